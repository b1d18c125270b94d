"""What the app's worker (demo.jobs) is asked to do and what it shows: the job specs (a run,
`JobSpec`; Prompt 5 explanations, `ExplainSpec`) and a job's status (`JobStatus`). Plain values:
a spec travels from the handler that builds it to the worker, a status from the worker to the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

JobState = Literal["queued", "running", "complete", "cancelled", "failed"]
JobKind = Literal["run", "explain"]
FINISHED_STATES: tuple[JobState, ...] = ("complete", "cancelled", "failed")


@dataclass(frozen=True)
class JobSpec:
    """What to run: a dataset file, the request, and the store to write.

    `request` is an engine.running.run_request.RunRequest (one experiment) or an
    engine.usecases.study.StudyRequest (a grid; its dataset and db are this spec's). Its hf_token
    is dropped once the model is loaded."""

    dataset_path: str
    request: Any
    db_path: Path
    skip_invalid: bool = False
    # An upload: the name the store records in place of the path, and whether the file (a
    # private copy, see demo.handlers.run) is deleted once loaded.
    dataset_name: str | None = None
    delete_after_load: bool = False
    # engine.usecases.run.RayOptions for one experiment generated on Ray (None: in the worker);
    # a StudyRequest carries its own.
    ray: Any = None
    # engine.usecases.served.ServerOptions for one experiment generated on an OpenAI-compatible
    # server (None: not served); a StudyRequest carries its own.
    server: Any = None
    # The store quota (PATTRIEVAL_MAX_STORE_MB; None: none): checked before the job starts and
    # between its batches, where a job of unknown size (a served model, no item bound) stops.
    max_store_mb: int | None = None


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
