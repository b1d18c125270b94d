"""compare's large-sample rule: above ASYMPTOTIC_ABOVE differing pairs the paired t-test (scipy's
ttest_rel) or McNemar's chi-square with continuity correction (statsmodels' mcnemar), and the t
interval, each checked against the library run directly; at or below it, and with `exact` at any
size, the permutation and exact tests as before. Sizes and coverage by simulation live in
scripts/calibration.py (section asymptotic), not here."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import ttest_rel
from statsmodels.stats.contingency_tables import mcnemar

from engine.statistics import asymptotic as asym
from engine.statistics import compare_stats as cs
from engine.statistics.paired_exact import mcnemar_power


def _continuous(n: int, differing: int, seed: int = 0, shift: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Shares of n items, `differing` of them moved by a third or a half either way."""
    rng = np.random.default_rng(seed)
    a = np.round(rng.random(n) * 3) / 3
    move = np.zeros(n)
    move[:differing] = rng.choice([-0.5, -1 / 3, 1 / 3, 0.5], differing) + shift
    return a, a + move


def _binary(n: int, b_only: int, a_only: int) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.zeros(n), np.zeros(n)
    b[:b_only] = 1
    a[b_only:b_only + a_only] = 1
    a[n - 5:] = b[n - 5:] = 1  # a few concordant ones
    return a, b


@pytest.mark.parametrize("b_only,a_only", [(0, 0), (7, 7), (3, 11), (600, 520), (1, 0), (1500, 1380)])
def test_mcnemar_chi2_is_statsmodels(b_only, a_only):
    ours = asym.mcnemar_chi2(b_only, a_only)
    if b_only + a_only == 0:
        assert ours == (0.0, 1.0)
        return
    theirs = mcnemar([[10, a_only], [b_only, 10]], exact=False, correction=True)
    assert ours.statistic == pytest.approx(theirs.statistic, rel=1e-12)
    assert ours.p == pytest.approx(theirs.pvalue, rel=1e-10)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_t_interval_is_scipys(seed):
    a, b = _continuous(400, 150, seed, shift=0.1)
    low, high = asym.t_interval(b - a)
    ci = ttest_rel(b, a).confidence_interval(0.95)
    assert (low, high) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert all(math.isnan(x) for x in asym.t_interval(np.array([1.0])))


def test_above_the_number_a_continuous_metric_gets_the_t_test_and_t_interval():
    a, b = _continuous(3000, asym.ASYMPTOTIC_ABOVE + 1, shift=0.05)
    r = cs.compare_metric(cs.METRICS["precision"], a, b)
    ref = ttest_rel(b * 100, a * 100)
    assert r.test == cs.PAIRED_T and r.ci_method == cs.CI_T and not r.ci_approximate
    assert r.p == pytest.approx(ref.pvalue, rel=1e-10) and r.statistic == pytest.approx(ref.statistic, rel=1e-10)
    ci = ref.confidence_interval(0.95)
    assert (r.ci_low, r.ci_high) == pytest.approx((ci.low, ci.high), rel=1e-10)


def test_at_the_number_the_permutation_test_and_bootstrap_stay():
    a, b = _continuous(3000, asym.ASYMPTOTIC_ABOVE)
    r = cs.compare_metric(cs.METRICS["precision"], a, b, permutations=99, n_resamples=100)
    assert r.test == cs.PERMUTATION and r.ci_method == cs.CI_BOOTSTRAP


def test_exact_keeps_the_permutation_test_and_bootstrap_at_any_size():
    a, b = _continuous(3000, 2500)
    r = cs.compare_metric(cs.METRICS["precision"], a, b, permutations=99, n_resamples=100, exact=True)
    assert r.test == cs.PERMUTATION and r.ci_method == cs.CI_BOOTSTRAP
    x, y = _binary(3000, 700, 620)
    r = cs.compare_metric(cs.METRICS["exact_match"], x, y, exact=True)
    assert r.test == cs.MCNEMAR and r.ci_method == cs.CI_EXACT


def test_above_the_number_a_binary_metric_gets_mcnemars_chi_square():
    x, y = _binary(5000, 700, 620)  # 1,320 discordant pairs
    r = cs.compare_metric(cs.METRICS["exact_match"], x, y)
    ref = mcnemar([[5, 620], [700, 5000 - 1325]], exact=False, correction=True)
    assert r.test == cs.MCNEMAR_CHI2 and r.ci_method == cs.CI_T
    assert r.p == pytest.approx(ref.pvalue, rel=1e-10)
    ci = ttest_rel(y * 100, x * 100).confidence_interval(0.95)
    assert (r.ci_low, r.ci_high) == pytest.approx((ci.low, ci.high), rel=1e-10)
    # At or below the number, the exact test.
    x, y = _binary(5000, 520, 480)
    assert cs.compare_metric(cs.METRICS["exact_match"], x, y).test == cs.MCNEMAR


def test_the_verdict_line_names_the_large_sample_test():
    from engine.commands.compare import _short_verdict

    x, y = _binary(5000, 800, 620)
    m = cs.with_holm([cs.compare_metric(cs.METRICS["exact_match"], x, y)])[0]
    assert m.verdict == cs.DIFFERENT
    assert _short_verdict(m).startswith("exact_match: different (McNemar chi-square (continuity-corrected), Holm p")


def test_compare_metrics_makes_no_permutation_test_for_a_large_metric(monkeypatch):
    a, b = _continuous(3000, 2000)
    seen = []
    real = cs.paired_permutations
    monkeypatch.setattr(cs, "paired_permutations", lambda pairs, **kw: seen.append(len(pairs)) or real(pairs, **kw))
    got = cs.compare_metrics({"precision": a, "recall": a}, {"precision": b, "recall": a}, ("precision", "recall"))
    assert seen == [1]  # recall (no item differs) is the permutation test's; precision is the t-test's
    assert [m.test for m in got] == [cs.PAIRED_T, cs.PERMUTATION]


def test_chi_square_detectable_difference_has_80_percent_power():
    n, discordant = 20_000, 1500
    d, why = asym.mcnemar_chi2_min_detectable(n, discordant)
    assert why == "" and d is not None
    assert asym.mcnemar_chi2_power(n, discordant / n, d) == pytest.approx(0.8, abs=1e-9)
    # The exact McNemar test, summed over every number of discordant pairs, agrees there.
    assert mcnemar_power(n, discordant / n, d) == pytest.approx(0.8, abs=0.02)
    assert asym.mcnemar_chi2_min_detectable(n, 0)[0] is None


def test_bias_uses_the_same_number():
    from engine.statistics import bias

    assert bias.PERMUTATION_MAX == asym.ASYMPTOTIC_ABOVE
    rng = np.random.default_rng(3)
    diffs = np.where(rng.random(5000) < 0.4, rng.choice([-50.0, 50.0, 100.0], 5000), 0.0)
    test = bias.difference_test(diffs)
    assert test.short == "t-test" and test.p == pytest.approx(ttest_rel(diffs, np.zeros(5000)).pvalue, rel=1e-9)


def test_the_cli_and_the_app_pass_exact_to_the_request(monkeypatch, tmp_path):
    from demo.handlers import compare as handlers
    from engine.__main__ import build_parser

    (tmp_path / "s.duckdb").touch()  # the command checks that the store exists before it calls compare
    args = build_parser().parse_args(["compare", "A", "B", "--exact", "--db", str(tmp_path / "s.duckdb")])
    assert args.exact is True
    assert build_parser().parse_args(["compare", "A", "B"]).exact is False
    seen = []

    class Stop(Exception):
        pass

    def fake(request, db=None):
        seen.append(request)
        raise Stop

    monkeypatch.setattr("engine.usecases.compare.compare.compare", fake)
    with pytest.raises(Stop):
        args.main(args)
    assert seen[-1].exact is True
    assert handlers.request_from("a", "b", None, None, False, True).exact is True
    assert handlers.request_from("a", "b").exact is False


def test_the_calibration_section_runs_and_checks_itself_against_the_engine():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
    from calibration_large import KINDS, large_sample_calibration

    rows = large_sample_calibration(30, 40, 2, seed=1)  # its vectorised tests are checked against the engine's
    assert [r.kind for r in rows] == list(KINDS)
    assert all(0 <= x <= 1 for r in rows for x in (r.size_large, r.size_exact, r.cover_large, r.cover_exact))
    assert all(r.n == 100 and r.draws == 40 and r.exact_draws == 2 for r in rows)
