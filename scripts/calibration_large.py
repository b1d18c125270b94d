"""The large-sample rule of `compare` and `bias` by simulation (scripts/calibration.py, section
`asymptotic`): type-I error and interval coverage of the large-sample tests and of the
permutation and exact tests, around the number of differing pairs above which the large-sample
ones decide (engine.statistics.asymptotic.ASYMPTOTIC_ABOVE).

What counts is how many pairs differ, so each cell fixes that number m; the items are m / 0.3 (70%
of pairs alike, as two runs' answers mostly are). Per metric kind:
  * continuous, precision-like: each differing pair moves by 1/3, 1/2, 2/3 or 1 (40/30/20/10%),
    the differences of citation precision over a few citations;
  * continuous, heavy-tailed: 2% of the differing pairs move by 1, the others by 0.05 (a few
    items carry most of the difference: the t-test's hard case);
  * 0/1: each differing pair is a discordant pair, right in B only or in A only.
Under the null each differing pair's sign is a coin flip (the permutation test's null: A and B
exchangeable within items); under the effect it is + with probability 0.6, so the true mean
difference is (m / n) x 0.2 x E|move|, known exactly. Measured per cell: the share of p < 0.05
under the null (size) and the share of 95% intervals that hold the true difference under the
effect (coverage), for
  * the large-sample side: the paired t-test (scipy's ttest_rel over all n items, zeros included,
    as compare runs it; bias's t-test is the same test) or McNemar's chi-square with continuity
    correction, and the t interval: engine.statistics.asymptotic, as compare_metric calls it;
  * the exact side: the sign-flip permutation test (engine.statistics.stats.sign_flip_test, bias's;
    compare's paired permutation test is the same test) with 999 patterns, or the exact McNemar
    test; the percentile bootstrap (1,000 resamples) or the exact Clopper-Pearson bounds.
The exact side costs far more per draw (the bootstrap at 10,000 items), so it gets fewer draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SHARE_DIFFERING = 0.3
EFFECT = 0.6  # P(a differing pair moves B's way) under the effect
KINDS = ("continuous, precision-like", "continuous, heavy-tailed", "0/1")
BOOTSTRAP_RESAMPLES = 1000
_MOVES = {"continuous, precision-like": (np.array([1 / 3, 1 / 2, 2 / 3, 1.0]), np.array([0.4, 0.3, 0.2, 0.1])),
          "continuous, heavy-tailed": (np.array([0.05, 1.0]), np.array([0.98, 0.02])),
          "0/1": (np.array([1.0]), np.array([1.0]))}


@dataclass(frozen=True)
class LargeRow:
    """One cell: a metric kind at m differing pairs among n items."""

    kind: str
    differing: int
    n: int
    draws: int  # large-sample side
    exact_draws: int  # permutation / exact side
    size_large: float  # share of p < 0.05 under the null
    size_exact: float
    cover_large: float  # share of 95% intervals holding the true difference under the effect
    cover_exact: float


def _moves(rng: np.random.Generator, kind: str, m: int, n: int, p_plus: float, rows: int) -> np.ndarray:
    """(rows, n) paired differences B - A: m of each row's n differ by a move of `kind`, B's way
    with probability p_plus; the others are 0 (which items differ does not matter to the tests)."""
    values, weights = _MOVES[kind]
    d = np.zeros((rows, n))
    d[:, :m] = rng.choice(values, (rows, m), p=weights) * np.where(rng.random((rows, m)) < p_plus, 1.0, -1.0)
    return d


def _large(kind: str, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p, interval low, high) of the large-sample side for each row of d, vectorised: the formulas
    of engine.statistics.asymptotic and scipy's ttest_rel (checked against them row by row in
    _check)."""
    from scipy.stats import chi2, t

    n = d.shape[1]
    mean, sd = d.mean(axis=1), d.std(axis=1, ddof=1)
    half = t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    if kind == "0/1":
        b_only, a_only = np.sum(d > 0, axis=1), np.sum(d < 0, axis=1)
        p = chi2.sf((np.abs(b_only - a_only) - 1.0) ** 2 / (b_only + a_only), 1)
    else:
        p = 2 * t.sf(np.abs(mean / (sd / math.sqrt(n))), n - 1)
    return p, mean - half, mean + half


def _check(kind: str, d: np.ndarray, got: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    """The vectorised p and interval of a row are the engine's (what compare_metric calls)."""
    from engine.statistics import asymptotic as asym
    from engine.statistics.compare_stats import paired_t

    if kind == "0/1":
        p = asym.mcnemar_chi2(int(np.sum(d > 0)), int(np.sum(d < 0))).p
    else:
        p = paired_t(np.zeros(d.size), d).p
    low, high = asym.t_interval(d)
    if not np.allclose((p, low, high), [x[0] for x in got], rtol=1e-9, atol=1e-12):
        raise SystemExit(f"calibration_large: {kind}: the vectorised test is not the engine's")


def _exact(kind: str, d: np.ndarray, seed: int) -> tuple[float, float, float]:
    """(p, interval low, high) of the permutation and exact side for one row of differences."""
    from scipy.stats import binomtest

    from engine.statistics.paired_exact import difference_bounds
    from engine.statistics.stats import bootstrap_mean_ci, sign_flip_test

    if kind == "0/1":
        b_only, a_only = int(np.sum(d > 0)), int(np.sum(d < 0))
        bounds = difference_bounds(b_only, a_only, d.size, 0.025)
        return binomtest(b_only, b_only + a_only, 0.5).pvalue, bounds.low, bounds.high
    p = sign_flip_test(d, n_resamples=999, seed=seed).p
    low, high = bootstrap_mean_ci(d, n_resamples=BOOTSTRAP_RESAMPLES, seed=seed)
    return p, float(low), float(high)


def large_sample_calibration(m: int, draws: int, exact_draws: int, seed: int) -> list[LargeRow]:
    """Every kind at m differing pairs: size under the null, coverage under the effect, both sides."""
    n = math.ceil(m / SHARE_DIFFERING)
    rows = []
    for k, kind in enumerate(KINDS):
        values, weights = _MOVES[kind]
        truth = (m / n) * (2 * EFFECT - 1) * float(values @ weights)
        rng = np.random.default_rng([seed, m, k])
        counts = np.zeros(4)
        chunk = max(1, min(draws, 2_000_000 // n))
        for start in range(0, draws, chunk):
            rows_now = min(chunk, draws - start)
            null = _moves(rng, kind, m, n, 0.5, rows_now)
            moved = _moves(rng, kind, m, n, EFFECT, rows_now)
            got_null, got_moved = _large(kind, null), _large(kind, moved)
            if start == 0:
                _check(kind, null[0], got_null)
                _check(kind, moved[0], got_moved)
            counts[0] += np.sum(got_null[0] < 0.05)
            counts[2] += np.sum((got_moved[1] <= truth) & (truth <= got_moved[2]))
            for r in range(start, min(start + rows_now, exact_draws)):
                counts[1] += _exact(kind, null[r - start], seed=r)[0] < 0.05
                _, low, high = _exact(kind, moved[r - start], seed=r)
                counts[3] += low <= truth <= high
        e = max(1, min(draws, exact_draws))
        rows.append(LargeRow(kind, m, n, draws, min(draws, exact_draws), float(counts[0] / draws),
                             float(counts[1] / e), float(counts[2] / draws), float(counts[3] / e)))
    return rows
