"""What the store holds: experiments, runs and studies, newest first (`python -m engine list` and
engine.api). Reads only the store; never creates it (a typo in a path must not make a new one)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from engine.paths import require_store
from engine.usecases.bias import tables
from engine.usecases.runs.run import run_metrics

if TYPE_CHECKING:
    from store.queries import ExperimentSummary, RunSummary


@overload
def experiments(db: Path, *, runs: Literal[True], study: str | None = None) -> tuple[RunSummary, ...]: ...
@overload
def experiments(db: Path, *, runs: Literal[False] = False, study: str | None = None) -> tuple[ExperimentSummary, ...]: ...
def experiments(db: Path, *, runs: bool = False, study: str | None = None,
                ) -> tuple[RunSummary, ...] | tuple[ExperimentSummary, ...]:
    """The experiments (store.queries.ExperimentSummary) or, with `runs`, the runs (RunSummary),
    newest first; with `study`, only those of the study, in its grid order (one line for an
    unknown study)."""
    from store.queries import experiment_listing, run_listing

    require_store(db)  # a read of a missing path would create an empty store and list nothing
    if runs:
        return _of_study(db, run_listing(db), study)
    return _of_study(db, experiment_listing(db), study)


Record = TypeVar("Record", "RunSummary", "ExperimentSummary")


def _of_study(db: Path, records: tuple[Record, ...], study: str | None) -> tuple[Record, ...]:
    if study is None:
        return records
    # A study given: its ids, or a UserError (never None).
    order = {e: i for i, e in enumerate(tables.study_experiments(Path(db), study) or ())}
    return tuple(sorted((r for r in records if r.experiment_id in order), key=lambda r: order[r.experiment_id]))


def studies(db: Path) -> tuple:
    """The studies (store.queries.StudySummary), newest first."""
    from store.queries import study_listing

    return study_listing(require_store(db))


def experiment_choices(db: Path) -> tuple:
    """Every experiment, newest first, as a picker offers it (store.queries.ExperimentChoice: id,
    name, model, metadata type, stored modes), read from the runs alone: no answer is counted, so
    that a picker fills at once on a large store."""
    from store.queries import experiment_choices as choices

    return choices(db)


@dataclass(frozen=True)
class StudyExperiments:
    """A study's experiments in grid order, and those of them that have a run yet."""

    experiment_ids: tuple[str, ...]
    with_runs: tuple[str, ...]  # in grid order


def study_experiments(db: Path, study: str) -> StudyExperiments | None:
    """The experiments of the study named `study` (exact); None when there is no such study."""
    from store.queries import experiment_choices as choices
    from store.queries import study_experiment_ids

    ids = study_experiment_ids(db, study)
    if ids is None:
        return None
    stored = {c.experiment_id for c in choices(db)}
    return StudyExperiments(tuple(ids), tuple(e for e in ids if e in stored))


@dataclass(frozen=True)
class ExperimentsPage:
    """One page of the experiment listing (store.queries.ExperimentPage: the total matching, the
    experiments with their runs) and the studies each of them belongs to."""

    page: Any  # store.queries.ExperimentPage
    studies: dict[str, tuple[str, ...]]  # experiment id -> its studies, oldest first; none: left out


def experiments_page(db: Path, offset: int, limit: int, *, model: str | None = None, dataset: str | None = None,
                     metadata: str | None = None, mode: str | None = None, study: str | None = None) -> ExperimentsPage:
    """Experiments newest first, filtered (model and dataset: substring, any case; metadata type,
    mode and study name: exact), `limit` of them from `offset`, with their runs and studies."""
    from store.queries import experiment_page, experiment_studies, reading

    with reading(db) as conn:  # one open for both reads: an open costs more than either
        found = experiment_page(conn, offset, limit, model=model, dataset=dataset, metadata=metadata, mode=mode,
                                study=study)
        return ExperimentsPage(found, experiment_studies(conn, [e.experiment_id for e in found.experiments]))


def holds_runs(db: Path) -> bool:
    """Whether the store holds any run; False where it does not exist (it is not created)."""
    from store.queries import count_runs

    return Path(db).is_file() and count_runs(db) > 0


def experiment_run_metrics(db: Path, experiment_id: str) -> Any:
    """Per run of the experiment, in mode order, its answers stored so far and their metrics: the
    table `run` prints (pandas DataFrame); None when it has no runs."""
    from store.queries import runs_for_experiment

    run_ids = list(runs_for_experiment(db, experiment_id)["run_id"])
    return run_metrics(db, run_ids) if run_ids else None


def runs_in_progress(db: Path) -> tuple:
    """The runs marked running, newest first, with their progress (store.queries.ActiveRun), whoever
    started them: an app's job or a command line on the same store."""
    from store.queries import active_runs

    return active_runs(db)
