"""The app's background worker: runs (and Prompt 5 explanations) queued and generated one at a
time, outside any request. The jobs' values are demo.job_specs'; what the worker does with one,
demo.job_work; the model it keeps loaded, demo.model_cache.

Why a worker: a run takes minutes to hours, far longer than a browser request or tab lives.
The app only submits jobs and polls their status (gr.Timer), so a run goes on when the tab
that started it is closed, and every visitor sees the same queue and progress.

One job at a time: one GPU holds one 7-8B model in 4-bit, and two runs on it would only
share its memory bandwidth. The loaded model stays cached for the next job with the same
model settings; a job with another model frees it first, so two never sit in memory at once.

Cancel stops at the next check, within seconds: between the job's steps (dataset, plan, model
load), every 500 items while items are stored or prompts are built, at every decoding step of
the batch in flight (a batch cut short is not written), and after each committed batch
(engine.usecases.runs.run.run_experiment's `stop`). What was committed stays, the run ends as failed,
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

import secrets
import threading
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import Any

from demo.fairness import round_robin
from demo.job_specs import FINISHED_STATES, ExplainSpec, JobSpec, JobState, JobStatus
from demo.job_work import discard_upload, run_job
from demo.model_cache import ModelCache
from engine.running.run_request import load_model_for
from store.db import utc_now


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
                    discard_upload(job.spec)
            else:
                job.message = "cancelling"
            return True

    def shutdown(self, timeout: float | None = None) -> None:
        """Cancel everything and wait for the worker to stop."""
        with self._wake:
            self._closing = True
            for job_id in list(self._queue):
                job = self._jobs[job_id]
                self._finish(job, "cancelled", "the app is shutting down")
                if isinstance(job.spec, JobSpec):
                    discard_upload(job.spec)
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
        state, line = run_job(job, self.models, self._lock)
        self._end(job, state, line)

    # ---------------------------------------------------------------- bookkeeping

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


def _visible_to(job: _Job, owner: str | None) -> bool:
    """The operator (None) sees every job; a visitor only their own."""
    return owner is None or job.owner == owner
