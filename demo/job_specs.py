"""What the app's worker (demo.jobs) is asked to do and what it shows: the job specs (a run,
`JobSpec`; Prompt 5 explanations, `ExplainSpec`) and a job's status (`JobStatus`). Plain values:
a spec travels from the handler that builds it to the worker, a status from the worker to the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from engine.usecases.runs.run import resolve_db
from engine.usecases.study.study import StudyRequest

if TYPE_CHECKING:  # light: the job queue's module is imported by every tab
    from engine.api import RunRequest  # the app reaches the engine's values through the API
    from engine.usecases.runs.run import ExperimentRequest

JobState = Literal["queued", "running", "complete", "cancelled", "failed"]
JobKind = Literal["run", "explain"]
FINISHED_STATES: tuple[JobState, ...] = ("complete", "cancelled", "failed")


@dataclass(frozen=True)
class JobSpec:
    """What to run: the use case's own request, one experiment (engine.usecases.runs.run.ExperimentRequest)
    or a study grid (engine.usecases.study.study.StudyRequest), each naming its dataset file, its store
    and where it generates. Its run's hf_token is dropped once the model is loaded."""

    work: ExperimentRequest | StudyRequest
    # An upload's private copy (see demo.handlers.run), deleted once loaded.
    delete_after_load: bool = False
    # The store quota (PATTRIEVAL_MAX_STORE_MB; None: none): checked before the job starts and
    # between its batches, where a job of unknown size (a served model, no item bound) stops.
    max_store_mb: int | None = None

    @property
    def request(self) -> RunRequest | StudyRequest:
        """What the jobs table shows (its model label and modes): the experiment's run, or the study."""
        return self.work if isinstance(self.work, StudyRequest) else self.work.run

    @property
    def dataset_path(self) -> str:
        return str(self.work.dataset)

    @property
    def db_path(self) -> Path:
        return resolve_db(self.work.db)


@dataclass(frozen=True)
class ExplainSpec:
    """What to explain (Prompt 5, as `python -m engine explain`): the answers of stored runs, all
    of them or one item's, by the explainer that `request` names (its model, label, quantize,
    device and dtype; its modes are the runs' modes, for the jobs table)."""

    run_ids: tuple[str, ...]
    request: Any  # engine.running.run_request.RunRequest for the explainer; loaded through the same ModelCache
    db_path: Path
    item_id: str | None = None  # None: every answer of the runs still unexplained by this model
    max_new_tokens: int = 256
    batch_size: int = 8
    # At most this many answers per job (the operator's item cap; None: all); the rest wait for
    # the next job, as answers already explained are skipped.
    max_answers: int | None = None
    max_store_mb: int | None = None  # as JobSpec's: checked before it starts and between batches


@dataclass(frozen=True)
class JobStatus:
    """A job as the app shows it: never holds a token or a server path."""

    job_id: str
    state: JobState
    model: str
    modes: tuple[str, ...]
    queue_position: int | None  # 1 = next to start; None once started
    n_done: int
    n_total: int | None  # known once the plan is made
    experiment_id: str | None
    message: str  # one line: what is happening, or why it failed
    submitted_utc: datetime
    finished_utc: datetime | None
    # Which worker path serves it: a run (JobSpec) or Prompt 5 explanations (ExplainSpec). Last,
    # with a default, as JobStatus is built by keyword elsewhere too.
    kind: JobKind = "run"
    # A study grid's name, once planned (None: a single run, or not planned yet).
    study: str | None = None
