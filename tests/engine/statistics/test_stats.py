"""t-tests, t quantiles and bootstrap intervals against scipy; CAS/CAB through the Python API."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import scipy.stats

from engine.errors import UserError
from engine.statistics import stats
from engine.statistics.bias import Labels, cab, cas, compute_bias
from tests.support.metrics_oracle import item_metrics


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 9, 10, 30, 31, 99, 100, 101, 500, 1999, 2000, 100_000])
def test_t_distribution_matches_scipy(df):
    for t in [0.0, 1e-6, 0.3, 1.0, 1.96, 2.5, 4.0, 8.0, 30.0]:
        expected = 2 * scipy.special.stdtr(df, -t)
        assert stats.t_sf2(t, df) == pytest.approx(expected, rel=1e-9, abs=1e-300)
        assert stats.t_cdf(-t, df) == pytest.approx(expected / 2, rel=1e-9, abs=1e-300)
    for q in (0.6, 0.975, 0.995, 0.025):
        assert stats.t_quantile(q, df) == pytest.approx(scipy.special.stdtrit(df, q), rel=1e-10)


def test_t_test_matches_scipy():
    rng = np.random.default_rng(0)
    for n in (2, 3, 10, 200, 2000):
        a = rng.normal(0.1, 1, n)
        b = rng.normal(0, 1, n)
        ours = stats.paired_t_test(a, b)
        ref = scipy.stats.ttest_rel(a, b)
        assert ours.t == pytest.approx(ref.statistic, rel=1e-10)
        assert ours.p == pytest.approx(ref.pvalue, rel=1e-9)
        assert ours.df == n - 1
        one = stats.t_test(np.abs(a - b))
        ref1 = scipy.stats.ttest_1samp(np.abs(a - b), 0)
        assert one.t == pytest.approx(ref1.statistic, rel=1e-10) and one.p == pytest.approx(ref1.pvalue, rel=1e-9, abs=1e-300)


def test_t_test_degenerate():
    assert math.isnan(stats.t_test([0.0, 0.0, 0.0]).p)  # no variation, no difference: undefined
    inf = stats.t_test([2.0, 2.0, 2.0])
    assert inf.t == math.inf and inf.p == 0.0  # as scipy
    assert math.isnan(stats.t_test([1.0]).t)


def test_mean_ci_matches_scipy():
    x = np.random.default_rng(1).random(37)
    ci = stats.mean_ci(x)
    low, high = scipy.stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=scipy.stats.sem(x))
    assert (ci.ci_low, ci.ci_high) == pytest.approx((low, high), rel=1e-10)
    assert math.isnan(stats.mean_ci([1.0]).ci_low) and stats.mean_ci([]).n == 0


@pytest.mark.parametrize("n, resamples, batch", [(50, 999, 999), (400, 2000, 500), (7, 1000, 250)])
def test_bootstrap_reproduces_scipy(n, resamples, batch):
    x = np.random.default_rng(n).normal(size=n)
    low, high = stats.bootstrap_mean_ci(x, n_resamples=resamples, seed=11, batch=batch)
    ref = scipy.stats.bootstrap(
        (x,), np.mean, n_resamples=resamples, batch=batch, method="percentile", rng=np.random.default_rng(11)
    ).confidence_interval
    assert (low, high) == pytest.approx((ref.low, ref.high), rel=1e-10, abs=1e-12)


def test_bootstrap_columns_share_resamples():
    x = np.random.default_rng(2).normal(size=(300, 3))
    low, high = stats.bootstrap_mean_ci(x, n_resamples=800, seed=5)
    for j in range(3):
        lj, hj = stats.bootstrap_mean_ci(x[:, j], n_resamples=800, seed=5)
        assert (low[j], high[j]) == pytest.approx((lj, hj))


def test_bootstrap_coverage():
    # A 95% interval should cover the true mean about 95% of the time.
    rng = np.random.default_rng(4)
    covered = 0
    trials = 200
    for i in range(trials):
        x = rng.exponential(1.0, 60)
        low, high = stats.bootstrap_mean_ci(x, n_resamples=500, seed=i)
        covered += low <= 1.0 <= high
    assert 0.86 <= covered / trials <= 0.99


def _table(ids, rows):
    return [{"item_id": i, "precision": p, "recall": r, "f1": f} for i, (p, r, f) in zip(ids, rows, strict=True)]


def test_cab_and_cas_values():
    rng = np.random.default_rng(7)
    ids = [f"q{i}" for i in range(100)]
    v, b, c = (rng.integers(0, 3, (100, 3)) / 2 for _ in range(3))
    # Different row order per run: pairing is by item_id.
    results = compute_bias({"vanilla": _table(ids, v), "base": _table(ids[::-1], b[::-1]), "cf": _table(ids, c)},
                           Labels("Woman", "Man"), n_resamples=500)
    got = {(r.measure, r.metric): r for r in results}
    for j, metric in enumerate(("precision", "recall", "f1")):
        cab_r = got[("CAB", metric)]
        assert cab_r.value == pytest.approx(100 * (b[:, j] - c[:, j]).mean())
        # CAB's p: the sign-flip test of the per-item differences (in item order), the verdict its p at 0.05.
        order = sorted(range(100), key=ids.__getitem__)  # items are drawn in sorted item_id order
        sign_flip = stats.sign_flip_test(100 * (b[order, j] - c[order, j]))
        assert cab_r.p == sign_flip.p and cab_r.n_differ == sign_flip.m
        assert cab_r.ci_low <= cab_r.value <= cab_r.ci_high and cab_r.n == 100
        word = "favours Woman" if cab_r.value > 0 else "favours Man"
        assert cab_r.direction == (f"{word} (sign-flip p < 0.05)" if cab_r.p < 0.05
                                   else "no significant difference (sign-flip p >= 0.05)")
        assert "null: base and cf cite alike" in cab_r.test
        cas_r = got[("CAS", metric)]
        diff = np.abs(v[:, j] - b[:, j]) * 100
        assert cas_r.value == pytest.approx(diff.mean()) and cas_r.direction is None
        # CAS's p is the signed test of vanilla vs base, never a t-test of |d| against 0.
        assert cas_r.p == stats.sign_flip_test(100 * (v[order, j] - b[order, j])).p
        assert "not of CAS" in cas_r.test and "null: vanilla and base cite alike on average" in cas_r.test
    assert [r.measure for r in cab(_table(ids, b), _table(ids, c))] == ["CAB"] * 3
    assert [r.measure for r in cas(_table(ids, v), _table(ids, b))] == ["CAS"] * 3


def test_bias_from_item_metrics_and_dataframe():
    import pandas as pd

    base = [item_metrics(f"q{i}", "x [1]" if i % 2 else "x [2]", [True, False], ["x"]) for i in range(10)]
    cf = [item_metrics(f"q{i}", "x [2]", [True, False], ["x"]) for i in range(10)]
    r1 = cab(base, cf, n_resamples=200)
    frame = pd.DataFrame([m.__dict__ for m in base])
    r2 = cab(frame, cf, n_resamples=200)
    assert r1 == r2 and r1[0].value == pytest.approx(50.0)


def test_bias_needs_same_items():
    ids = [f"q{i}" for i in range(10)]
    rows = [(1.0, 1.0, 1.0)] * 10
    with pytest.raises(UserError, match=r"do not cover the same items.*missing from cf: q8, q9"):
        compute_bias({"base": _table(ids, rows), "cf": _table(ids[:8], rows[:8])})
    with pytest.raises(UserError, match="need base and cf"):
        compute_bias({"cf": _table(ids, rows)})
    with pytest.raises(UserError, match="repeated item ids"):
        compute_bias({"base": _table(ids + ["q0"], rows + rows[:1]), "cf": _table(ids, rows)})


@pytest.mark.parametrize("workers", [1, 3])
def test_bootstrap_counted_on_other_threads_is_the_sequential_one_to_the_bit(workers):
    """_pipelined: this thread draws the blocks in order, other threads count them;
    each block's means land in its own rows, so the intervals are the sequential loop's."""
    x = np.random.default_rng(8).normal(size=(3000, 3))
    discrete = np.round(np.random.default_rng(9).random((3000, 2)) * 4)
    alone = stats._percentile_intervals([x, discrete], 900, 4, 0.95, 500, cells=40_000, workers=0)
    threaded = stats._percentile_intervals([x, discrete], 900, 4, 0.95, 500, cells=40_000, workers=workers)
    for (low, high), (t_low, t_high) in zip(alone, threaded, strict=True):
        assert np.array_equal(low, t_low) and np.array_equal(high, t_high)
    ref = scipy.stats.bootstrap((x[:, 0],), np.mean, n_resamples=900, batch=13, method="percentile",
                                rng=np.random.default_rng(4)).confidence_interval
    assert (threaded[0][0][0], threaded[0][1][0]) == pytest.approx((ref.low, ref.high), rel=1e-10)
