"""Significance tests and confidence intervals for per-item metric differences.

The t-tests give exactly what scipy.stats.ttest_rel / ttest_1samp give (tests/engine/statistics/test_stats.py
checks to 1e-10), but the Student-t distribution is computed here from the regularised
incomplete beta function instead of importing scipy: importing scipy.special alone takes longer
than the whole `python -m engine bias` command otherwise needs (scripts/bench_bias.py).

The bootstrap is the percentile method over resampled items, vectorised: one matrix of resample
counts is shared by every statistic of a comparison, so the CAS and CAB intervals for precision,
recall and F1 come from the same resamples. With the same seed and batch it reproduces
scipy.stats.bootstrap(method="percentile") draw for draw.

The sign-flip test is the paired permutation test (scipy.stats.permutation_test with
permutation_type="samples" on the differences): exact, by enumerating every sign pattern, for
few non-zero differences, Monte Carlo (seeded) for more. It holds its size at every n, where
the paired t-test does not (7.5-8% at n = 30 for 0/1 or skewed metrics).
"""

from __future__ import annotations

import math
import os
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

DEFAULT_RESAMPLES = 2000  # the usual minimum for 95% percentile intervals; --resamples for more
DEFAULT_SEED = 0
DEFAULT_BATCH = 500  # resamples per chunk: bounds memory at batch x n counts
# ...and at most this many resample x item counts per chunk (500 x 1M items held 14 GB
# at once, most of a 1M-item `compare`'s time went to page faults): ~4M x 20 bytes = 80 MB.
BOOTSTRAP_CELLS = 4_000_000
# Resample x item draws below which the bootstrap counts on this thread alone (~10 ms of work):
# above, threads on the other cores count blocks while this one draws the next (_pipelined).
PARALLEL_CELLS = 2_000_000
# Below this many items the percentile bootstrap of a mean difference covers less than 95% where
# few items differ, the usual case between two runs (scripts/calibration.py, docs/figures.md:
# CAB 87% at 30 items, CAS 92% at 100, 94-95% at 300): `bias` and `compare` mark it approximate.
BOOTSTRAP_APPROXIMATE_BELOW = 300


def interval_note(n: int, spread: bool, first: float) -> str | None:
    """Why a mean over n items has no bootstrap interval, or why its interval is approximate;
    None for a full one. With one item, or every item's value the same (no spread), resampling
    gives that value alone: a zero-width interval from round-off that no one should read as
    certainty, so there is none (as `compare` says of a difference with no spread)."""
    if n < 2:
        return "none: one item"
    if not spread:
        return f"none: every item's value is {first:g} (no spread)"
    if n < BOOTSTRAP_APPROXIMATE_BELOW:
        return f"approximate: percentile bootstrap over {n} items (< {BOOTSTRAP_APPROXIMATE_BELOW})"
    return None


# Sign-flip test: every one of the 2**m sign patterns up to this many non-zero differences
# (65,536 patterns), else this many random patterns: p (twice the smaller one-sided p) then
# carries a Monte Carlo standard error of 2 sqrt(0.025 x 0.975 / 5,000), about 0.0044, at
# p = 0.05, and stays valid (scipy's +1 in numerator and denominator).
EXACT_SIGN_FLIPS = 16
DEFAULT_SIGN_FLIPS = 4999


class TTest(NamedTuple):
    """A one-sample (or paired) t-test: statistic, two-sided p value, degrees of freedom."""

    t: float
    p: float
    df: int


class MeanCI(NamedTuple):
    """A mean with its t-based confidence interval."""

    mean: float
    ci_low: float
    ci_high: float
    sd: float
    n: int


class PairedTest(NamedTuple):
    """Mean difference, percentile-bootstrap CI, t statistic, two-sided p value, n pairs."""

    mean: float
    ci_low: float
    ci_high: float
    t: float
    p: float
    n: int


class SignFlipTest(NamedTuple):
    """A two-sided paired permutation test of mean difference 0 (null: each difference is as
    likely to have either sign, i.e. the two conditions are exchangeable within a pair)."""

    p: float
    m: int  # non-zero differences (zeros are the same under every sign pattern)
    exact: bool  # every sign pattern enumerated; else `resamples` random ones
    resamples: int


# ------------------------------------------------------------------ Student-t distribution


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    return h


def _betainc(a: float, b: float, x: float, y: float) -> float:
    """Regularised incomplete beta I_x(a, b), given x and y = 1 - x each computed without loss."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_front = a * math.log(x) + b * math.log(y) - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
    # The continued fraction converges fast only below the mean; use the symmetry above it.
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, y) / b


def t_sf2(t: float, df: float) -> float:
    """Two-sided tail probability P(|T| >= |t|) of Student's t with df degrees of freedom."""
    if math.isnan(t) or df <= 0:
        return math.nan
    if math.isinf(t):
        return 0.0
    t2 = t * t
    return _betainc(df / 2.0, 0.5, df / (df + t2), t2 / (df + t2))


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom."""
    tail = t_sf2(t, df) / 2.0
    return tail if t < 0 else 1.0 - tail


def t_quantile(q: float, df: float) -> float:
    """The q-quantile of Student's t (bisection on the exact CDF; only for q in (0, 1))."""
    if not 0.0 < q < 1.0 or df <= 0:
        return math.nan
    if q == 0.5:
        return 0.0
    upper = q > 0.5
    tail = 2.0 * ((1.0 - q) if upper else q)  # two-sided tail mass at the answer
    lo, hi = 0.0, 1.0
    while t_sf2(hi, df) > tail:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_sf2(mid, df) > tail:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * hi:
            break
    x = 0.5 * (lo + hi)
    return x if upper else -x


# ------------------------------------------------------------------ tests and intervals


def t_test(x: Sequence[float] | np.ndarray, popmean: float = 0.0) -> TTest:
    """One-sample two-sided t-test of mean(x) against popmean (as scipy.stats.ttest_1samp)."""
    arr = np.asarray(x, dtype=float)
    n = arr.size
    if n < 2:
        return TTest(math.nan, math.nan, max(n - 1, 0))
    d = arr.mean() - popmean
    sd = float(arr.std(ddof=1))
    if sd == 0.0:
        # scipy: 0/0 is NaN (no evidence), a constant non-zero difference is infinitely significant.
        t = math.nan if d == 0 else math.copysign(math.inf, d)
    else:
        t = float(d / (sd / math.sqrt(n)))
    return TTest(t, t_sf2(t, n - 1), n - 1)


def paired_t_test(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> TTest:
    """Paired two-sided t-test of a against b (as scipy.stats.ttest_rel)."""
    return t_test(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))


def mean_ci(x: Sequence[float] | np.ndarray, confidence: float = 0.95) -> MeanCI:
    """Mean ± t_{(1+c)/2, n-1} · sd / √n; the interval is NaN for fewer than two values."""
    arr = np.asarray(x, dtype=float)
    n = arr.size
    if n == 0:
        return MeanCI(math.nan, math.nan, math.nan, math.nan, 0)
    mean = float(arr.mean())
    if n < 2:
        return MeanCI(mean, math.nan, math.nan, math.nan, n)
    sd = float(arr.std(ddof=1))
    half = t_quantile((1.0 + confidence) / 2.0, n - 1) * sd / math.sqrt(n)
    return MeanCI(mean, mean - half, mean + half, sd, n)


def bootstrap_mean_ci(
    values: np.ndarray,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = 0.95,
    batch: int = DEFAULT_BATCH,
    cells: int = BOOTSTRAP_CELLS,
) -> tuple[np.ndarray, np.ndarray] | tuple[float, float]:
    """Percentile-bootstrap CI of the column means of an (n,) or (n, k) array: (low, high), two
    numbers for an (n,) array, two (k,) arrays for an (n, k) one. `batch` and `cells` bound the
    resamples drawn at once (the same draws, whatever the bounds)."""
    arr = np.asarray(values, dtype=float)
    columns = arr.reshape(arr.shape[0], -1)
    n, k = columns.shape
    if n == 0:
        nan = np.full(k, np.nan)
        return (nan, nan.copy()) if arr.ndim > 1 else (math.nan, math.nan)
    [(low, high)] = _percentile_intervals([columns], n_resamples, seed, confidence, batch, cells)
    if arr.ndim == 1:
        return low[0], high[0]
    return low, high


def bootstrap_mean_cis(values: Sequence[np.ndarray], *, n_resamples: int = DEFAULT_RESAMPLES,
                       seed: int = DEFAULT_SEED, confidence: float = 0.95,
                       batch: int = DEFAULT_BATCH, cells: int = BOOTSTRAP_CELLS) -> list[tuple[float, float]]:
    """bootstrap_mean_ci of each (n,) array, all of one length n >= 1, with the resampled items
    drawn once for all of them: the draws depend on n and the seed only, so every
    interval is the one bootstrap_mean_ci gives alone, to the bit, for a sixth of the draws at six."""
    columns = [np.asarray(v, dtype=float).reshape(-1, 1) for v in values]
    return [(float(low[0]), float(high[0]))
            for low, high in _percentile_intervals(columns, n_resamples, seed, confidence, batch, cells)]


def _percentile_intervals(arrays: list[np.ndarray], n_resamples: int, seed: int, confidence: float,
                          batch: int, cells: int = BOOTSTRAP_CELLS,
                          workers: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    n = arrays[0].shape[0]
    if any(a.shape[0] != n for a in arrays):
        raise ValueError("one draw of resamples needs arrays of one length")
    means = [np.empty((n_resamples, a.shape[1])) for a in arrays]
    # The draws are one stream, however it is cut into blocks. BLAS sums a row of the product in an
    # order that depends on the block's shape: up to cells / batch items (8,000) the blocks, and so
    # every interval, are those of one draw per metric to the bit; above, a mean may move in its last bit.
    batch = max(1, min(batch, cells // n))
    blocks = _resample_blocks(n, n_resamples, seed, batch)
    if workers is None:
        workers = usable_cores() - 1 if n_resamples * n >= PARALLEL_CELLS else 0
    if workers < 1:
        counts = np.empty((batch, n))  # reused: a fresh block per batch was page faults
        for start, idx in blocks:
            _block_means(idx, start, arrays, means, counts)
    else:
        _pipelined(blocks, arrays, means, batch, workers)
    alpha = (1.0 - confidence) / 2.0
    out = []
    for m in means:
        low, high = np.percentile(m, [100 * alpha, 100 * (1 - alpha)], axis=0)
        out.append((low, high))
    return out


def _resample_blocks(n: int, n_resamples: int, seed: int, batch: int) -> Iterator[tuple[int, np.ndarray]]:
    """(first resample, its block of drawn items) in order: the same draws as scipy.stats.bootstrap,
    one (resamples, n) block of indices per batch (int32 draws the same stream as scipy's int64
    for n < 2**31, at half the memory)."""
    rng = np.random.default_rng(seed)
    for start in range(0, n_resamples, batch):
        yield start, rng.integers(0, n, (min(batch, n_resamples - start), n), dtype=np.int32)


def _block_means(idx: np.ndarray, start: int, arrays: list[np.ndarray], means: list[np.ndarray],
                 counts: np.ndarray) -> None:
    """Write the means of the resamples idx holds (rows from `start`) into `means`. Counting how
    often each item was drawn turns every resample mean into one matmul; the counts as float64
    once for every array (matmul cast them again for each)."""
    rows, n = idx.shape
    for r in range(rows):
        counts[r] = np.bincount(idx[r], minlength=n)
    for m, columns in zip(means, arrays, strict=True):
        m[start : start + rows] = counts[:rows] @ columns / n


def _pipelined(blocks: Iterator[tuple[int, np.ndarray]], arrays: list[np.ndarray], means: list[np.ndarray],
               batch: int, workers: int) -> None:
    """_block_means of every block on `workers` threads while this one draws the next blocks: the
    draws stay one stream in order (they cannot be split: a bounded draw takes one or more
    32-bit values), the counting and the products, most of the time, go on the other cores.
    Each block's means land in rows of their own, so they are the sequential loop's to the bit.
    numpy's generator, bincount and BLAS release the GIL."""
    from concurrent.futures import Future, ThreadPoolExecutor

    n = arrays[0].shape[0]
    local = threading.local()

    def work(start: int, idx: np.ndarray) -> None:
        if getattr(local, "counts", None) is None:
            local.counts = np.empty((batch, n))  # one per thread, reused
        _block_means(idx, start, arrays, means, local.counts)

    pending: deque[Future[None]] = deque()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bootstrap") as pool:
        for start, idx in blocks:
            pending.append(pool.submit(work, start, idx))
            while len(pending) > 2 * workers:  # blocks drawn ahead: memory stays a few blocks
                pending.popleft().result()
        for done in pending:
            done.result()


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS tells it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def one_sample_tests(
    values: np.ndarray,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = 0.95,
) -> list[PairedTest]:
    """For each column of an (n, k) array: mean, bootstrap CI and a t-test against 0."""
    columns = np.asarray(values, dtype=float).reshape(len(values), -1)
    # (n, k) in: (k,) arrays out (atleast_1d tells the type checker, which cannot see the shape).
    low, high = map(np.atleast_1d, bootstrap_mean_ci(columns, n_resamples=n_resamples, seed=seed, confidence=confidence))
    out = []
    for j in range(columns.shape[1]):
        test = t_test(columns[:, j])
        mean = float(columns[:, j].mean()) if len(columns) else math.nan
        out.append(PairedTest(mean, float(low[j]), float(high[j]), test.t, test.p, len(columns)))
    return out


def paired_test(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = 0.95,
) -> PairedTest:
    """Mean of a - b with its bootstrap CI and paired t-test (pairs must be aligned)."""
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    return one_sample_tests(diff[:, None], n_resamples=n_resamples, seed=seed, confidence=confidence)[0]


def sign_flip_test(
    diffs: Sequence[float] | np.ndarray,
    *,
    n_resamples: int = DEFAULT_SIGN_FLIPS,
    seed: int = DEFAULT_SEED,
    batch: int = DEFAULT_BATCH,
) -> SignFlipTest:
    """Two-sided sign-flip permutation test of mean(diffs) = 0, as scipy.stats.permutation_test
    (data=(nonzero diffs,), statistic=mean, permutation_type="samples") computes it: p = 2 x the
    smaller one-sided p, capped at 1; exact when 2**m <= max(n_resamples, 2**EXACT_SIGN_FLIPS).

    Only the non-zero differences enter: a zero is the same under either sign, so the exact p is
    that of all differences; the Monte Carlo draws are made over the non-zero ones alone. No
    non-zero difference: p = 1 (every pattern gives the observed mean).
    """
    arr = np.asarray(diffs, dtype=float)
    nonzero = arr[arr != 0.0]
    m = int(nonzero.size)
    if m == 0:
        return SignFlipTest(1.0, 0, True, 0)
    observed = float(nonzero.mean())
    gamma = abs(np.finfo(float).eps * 100 * observed)  # scipy's tolerance for ties in floating point
    exact = m <= EXACT_SIGN_FLIPS or 2**m <= n_resamples
    less = greater = 0
    if exact:
        total = 2**m
        for start in range(0, total, 1 << 14):
            codes = np.arange(start, min(total, start + (1 << 14)), dtype=np.int64)
            signs = 1.0 - 2.0 * ((codes[:, None] >> np.arange(m)) & 1)
            null = signs @ nonzero / m
            less += int(np.count_nonzero(null <= observed + gamma))
            greater += int(np.count_nonzero(null >= observed - gamma))
        p_less, p_greater = less / total, greater / total
        draws = 0
    else:
        rng = np.random.default_rng(seed)
        for start in range(0, n_resamples, batch):
            rows = min(batch, n_resamples - start)
            signs = 1.0 - 2.0 * rng.integers(0, 2, (rows, m), dtype=np.int8)
            null = signs @ nonzero / m
            less += int(np.count_nonzero(null <= observed + gamma))
            greater += int(np.count_nonzero(null >= observed - gamma))
        p_less, p_greater = (less + 1) / (n_resamples + 1), (greater + 1) / (n_resamples + 1)
        draws = n_resamples
    return SignFlipTest(min(1.0, 2.0 * min(p_less, p_greater)), m, exact, draws)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p values, in the order given: the k-th smallest of the m known p
    values times (m - k + 1), made non-decreasing and capped at 1; NaN entries stay NaN and do not
    count among the tests. statsmodels' multipletests(method="holm") gives the same numbers (the
    tests hold them equal), but runs a full gc.collect() on every call: seconds in a process that
    holds a model or the app, paid on every board of the leaderboard and every draw of a simulation."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    known = np.flatnonzero(~np.isnan(p))
    order = known[np.argsort(p[known], kind="stable")]
    out[order] = np.minimum(np.maximum.accumulate(p[order] * np.arange(order.size, 0, -1)), 1.0)
    return out.tolist()
