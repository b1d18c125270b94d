"""The interface through which the runner persists results, so the engine never imports DuckDB.

`store.RunStore` implements it over DuckDB; anything with these methods (a list in a test, a
JSONL writer) can stand in.

The runner reads first and writes last: `find_experiment` and `done_item_ids` must not create
anything (a run that cannot start leaves no trace), and `claim` is the one call that creates the
experiment, its runs and the dataset items, in a single transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from engine.types import Generation, Item, Mode, RunStatus


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
    rag_mode: Mode
    seed: int
    prompt_version: str
    git_sha: str | None
    library_versions: dict[str, str]
    # The full prompt + generation configuration and what the run recorded about itself
    # (skipped items, a checkpoint's dropped generation defaults); never holds a token.
    config: dict[str, Any]
    n_items: int


@dataclass(frozen=True)
class ExperimentSpec:
    """The experiment a run command belongs to: named, or found by what its runs share."""

    key: str  # hash of model + dataset content + every setting except the mode
    name: str | None  # `run --experiment NAME`; also matches an experiment id
    new: bool  # `--repeat`: never join an existing experiment
    model: str
    dataset: str
    dataset_sha: str
    settings: dict[str, Any]  # the run configuration without its mode
    run_hashes: tuple[str, ...] = ()  # config hashes of the requested runs (finds older experiments)


@dataclass(frozen=True)
class StoredRun:
    """A run as the store holds it, with the process generating it if one still is."""

    run_id: str
    experiment_id: str
    rag_mode: Mode
    config_hash: str
    status: RunStatus
    n_items: int | None
    config: dict[str, Any]
    owner: str | None  # e.g. "process 1234 on host-a" while a live process generates it


@dataclass(frozen=True)
class StoredExperiment:
    """An experiment and its runs (at most one per mode)."""

    experiment_id: str
    name: str | None
    key: str | None  # None for experiments made before keys existed, or by `import`
    model: str | None
    dataset: str | None
    dataset_sha: str | None
    settings: dict[str, Any] | None
    runs: tuple[StoredRun, ...]

    def run_for(self, mode: str) -> StoredRun | None:
        """This experiment's run of `mode`, if it has one."""
        return next((r for r in self.runs if r.rag_mode == mode), None)

    @property
    def label(self) -> str:
        """How messages name it: its name, else its id."""
        return self.name or self.experiment_id


class Sink(Protocol):
    """Where a run's results go, batch by batch."""

    def find_experiment(self, spec: ExperimentSpec) -> StoredExperiment | None:
        """The experiment `spec` resolves to now (by name, else by key); never creates anything."""

    def done_item_ids(self, run_id: str) -> set[str]:
        """Items of this run already stored; the runner skips them on resume."""

    def claim(
        self,
        spec: ExperimentSpec,
        experiment_id: str,
        expected: Mapping[Mode, str | None],
        runs: Sequence[RunSpec],
        items: Sequence[Item],
    ) -> None:
        """In one transaction: check the experiment is still as planned, create or resume `runs`
        (status 'running', owned by this process) and store `items`.

        `expected` maps each mode to the run id the plan resumes, or None for a new run. Raises
        a UserError naming the other run (and its process) when the plan no longer holds: another
        process created the experiment or a run of the same mode meanwhile, or is generating it.
        """

    def write_batch(self, run_id: str, generations: Sequence[Generation]) -> None:
        """Store one finished batch in a single transaction (all or nothing)."""

    def fail_runs(self, run_ids: Sequence[str]) -> None:
        """Mark these runs failed and release them in ONE transaction, so that a failure while
        failing them (a full disk) leaves them all alike: all failed, or all still claimed."""

    def finish_run(self, run_id: str, status: RunStatus) -> None:
        """Set the final status: 'complete' or 'failed', and release the run."""

    def copy_generations(self, source_run_id: str, run_id: str, item_ids: Sequence[str]) -> int:
        """Copy the source run's answers (and citations) of these items into `run_id`, skipping
        items it holds; returns how many were copied. Only called with execute_plan's
        `copy_from` (a study's shared vanilla run)."""
