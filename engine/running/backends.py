"""Backends: what turns planned batches into generation outputs.

The runner works in three steps (engine.running.runner.execute_plan):

1. `plan_batches` (driver, tokenizer only): each run's prompts are encoded through the chat
   template and cut into length-sorted batches exactly as `engine.generation.generate.iter_batches` cuts
   them, every batch carrying its run and item ids;
2. a backend generates them: `LocalBackend` in this process (the path every run took before
   backends existed), or `engine.running.backend_ray.RayBackend` on a pool of Ray actors;
3. one write loop (engine.running.write_loop) stores each finished batch as it arrives.

Because the batches are fixed before a backend sees them, and `generate_batch` seeds each
batch itself and computes it with the driver's torch thread count (engine.generation.threads), the
backend that generated a batch does not change its rows: a run started on one backend resumes
on the other under the same config hash.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.generation.batching import cut_batches
from engine.running.provenance import Provenance
from engine.types import GenerationOutput

__all__ = ["Backend", "BatchResult", "LocalBackend", "PlannedBatch", "plan_batches"]


@dataclass(frozen=True)
class PlannedBatch:
    """One batch to generate: prompt token ids (cut as engine.generation.batching says) and the items they belong to."""

    batch_id: int
    run_id: str
    item_ids: tuple[str, ...]
    input_ids: tuple[tuple[int, ...], ...] = field(repr=False)


@dataclass(frozen=True)
class BatchResult:
    """A generated batch: one output per item, in the batch's order.

    `fingerprint` is what the generating worker reports about its model and libraries (Ray
    only); the write loop refuses a result whose fingerprint differs from the run's.
    """

    batch_id: int
    outputs: tuple[GenerationOutput, ...]
    fingerprint: tuple | None = None


class Backend(Protocol):
    """Generates planned batches; results may arrive in any order, and a batch may arrive twice."""

    provenance: Provenance
    tokenizer: Any  # the driver's tokenizer, which plans the batches

    def generate(self, batches: Sequence[PlannedBatch]) -> Iterator[BatchResult]: ...


def plan_batches(tokenizer, runs: Sequence[tuple[str, Sequence[str], Sequence[str]]], batch_size: int,
                 first_id: int = 0, check: Callable[[], None] | None = None, *,
                 batch_invariant: bool = False, rerun: int = 0) -> tuple[PlannedBatch, ...]:
    """Batches for (run id, item ids, prompt texts) triples, run after run, as iter_batches cuts them
    (engine.generation.batching.cut_batches; `rerun` k: the k-th rerun's cut). `check` is called
    every 500 prompts encoded; it raises to stop (a cancel)."""
    from engine.generation.models import chat_input_ids_for

    batches: list[PlannedBatch] = []
    for run_id, item_ids, prompts in runs:
        encoded = []
        for n, p in enumerate(prompts, start=1):
            # Chat templates cost about a millisecond a prompt: a huge plan must still hear a cancel.
            if check is not None and n % 500 == 0:
                check()
            encoded.append(tuple(chat_input_ids_for(tokenizer, p)))
        for indices in cut_batches(encoded, batch_size, batch_invariant, rerun):
            batches.append(
                PlannedBatch(
                    batch_id=first_id + len(batches),
                    run_id=run_id,
                    item_ids=tuple(item_ids[i] for i in indices),
                    input_ids=tuple(encoded[i] for i in indices),
                )
            )
    return tuple(batches)


class LocalBackend:
    """Generates in this process with a model loaded here, batch after batch, in plan order."""

    def __init__(self, loaded: Any, config: Any, request: Any, interrupted: Callable[[], bool] | None = None) -> None:
        self.loaded = loaded
        self.config = config  # engine.generation.generate.GenerationConfig
        self.interrupted = interrupted  # a cancel: asked at every decoding step
        self.tokenizer = getattr(loaded, "tokenizer", None)
        self.provenance = Provenance.of_loaded(loaded, request, threads=config.threads)

    def generate(self, batches: Sequence[PlannedBatch]) -> Iterator[BatchResult]:
        from engine.generation.generate import check_config, generate_batch
        from engine.generation.models import neutralize_generation_config

        if not batches:
            return
        check_config(self.config)
        loaded = self.loaded
        # Idempotent, as in iter_batches: guards models whose generation_config changed after load.
        neutralize_generation_config(loaded.model, loaded.stop_token_ids, loaded.pad_token_id)
        for batch in batches:
            outputs = generate_batch(loaded, [list(ids) for ids in batch.input_ids], self.config, self.interrupted)
            yield BatchResult(batch.batch_id, tuple(outputs))
