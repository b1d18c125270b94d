"""The app's background worker: runs (and Prompt 5 explanations, `ExplainSpec`) queued and
generated one at a time, outside any request.

Why a worker: a run takes minutes to hours, far longer than a browser request or tab lives.
The app only submits jobs and polls their status (gr.Timer), so a run goes on when the tab
that started it is closed, and every visitor sees the same queue and progress.

One job at a time: one GPU holds one 7-8B model in 4-bit, and two runs on it would only
share its memory bandwidth. The loaded model stays cached for the next job with the same
model settings; a job with another model frees it first, so two never sit in memory at once.

Cancel stops at the next check, within seconds: between the job's steps (dataset, plan, model
load), every 500 items while items are stored or prompts are built, at every decoding step of
the batch in flight (a batch cut short is not written), and after each committed batch
(engine.usecases.run.run_experiment's `stop`). What was committed stays, the run ends as failed,
and submitting the same settings resumes it.

Jobs belong to the visitor who queued them (`owner`: the Gradio session, see demo.visitors):
ids are unguessable, and a visitor's status and cancel reach only their own jobs; an operator
(owner None) sees and cancels all. Caps on queued jobs, per visitor, per client address and in
all, are checked at submit, so one client cannot fill the single worker's queue for everyone.
The worker serves clients (addresses, demo.visitors.client_key) round-robin: demo.fairness.

A token typed into the app travels in the job's RunRequest only until the model is loaded; it
is then dropped from the job, and JobStatus never carries it.
"""

from __future__ import annotations

import gc
import secrets
import sys
import threading
import traceback
from collections import deque
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Literal

from demo.settings import without_server_paths
from store.db import utc_now

JobState = Literal["queued", "running", "complete", "cancelled", "failed"]
JobKind = Literal["run", "explain"]
FINISHED_STATES: tuple[JobState, ...] = ("complete", "cancelled", "failed")


@dataclass(frozen=True)
class JobSpec:
    """What to run: a dataset file, the request, and the store to write.

    `request` is an engine.run_request.RunRequest (one experiment) or an
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


@dataclass(frozen=True)
class ExplainSpec:
    """What to explain (Prompt 5, as `python -m engine explain`): the answers of stored runs, all
    of them or one item's, by the explainer that `request` names (its model, label, quantize,
    device and dtype; its modes are the runs' modes, for the jobs table)."""

    run_ids: tuple[str, ...]
    request: Any  # engine.run_request.RunRequest for the explainer; loaded through the same ModelCache
    db_path: Path
    item_id: str | None = None  # None: every answer of the runs still unexplained by this model
    max_new_tokens: int = 256
    batch_size: int = 8
    # At most this many answers per job (the operator's item cap; None: all); the rest wait for
    # the next job, as answers already explained are skipped.
    max_answers: int | None = None


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


@dataclass(frozen=True)
class _ModelKey:
    model: str
    quantize: str
    device: str
    dtype: str
    # Whose access loaded it: a digest of the typed token, "environment" or "none". A model a
    # visitor's token opened is not handed to a later job without that token.
    access: str


class ModelCache:
    """Keeps the last loaded model; loading another frees it first."""

    def __init__(self, load: Callable[[Any], Any]):
        self._load = load
        self._key: _ModelKey | None = None
        self._model: Any = None

    def get(self, request: Any) -> Any:
        """The model the request names, loaded now or kept from the previous job."""
        key = _ModelKey(request.model, request.quantize, request.device, request.dtype, _access(request))
        if key != self._key:
            self.clear()
            self._model = self._load(request)
            self._key = key
        return self._model

    @property
    def loaded(self) -> str | None:
        """The model id held now, if any."""
        return self._key.model if self._key else None

    def clear(self) -> None:
        """Drop the held model and give its memory back (the GPU's too)."""
        self._model, self._key = None, None
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass


class QueueFull(Exception):
    """A submit refused by a cap on queued jobs; its message is one line for the visitor."""


class _Job:
    """A job's mutable bookkeeping; read through JobStatus snapshots only."""

    def __init__(self, job_id: str, spec: JobSpec | ExplainSpec, owner: str | None, client: str | None = None):
        self.job_id = job_id
        self.spec = spec
        self.owner = owner  # the visitor who queued it; None: the operator
        self.client = client or owner  # whom the caps and the round-robin count it for
        self.state: JobState = "queued"
        self.n_done = 0
        self.n_total: int | None = None
        self.experiment_id: str | None = None
        self.study: str | None = None
        self.message = "waiting for the worker"
        self.submitted_utc = utc_now()
        self.finished_utc: datetime | None = None
        self.cancel = threading.Event()


class JobQueue:
    """A FIFO of run jobs served by one worker thread (started on the first submit)."""

    def __init__(self, *, load: Callable[[Any], Any] | None = None, keep_finished: int = 100):
        if load is None:
            from engine.run_request import load_model_for

            load = load_model_for
        self.models = ModelCache(load)
        self._keep_finished = keep_finished
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._jobs: dict[str, _Job] = {}
        self._queue: deque[str] = deque()
        self._worker: threading.Thread | None = None
        self._closing = False

    def submit(self, spec: JobSpec | ExplainSpec, owner: str | None = None, *,
               max_queued: int | None = None, max_per_owner: int | None = None,
               client: str | None = None, max_per_client: int | None = None) -> str:
        """Queue a job (a run, or explanations) for `owner` (a session) from `client` (its
        address; None: the owner) and return its id; QueueFull when the owner already has
        `max_per_owner` unfinished jobs, the client `max_per_client` over all its sessions, or
        `max_queued` jobs wait in all."""
        with self._wake:
            if self._closing:
                raise RuntimeError("the job queue is shut down")
            if max_per_owner is not None and owner is not None:
                mine = sum(1 for j in self._jobs.values() if j.owner == owner and j.state not in FINISHED_STATES)
                if mine >= max_per_owner:
                    raise QueueFull(f"you already have {mine} job{'s' if mine != 1 else ''} queued or running "
                                    f"(at most {max_per_owner} here); wait for one to finish or cancel one")
            if max_per_client is not None and client is not None:
                ours = sum(1 for j in self._jobs.values() if j.client == client and j.state not in FINISHED_STATES)
                if ours >= max_per_client:
                    raise QueueFull(f"your address already has {ours} job{'s' if ours != 1 else ''} queued or running "
                                    f"over all its sessions (at most {max_per_client} here); wait for one to finish")
            if max_queued is not None and len(self._queue) >= max_queued:
                raise QueueFull(f"the queue is full ({len(self._queue)} jobs waiting); try again later")
            # Unguessable: an id is what a visitor's status and cancel calls name.
            job_id = f"job-{secrets.token_urlsafe(12)}"
            self._jobs[job_id] = _Job(job_id, spec, owner, client)
            self._queue.append(job_id)
            self._forget_old()
            if self._worker is None:
                self._worker = threading.Thread(target=self._serve, name="pattrieval-jobs", daemon=True)
                self._worker.start()
            self._wake.notify()
        return job_id

    def status(self, job_id: str, owner: str | None = None) -> JobStatus | None:
        """A snapshot of one job, or None if the id is unknown or the job is another visitor's
        (owner None: the operator, who sees every job)."""
        with self._lock:
            job = self._jobs.get(job_id)
            return self._snapshot(job) if job and _visible_to(job, owner) else None

    def statuses(self, owner: str | None = None) -> tuple[JobStatus, ...]:
        """The owner's jobs (the operator's view, owner None: every job), newest first."""
        with self._lock:
            order = self._serve_order()
            return tuple(self._snapshot(j, order) for j in reversed(self._jobs.values()) if _visible_to(j, owner))

    def cancel(self, job_id: str, owner: str | None = None) -> bool:
        """Cancel one's own queued job at once, or a running one at its next check (seconds)."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or not _visible_to(job, owner) or job.state in FINISHED_STATES:
                return False
            job.cancel.set()
            if job.state == "queued":
                self._queue.remove(job_id)
                self._finish(job, "cancelled", "cancelled before it started")
                if isinstance(job.spec, JobSpec):
                    _discard_upload(job.spec)
            else:
                job.message = "cancelling"
            return True

    def shutdown(self, timeout: float | None = None) -> None:
        """Cancel everything and wait for the worker to stop."""
        with self._wake:
            self._closing = True
            for job_id in list(self._queue):
                self._finish(self._jobs[job_id], "cancelled", "the app is shutting down")
                if isinstance(self._jobs[job_id].spec, JobSpec):
                    _discard_upload(self._jobs[job_id].spec)
            self._queue.clear()
            for job in self._jobs.values():
                job.cancel.set()
            self._wake.notify_all()
        if self._worker is not None:
            self._worker.join(timeout)

    # ---------------------------------------------------------------- the worker

    def _serve(self) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._closing:
                    self._wake.wait()
                if self._closing:
                    return
                job_id = self._serve_order()[0]
                self._queue.remove(job_id)
                job = self._jobs[job_id]
                job.state, job.message = "running", "checking the dataset and the store"
            self._run(job)

    def _run(self, job: _Job) -> None:
        from engine.errors import UserError
        from engine.errors import RunCancelled

        try:
            done_line = self._explain(job) if isinstance(job.spec, ExplainSpec) else self._execute(job)
        except RunCancelled as stop:
            self._end(job, "cancelled", f"{stop}; submit the same settings to resume")
        except UserError as err:
            self._end(job, "failed", without_server_paths(str(err), job.spec.db_path,
                                                          dataset_path=getattr(job.spec, "dataset_path", None)))
        except Exception as err:  # noqa: BLE001 - a bug must not kill the worker for every later job
            traceback.print_exc(file=sys.stderr)  # the server's log, never the page
            self._end(job, "failed", f"internal error ({type(err).__name__}); the server log has the details")
        else:
            self._end(job, "complete", done_line)

    def _execute(self, job: _Job):
        """A run or a study grid, through the same use case as `python -m engine run`."""
        spec = job.spec
        # The model cache loads; the token has done its one job once the model is loaded, and
        # must not outlive the load in memory.
        def load(request):
            try:
                return self.models.get(request)
            finally:
                job.spec = replace(job.spec, request=_without_token(job.spec.request))

        def read(path, **options):
            from engine.load_child import load_dataset_bounded

            # In a capped child process: an upload may decode to far more than its size.
            options["skip_invalid"] = spec.skip_invalid
            try:
                return load_dataset_bounded(path, **options)
            finally:
                _discard_upload(spec)

        def progress(event) -> None:  # engine.usecases.run.Progress
            with self._lock:
                if event.experiment_id is not None:
                    job.experiment_id = event.experiment_id
                if event.study is not None:
                    job.study = event.study.name
                if event.stage == "stored":
                    job.n_done += event.step
                    return
                if event.total is not None:
                    job.n_total = event.total
                if event.message:
                    job.message = event.message

        try:
            if _is_study(spec.request):
                from engine.usecases.study import run_study

                study = replace(spec.request, dataset=spec.dataset_path, db=spec.db_path,
                                dataset_name=spec.dataset_name)
                outcome = run_study(study, progress=progress, stop=job.cancel.is_set, load=load, read_dataset=read)
                done = sum(r.n_generated for e in outcome.experiments for r in e.outcome.runs)
                return f"generated {done} answers in study {outcome.name} ({len(outcome.experiments)} experiments)"
            from engine.usecases.run import ExperimentRequest, run_experiment

            request = ExperimentRequest(spec.request, spec.dataset_path, spec.db_path, dataset_name=spec.dataset_name,
                                        ray=spec.ray, server=spec.server)
            outcome = run_experiment(request, progress=progress, stop=job.cancel.is_set, load=load, read_dataset=read)
        finally:
            _discard_upload(spec)
        done = sum(r.n_generated for r in outcome.runs)
        return f"generated {done} answers in experiment {outcome.experiment_id}"

    def _explain(self, job: _Job) -> str:
        """Prompt 5 explanations of stored answers through engine.usecases.explain, the loop
        `python -m engine explain` runs: each finished batch committed on its own, answers
        already explained by this model skipped, cancel honoured between steps and batches."""
        from engine.errors import UserError
        from engine.usecases.explain import ExplainRequest, UnknownRun, capped_plan, plan_explain, run_explain

        spec = job.spec
        request = ExplainRequest(spec.db_path, runs=tuple(spec.run_ids), item_id=spec.item_id,
                                 model=spec.request.model, label=spec.request.label,
                                 max_new_tokens=spec.max_new_tokens, batch_size=spec.batch_size)
        try:
            plan = plan_explain(request, stop=job.cancel.is_set)
        except UnknownRun as err:
            raise UserError(f"no run '{err.run_id}' in the store") from err
        capped = capped_plan(plan, spec.max_answers)
        self._update(job, experiment_id=plan.experiment_id, n_total=capped.n_todo)
        if plan.n_todo == 0:
            return f"nothing to explain: every answer asked for is already explained by {plan.label}"

        def progress(n: int) -> None:
            with self._lock:
                job.n_done += n

        result = run_explain(capped, request, load=lambda _model: self.models.get(spec.request), progress=progress,
                             stop=job.cancel.is_set, stage=lambda line: self._update(job, message=line))
        done = result.n_done
        rest = "" if capped is plan else (f"; {plan.n_todo - done:,} more wait (at most {spec.max_answers:,} per job "
                                          "here): generate again for the next")
        return f"explained {done} answer{'s' if done != 1 else ''} with {plan.label}{rest}"

    # ---------------------------------------------------------------- bookkeeping

    def _update(self, job: _Job, **changes: Any) -> None:
        with self._lock:
            for name, value in changes.items():
                setattr(job, name, value)

    def _end(self, job: _Job, state: JobState, message: str) -> None:
        with self._lock:
            self._finish(job, state, message)

    def _finish(self, job: _Job, state: JobState, message: str) -> None:
        job.state, job.message, job.finished_utc = state, message, utc_now()

    def _forget_old(self) -> None:
        finished = [j for j in self._jobs.values() if j.state in FINISHED_STATES]
        for job in finished[: max(0, len(finished) - self._keep_finished)]:
            del self._jobs[job.job_id]

    def _serve_order(self) -> list[str]:
        """The queued job ids in the order the worker starts them (demo.fairness); under the lock."""
        from demo.fairness import round_robin

        started: dict[str | None, int] = {}
        for job in self._jobs.values():
            if job.state != "queued":
                started[job.client] = started.get(job.client, 0) + 1
        return round_robin(((self._jobs[i].client, i) for i in self._queue), started)

    def _snapshot(self, job: _Job, order: list[str] | None = None) -> JobStatus:
        if job.state == "queued":
            order = self._serve_order() if order is None else order
            position: int | None = order.index(job.job_id) + 1
        else:
            position = None
        request = job.spec.request
        return JobStatus(
            job_id=job.job_id,
            state=job.state,
            model=request.label,
            modes=tuple(request.modes),
            queue_position=position,
            n_done=job.n_done,
            n_total=job.n_total,
            experiment_id=job.experiment_id,
            message=job.message,
            submitted_utc=job.submitted_utc,
            finished_utc=job.finished_utc,
            kind="explain" if isinstance(job.spec, ExplainSpec) else "run",
            study=job.study,
        )


def _access(request: Any) -> str:
    """How a request's model is reached on the Hub, without keeping the token itself."""
    import hashlib

    token = getattr(request, "hf_token", None)
    if token:
        return "token:" + hashlib.sha256(token.encode()).hexdigest()
    return "environment" if getattr(request, "environment_token", True) else "none"


def _is_study(request: Any) -> bool:
    from engine.usecases.study import StudyRequest

    return isinstance(request, StudyRequest)


def _without_token(request: Any) -> Any:
    """The request with its typed token dropped (a study's in its shared settings)."""
    if _is_study(request):
        return replace(request, run=replace(request.run, hf_token=None))
    return replace(request, hf_token=None)


def _visible_to(job: _Job, owner: str | None) -> bool:
    """The operator (None) sees every job; a visitor only their own."""
    return owner is None or job.owner == owner


def _stopper(job: _Job) -> Callable[[], None]:
    """A check to call between a job's steps: RunCancelled once cancel was asked."""
    from engine.errors import RunCancelled

    def stop() -> None:
        if job.cancel.is_set():
            raise RunCancelled("cancelled before generating")

    return stop


def _discard_upload(spec: JobSpec) -> None:
    """Delete the job's private copy of an upload once it is loaded (or failed to load)."""
    if spec.delete_after_load:
        try:
            Path(spec.dataset_path).unlink(missing_ok=True)
            Path(spec.dataset_path).parent.rmdir()
        except OSError:
            pass  # not empty or already gone: nothing of the visitor's is served from there anyway
