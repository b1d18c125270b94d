"""One draw of sign patterns for every metric's paired permutation test: the same p
values as scipy's permutation_test per metric, exactly, whatever the block size, in bounded memory."""

from __future__ import annotations

import numpy as np
import pytest

from engine.statistics.compare_stats import paired_permutation, paired_permutations
from engine.statistics.sign_flips import sign_flip_pvalues


def _columns(n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Differences with ties (thirds, integers, mostly zero) as metrics give them, and continuous ones."""
    thirds = lambda: np.round(rng.random(n) * 3) / 3 * 100  # noqa: E731
    return [thirds() - thirds(), rng.integers(-2, 3, n).astype(float), rng.random(n) * 100 - 50,
            np.full(n, 2.5), (rng.random(n) < 0.1) * thirds()]


@pytest.mark.parametrize(("n", "seed"), [(14, 0), (30, 3), (30, 11), (257, 0), (2_001, 5)])
def test_same_p_values_as_scipy_per_metric(n: int, seed: int) -> None:
    cols = _columns(n, np.random.default_rng(n + seed))
    zeros = np.zeros(n)
    want = [paired_permutation(zeros, c, seed=seed) for c in cols]
    got = paired_permutations([(zeros, c) for c in cols], seed=seed)
    assert [g.p for g in got] == [w.p for w in want]  # equal, not close
    assert [g.statistic for g in got] == [w.statistic for w in want]


def test_small_and_degenerate_pairs_keep_their_paths() -> None:
    """Exact (2**n <= resamples), one pair, no spread and NaN pairs: as paired_permutation."""
    rng = np.random.default_rng(1)
    pairs = [(np.zeros(5), rng.random(5)), (np.zeros(1), np.ones(1)), (np.ones(40), np.ones(40)),
             (np.r_[rng.random(30), np.nan], rng.random(31))]
    assert [t.p for t in paired_permutations(pairs)] == [paired_permutation(a, b).p for a, b in pairs]


def test_block_size_does_not_change_p() -> None:
    cols = _columns(3_001, np.random.default_rng(2))
    ps = {tuple(sign_flip_pvalues(cols, n_resamples=999, seed=4, batch=b, cells=c))
          for c in (1, 2_999, 3_001 * 7, 4_000_000) for b in (666,)}
    assert len(ps) == 1


def test_memory_stays_bounded() -> None:
    """The patterns are held a block at a time: 100 patterns x 200k items would be 160 MB at once."""
    import tracemalloc

    cols = _columns(200_000, np.random.default_rng(3))
    tracemalloc.start()
    sign_flip_pvalues(cols, n_resamples=100, seed=0, batch=10, cells=400_000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 40e6, peak


def test_many_small_blocks_give_scipys_p_values() -> None:
    """Blocks of 7 patterns and a partial last one (cells forced small), n odd (a block starts
    mid-draw): each p is scipy's permutation_test's, equal, not close (blocks bound the
    memory at 1M items)."""
    from engine.statistics.compare_stats import _PERMUTATION_CELLS

    n = 1_501
    cols = _columns(n, np.random.default_rng(9))
    zeros = np.zeros(n)
    want = [paired_permutation(zeros, c, n_resamples=2_999, seed=2).p for c in cols]
    got = sign_flip_pvalues(cols, n_resamples=2_999, seed=2, batch=max(1, _PERMUTATION_CELLS // n), cells=n * 7 + 5)
    assert got == want


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 5])
def test_any_number_of_threads_gives_scipys_p_values(workers: int) -> None:
    """Ranges of patterns counted at once, each from a copy of the stream moved to its first
    pattern (n odd: some ranges start mid-draw): scipy's p values, equal, on any number of threads."""
    from engine.statistics import sign_flips
    from engine.statistics.compare_stats import _PERMUTATION_CELLS

    n, resamples = 4_001, 2_999
    assert len(sign_flips._ranges(resamples, n, workers)) == workers
    cols = _columns(n, np.random.default_rng(12))
    zeros = np.zeros(n)
    want = [paired_permutation(zeros, c, n_resamples=resamples, seed=8).p for c in cols]
    got = sign_flip_pvalues(cols, n_resamples=resamples, seed=8, batch=max(1, _PERMUTATION_CELLS // n),
                            cells=n * 5 + 3, workers=workers)
    assert got == want


def test_the_threads_bench_prints_the_same_p_values_on_one_thread_and_every_core() -> None:
    """scripts/bench_compare.py --sign-flips (docs/figures.md) at a tiny size, so it cannot rot."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "scripts/bench_compare.py", "--sign-flips", "3001"], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = re.findall(r"^3,001 items, (\d+) thread\(s\): wall [\d.]+ s, CPU [\d.]+ s, load [\d.]+, p (\[.*\])$",
                       done.stdout, re.M)
    assert len(lines) == 4 and lines[0][0] == "1" and len({p for _, p in lines}) == 1, done.stdout
