"""Study grids and backends from the Run tab: comma lists in the form, its plan, Ray.

A form whose model, metadata type, cut-off k, order, few-shot, XAI or battery box holds a comma list
("5,10"), or that names a study, is a grid: the cross product of the lists, one experiment per
configuration, exactly `python -m engine run` with the same lists (engine.prompting.study parses them,
engine.usecases.study.study plans and runs them). Start queues ONE job for the whole grid; /plan_run
shows the use case's own plan first (plan_study: the same planning run_study does, vanilla
shared across metadata types), so the app never works out a plan of its own. Start runs the plan on
screen or nothing (check_plan_shown): a box that changed after the plan was made (an edit, or a
late page event such as the first screen filling the form) is refused in one line.

The backend (BACKENDS) says where the answers are generated: "local", the app's worker, or
"ray", a pool of Ray actors with `run --backend ray`'s options (the desktop only: an address
reaches other machines), or "server", an OpenAI-compatible server with `run --backend
server`'s options (the desktop only too: a URL reaches other machines, and the key is read from
the app's own environment). The model box then holds the served model name(s); the server is
asked at Start (its URL, key and every model, one line each) before anything is queued.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from demo.field_words import app_message, app_worded, field_label
from demo.handlers.run import (
    BUILT_IN_METADATA,
    RunForm,
    build_run_request,
    check_model_offered,
    dataset_path,
    operator_token_serves,
    run_batch,
)
from demo.settings import AppSettings, without_server_paths
from engine.datasets.load_child import load_dataset_bounded
from engine.errors import UserError
from engine.usecases.runs.model_names import SMOKE, check_hub_ids, check_models_load
from engine.usecases.runs.run import RayOptions, check_ray
from engine.usecases.runs.run_options import GRID_AXES
from engine.usecases.served import ServerOptions, check_server, served_run, server_backend
from engine.usecases.study.study import StudyRequest, check_study, grid_of, plan_study

BACKENDS = ("local", "ray", "server")
PLAN_COLUMNS = ["#", "model", "metadata", "k", "order", "few-shot", "XAI", "battery", "modes", "items",
                "runs to generate", "answers to generate", "vanilla"]


def form_grid(form: RunForm):
    """The form's engine.prompting.study.Grid: each list box parsed as `run` parses its option (UserError,
    one line: an unknown value, a duplicate, an empty entry, k < 1)."""
    top_k = form.top_k
    if isinstance(top_k, str) and top_k.strip().lower() in ("", "all"):
        top_k = None
    with app_worded():  # a field named by the form's label (demo.field_words)
        return grid_of({**{axis: getattr(form, axis) for axis in GRID_AXES}, "top_k": top_k,
                        "model": str(form.model or "").strip() or SMOKE,
                        "metadata": str(form.metadata or "").strip() or "gender"})


def run_form(jobs: Any, settings: AppSettings, form: RunForm, visitor: str | None = None, *,
             client: str | None = None) -> str:
    """Queue the Run tab's form, a single run or a grid, on its backend; the job id (UserError, one
    line). What /run_batch calls: demo.handlers.run.run_batch with the request built here."""
    # A model that cannot load here is refused at Start, before anything is queued: the CLI's own
    # check, one line in a few seconds (queued, the job met it only after its dataset and store
    # checks, about a minute later).

    if is_grid(form):
        # One job for the whole grid; the StudyRequest carries its own RayOptions or ServerOptions.
        study = build_study_request(settings, form)
        if study.server is not None:
            probe_server(study.run, study.server, study.grid.model)
        else:
            check_models_load(study.grid.model)
        return run_batch(jobs, settings, form, visitor, request=study, client=client)
    backend_of(settings, form)
    ray = ray_options(settings, form)
    server = server_options(settings, form)
    request = build_run_request(settings, form)
    if server is not None:
        probe_server(request, server, (server.model,))
    else:
        check_models_load((request.model,))
    return run_batch(jobs, settings, form, visitor, request=request, ray=ray, server=server, client=client)


def is_grid(form: RunForm) -> bool:
    """A form is a grid when a box holds a list, or when it names a study (as `run --study`)."""
    return form.study.strip() != "" or not form_grid(form).is_single


def ray_options(settings: AppSettings, form: RunForm):
    """The form's engine.usecases.runs.run.RayOptions, None for a local run; the address probed now, so
    that a dead one is refused at Start, not minutes later in the job (UserError, one line)."""
    if backend_of(settings, form) != "ray":
        return None
    options = RayOptions(form.ray_address.strip() or None, form.actors, form.gpus_per_actor)
    with app_worded():
        check_ray(options, "auto")
    return options


def backend_of(settings: AppSettings, form: RunForm) -> str:
    """The form's backend, one of BACKENDS and offered here (UserError, one line, for any other)."""

    backend = (form.backend or "local").strip()
    if backend not in BACKENDS:
        raise UserError(f"unknown backend '{backend}' (choose from {', '.join(BACKENDS)})")
    if not {"ray": settings.allow_ray, "server": settings.allow_server}.get(backend, True):
        raise UserError(f"the {backend} backend is offered only by the desktop app; choose local")
    return backend


def server_options(settings: AppSettings, form: RunForm):
    """The form's engine.usecases.served.ServerOptions, None unless its backend is "server";
    checked by the use case's own rules, the key's variable NAME included (UserError, one line).
    The model is the form's (a grid's models replace it, as `run --backend server` with a list)."""
    if backend_of(settings, form) != "server":
        return None
    options = ServerOptions(base_url=form.base_url.strip(), model=(form.model or "").strip(),
                            tokenizer=form.tokenizer.strip() or None, concurrency=form.concurrency,
                            api_key_env=form.api_key_env.strip() or None, timeout=form.request_timeout)
    # A grid's list of models is checked model by model by check_study; its first one here.
    with app_worded():  # the server's fields by the form's labels, not --base-url
        check_server(replace(options, model=options.model.split(",")[0].strip()), None)
    return options


def probe_server(run: Any, server: Any, models: tuple[str, ...]) -> None:
    """Ask the server, at Start, what the job would ask first: its URL and key, each model, one
    1-token request (engine.usecases.served.server_backend); UserError, one line, and nothing
    queued or written when it cannot serve them."""
    for model in models:
        options = replace(server, model=model)
        with app_worded():  # e.g. a tokenizer that cannot load, by the form's label
            server_backend(served_run(run, options), options).close()


def build_study_request(settings: AppSettings, form: RunForm):
    """The engine's StudyRequest for a grid form (dataset and store are the job's), checked as
    `run` with lists checks it, plus this app's bounds on every model and on the grid's size."""
    backend_of(settings, form)  # a backend not offered here is the first thing said
    grid = form_grid(form)
    if settings.max_configurations is not None and grid.size > settings.max_configurations:
        raise UserError(f"this grid has {grid.size} configurations; at most {settings.max_configurations} here "
                        "(shorten a list)")
    if form.experiment.strip():
        raise UserError(f"the experiment name names one experiment; this grid has {grid.size} configuration"
                        f"{'s' if grid.size != 1 else ''}: name it with the study name instead")
    for model in grid.model:
        check_model_offered(settings, model)
    first = grid.configurations()[0]
    # The settings every configuration shares, checked by the single form's own rules.
    base = build_run_request(settings, replace(form, experiment="", **first))
    if not settings.allow_local_paths and SMOKE in grid.model:
        # The shared request cannot say "Hub only" for one model and not for the smoke model's
        # folder: each other model is refused here as load_model_for refuses it (hub_only).
        check_hub_ids(grid.model)
    custom = any(m not in BUILT_IN_METADATA for m in grid.metadata)
    study = StudyRequest(
        grid=grid,
        # A visitor who typed no token borrows the operator's only if it serves every model.
        run=replace(base, model_label=None, hub_only=base.hub_only and SMOKE not in grid.model,
                    environment_token=all(operator_token_serves(settings, m) for m in grid.model)),
        dataset="", db=settings.db_path, name=form.study.strip() or None,
        label_a=form.label_a if custom else None, label_b=form.label_b if custom else None,
        consideration=form.consideration if custom else None,
        ray=ray_options(settings, form),
        server=server_options(settings, form),
    )
    with app_worded():
        check_study(study)
    return study


def planned_form(form: RunForm) -> RunForm:
    """What a plan is of: the form without its token (a token is for one load and is never kept,
    not even in the page's session state)."""
    return replace(form, hf_token="")


def check_plan_shown(shown: RunForm | None, form: RunForm) -> None:
    """Start runs the plan on screen or nothing: UserError (one line) naming the first box whose
    value is not the plan's. `shown` is the planned_form of the plan on screen (None: no plan
    shown, nothing to hold Start to). A box can change after Show plan without the visitor
    touching it: the first screen's load event fills model, limit and sizes when it answers,
    seconds late on a loaded server, and Start then ran 5 items under a plan of 2."""
    if shown is None:
        return
    now = planned_form(form)
    changed = [f.name for f in fields(RunForm) if getattr(shown, f.name) != getattr(now, f.name)]
    if not changed:
        return

    name = changed[0]
    if name in ("dataset", "local_path"):  # a path on the server: never shown
        what = "the dataset is not the plan's"
    else:
        what = (f"{field_label(name)} is {_box_text(name, getattr(now, name))} in the form but "
                f"{_box_text(name, getattr(shown, name))} in the plan shown")
    more = f" (and {len(changed) - 1} more box{'es' if len(changed) > 2 else ''})" if len(changed) > 1 else ""
    raise UserError(f"not started: {what}{more}; press Show plan to see the plan of the form as it is, then Start")


def _box_text(name: str, value: Any) -> str:
    """A box's value as a refusal quotes it (a visitor's text cut short: the line stays one line)."""
    if value is None:
        return "all" if name == "top_k" else "empty"
    if isinstance(value, tuple):
        value = ",".join(map(str, value))
    text = " ".join(str(value).split())
    return repr(text if len(text) <= 40 else text[:39] + "…") if isinstance(value, str) else text


def plan_run(settings: AppSettings, form: RunForm) -> tuple[str, list[list[Any]]]:
    """The plan of the form's grid as the study use case makes it: one line (the study, its size,
    what is generated and shared) and PLAN_COLUMNS rows, one per configuration, then the total.
    Nothing is loaded or written; the dataset is read in the capped child process."""
    if not is_grid(form):
        raise UserError("the plan is for a grid: put a comma list in a box (or name a study); a single run "
                        "starts with Start")
    study = build_study_request(settings, form)
    path = dataset_path(settings, form)

    def read(source, **options):
        options["skip_invalid"] = form.skip_invalid
        return load_dataset_bounded(source, **options)

    try:
        plan = plan_study(replace(study, dataset=path), read_dataset=read)
    except UserError as err:
        # The dataset's own line names its file, never its folder on the server: an upload is
        # in Gradio's upload folder even on the desktop, and its name is all the visitor knows
        # (as the dataset check says it). Only a path typed on the desktop is shown as typed.
        if settings.allow_local_paths and form.local_path.strip():
            raise
        raise UserError(without_server_paths(app_message(err), settings.db_path, dataset_path=path)) from None
    s = plan.summary
    varied = " x ".join(f"{n} {axis.replace('_', '-')}" for axis, n in s.axis_sizes if n > 1) or "1 configuration"
    head = (f"study {s.name}: {s.n_experiments} configuration{'s' if s.n_experiments != 1 else ''} ({varied}), "
            f"{s.n_shared} vanilla run{'s' if s.n_shared != 1 else ''} shared; "
            + s.plan_line)
    rows = []
    for c in plan.configurations:
        v = c.configuration
        if "vanilla" not in c.modes:
            vanilla = "-"
        elif c.shared_from is not None:
            vanilla = f"shared from #{c.shared_from + 1}"
        else:
            vanilla = "its own"
        rows.append([c.position + 1, c.label, v["metadata"], "all" if v["top_k"] is None else v["top_k"],
                     v["order"], v["few_shot"], v["xai"], c.battery_text() or "-", ", ".join(c.modes), c.n_items, c.n_runs, c.n_todo,
                     vanilla])
    # The total's name in the wide model column: the narrow "#" column would break the word.
    rows.append(["", "total", "", "", "", "", "", "", "", s.n_items, sum(c.n_runs for c in plan.configurations),
                 s.n_todo, f"{s.n_copied} answers shared" if s.n_copied else "-"])
    return head, rows
