"""engine/statistics/rerun_floor.py against the libraries run directly: the test's p is
scipy.stats.permutation_test's on the same data (exactly where both enumerate, within Monte Carlo
error where both draw), the floors are numpy's means, the intervals stats.bootstrap_mean_ci's at
compute_bias's seed; and every degenerate input says "undefined" and why."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import permutation_test

from engine.errors import UserError
from engine.statistics.bias import compute_bias
from engine.statistics.rerun_floor import (
    CAB_NO_TEST,
    NO_RERUN,
    floor_line,
    floor_test,
    no_rerun_line,
    rerun_floors,
)
from engine.statistics.stats import bootstrap_mean_ci

LEVELS = np.array([0.0, 0.5, 1.0])  # halves: sums exact in binary, so ties are ties for scipy too


def _scipy_p(anchor, draws, n_resamples=np.inf, seed=0):
    """The test as the module's docstring states it, computed by scipy."""
    def statistic(*xs, axis):
        others = np.mean([np.abs(anchor - x) for x in xs[1:]], axis=0)
        return np.mean(np.abs(anchor - xs[0]) - others, axis=axis)

    return permutation_test(draws, statistic, permutation_type="samples", alternative="greater", vectorized=True,
                            n_resamples=n_resamples, rng=np.random.default_rng(seed))


def _table(values, cites=None):
    return [{"item_id": f"q{i:03d}", "precision": v, "recall": 1.0 - v, "f1": v / 2,
             **({} if cites is None else {"cites": bool(cites[i])})} for i, v in enumerate(values)]


@pytest.mark.parametrize("k, n", [(1, 10), (2, 6), (3, 4)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_exact_p_is_scipys_exact_p(k, n, seed):
    rng = np.random.default_rng(seed)
    anchor = 100 * rng.choice(LEVELS, n)
    draws = [100 * rng.choice(LEVELS, n) for _ in range(k + 1)]
    draws[0][: n // 2] = np.where(anchor[: n // 2] > 50, 0.0, 100.0)  # the other run differs more: small p
    ref = _scipy_p(anchor, draws)
    mine = floor_test(anchor, draws[0], draws[1:])
    assert mine.exact
    assert mine.p == ref.pvalue
    assert mine.statistic == pytest.approx(float(ref.statistic), abs=1e-12)


def test_the_exact_p_counts_ties_of_thirds_as_scipy_does():
    rng = np.random.default_rng(7)
    anchor = 100 * rng.choice([0, 1 / 3, 2 / 3, 1], 9)
    draws = [100 * rng.choice([0, 1 / 3, 2 / 3, 1], 9) for _ in range(2)]
    assert floor_test(anchor, draws[0], draws[1:]).p == _scipy_p(anchor, draws).pvalue


def test_k1_is_the_one_sided_sign_flip_test_of_the_difference_of_absolute_differences():
    rng = np.random.default_rng(11)
    n = 14
    v, b, v2 = (100 * rng.choice(LEVELS, n) for _ in range(3))
    b[:5] = 100 - v[:5]
    d = np.abs(v - b) - np.abs(v - v2)
    flip = permutation_test((d,), np.mean, permutation_type="samples", alternative="greater", n_resamples=np.inf)
    assert floor_test(v, b, [v2]).p == flip.pvalue


@pytest.mark.parametrize("k", [1, 2, 3])
def test_the_monte_carlo_p_is_scipys_within_monte_carlo_error(k):
    rng = np.random.default_rng(20 + k)
    n = 40
    anchor = 100 * rng.choice(LEVELS, n)
    draws = [100 * rng.choice(LEVELS, n) for _ in range(k + 1)]
    draws[0][:6] = 100 - anchor[:6]  # a moderate effect: p away from 0 and 1
    mine = floor_test(anchor, draws[0], draws[1:], permutations=9999, seed=5)
    ref = _scipy_p(anchor, draws, n_resamples=9999, seed=5)
    assert not mine.exact and mine.resamples == 9999
    assert 0.005 < ref.pvalue < 0.5, ref.pvalue  # the comparison means something
    se = math.sqrt(2 * ref.pvalue * (1 - ref.pvalue) / 9999)  # two independent Monte Carlo estimates
    assert abs(mine.p - ref.pvalue) < 4 * se, (mine.p, ref.pvalue)
    assert mine.p == floor_test(anchor, draws[0], draws[1:], permutations=9999, seed=5).p  # seeded


def test_the_monte_carlo_p_keeps_scipys_plus_one():
    n = 30
    anchor = np.zeros(n)
    mine = floor_test(anchor, np.full(n, 100.0), [np.zeros(n)], permutations=999)
    assert mine.p == 1 / 1000  # only the observed assignment is as extreme
    assert mine.statistic == 100.0


def _experiment(n, seed, k=1):
    rng = np.random.default_rng(seed)
    v = rng.choice(LEVELS, n)
    b = np.where(rng.random(n) < 0.6, v, rng.choice(LEVELS, n))
    cf = np.where(rng.random(n) < 0.6, b, rng.choice(LEVELS, n))
    again = [np.where(rng.random(n) < 0.7, v, rng.choice(LEVELS, n)) for _ in range(k)]
    return v, b, cf, again


@pytest.mark.parametrize("k", [1, 2, 3])
def test_the_cas_floor_and_its_interval_are_numpys_mean_and_the_bootstrap_of_compute_bias(k):
    v, b, cf, again = _experiment(120, seed=k, k=k)
    rows = rerun_floors({"vanilla": _table(v), "base": _table(b), "cf": _table(cf)},
                        {"vanilla": [_table(x) for x in again]}, seed=3)
    cas = [r for r in rows if r.measure == "CAS"]
    assert [r.metric for r in cas] == ["precision", "recall", "f1"]
    per_metric = {"precision": lambda x: x, "recall": lambda x: 1.0 - x, "f1": lambda x: x / 2}
    bias = {r.metric: r for r in compute_bias({"vanilla": _table(v), "base": _table(b)}, seed=3)}
    for row in cas:
        f = per_metric[row.metric]
        column = 100 * np.mean([np.abs(f(v) - f(x)) for x in again], axis=0)
        assert row.value == pytest.approx(column.mean(), abs=1e-12)
        assert (row.ci_low, row.ci_high) == pytest.approx(bootstrap_mean_ci(column, seed=3), abs=1e-12)
        assert (row.mode, row.n_reruns, row.n) == ("vanilla", k, 120)
        assert row.interval_note == "approximate: percentile bootstrap over 120 items (< 300)"
        test = floor_test(100 * f(v), 100 * f(b), [100 * f(x) for x in again], seed=3)
        assert row.p == test.p and row.n_differ == test.n_differ
        # The test's statistic is CAS minus its floor.
        assert test.statistic == pytest.approx(bias[row.metric].value - row.value, abs=1e-9)
        assert "exchangeable (no label effect)" in row.test and row.undefined_reason is None


def test_the_cab_floor_is_base_against_its_rerun_and_has_no_test():
    v, b, cf, again = _experiment(80, seed=4, k=2)
    rows = rerun_floors({"base": _table(b), "cf": _table(cf)}, {"base": [_table(x) for x in again]})
    assert [r.measure for r in rows] == ["CAB"] * 3
    precision = rows[0]
    column = 100 * (b - np.mean(again, axis=0))
    assert precision.value == pytest.approx(column.mean(), abs=1e-12)
    assert (precision.ci_low, precision.ci_high) == pytest.approx(bootstrap_mean_ci(column, seed=0), abs=1e-12)
    assert math.isnan(precision.p) and precision.verdict is None and precision.test == CAB_NO_TEST
    assert precision.n_differ == np.count_nonzero(column)


def test_with_only_cf_rerun_the_cab_floor_is_the_rerun_minus_cf():
    v, b, cf, again = _experiment(50, seed=5)
    rows = rerun_floors({"base": _table(b), "cf": _table(cf)}, {"cf": [_table(again[0])]})
    assert rows[0].mode == "cf"
    assert rows[0].value == pytest.approx(100 * (again[0] - cf).mean(), abs=1e-12)


def test_with_only_base_rerun_cas_is_tested_against_base_and_its_rerun():
    v, b, cf, again = _experiment(60, seed=6)
    rows = rerun_floors({"vanilla": _table(v), "base": _table(b)}, {"base": [_table(again[0])]}, seed=2)
    row = rows[0]
    assert row.mode == "base" and row.value == pytest.approx(100 * np.abs(b - again[0]).mean(), abs=1e-12)
    assert row.p == floor_test(100 * b, 100 * v, [100 * again[0]], seed=2).p
    assert "|base - vanilla| against |base - rerun|" in row.test


def test_a_real_effect_is_above_its_floor_and_noise_is_not():
    rng = np.random.default_rng(8)
    n = 400
    v = rng.choice(LEVELS, n)
    again = np.where(rng.random(n) < 0.9, v, rng.choice(LEVELS, n))
    moved = np.where(rng.random(n) < 0.5, v, rng.choice(LEVELS, n))
    above = rerun_floors({"vanilla": _table(v), "base": _table(moved)}, {"vanilla": [_table(again)]})[0]
    assert above.verdict.startswith("above its floor (one-sided permutation p"), above
    assert above.p < 0.05
    # base is another draw of the same noise as the rerun: nothing to claim.
    alike = np.where(rng.random(n) < 0.9, v, rng.choice(LEVELS, n))
    same = rerun_floors({"vanilla": _table(v), "base": _table(alike)}, {"vanilla": [_table(again)]})[0]
    assert same.p >= 0.05
    assert same.verdict == "not above its floor (one-sided permutation p >= 0.05)"


def test_no_rerun_gives_undefined_rows_and_the_line_that_says_how_to_measure_it():
    v, b, cf, _ = _experiment(30, seed=9)
    per_mode = {"vanilla": _table(v), "base": _table(b), "cf": _table(cf)}
    rows = rerun_floors(per_mode, {})
    assert len(rows) == 6 and all(math.isnan(r.value) and r.mode is None for r in rows)
    assert rows[0].undefined_reason == "no rerun of vanilla or base"
    assert rows[0].verdict == "undefined: no rerun of vanilla or base"
    assert rows[3].undefined_reason == "no rerun of base or cf" and rows[3].verdict is None
    assert no_rerun_line() == NO_RERUN == "no rerun floor: `run --reruns 1` measures it"
    bias = compute_bias(per_mode)
    assert floor_line(bias[0], rows[0]).endswith("; no rerun floor: `run --reruns 1` measures it")


def test_one_item_has_a_floor_but_no_interval_and_no_test():
    rows = rerun_floors({"vanilla": _table([1.0]), "base": _table([0.0])}, {"vanilla": [_table([0.5])]})
    row = rows[0]
    assert row.value == 50.0 and math.isnan(row.ci_low) and math.isnan(row.ci_high)
    assert row.interval_note == "none: one item"
    assert row.verdict == "undefined: one item" and math.isnan(row.p)


def test_identical_runs_give_a_floor_of_zero_without_an_interval_and_no_test():
    v = np.array([0.0, 0.5, 1.0, 1.0, 0.5])
    rows = rerun_floors({"vanilla": _table(v), "base": _table(v)}, {"vanilla": [_table(v), _table(v)]})
    row = rows[0]
    assert row.value == 0.0
    assert math.isnan(row.ci_low) and row.interval_note == "none: every item's value is 0 (no spread)"
    assert row.verdict == "undefined: no item differs between vanilla, base and the reruns"
    assert math.isnan(row.p) and row.n_differ == 0
    assert floor_test(v, v, [v]).p == 1.0  # scipy's p where nothing moves; the rows call it undefined


def test_equal_absolute_differences_in_every_item_leave_the_test_undefined():
    # Values vary, but in each item |v - b| equals |v - v'|: every assignment gives the same statistic.
    v = np.full(4, 0.5)
    rows = rerun_floors({"vanilla": _table(v), "base": _table([0.0, 1.0, 0.0, 1.0])},
                        {"vanilla": [_table([1.0, 0.0, 1.0, 0.0])]})
    assert rows[0].verdict == "undefined: in no item does |vanilla - base| differ from |vanilla - its rerun|"


def test_no_citations_at_all_leave_floor_and_test_undefined():
    none = [False] * 4
    zeros = [0.0] * 4
    rows = rerun_floors({"vanilla": _table(zeros, none), "base": _table(zeros, none)},
                        {"vanilla": [_table(zeros, none)]})
    row = rows[0]
    assert math.isnan(row.value)
    assert row.undefined_reason == "no answer in vanilla or its reruns cites a shown document"
    assert row.verdict == "undefined: no answer in vanilla or its reruns cites a shown document"


def test_cas_undefined_leaves_the_test_undefined_though_the_floor_is_defined():
    none, some = [False] * 4, [True, False, True, False]
    rows = rerun_floors({"vanilla": _table([0.0] * 4, none), "base": _table([0.0] * 4, none)},
                        {"vanilla": [_table([1.0, 0.0, 0.5, 0.0], some)]})
    assert rows[0].value == pytest.approx(37.5)
    assert rows[0].verdict == "undefined: CAS is undefined (no answer in runs vanilla/base cites a shown document)"


def test_runs_over_other_items_are_a_user_error():
    v = _table([0.0, 1.0, 0.5])
    with pytest.raises(UserError, match="do not cover the same items.*missing from vanilla rerun 1: q002"):
        rerun_floors({"vanilla": v, "base": v}, {"vanilla": [v[:2]]})
    with pytest.raises(UserError, match="unknown mode"):
        rerun_floors({"vanilla": v, "base": v}, {"other": [v]})
    with pytest.raises(UserError, match="a rerun of cf needs its run"):
        rerun_floors({"vanilla": v, "base": v}, {"cf": [v]})
    with pytest.raises(UserError, match="need base and cf"):
        rerun_floors({"vanilla": v}, {"vanilla": [v]})


def test_the_line_a_face_prints():
    v, b, cf, again = _experiment(300, seed=12)
    per_mode = {"vanilla": _table(v), "base": _table(b), "cf": _table(cf)}
    rows = rerun_floors(per_mode, {"vanilla": [_table(again[0])], "base": [_table(again[0])]})
    bias = compute_bias(per_mode)
    cas, floor = bias[0], rows[0]
    assert floor_line(cas, floor) == (
        f"CAS precision {cas.value:.1f} [{cas.ci_low:.1f}, {cas.ci_high:.1f}]; rerun floor {floor.value:.1f} "
        f"[{floor.ci_low:.1f}, {floor.ci_high:.1f}]; {floor.verdict}")
    assert floor.verdict.startswith(("above its floor (one-sided permutation p", "not above its floor"))
    cab_line = floor_line(bias[3], rows[3])
    assert cab_line.startswith(f"CAB precision {bias[3].value:+.1f} [") and "rerun floor" in cab_line
    with pytest.raises(ValueError):
        floor_line(bias[0], rows[1])
