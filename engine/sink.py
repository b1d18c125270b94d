"""The interface through which the runner persists results, so the engine never imports DuckDB.

`store.RunStore` implements it over DuckDB; anything with these methods (a list in a test, a
JSONL writer) can stand in.

The runner reads first and writes last: `find_experiment` and `done_item_ids` must not create
anything (a run that cannot start leaves no trace), and `claim` is the one call that creates the
experiment, its runs and the dataset items, in a single transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

# The value types live in engine.types (the store imports them from there); re-exported here
# for the engine's callers.
from engine.types import ExperimentSpec, Generation, Item, Mode, RunSpec, RunStatus, StoredExperiment

__all__ = ["Sink"]


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
