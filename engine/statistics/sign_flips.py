"""The paired permutation test of several metrics at once, with scipy's p values (issue 31).

compare_stats' paired permutation test is scipy.stats.permutation_test(permutation_type="samples")
with np.random.default_rng(seed): each metric drew its own 9,999 x n sign patterns, the same ones
whenever n and the seed agree. Here they are drawn once and every metric's differences are tested
with one matrix product per block of patterns, in the order scipy draws them, so the p values are
scipy's exactly, not nearly:

  * scipy shuffles each item's (B, A) pair with Generator.permuted: one 32-bit draw per item and
    pattern, pattern by pattern, the pair swapped where the draw is even. PCG64 hands out 32-bit
    draws as the low then the high half of each 64-bit one, so pattern r, item i is bit 0 of half
    r * n + i of the raw stream (tests/test_sign_flips.py checks the null values against scipy's).
  * scipy's null value is a float64 sum: sequential within a batch of two or more patterns,
    pairwise (numpy's add.reduce) in a batch of one. The product here is within a bound of the
    exact sum; a pattern that close to the observed mean +- scipy's tolerance is summed again
    scipy's way, so every comparison with the observed value comes out as scipy's does.

Patterns are made in blocks of rows of the same stream, so the result does not depend on the
block size, and memory stays at about `cells` x 8 bytes (+ the differences).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# Sign-pattern cells (patterns x items) held at once: 4M x float64 = 32 MB, plus the raw draws.
BLOCK_CELLS = 4_000_000
_EPS = float(np.finfo(float).eps)


def sign_flip_pvalues(diffs: Sequence[np.ndarray], *, n_resamples: int, seed: int, batch: int,
                      cells: int = BLOCK_CELLS) -> list[float]:
    """Two-sided Monte Carlo p of mean(d) = 0 for each d (all of one length n, 2**n > n_resamples,
    not all zero), as scipy's permutation_test((y, x), mean difference, permutation_type="samples",
    n_resamples, rng=default_rng(seed), batch) gives it for d = y - x."""
    d = np.column_stack([np.asarray(x, dtype=float) for x in diffs])  # (n, metrics)
    n, m = d.shape
    if 2**n <= n_resamples:
        raise ValueError(f"{n} items: the exact test enumerates every pattern; this is the Monte Carlo one")
    observed = np.array([np.mean(d[:, j]) for j in range(m)])  # as scipy: pairwise, one column at a time
    gamma = np.abs(_EPS * 100 * observed)
    low, high = observed + gamma, observed - gamma  # null <= low counts as less, >= high as greater
    # The product's sum and scipy's are each within (n + 2) eps sum|d| of the exact sum.
    band = 2.0 * (n + 2) * _EPS * np.abs(d).sum(axis=0) / n + 4 * _EPS * (np.abs(observed) + gamma)
    batch = min(batch, n_resamples)
    single_from = n_resamples if batch > 1 else 0  # patterns from here on sit in a batch of one
    if batch > 1 and n_resamples % batch == 1:
        single_from = n_resamples - 1
    less = np.zeros(m, dtype=np.int64)
    greater = np.zeros(m, dtype=np.int64)
    rows = max(1, cells // n)
    stream = _HalfStream(np.random.default_rng(seed))
    for start in range(0, n_resamples, rows):
        count = min(rows, n_resamples - start)
        signs = stream.take(count * n).reshape(count, n).astype(np.float64)
        signs *= 2.0
        signs -= 1.0  # an even draw swaps the pair: -1
        null = (signs @ d) / n  # (count, metrics)
        less += np.count_nonzero(null <= low, axis=0)
        greater += np.count_nonzero(null >= high, axis=0)
        for r, j in zip(*np.nonzero((np.abs(null - low) <= band) | (np.abs(null - high) <= band)), strict=True):
            exact = _scipy_sum(signs[r] * d[:, j], start + r >= single_from) / n
            less[j] += int(exact <= low[j]) - int(null[r, j] <= low[j])
            greater[j] += int(exact >= high[j]) - int(null[r, j] >= high[j])
    out = []
    for j in range(m):
        p_less = (float(less[j]) + 1) / (n_resamples + 1)
        p_greater = (float(greater[j]) + 1) / (n_resamples + 1)
        out.append(min(1.0, max(0.0, min(p_less, p_greater) * 2)))
    return out


def _scipy_sum(values: np.ndarray, single: bool) -> float:
    """The sum as scipy's np.mean makes it: pairwise for a batch of one pattern, else in item order."""
    if single:
        return float(np.add.reduce(values))
    return float(np.cumsum(values)[-1])


class _HalfStream:
    """Bit 0 of each 32-bit draw a Generator's next_uint32 would give (the low, then the high half
    of each 64-bit draw), read on from where the last take stopped."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._bits = rng.bit_generator
        self._carry: np.ndarray = np.zeros(0, dtype=np.uint8)

    def take(self, k: int) -> np.ndarray:
        need = k - self._carry.size
        raw = self._bits.random_raw(math.ceil(need / 2)) if need > 0 else np.zeros(0, dtype=np.uint64)
        halves = raw.view(np.uint8).reshape(-1, 8)[:, [0, 4]].reshape(-1) & 1  # little-endian bytes 0 and 4
        bits = np.concatenate([self._carry, halves])
        self._carry = bits[k:]
        return bits[:k]
