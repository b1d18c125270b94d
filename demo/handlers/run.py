"""The Run tab: start a batch run in the background worker, follow it, cancel it.

Plain functions (values in, values out) so that tests call them without a browser; the app
wires them to buttons and to the API names /run_batch, /run_status and /cancel_run.

A form becomes the engine's RunRequest through the use case's one builder
(engine.usecases.runs.run_options), so every option means in the app exactly what it means to
`python -m engine run`, and a bad value gets the same one-line message, its field named by the
form's label (demo.field_words); the job queue then runs it through the same use case
(engine.usecases.runs.run.run_experiment).
"""

from __future__ import annotations

import html
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from demo.field_words import app_message, app_worded
from demo.handlers.bias import markdown_text
from demo.job_specs import JobSpec, JobStatus
from demo.jobs import JobQueue
from demo.quotas import check_store_quota
from demo.render import SMOKE_NOTE
from demo.settings import AppSettings, without_server_paths
from engine import paths
from engine.datasets.data import dataset_location
from engine.datasets.load_child import check_dataset_bounded
from engine.errors import UserError
from engine.paths import SAMPLE_DATASET
from engine.presentation.formatting import TYPE_NAMES
from engine.usecases.runs.listing import experiment_run_metrics, holds_runs, runs_in_progress
from engine.usecases.runs.model_names import SMOKE, first_model, is_smoke
from engine.usecases.runs.run import ExperimentRequest, resolved
from engine.usecases.runs.run_options import OPTIONS
from engine.usecases.runs.run_options import build_run_request as build
from engine.usecases.study.study import StudyRequest

SAMPLE = "sample"  # the bundled dataset, as the dataset choice names it
BUILT_IN_METADATA = tuple(TYPE_NAMES)  # engine.prompting.prompts' built-in types, in the paper's order
NO_SERVER_PATHS = "this app takes the bundled sample or an uploaded file, not a path on the server"
FIRST_RUN_LIMIT_CPU = 5  # the one-click first run: seconds with the smoke model on a CPU
FIRST_RUN_LIMIT_GPU = 10
METRIC_COLUMNS = ["run_id", "mode", "relevant_label", "n", "precision", "recall", "f1", "em"]
STORE_PROGRESS_COLUMNS = ["experiment", "mode", "model", "state", "progress", "run", "started (UTC)"]


def _initial(name: str) -> Any:
    return OPTIONS[name].initial


@dataclass(frozen=True)
class RunForm:
    """What a visitor chose in the Run tab: the run options (engine.usecases.runs.run_options) the form
    offers, by their names, with the table's initial values, and the app's own dataset path. A text
    box left empty is "" here."""

    model: str = _initial("model")
    dataset: str = SAMPLE  # "sample", or the path of an uploaded file (Gradio's upload folder)
    local_path: str = ""  # a dataset path typed in: the desktop only (AppSettings.allow_local_paths)
    metadata: str = _initial("metadata")  # a built-in type, or the name of a custom one defined by the next three
    label_a: str = ""
    label_b: str = ""
    consideration: str = ""
    modes: tuple[str, ...] = _initial("modes")
    quantize: str = _initial("quantize")
    # The grid options (OPTIONS[name].grid) may each hold a comma list ("5,10"): the form is then a
    # study grid (demo.handlers.grid), one experiment per configuration, as `run` with lists.
    top_k: int | str | None = _initial("top_k")  # cut-off: the first k ranked documents; None shows all
    order: str = _initial("order")
    few_shot: int | str = _initial("few_shot")
    xai: str = _initial("xai")
    relevant_at: str = _initial("relevant_at")
    repetition: str = _initial("repetition")
    label_scope: str = _initial("label_scope")
    sample: bool = _initial("sample")
    temperature: float = _initial("temperature")
    top_p: float = _initial("top_p")
    sample_top_k: int = _initial("sample_top_k")
    seed: int = _initial("seed")
    top_logprobs: int = _initial("top_logprobs")
    limit: int | None = _initial("limit")
    batch_size: int = _initial("batch_size")
    max_new_tokens: int = _initial("max_new_tokens")
    skip_invalid: bool = _initial("skip_invalid")
    experiment: str = ""
    hf_token: str = ""  # used for this load only; never stored, logged or returned
    study: str = ""  # a grid's study name (optional, as `run --study`); a name makes even one configuration a study
    # Where answers are generated (demo.handlers.grid.BACKENDS): "local", the app's worker, or
    # "ray", a pool of Ray actors (the desktop only, AppSettings.allow_ray), with run's Ray options,
    # or "server", an OpenAI-compatible server (the desktop only, AppSettings.allow_server), the
    # model box then holding the served model name(s).
    backend: str = _initial("backend")
    ray_address: str = ""  # empty: a Ray instance started on this machine
    actors: int = _initial("actors")
    gpus_per_actor: float | None = _initial("gpus_per_actor")  # None: 1 when the cluster has GPUs, else 0
    base_url: str = ""  # e.g. http://127.0.0.1:8000/v1
    tokenizer: str = ""  # empty: the chat endpoint (the server applies the chat template)
    concurrency: int | None = _initial("concurrency")  # None: fit the server (engine.running.served_flow)
    api_key_env: str = ""  # the NAME of the key's environment variable (empty: OPENAI_API_KEY when set)
    request_timeout: float = _initial("request_timeout")  # seconds one request may take


# The form's fields that the run request is built from (the rest say where and how it runs).
RUN_FORM_OPTIONS = tuple(f.name for f in fields(RunForm) if f.name in OPTIONS)


def run_batch(jobs: JobQueue, settings: AppSettings, form: RunForm, visitor: str | None = None, *,
              request: Any = None, ray: Any = None, server: Any = None, client: str | None = None) -> str:
    """Check the form and queue the run for `visitor` (None: the operator); returns the job id
    (or raises UserError, one line: a bad form, or a full queue). `request`: the request already
    built from the form (a study grid's, demo.handlers.grid.run_form), else the form's RunRequest;
    `ray`: a single run's engine.usecases.runs.run.RayOptions; `server`: its
    engine.usecases.served.ServerOptions; `client`: the visitor's address (demo.visitors.client_key).

    An upload is moved out of Gradio's upload folder into a private one at once, and deleted
    there once the worker has loaded it: no later request can fetch it (`/gradio_api/file=`),
    and the store records its file name, never its server path."""
    from demo.jobs import QueueFull

    if request is None:
        request = build_run_request(settings, form)

    check_store_quota(settings, request)
    dataset = dataset_path(settings, form)
    if not Path(dataset).exists():
        raise UserError("the uploaded file is gone from the server; upload it again" if form.dataset != SAMPLE
                        and not form.local_path.strip() else f"{Path(dataset).name}: no such file or folder")
    given = dataset
    uploaded = not form.local_path.strip() and form.dataset not in ("", SAMPLE) and _in_upload_folder(dataset)
    # Where strangers are served, the store names even the bundled sample by its file name: the
    # SQL console shows the store to every visitor, and server paths are not theirs to see.
    named = uploaded or not settings.allow_local_paths
    if uploaded:
        dataset = _take_upload(dataset)  # moved before the submit: the worker may start the job at once
    spec = JobSpec(_work(request, dataset, settings, Path(dataset).name if named else None, ray, server),
                   delete_after_load=uploaded, max_store_mb=settings.max_store_mb)
    try:
        return jobs.submit(spec, visitor, max_queued=settings.max_queued_jobs,
                           max_per_owner=settings.max_jobs_per_visitor, client=client,
                           max_per_client=settings.max_jobs_per_client)
    except QueueFull as full:
        if uploaded:  # refused: the visitor's upload goes back where it was, to try again later
            shutil.move(dataset, given)
            Path(dataset).parent.rmdir()
        raise UserError(str(full)) from None


def _work(request: Any, dataset: str, settings: AppSettings, name: str | None, ray: Any, server: Any) -> Any:
    """The use case's own request of a job: a study on this dataset and store, or one experiment."""
    if isinstance(request, StudyRequest):
        return replace(request, dataset=dataset, db=settings.db_path, dataset_name=name)
    return ExperimentRequest(request, dataset, settings.db_path, dataset_name=name, ray=ray, server=server)


def _take_upload(path: str) -> str:
    """Move an upload into a private folder (outside everything Gradio serves); its new path."""
    private = Path(tempfile.mkdtemp(prefix="pattrieval-upload-")) / Path(path).name
    shutil.move(path, private)
    return str(private)


def build_run_request(settings: AppSettings, form: RunForm):
    """The engine's RunRequest for a form: the operator's bounds here, then the use case's one
    builder (engine.usecases.runs.run_options), its FieldErrors worded with the form's labels
    (demo.field_words); UserError, one line."""
    if settings.read_only:
        raise UserError("this app is read-only: runs are started elsewhere")
    model_name = (form.model or "").strip() or SMOKE
    check_model_offered(settings, model_name)
    if not form.modes:
        raise UserError("choose at least one mode")
    # The operator's bounds hold here, on the server, whatever the form or an API caller sends.
    if settings.max_new_tokens is not None and form.max_new_tokens > settings.max_new_tokens:
        raise UserError(f"max new tokens is at most {settings.max_new_tokens} here, not {form.max_new_tokens}")
    if settings.max_top_logprobs is not None and form.top_logprobs > settings.max_top_logprobs:
        raise UserError(f"top log-probs is at most {settings.max_top_logprobs} here, not {form.top_logprobs}")
    custom = form.metadata not in BUILT_IN_METADATA
    # A list in these fields makes a grid, which demo.handlers.grid splits into single values first.
    if isinstance(form.top_k, str) or isinstance(form.few_shot, str):
        raise UserError("a list of cut-offs or few-shot counts makes a grid: start it as a study")
    values = {name: getattr(form, name) for name in RUN_FORM_OPTIONS} | {
        "model": model_name, "modes": tuple(form.modes), "metadata": form.metadata.strip(),
        "label_a": form.label_a if custom else None, "label_b": form.label_b if custom else None,
        "consideration": form.consideration if custom else None, "experiment": form.experiment.strip() or None,
        "hf_token": None,  # set below, after every check: a typed token is for this load only
    }
    with app_worded():
        request = build(values, model_label=model_name)
    if settings.max_items is not None:  # the operator's cap, on a limit already checked
        request = replace(request, limit=min(request.limit or settings.max_items, settings.max_items))
    request = resolved(replace(request, model_label=None))  # after every check: smoke writes its model on first use
    # A visitor who typed no token borrows the operator's HF_TOKEN only for the operator's models.
    typed = form.hf_token.strip() or None
    # Where visitors are strangers, a Hub id that is also a folder here is unknown like any other.
    hub_only = not settings.allow_local_paths and model_name != SMOKE
    return replace(request, hf_token=typed,
                   environment_token=operator_token_serves(settings, model_name), hub_only=hub_only)


def check_model_offered(settings: AppSettings, model_name: str) -> None:
    """Refuse, in one line, a model this app does not offer (a grid checks each of its models)."""
    if settings.allowed_models is not None and model_name not in settings.allowed_models + (SMOKE,):
        raise UserError(f"model '{model_name}' is not offered here; choose one of {', '.join(settings.allowed_models)}")
    if model_name == "auto":
        raise UserError("choose a model: 'auto' is for the command line")
    if not settings.allow_local_paths and model_name != SMOKE and _looks_like_path(model_name):
        raise UserError("model folders on the server cannot be named here; give a Hugging Face id")


def operator_token_serves(settings: AppSettings, model_name: str) -> bool:
    """Whether the operator's HF_TOKEN may load `model_name` for a visitor (smoke needs none)."""
    allowed = settings.operator_token_models
    return allowed is None or model_name in allowed or model_name == SMOKE


def dataset_path(settings: AppSettings, form: RunForm) -> str:
    """The dataset file a form names: the sample, an upload, or (desktop only) a local path."""
    typed = form.local_path.strip()
    if typed:
        if not settings.allow_local_paths:
            raise UserError(NO_SERVER_PATHS)

        return str(dataset_location(typed))  # `sample` as on the command line
    if form.dataset in ("", SAMPLE):
        return str(SAMPLE_DATASET)
    # Gradio hands the tab only files from its upload folder; a script calling run_batch, or an
    # API caller naming a path, must meet the same rule where strangers are served.
    if not settings.allow_local_paths and not _in_upload_folder(form.dataset):
        raise UserError(NO_SERVER_PATHS)
    _check_upload_size(settings, form.dataset)
    return form.dataset


def validate_upload(settings: AppSettings, path: str | None, top_k: int | None = None) -> str:
    """One line on a dataset file as soon as it is uploaded: layout and items, or the first problem.

    The file is read in a child process with a memory cap and a time limit (engine.datasets.load_child):
    a small upload can decode to gigabytes, which must not happen in the app's own process."""
    if not path:
        return "the bundled sample (67 Natural-Questions-style items, 10 documents each)"
    name = Path(path).name
    try:
        _check_upload_size(settings, path)
    except UserError as err:
        return _visible(settings, str(err), path)
    if top_k is not None and top_k < 1:
        top_k = None
    check = check_dataset_bounded(path, top_k=top_k)
    error = app_message(check.error) if check.error else None  # the skip-invalid box by its label
    if check.broken:
        return _visible(settings, error or "the dataset could not be read", path)
    if error:
        # Invalid items: the loader's own line, after what a run with skip_invalid would keep.
        return _visible(settings, f"{name}: {check.layout} layout, {check.n_items} valid items; {error}", path)
    return f"{name}: {check.layout} layout, {check.n_items} items, ready to run"


def store_is_empty(db_path: str | os.PathLike[str]) -> bool:
    """True when the store holds no run yet (or does not exist): the first screen offers a run."""
    return not holds_runs(Path(db_path))


def store_note(settings: AppSettings) -> str:
    """The first screen's sentence when the runs stored here will not survive a restart (a Space
    without persistent storage, a temporary folder), as escaped Markdown; "" when they will, or
    when nothing can be run here."""
    note = None if settings.read_only else paths.transient_store(settings.db_path)
    return markdown_text(note) if note else ""


@dataclass(frozen=True)
class FirstRun:
    """The one-click first run: the form it fills, and one line saying which model and why."""

    form: RunForm
    why: str


def first_run(settings: AppSettings, gpu: bool, available: Callable[[str], bool] | None = None) -> FirstRun:
    """The one-click first run on the bundled sample, on the model `--model auto` would choose
    (engine.generation.model_choice): Mistral in 4-bit on a GPU, Qwen2.5-0.5B on a CPU, the smoke model
    only where neither can be had (no Hub, nothing cached) or the operator offers neither.
    `available(model_id)` says whether a model can be loaded (default: the Hub cache or the Hub)."""
    def offered(model_id: str) -> bool:
        return settings.allowed_models is None or model_id in settings.allowed_models

    choice = first_model(gpu, offered, available)
    model = choice.name
    if choice.why == "gpu":
        why = "a GPU is here: the paper's first model, in 4-bit"
    elif choice.why == "cpu":
        why = ("a small real instruct model that runs on a CPU (no GPU here)" if not gpu
               else "a small real instruct model (the paper's Mistral cannot be had here)")
    else:
        why = (SMOKE_NOTE + " It is used because " + ("this app offers no other model that can be loaded"
               if settings.allowed_models is not None else "the Hugging Face Hub is not reachable and no real "
               "model is cached") + f"; with the Hub, the first run uses {choice.cpu_model} on a CPU.")
    limit = FIRST_RUN_LIMIT_GPU if gpu else FIRST_RUN_LIMIT_CPU
    if settings.max_items is not None:
        limit = min(limit, settings.max_items)
    return FirstRun(RunForm(model=model, dataset=SAMPLE, limit=limit, batch_size=8, experiment=""), why)


def first_screen_text(choice: FirstRun) -> str:
    """The first screen's Markdown: what the one click runs (its item count is the form's
    limit, the number the form under it shows) and why this model, each said once."""
    model = "the smoke model" if choice.form.model == "smoke" else choice.form.model
    intro = (f"Start with one click: the bundled sample dataset, {choice.form.limit} items in vanilla, base "
             f"and cf, on {model}: {choice.why}")
    return "**Nothing is stored yet.** " + markdown_text(intro)


def first_run_form(settings: AppSettings, gpu: bool, available: Callable[[str], bool] | None = None) -> RunForm:
    """The form of the one-click first run (see first_run)."""
    return first_run(settings, gpu, available).form


def run_status(jobs: JobQueue, job_id: str | None = None, visitor: str | None = None) -> list[dict[str, Any]]:
    """The visitor's job (or all their jobs, newest first) as plain records for a table or the
    API; another visitor's job is as unknown as a made-up id. The operator (None) sees all."""
    if job_id:
        status = jobs.status(job_id, visitor)
        return [_record(status)] if status else []
    return [_record(s) for s in jobs.statuses(visitor)]


def partial_metrics(jobs: JobQueue, settings: AppSettings, job_id: str | None, visitor: str | None = None):
    """The job's experiment as it stands: per run, the answers stored so far and their metrics (x100)."""
    import pandas as pd

    status = jobs.status(job_id, visitor) if job_id else None
    if status is None or not status.experiment_id or not Path(settings.db_path).is_file():
        return pd.DataFrame(columns=METRIC_COLUMNS)
    found = experiment_run_metrics(settings.db_path, status.experiment_id)
    return found[METRIC_COLUMNS] if found is not None else pd.DataFrame(columns=METRIC_COLUMNS)


def store_progress(settings: AppSettings) -> list[list[Any]]:
    """Every run in progress in the store, this app's or a command line's on the same file, as
    table rows (STORE_PROGRESS_COLUMNS); none before the first run (no file is created)."""
    if not Path(settings.db_path).is_file():
        return []
    return [
        [r.experiment_id, r.mode, r.model, r.status, f"{r.n_done}/{r.n_total}", r.run_id,
         r.created_utc.strftime("%Y-%m-%d %H:%M:%S") if r.created_utc else "-"]
        for r in runs_in_progress(settings.db_path)
    ]


def job_active(jobs: JobQueue, job_id: str | None, visitor: str | None = None) -> bool:
    """True while the visitor's job is queued or running: only then is there anything to cancel."""
    status = jobs.status(job_id, visitor) if job_id else None
    return status is not None and status.state in ("queued", "running")


_BANNER_COLOURS = {"queued": "#eef4ff", "running": "#eef4ff", "complete": "#e9f7ec", "cancelled": "#f4f4f4",
                   "failed": "#fdecea"}


def job_banner(jobs: JobQueue, job_id: str | None, note: str = "", visitor: str | None = None) -> str:
    """The job as the top of the Run tab shows it, as escaped HTML: state, model, progress and its
    message in full (a failure's whole line); `note` (why this model) under it. "" for no job."""
    status = jobs.status(job_id, visitor) if job_id else None
    if status is None:
        return ""

    def esc(value: object) -> str:
        return html.escape(str(value), quote=True)

    head = f"<b>{esc(status.job_id)}</b> {esc(status.state)}"
    if status.state == "queued" and status.queue_position:
        head += f" (position {status.queue_position} in the queue)"
    head += f" · {esc(status.model)} · {esc(', '.join(status.modes))}"
    bar = ""
    if status.n_total:
        head += f" · {status.n_done}/{status.n_total} answers"
        if status.state in ("queued", "running"):
            bar = f'<progress value="{status.n_done}" max="{status.n_total}"></progress>'
    lines = [head, esc(status.message)]
    if status.state == "complete" and status.study:
        lines.append(f"Study {esc(status.study)}: choose it in the Runs tab's study filter and the Bias tab's "
                     "study picker.")
    elif status.state == "complete" and status.experiment_id:
        lines.append(f"Experiment {esc(status.experiment_id)}: read it in the Runs, Query and Bias tabs.")
        if is_smoke(status.model) and SMOKE_NOTE not in note:  # the first run's note says it already
            lines.append(esc(SMOKE_NOTE))
    if note:
        lines.append(f"<i>{esc(note)}</i>")
    colour = _BANNER_COLOURS.get(status.state, "#f4f4f4")
    return (f'<div class="pe-job pe-job-{esc(status.state)}" role="status" style="background:{colour};'
            f'padding:.6em .9em;border-radius:6px;overflow-wrap:anywhere">'
            + "<br>".join(lines) + bar + "</div>")


def cancel_run(jobs: JobQueue, job_id: str, visitor: str | None = None) -> str:
    """Cancel one's own job: at once when queued, within seconds when running. Another
    visitor's job gets the same answer as an unknown id."""
    status = jobs.status(job_id, visitor)
    if status is None:
        return f"no job '{job_id}'"
    if jobs.cancel(job_id, visitor):
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
        "kind": status.kind,
    }


def _check_upload_size(settings: AppSettings, path: str) -> None:
    try:
        size = os.path.getsize(path)
    except OSError:
        return  # a missing file gets the loader's own message
    if size > settings.max_upload_bytes:
        raise UserError(f"{Path(path).name} is {size / 2**20:.1f} MB; uploads here are limited to "
                        f"{settings.max_upload_mb} MB")


def _in_upload_folder(path: str) -> bool:
    from gradio.utils import get_upload_folder, is_in_or_equal

    return is_in_or_equal(path, get_upload_folder())


def _looks_like_path(name: str) -> bool:
    """A model name shaped like a server path rather than a Hub id. Its shape only: whether it
    exists on the server must not change the answer (hub_only refuses such a folder at load)."""
    return name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1


def _visible(settings: AppSettings, message: str, dataset: str) -> str:
    return without_server_paths(message, settings.db_path, dataset_path=dataset)
