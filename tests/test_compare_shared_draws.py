"""compare's work done once where it was repeated with the same inputs (issue 31), the same results
to the bit: the exact McNemar detectable difference's rejection region (at 100k items the ~20 power
evaluations recomputing it took 80% of a binary metric's time), and the bootstrap's resampled items,
drawn once for every metric with the same number of items and seed (the draws were ~90% of each
interval's time)."""

import math

import numpy as np
import pytest

from engine.statistics import compare_stats as cs
from engine.statistics.paired_exact import ALPHA, _critical, mcnemar_min_detectable, mcnemar_power
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
