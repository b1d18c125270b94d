"""The Run tab: start a batch run in the background worker, follow it, cancel it.

Plain functions (values in, values out) so that tests call them without a browser; the app
wires them to buttons and to the API names /run_batch, /run_status and /cancel_run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from demo.jobs import JobQueue, JobSpec, JobStatus
from demo.settings import AppSettings

SAMPLE = "sample"  # the bundled dataset, as the dataset choice names it


@dataclass(frozen=True)
class RunForm:
    """What a visitor chose in the Run tab."""

    model: str = "smoke"
    dataset: str = SAMPLE  # "sample", or the path of an uploaded file
    metadata: str = "gender"
    label_a: str = ""
    label_b: str = ""
    consideration: str = ""
    modes: tuple[str, ...] = ("vanilla", "base", "cf")
    quantize: str = "auto"
    top_k: int | None = None
    order: str = "ranked"
    few_shot: int = 0
    xai: str = "none"
    limit: int | None = 10
    batch_size: int = 8
    max_new_tokens: int = 48
    experiment: str = ""
    hf_token: str = ""  # used for this load only; never stored, logged or returned


def run_batch(jobs: JobQueue, settings: AppSettings, form: RunForm) -> str:
    """Check the form and queue the run; returns the job id (or raises UserError, one line)."""
    from engine.errors import UserError
    from engine.model_choice import SMOKE, resolve_model
    from engine.paths import SAMPLE_DATASET
    from engine.prompts import PromptConfig, metadata_type
    from engine.runner import RunRequest

    if settings.read_only:
        raise UserError("this app is read-only: runs are started elsewhere")
    if settings.allowed_models is not None and form.model not in settings.allowed_models + (SMOKE,):
        raise UserError(f"model '{form.model}' is not offered here; choose one of {', '.join(settings.allowed_models)}")
    limit = form.limit
    if settings.max_items is not None:
        limit = min(limit or settings.max_items, settings.max_items)
    if limit is not None and limit < 1:
        raise UserError("the item limit must be at least 1")
    if not form.modes:
        raise UserError("choose at least one mode")
    custom = form.metadata not in ("hai", "gender", "race")
    meta = metadata_type(
        form.metadata,
        form.label_a if custom else None,
        form.label_b if custom else None,
        form.consideration if custom else None,
    )
    prompt = PromptConfig(metadata=meta, top_k=form.top_k, order=form.order, few_shot=form.few_shot, xai=form.xai)
    model, label = resolve_model(form.model)
    request = RunRequest(
        model=model,
        model_label=label,
        modes=tuple(form.modes),
        prompt=prompt,
        quantize=form.quantize,
        max_new_tokens=form.max_new_tokens,
        batch_size=form.batch_size,
        experiment=form.experiment.strip() or None,
        limit=limit,
        hf_token=form.hf_token.strip() or None,
    )
    dataset = str(SAMPLE_DATASET) if form.dataset == SAMPLE else form.dataset
    return jobs.submit(JobSpec(dataset, request, settings.db_path))


def run_status(jobs: JobQueue, job_id: str | None = None) -> list[dict[str, Any]]:
    """The job (or every job, newest first) as plain records for a table or the API."""
    if job_id:
        status = jobs.status(job_id)
        return [_record(status)] if status else []
    return [_record(s) for s in jobs.statuses()]


def cancel_run(jobs: JobQueue, job_id: str) -> str:
    """Cancel a job: at once when queued, after the batch in flight when running."""
    status = jobs.status(job_id)
    if status is None:
        return f"no job '{job_id}'"
    if jobs.cancel(job_id):
        return f"{job_id}: cancelling" if status.state == "running" else f"{job_id}: cancelled"
    return f"{job_id} is already {status.state}"


def _record(status: JobStatus) -> dict[str, Any]:
    total = status.n_total
    return {
        "job": status.job_id,
        "state": status.state,
        "queue position": status.queue_position,
        "model": status.model,
        "modes": ",".join(status.modes),
        "progress": f"{status.n_done}/{total}" if total is not None else "-",
        "experiment": status.experiment_id or "-",
        "message": status.message,
    }
