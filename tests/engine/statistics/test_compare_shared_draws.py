"""compare's work done once where it was repeated with the same inputs, the same results
to the bit: the exact McNemar detectable difference's rejection region (at 100k items the ~20 power
evaluations recomputing it took 80% of a binary metric's time), and the bootstrap's resampled items,
drawn once for every metric with the same number of items and seed (the draws were ~90% of each
interval's time)."""

import math

import numpy as np
import pytest

from engine.statistics import compare_stats as cs
from engine.statistics.paired_exact import ALPHA, _critical, _discordant_weights, mcnemar_min_detectable, mcnemar_power
from engine.statistics.stats import bootstrap_mean_ci, bootstrap_mean_cis


@pytest.mark.parametrize("difference", [0.0, 0.01, 0.05, 0.2])
def test_power_with_a_given_rejection_region_is_the_same(difference):
    n, p_d = 3000, 0.2
    critical = _critical(np.arange(n + 1), ALPHA)
    assert mcnemar_power(n, p_d, difference, critical=critical) == mcnemar_power(n, p_d, difference)


# Values of the code before the change (HEAD 8e1f9ad), which recomputed the region per evaluation.
@pytest.mark.parametrize(("n", "discordant", "want"), [
    (40, 9, 0.20703140749953705), (500, 120, 0.0628700567981427),
    (3000, 310, 0.01672084771697688), (20000, 4100, 0.009017131834400156), (30, 2, None),
])
def test_detectable_difference_is_unchanged(n, discordant, want):
    assert mcnemar_min_detectable(n, discordant).value == want


def test_one_draw_of_resamples_gives_each_interval_bootstrap_mean_ci_gives_alone():
    rng = np.random.default_rng(3)
    cols = [rng.random(1500), np.round(rng.random(1500) * 3), rng.normal(size=1500)]
    want = [bootstrap_mean_ci(c, n_resamples=1200, seed=7, batch=500) for c in cols]
    assert bootstrap_mean_cis(cols, n_resamples=1200, seed=7, batch=500) == [(float(lo), float(hi)) for lo, hi in want]


def test_compare_metrics_gives_every_metric_its_own_interval():
    rng = np.random.default_rng(5)
    n = 800
    a = {name: rng.random(n) if not spec.binary else (rng.random(n) < 0.4).astype(float)
         for name, spec in cs.METRICS.items()}
    b = {name: v[rng.permutation(n)] for name, v in a.items()}
    a["f1"][:30] = math.nan  # another number of items: its own draw
    got = cs.compare_metrics(a, b)
    alone = cs.with_holm(cs.compare_metric(cs.METRICS[r.metric], a[r.metric], b[r.metric]) for r in got)
    assert [(r.metric, r.ci_low, r.ci_high, r.p) for r in got] == [(r.metric, r.ci_low, r.ci_high, r.p) for r in alone]


def test_power_sums_the_same_terms_where_most_weights_are_zero():
    """At 50k pairs the discordant count's weight underflows to 0 on ~90% of 0..n: the rejection
    probability is computed only where it is not, and the power is the full sum's."""
    from scipy.stats import binom

    n, p_d, difference = 50_000, 0.3, 0.01
    m = np.arange(n + 1)
    c = _critical(m, ALPHA)
    pi = 0.5 + difference / (2 * p_d)
    reject = np.where(c >= 0, binom.cdf(c, m, pi) + binom.sf(m - c - 1, m, pi), 0.0)
    assert np.count_nonzero(_discordant_weights(n, p_d)) < n / 5
    assert mcnemar_power(n, p_d, difference) == float(np.sum(binom.pmf(m, n, p_d) * reject))


def test_detectable_difference_at_300k_pairs_takes_seconds_not_tens():
    """Before the draws were shared: ~9 s of CPU at 300k pairs (30 s at 1M), the rejection
    probability of every possible number of discordant pairs, ~20 times; now ~0.6 s."""
    import time

    start = time.process_time()
    mcnemar_min_detectable(300_000, 120_000)
    assert time.process_time() - start < 4.0


def test_bootstrap_memory_is_bounded_by_cells_not_resamples():
    """500 resamples x 100k items at once were ~1 GB (14 GB at 1M); now a block holds at
    most BOOTSTRAP_CELLS counts. The resamples are the same whatever the block; BLAS sums a row of
    the product in an order that depends on the block's shape, so a mean may move in its last bit."""
    import tracemalloc

    rng = np.random.default_rng(4)
    cols = [rng.random(100_000), np.round(rng.random(100_000) * 3)]
    tracemalloc.start()
    got = bootstrap_mean_cis(cols, n_resamples=400, seed=1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 200e6, peak
    one_a_block = bootstrap_mean_cis(cols, n_resamples=400, seed=1, cells=1)
    assert np.allclose(got, one_a_block, rtol=1e-12, atol=0)


def test_the_tests_and_the_intervals_run_side_by_side_with_the_same_results(monkeypatch):
    """compare_metrics runs the permutation tests in a second thread while the bootstrap runs
    (wall time at 1M items); each draws its own seeded stream, so one core or two give
    the same comparison, and an error in the thread reaches the caller."""
    import os
    import threading

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    rng = np.random.default_rng(7)
    a = {"f1": rng.random(3_000), "precision": rng.random(3_000), "recall": rng.random(3_000)}
    b = {name: np.clip(v + rng.normal(0, 0.1, v.size), 0, 1) for name, v in a.items()}
    two = cs.compare_metrics(a, b, ["f1", "precision", "recall"], n_resamples=300, permutations=999)
    names = cs._side_by_side(lambda: threading.current_thread().name, lambda: threading.current_thread().name)
    assert names[0].startswith("compare-permutations") and names[1] == threading.current_thread().name
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})  # one core: one after the other
    assert cs.compare_metrics(a, b, ["f1", "precision", "recall"], n_resamples=300, permutations=999) == two

    def fails() -> None:
        raise ValueError("in the thread")

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    with pytest.raises(ValueError, match="in the thread"):
        cs._side_by_side(fails, lambda: None)
