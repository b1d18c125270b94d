"""`compare`'s verdicts hold: the exact statistics of paired 0/1 values
(engine.statistics.paired_exact) against scipy and statsmodels and summed exactly over every outcome; the
verdicts' error rates by seeded simulation; margins per metric; Holm over the equivalence tests.

The exact sums enumerate every (b_only, a_only) table of n pairs with its trinomial probability
(scipy.stats.multinomial), so a size or a coverage is computed, not estimated.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from engine.errors import UserError
from engine.statistics import compare_stats as cs
from engine.statistics import paired_exact as pe
from engine.statistics.stats import BOOTSTRAP_APPROXIMATE_BELOW
from engine.usecases.compare.compare import Margins, parse_margins


def _tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (b_only, a_only) with b_only + a_only <= n."""
    b, a = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    keep = b + a <= n
    return b[keep], a[keep]


def _pmf(n: int, b: np.ndarray, a: np.ndarray, p_b: float, p_a: float) -> np.ndarray:
    return scipy.stats.multinomial.pmf(np.stack([b, a, n - b - a], axis=1), n, [p_b, p_a, 1 - p_b - p_a])


def _pairs(b_only: int, a_only: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Paired 0/1 values with these discordant counts (the concordant ones half 1, half 0)."""
    x = np.r_[np.zeros(b_only), np.ones(a_only), np.arange(n - b_only - a_only) % 2]
    y = np.r_[np.ones(b_only), np.zeros(a_only), np.arange(n - b_only - a_only) % 2]
    return x, y


# ---------------------------------------------------------------- exact bounds and TOST (0/1 metrics)


@pytest.mark.parametrize("k, n", [(0, 20), (3, 20), (20, 20), (7, 130)])
def test_clopper_pearson_is_statsmodels_and_scipy(k, n):
    from statsmodels.stats.proportion import proportion_confint
    for alpha in (0.05, 0.1, 0.01):
        low, high = proportion_confint(k, n, alpha=alpha, method="beta")
        assert (pe.cp_lower(k, n, alpha / 2), pe.cp_upper(k, n, alpha / 2)) == pytest.approx((low, high), abs=1e-12)
        ci = scipy.stats.binomtest(k, n).proportion_ci(1 - alpha, method="exact")
        assert (pe.cp_lower(k, n, alpha / 2), pe.cp_upper(k, n, alpha / 2)) == pytest.approx((ci.low, ci.high),
                                                                                             abs=1e-10)


def test_no_discordant_pair_bounds_the_difference_only_loosely():
    # 0 of 20 discordant pairs: B - A is still anywhere within about +-17 points
    # (Clopper-Pearson 97.5% for 0 of 20 = 1 - 0.025 ** (1 / 20)).
    bound = 1 - 0.025 ** (1 / 20)
    assert pe.difference_bounds(0, 0, 20) == pytest.approx((-bound, bound))
    assert pe.exact_tost(0, 0, 20, 0.10).p > 0.05 and pe.exact_tost(0, 0, 20, 0.17).p < 0.05


@pytest.mark.parametrize("b_only, a_only, n, margin", [(10, 8, 100, 0.15), (0, 0, 20, 0.2), (3, 9, 60, 0.3),
                                                       (40, 35, 400, 0.06)])
def test_tost_p_is_where_the_statsmodels_bounds_meet_the_margin(b_only, a_only, n, margin):
    from statsmodels.stats.proportion import proportion_confint

    def upper(alpha):
        return proportion_confint(b_only, n, alpha, method="beta")[1] - proportion_confint(a_only, n, alpha,
                                                                                           method="beta")[0]

    def lower(alpha):
        return proportion_confint(b_only, n, alpha, method="beta")[0] - proportion_confint(a_only, n, alpha,
                                                                                           method="beta")[1]

    res = pe.exact_tost(b_only, a_only, n, margin)
    assert upper(res.p_upper) == pytest.approx(margin, abs=1e-8)
    assert lower(res.p_lower) == pytest.approx(-margin, abs=1e-8)
    assert upper(res.p_upper * 0.99) > margin > upper(res.p_upper * 1.01)


@pytest.mark.parametrize("n", [20, 30])
def test_exact_tost_size_summed_over_every_outcome(n):
    # H0 at its boundary, B - A = +M, over the nuisance (the discordant share): the chance that
    # the upper one-sided test rejects (p_upper < 0.05) is at most 5%, summed exactly.
    b, a = _tables(n)
    for margin in (0.1, 0.2):
        rejects = np.array([pe.difference_bounds(int(x), int(y), n, 0.05).high < margin
                            for x, y in zip(b, a, strict=True)])
        sizes = [_pmf(n, b, a, p_a + margin, p_a)[rejects].sum() for p_a in np.linspace(0, (1 - margin) / 2, 12)]
        assert max(sizes) <= 0.05, sizes
    # The same decisions from the p value.
    for x, y in ((0, 0), (1, 2), (4, 0)):
        assert (pe.exact_tost(x, y, n, 0.2).p_upper < 0.05) == (pe.difference_bounds(x, y, n, 0.05).high < 0.2)


def test_exact_interval_covers_at_least_95_percent():
    n = 30
    b, a = _tables(n)
    low, high = np.array([pe.difference_bounds(int(x), int(y), n, 0.025) for x, y in zip(b, a, strict=True)]).T
    for p_b in (0.0, 0.05, 0.2, 0.45):
        for p_a in (0.0, 0.1, 0.3):
            covered = (low <= p_b - p_a + 1e-12) & (p_b - p_a - 1e-12 <= high)
            assert _pmf(n, b, a, p_b, p_a)[covered].sum() >= 0.95


# ---------------------------------------------------------------- exact McNemar power


@pytest.mark.parametrize("n, p_d, d", [(20, 0.4, 0.3), (30, 0.5, 0.2), (30, 0.2, -0.15)])
def test_mcnemar_power_is_the_sum_of_statsmodels_decisions(n, p_d, d):
    from statsmodels.stats.contingency_tables import mcnemar
    b, a = _tables(n)
    rejects = np.array([mcnemar([[0, y], [x, 0]], exact=True).pvalue < 0.05 for x, y in zip(b, a, strict=True)])
    power = _pmf(n, b, a, (p_d + d) / 2, (p_d - d) / 2)[rejects].sum()
    assert pe.mcnemar_power(n, p_d, d) == pytest.approx(power, abs=1e-12)


def test_mcnemar_detectable_difference_has_80_percent_power():
    for n, discordant in ((30, 12), (100, 18), (400, 60)):
        mdd = pe.mcnemar_min_detectable(n, discordant)
        assert pe.mcnemar_power(n, discordant / n, mdd.value) == pytest.approx(0.8, abs=1e-6)
        # Simulated with statsmodels' test on drawn tables: 80% within Monte Carlo error.
        if n == 100:
            from statsmodels.stats.contingency_tables import mcnemar
            rng = np.random.default_rng(0)
            p_d = discordant / n
            draws = rng.multinomial(n, [(p_d + mdd.value) / 2, (p_d - mdd.value) / 2, 1 - p_d], size=2000)
            hits = np.mean([mcnemar([[0, y], [x, 0]], exact=True).pvalue < 0.05 for x, y, _ in draws])
            assert hits == pytest.approx(0.8, abs=0.03)
    assert pe.mcnemar_min_detectable(20, 0).value is None
    assert "below 80% power" in pe.mcnemar_min_detectable(100, 3).undefined


def test_a_0_1_metric_gets_its_detectable_difference_from_mcnemar_not_the_t_test():
    x, y = _pairs(14, 4, 100)
    m = cs.compare_metric(cs.METRICS["exact_match"], x, y, n_resamples=200)
    assert m.discordant == 18 and m.min_detectable == pytest.approx(100 * pe.mcnemar_min_detectable(100, 18).value)
    t_based = cs.min_detectable_difference(m.sd_diff, 100)
    assert abs(m.min_detectable - t_based) > 0.1  # the old, t-based figure differs
    assert m.ci_method == cs.CI_EXACT and (m.ci_low, m.ci_high) == pytest.approx(
        [100 * v for v in pe.difference_bounds(14, 4, 100, 0.025)])


# ---------------------------------------------------------------- the verdicts


def test_equivalence_without_spread_is_undefined():
    # Every paired difference equal; old: "equivalent within 0.1 (TOST p<0.001)" and
    # "a difference of 0.0 is detectable at 80% power".
    same = np.linspace(0, 1, 20)
    m = cs.compare_metric(cs.METRICS["precision"], same, same, margin=0.1, n_resamples=200)
    assert not m.verdict.startswith("equivalent") and "undefined: every paired difference is equal" in m.verdict
    assert m.min_detectable is None and m.min_detectable_undefined == cs.NO_SPREAD
    x, y = _pairs(0, 0, 20)
    m = cs.compare_metric(cs.METRICS["exact_match"], x, y, margin=0.1, n_resamples=200)
    assert m.verdict == "inconclusive" and m.min_detectable is None


def _sparse(rng: np.random.Generator, n: int, shift: float, p_change: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Precision-like values; a share p_change of the items move by shift / p_change (B - A = shift)."""
    a = rng.choice([0.0, 0.25, 0.5, 0.75], n)
    b = a + np.where(rng.random(n) < p_change, shift / p_change, 0.0)
    return a, b


def test_equivalence_rate_with_a_true_difference_beyond_the_margin():
    # A true +3-point difference; "equivalent within 1" came in 35% of comparisons at
    # n = 20 (most of them with no item changed). Now at most 5%, continuous and 0/1.
    rng = np.random.default_rng(26)
    hits = 0
    for _ in range(300):
        a, b = _sparse(rng, 20, 0.03)
        hits += cs.compare_metric(cs.METRICS["precision"], a, b, margin=1.0, n_resamples=100,
                                  permutations=99).verdict.startswith("equivalent")
    assert hits / 300 <= 0.05
    hits = 0
    for _ in range(300):
        draw = rng.multinomial(20, [0.04, 0.01, 0.95])
        x, y = _pairs(int(draw[0]), int(draw[1]), 20)
        hits += cs.compare_metric(cs.METRICS["exact_match"], x, y, margin=1.0, n_resamples=100).verdict.startswith(
            "equivalent")
    assert hits == 0


def _null_rates(n: int, moved: int, draws: int, seed: int, permutations: int = 999) -> tuple[float, float]:
    """Under the null (A and B exchangeable within items): `moved` items of n differ by +-50
    points with random signs. (rate of the verdict "different", rate of the paired t-test p < 0.05)."""
    rng = np.random.default_rng(seed)
    different = t_rejects = 0
    for _ in range(draws):
        a = rng.choice([0.0, 0.5, 1.0], n) * 0.5
        b = a.copy()
        b[:moved] += 0.5 * rng.choice([-1.0, 1.0], moved)
        m = cs.compare_metric(cs.METRICS["precision"], a, b, n_resamples=100, permutations=permutations,
                              seed=int(rng.integers(10**9)))
        different += m.verdict == cs.DIFFERENT
        t_rejects += m.p_t is not None and m.p_t < 0.05
    return different / draws, t_rejects / draws


def test_the_verdicts_size_at_30_items():
    # With 4 of 30 items moved, the t-test rejects 12.5% of the time (all four
    # alike in sign: t = 2.11, p = 0.043), and the old verdict with it; the verdict's
    # permutation test cannot (p >= 2/16).
    different, t_rate = _null_rates(30, 4, 250, seed=11, permutations=199)
    assert different <= 0.05 and t_rate > 0.08


@pytest.mark.slow
@pytest.mark.parametrize("n, moved", [(30, 16), (30, 21), (100, 12), (300, 20)])
def test_the_verdicts_size_larger(n, moved):
    # The t-test's exact size with 16 or 21 of 30 moved is 7.7% and 7.8%; the verdict's <= 5%.
    different, _ = _null_rates(n, moved, 800, seed=n + moved)
    assert different <= 0.05


def test_equivalence_is_corrected_for_multiplicity():
    from statsmodels.stats.multitest import multipletests
    rng = np.random.default_rng(4)
    a = {name: rng.random(200) for name in ("precision", "recall", "f1")}
    b = {name: a[name] + rng.normal(0, 0.3, 200) for name in a}
    # A margin per metric (precision's wider), each in points.
    results = cs.compare_metrics(a, b, ["precision", "recall", "f1"], margins={"precision": 5.0, "recall": 2.0,
                                                                               "f1": 2.0}, n_resamples=200)
    raw = [r.equivalence.p for r in results]
    assert [r.equivalence.p_holm for r in results] == pytest.approx(multipletests(raw, method="holm")[1])
    assert [r.equivalence.margin for r in results] == [5.0, 2.0, 2.0]
    # Precision's TOST p is 0.024 alone, 0.071 after Holm over the three: no equivalence verdict
    # (old: "equivalent within 5" from the uncorrected p).
    precision = results[0]
    assert precision.equivalence.p < 0.05 <= precision.equivalence.p_holm and precision.verdict == "inconclusive"


@pytest.mark.slow
def test_the_bootstrap_interval_is_marked_approximate_where_it_undercovers():
    # Sparse differences (10% of items +50 points, 11.1% -25): the percentile bootstrap covers
    # 90.4% at 30 items, 93.0% at 100 and 95.0% at 300 (1,000 draws each, seed 7); compare marks
    # it approximate below BOOTSTRAP_APPROXIMATE_BELOW = 300.
    rng = np.random.default_rng(7)
    mu = 0.1 * 50 - 0.9 * 0.111 * 25
    coverage = {}
    for n in (30, 100, 300):
        hits = 0
        for s in range(1000):
            d = np.where(rng.random(n) < 0.1, 50.0, np.where(rng.random(n) < 0.111, -25.0, 0.0))
            low, high = cs.bootstrap_diff_ci(np.zeros(n), d, n_resamples=1000, seed=s)
            hits += low <= mu <= high
        coverage[n] = hits / 1000
    assert coverage[30] < 0.92 and coverage[100] < 0.94 and coverage[300] >= 0.94, coverage
    assert BOOTSTRAP_APPROXIMATE_BELOW == 300


# ---------------------------------------------------------------- margins per metric


def test_margins_read_per_metric():
    assert parse_margins("precision=5,recall=5") == Margins(None, (("precision", 5.0), ("recall", 5.0)))
    assert parse_margins("5, n_citations=0.2") == Margins(5.0, (("n_citations", 0.2),))
    assert parse_margins(2) == Margins(2.0) and parse_margins("  ") is None and parse_margins(None) is None
    m = parse_margins("5,n_citations=0.2,CAB_f1=3")
    assert m.for_metric(cs.METRICS["precision"]) == 5.0 and m.for_metric(cs.METRICS["n_citations"]) == 0.2
    assert m.for_metric(cs.MetricSpec("CAB_f1", "CAB F1", False, 100.0)) == 3.0
    # A plain number is in points: it gives n_citations (citations per answer) no margin.
    assert parse_margins("5").for_metric(cs.METRICS["n_citations"]) is None
    for bad, message in (("5,6", "one plain margin"), ("f2=1", "unknown metric 'f2'"), ("=3", "no metric name"),
                         ("precision=x", "NAME=NUMBER"), ("recall=1,recall=2", "two margins")):
        with pytest.raises(UserError, match=message):
            parse_margins(bad)


def test_math_of_undefined_p_is_nan_not_zero():
    # The t-test beside the permutation test has no p without spread (old: t = inf, p = 0).
    res = cs.paired_t([0.0, 0.0, 0.0], [0.1, 0.1, 0.1])
    assert math.isnan(res.p) and math.isnan(res.statistic)
