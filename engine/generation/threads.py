"""The torch thread count that generation computes with, the same in every process.

Why it matters: on a CPU, a matrix product or a softmax split over N threads adds its partial
sums in another order than one split over M threads, so the log-probs of the same batch differ
in their last digits (tokens rarely do). A run is stored as one set of rows whichever backend
made them (engine.running.backends), so every process that generates for it computes with one count:
the driver resolves it (`resolve_threads`), LocalBackend and every Ray actor set it before each
batch (`use_threads`, called by engine.generation.generate.generate_batch), and the runs record it
(config_json.torch_threads).

Ray starts each worker with OMP_NUM_THREADS set to the CPUs the actor reserved (1), so without
this its actors computed with 1 thread while a local run used the machine's cores.

Only intra-op threads are set: the inter-op pool runs TorchScript forks and parallel
graph-level work, which eager `generate()` never uses, so its size cannot change a number.
"""

from __future__ import annotations

import functools

MAX_THREADS = 1024  # a bound that catches typos (--threads 80000), not a tuning advice


@functools.lru_cache(maxsize=1)
def default_threads() -> int:
    """torch's own choice in this process (its physical cores, or $OMP_NUM_THREADS), read once,
    before this module changes anything, so a later `use_threads` does not move the default."""
    import torch

    return torch.get_num_threads()


def resolve_threads(requested: int | None) -> int:
    """The count to compute with: `requested`, or torch's default in this (the driver's) process."""
    if requested is None:
        return default_threads()
    if not 1 <= requested <= MAX_THREADS:
        raise ValueError(f"threads must be between 1 and {MAX_THREADS}, not {requested}")
    return requested


def use_threads(n: int) -> int:
    """Compute with `n` intra-op threads from here on, in the calling thread; returns the count in effect.

    Called in the thread that computes, before each batch: torch keeps the OpenMP count per
    thread once that thread has computed, so a count set in another thread (the app's request
    handler, Ray's actor constructor) does not reliably reach the one that generates.
    """
    import torch

    default_threads()  # remember the default before the first change
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return torch.get_num_threads()
