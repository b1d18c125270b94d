"""The interface through which the runner persists results, so the engine never imports DuckDB.

`store.RunStore` implements it over DuckDB; anything with these methods (a list in a test, a
JSONL writer) can stand in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from engine.types import Generation, Item


@dataclass(frozen=True)
class RunSpec:
    """Everything recorded about a run before its first generation (provenance included)."""

    run_id: str
    experiment_id: str
    config_hash: str  # same command line + same dataset content -> same hash -> resume
    model: str
    model_revision: str | None
    quantization: str  # "4bit" | "8bit" | "none" | "imported"
    dtype: str
    device: str
    dataset: str  # the path or name the user gave
    dataset_sha: str  # content hash of the validated items
    metadata_type: str | None  # None for vanilla-only runs without a type
    rag_mode: str  # "vanilla" | "base" | "cf"
    seed: int
    prompt_version: str
    git_sha: str | None
    library_versions: dict[str, str]
    config: dict[str, Any]  # the full prompt + generation configuration; never holds a token
    n_items: int


class Sink(Protocol):
    """Where a run's results go, batch by batch."""

    def put_items(self, dataset_sha: str, items: Sequence[Item]) -> None:
        """Store dataset items once per dataset content (idempotent)."""

    def find_resumable(self, config_hash: str) -> tuple[str, str, str] | None:
        """(run_id, experiment_id, status) of the newest run with this config hash, if any."""

    def start_run(self, spec: RunSpec) -> None:
        """Create the run with status 'running', or mark an existing one 'running' again."""

    def done_item_ids(self, run_id: str) -> set[str]:
        """Items of this run already stored; the runner skips them on resume."""

    def write_batch(self, run_id: str, generations: Sequence[Generation]) -> None:
        """Store one finished batch in a single transaction (all or nothing)."""

    def finish_run(self, run_id: str, status: str) -> None:
        """Set the final status: 'complete' or 'failed'."""
