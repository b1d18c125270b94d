"""The paired permutation test of several metrics at once, with scipy's p values.

compare_stats' paired permutation test is scipy.stats.permutation_test(permutation_type="samples")
with np.random.default_rng(seed): each metric drew its own 9,999 x n sign patterns, the same ones
whenever n and the seed agree. Here they are drawn once and every metric's differences are tested
with one matrix product per block of patterns, in the order scipy draws them, so the p values are
scipy's exactly, not nearly:

  * scipy shuffles each item's (B, A) pair with Generator.permuted: one 32-bit draw per item and
    pattern, pattern by pattern, the pair swapped where the draw is even. PCG64 hands out 32-bit
    draws as the low then the high half of each 64-bit one, so pattern r, item i is bit 0 of half
    r * n + i of the raw stream (tests/engine/statistics/test_sign_flips.py checks the null values against scipy's).
  * scipy's null value is a float64 sum: sequential within a batch of two or more patterns,
    pairwise (numpy's add.reduce) in a batch of one. The product here is within a bound of the
    exact sum; a pattern that close to the observed mean +- scipy's tolerance is summed again
    scipy's way, so every comparison with the observed value comes out as scipy's does.

Patterns are made in blocks of rows of the same stream, so the result does not depend on the
block size, and memory stays at about `cells` x 4 bytes (the draws) + a tile (+ the differences).
The product is taken with the 0/1 pattern (2 bits.d - sum d): no pass turns the bits into +-1.
It goes tile by tile (TILE_ROWS patterns x a cache-sized run of items): turning a whole block's
bits into floats, then multiplying, read and wrote 64 MB of floats through memory per block;
a tile stays in the core's cache between the two (2.2x faster per pattern cell at 1M items).

The patterns are counted in contiguous ranges on as many threads as the process has cores: a
range starting at pattern r draws from a copy of the generator moved to half r * n
(PCG64.advance, one step per 64-bit draw), so each range sees exactly the draws one stream would
have given it, and the counts, hence the p values, are the same on one core or many (tested).
numpy and BLAS release the GIL while drawing, masking and multiplying.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.statistics.stats import usable_cores

# Sign-pattern cells (patterns x items) held at once: 8M x float64 = 64 MB, plus the raw draws
# (32 MB). Fewer rows than ~8 a block at 1M items re-read the differences per pattern.
BLOCK_CELLS = 8_000_000
# A tile of 16 patterns x 8,192 items as float64 is 1 MB: it stays in a core's L2 (1-2 MB on the
# machines measured) between the bits' conversion and the product. 16 rows keep BLAS efficient;
# 8 rows were 1.25x slower per cell, 64 x 4,096 2.7x (out of cache). Measured on an AMD EPYC.
TILE_ROWS = 16
TILE_CELLS = 131_072
# Pattern cells below which a range is not worth a thread of its own (~10 ms of work).
MIN_CELLS_PER_WORKER = 2_000_000
_EPS = float(np.finfo(float).eps)


def sign_flip_pvalues(diffs: Sequence[np.ndarray], *, n_resamples: int, seed: int, batch: int,
                      cells: int = BLOCK_CELLS, workers: int | None = None) -> list[float]:
    """Two-sided Monte Carlo p of mean(d) = 0 for each d (all of one length n, 2**n > n_resamples,
    not all zero), as scipy's permutation_test((y, x), mean difference, permutation_type="samples",
    n_resamples, rng=default_rng(seed), batch) gives it for d = y - x. `workers`: threads that
    count ranges of patterns at once (None: the cores this process may use); the p values are the
    same for any number."""
    dt = np.vstack([np.asarray(x, dtype=float) for x in diffs])  # (metrics, n): each metric's row contiguous
    m, n = dt.shape
    if 2**n <= n_resamples:
        raise ValueError(f"{n} items: the exact test enumerates every pattern; this is the Monte Carlo one")
    observed = np.array([np.mean(dt[j]) for j in range(m)])  # as scipy: pairwise, one column at a time
    gamma = np.abs(_EPS * 100 * observed)
    low, high = observed + gamma, observed - gamma  # null <= low counts as less, >= high as greater
    # The null sum is 2 (bits . d) - sum(d): the product and the total are each within n eps sum|d|
    # of their exact values (the product counts twice), scipy's own sum within (n + 2) eps sum|d|:
    # 4 (n + 2) eps sum|d| covers all of them.
    total = dt.sum(axis=1)
    band = 4.0 * (n + 2) * _EPS * np.abs(dt).sum(axis=1) / n + 4 * _EPS * (np.abs(observed) + gamma)
    batch = min(batch, n_resamples)
    single_from = n_resamples if batch > 1 else 0  # patterns from here on sit in a batch of one
    if batch > 1 and n_resamples % batch == 1:
        single_from = n_resamples - 1
    bounds = Bounds(low, high, band, total, single_from)
    # Pattern r's draws start at half r * n of the stream, so a range of patterns can be drawn from
    # a copy of the generator moved there (PCG64.advance): the ranges are counted at once, on as
    # many cores as the process may use, and the counts are the same as one stream's in order.
    parts = _ranges(n_resamples, n, workers if workers is not None else usable_cores())
    if len(parts) == 1:
        counts = [_count(dt, bounds, seed, parts[0], cells)]
    else:
        from concurrent.futures import ThreadPoolExecutor

        share = max(n, cells // len(parts))  # the memory bound is the whole call's
        with ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="sign-flips") as pool:
            counts = list(pool.map(lambda part: _count(dt, bounds, seed, part, share), parts))
    less = np.sum([c[0] for c in counts], axis=0)
    greater = np.sum([c[1] for c in counts], axis=0)
    out = []
    for j in range(m):
        p_less = (float(less[j]) + 1) / (n_resamples + 1)
        p_greater = (float(greater[j]) + 1) / (n_resamples + 1)
        out.append(min(1.0, max(0.0, min(p_less, p_greater) * 2)))
    return out


@dataclass(frozen=True)
class Bounds:
    """What a pattern's null value is compared with, per metric (arrays of the metrics' length)."""

    low: np.ndarray  # null <= low counts as less
    high: np.ndarray  # null >= high counts as greater
    band: np.ndarray  # a null value this close to low or high is summed again scipy's way
    total: np.ndarray  # sum(d)
    single_from: int  # patterns from here on sit in a batch of one (scipy sums them pairwise)


def _ranges(n_resamples: int, n: int, workers: int) -> list[tuple[int, int]]:
    """Contiguous ranges of patterns, one per worker; one range where the work is small (a
    thread costs more than a pattern of a few thousand items)."""
    workers = max(1, min(workers, n_resamples, (n_resamples * n) // MIN_CELLS_PER_WORKER))
    edges = [round(k * n_resamples / workers) for k in range(workers + 1)]
    return [(a, b) for a, b in zip(edges, edges[1:], strict=False) if b > a]


def _count(dt: np.ndarray, bounds: Bounds, seed: int, patterns: tuple[int, int],
           cells: int) -> tuple[np.ndarray, np.ndarray]:
    """(less, greater) counts per metric over the patterns first..stop-1, drawn from the seed's
    stream moved to pattern `first`."""
    first, stop = patterns
    m, n = dt.shape
    less = np.zeros(m, dtype=np.int64)
    greater = np.zeros(m, dtype=np.int64)
    rows = max(1, min(cells // n, stop - first))
    stream = _HalfStream(np.random.default_rng(seed), skip=first * n)
    tile_rows = min(TILE_ROWS, rows)
    width = max(1, min(n, TILE_CELLS // tile_rows))
    d_cols = dt.T  # (n, metrics), a view: a run of items is a (width, metrics) operand
    tile = np.empty((tile_rows, width))  # reused: bits as 0.0 / 1.0 (a fresh one per tile was page faults)
    bits = np.empty((tile_rows, width), dtype=np.uint32)
    low, high, band = bounds.low, bounds.high, bounds.band
    for start in range(first, stop, rows):
        count = min(rows, stop - start)
        # Bit 0 of each draw: 1 keeps the pair, 0 swaps it.
        draws = stream.take(count * n).reshape(count, n)
        kept = np.zeros((count, m))  # bits . d per pattern and metric
        for r0 in range(0, count, tile_rows):
            r1 = min(r0 + tile_rows, count)
            for c0 in range(0, n, width):
                c1 = min(c0 + width, n)
                b, t = bits[: r1 - r0, : c1 - c0], tile[: r1 - r0, : c1 - c0]
                # Masking, then copying: one ufunc masking into floats casts through a buffer (2x slower).
                np.bitwise_and(draws[r0:r1, c0:c1], np.uint32(1), out=b)
                t[...] = b
                kept[r0:r1] += t @ d_cols[c0:c1]  # d_cols[...] @ t.T is 5x slower
        null = (2.0 * kept - bounds.total) / n  # (count, metrics)
        less += np.count_nonzero(null <= low, axis=0)
        greater += np.count_nonzero(null >= high, axis=0)
        for r, j in zip(*np.nonzero((np.abs(null - low) <= band) | (np.abs(null - high) <= band)), strict=True):
            signs = 2.0 * (draws[r] & np.uint32(1)) - 1.0
            exact = _scipy_sum(signs * dt[j], start + r >= bounds.single_from) / n
            less[j] += int(exact <= low[j]) - int(null[r, j] <= low[j])
            greater[j] += int(exact >= high[j]) - int(null[r, j] >= high[j])
    return less, greater


def _scipy_sum(values: np.ndarray, single: bool) -> float:
    """The sum as scipy's np.mean makes it: pairwise for a batch of one pattern, else in item order."""
    if single:
        return float(np.add.reduce(values))
    return float(np.cumsum(values)[-1])


class _HalfStream:
    """The 32-bit draws a Generator's next_uint32 would give (the low, then the high half of each
    64-bit draw), read on from where the last take stopped."""

    def __init__(self, rng: np.random.Generator, skip: int = 0) -> None:
        """`skip`: start at that 32-bit draw (the generator moved on by whole 64-bit draws, then
        the low half dropped where `skip` is odd)."""
        self._bits = rng.bit_generator
        self._carry: np.ndarray = np.zeros(0, dtype=np.uint32)
        if skip:
            self._bits.advance(skip // 2)  # type: ignore[attr-defined]  # PCG64's: one step a 64-bit draw
            if skip % 2:
                self.take(1)

    def take(self, k: int) -> np.ndarray:
        need = k - self._carry.size
        raw = self._bits.random_raw(math.ceil(need / 2)) if need > 0 else np.zeros(0, dtype=np.uint64)
        if sys.byteorder == "little":
            halves = raw.view(np.uint32)  # low half first: one pass, no copy
        else:
            halves = np.column_stack([raw & 0xFFFFFFFF, raw >> 32]).reshape(-1).astype(np.uint32)
        draws = np.concatenate([self._carry, halves]) if self._carry.size else halves
        self._carry = draws[k:].copy()
        return draws[:k]
