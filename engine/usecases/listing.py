"""What the store holds: experiments, runs and studies, newest first (`python -m engine list` and
engine.api). Reads only the store; never creates it (a typo in a path must not make a new one)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from store.queries import ExperimentSummary, RunSummary


def experiments(db: Path, *, runs: bool = False, study: str | None = None,
                ) -> tuple[RunSummary | ExperimentSummary, ...]:
    """The experiments (store.queries.ExperimentSummary) or, with `runs`, the runs (RunSummary),
    newest first; with `study`, only those of the study, in its grid order (one line for an
    unknown study)."""
    from engine.usecases.tables import study_experiments
    from store.queries import experiment_listing, run_listing

    records: tuple[RunSummary | ExperimentSummary, ...] = run_listing(db) if runs else experiment_listing(db)
    if study is not None:
        # A study given: its ids, or a UserError (never None).
        order = {e: i for i, e in enumerate(study_experiments(Path(db), study) or ())}
        records = tuple(sorted((r for r in records if r.experiment_id in order), key=lambda r: order[r.experiment_id]))
    return records


def studies(db: Path) -> tuple:
    """The studies (store.queries.StudySummary), newest first."""
    from store.queries import study_listing

    return study_listing(db)
