"""What the worker (demo.jobs) does with one job: a run or a study grid (JobSpec) through
engine.usecases.runs.run and engine.usecases.study.study, Prompt 5 explanations (ExplainSpec)
through engine.usecases.judges.explain, each ending in one line for the page.

Both use cases take a `stop` callback, asked between steps and after every committed batch: it is
the visitor's cancel, and the store quota (demo.quotas.StoreGuard). A job that takes the store
past its quota stops as a cancelled one does (the batch in flight is not written, the runs end as
failed and resumable) and reports why in one line.
"""

from __future__ import annotations

import sys
import threading
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from demo.field_words import app_message
from demo.job_specs import ExplainSpec, JobSpec, JobState
from demo.model_cache import ModelCache
from demo.quotas import StoreGuard, store_full_problem
from demo.settings import without_server_paths
from engine.datasets.load_child import load_dataset_bounded
from engine.errors import RunCancelled, UserError, message_line
from engine.usecases.judges.explain import ExplainRequest, plan_explain, run_explain
from engine.usecases.judges.judge_runs import UnknownRun
from engine.usecases.runs.run import run_experiment
from engine.usecases.study.study import StudyRequest, run_study


class _Job(Protocol):
    """What the worker reads and updates of demo.jobs' bookkeeping (a Protocol: demo.jobs imports
    this module, so naming its class here would import in a circle)."""

    job_id: str
    spec: JobSpec | ExplainSpec
    cancel: threading.Event
    n_done: int
    n_total: int | None
    experiment_id: str | None
    study: str | None
    message: str


def run_job(job: _Job, models: ModelCache, lock: threading.Lock) -> tuple[JobState, str]:
    """Run `job` (demo.jobs' bookkeeping: its spec, cancel event and progress fields, updated under
    `lock`) to its end: its final state and one line, never raising."""
    spec = job.spec
    guard = StoreGuard(spec.db_path, spec.max_store_mb)

    def stop() -> bool:
        return job.cancel.is_set() or guard.passed()

    try:
        full = store_full_problem(spec.db_path, spec.max_store_mb)
        if full:  # other jobs filled it while this one waited
            if isinstance(spec, JobSpec):
                discard_upload(spec)
            return "failed", full
        if isinstance(spec, ExplainSpec):
            return "complete", explain(job, models, lock, stop)
        return "complete", execute(job, models, lock, stop)
    except RunCancelled as stopped:
        if guard.reason is not None and not job.cancel.is_set():
            detail = str(stopped).replace("cancelled", "stopped", 1)
            return "failed", f"{guard.reason}; {detail}, what was stored is kept"
        return "cancelled", f"{stopped}; submit the same settings to resume"
    except UserError as err:  # a field named by the form's label (demo.field_words), never an option
        return "failed", message_line(without_server_paths(app_message(err), spec.db_path,
                                                           dataset_path=getattr(spec, "dataset_path", None)))
    except Exception as err:  # noqa: BLE001 - a bug must not kill the worker for every later job
        traceback.print_exc(file=sys.stderr)  # the server's log, never the page
        return "failed", f"internal error ({type(err).__name__}); the server log has the details"


def execute(job: _Job, models: ModelCache, lock: threading.Lock, stop: Any = None) -> str:
    """A run or a study grid, through the same use case as `python -m engine run`."""
    spec = job.spec
    if not isinstance(spec, JobSpec):  # run_job sends explanations to explain()
        raise TypeError(f"job {job.job_id}: execute() given a {type(spec).__name__}, not a JobSpec")
    stop = stop or job.cancel.is_set

    # The model cache loads; the token has done its one job once the model is loaded, and
    # must not outlive the load in memory.
    def load(request):
        try:
            return models.get(request)
        finally:
            job.spec = replace(job.spec, work=without_token(job.spec.work))

    def read(path, **options):
        # In a capped child process: an upload may decode to far more than its size.
        options["skip_invalid"] = spec.work.run.skip_invalid
        try:
            return load_dataset_bounded(path, **options)
        finally:
            discard_upload(spec)

    def progress(event) -> None:  # engine.usecases.runs.run.Progress
        with lock:
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
        if is_study(spec.work):
            studied = run_study(spec.work, progress=progress, stop=stop, load=load,  # type: ignore[arg-type]
                                read_dataset=read)
            done = sum(r.n_generated for e in studied.experiments for r in e.outcome.runs)
            return f"generated {done} answers in study {studied.name} ({len(studied.experiments)} experiments)"

        outcome = run_experiment(spec.work, progress=progress, stop=stop, load=load,  # type: ignore[arg-type]
                                 read_dataset=read)
    finally:
        discard_upload(spec)
    done = sum(r.n_generated for r in outcome.runs)
    return f"generated {done} answers in experiment {outcome.experiment_id}"


def explain(job: _Job, models: ModelCache, lock: threading.Lock, stop: Any = None) -> str:
    """Prompt 5 explanations of stored answers through engine.usecases.judges.explain, the loop
    `python -m engine explain` runs: each finished batch committed on its own, answers
    already explained by this model skipped, cancel honoured between steps and batches."""
    spec = job.spec
    if not isinstance(spec, ExplainSpec):  # run_job sends runs to execute()
        raise TypeError(f"job {job.job_id}: explain() given a {type(spec).__name__}, not an ExplainSpec")
    stop = stop or job.cancel.is_set

    def update(**changes: Any) -> None:
        with lock:
            for name, value in changes.items():
                setattr(job, name, value)

    request = ExplainRequest(spec.db_path, runs=tuple(spec.run_ids), item_id=spec.item_id,
                             model=spec.request.model, label=spec.request.label,
                             max_new_tokens=spec.max_new_tokens, batch_size=spec.batch_size)
    try:
        plan = plan_explain(request, stop=stop)
    except UnknownRun as err:
        raise UserError(f"no run '{err.run_id}' in the store") from err
    capped = plan.capped(spec.max_answers)
    update(experiment_id=plan.experiment_id, n_total=capped.n_todo)
    if plan.n_todo == 0:
        return f"nothing to explain: every answer asked for is already explained by {plan.label}"

    def progress(n: int) -> None:
        with lock:
            job.n_done += n

    result = run_explain(capped, request, load=lambda _model: models.get(spec.request), progress=progress,
                         stop=stop, stage=lambda line: update(message=line))
    done = result.n_done
    rest = "" if capped is plan else (f"; {plan.n_todo - done:,} more wait (at most {spec.max_answers:,} per job "
                                      "here): generate again for the next")
    return f"explained {done} answer{'s' if done != 1 else ''} with {plan.label}{rest}"


def is_study(request: Any) -> bool:
    return isinstance(request, StudyRequest)


def without_token(work: Any) -> Any:
    """The experiment's or the study's request with its run's typed token dropped."""
    return replace(work, run=replace(work.run, hf_token=None))


def discard_upload(spec: JobSpec) -> None:
    """Delete the job's private copy of an upload once it is loaded (or failed to load)."""
    if spec.delete_after_load:
        try:
            Path(spec.dataset_path).unlink(missing_ok=True)
            Path(spec.dataset_path).parent.rmdir()
        except OSError:
            pass  # not empty or already gone: nothing of the visitor's is served from there anyway
