"""The Run tab: choose a model, dataset and settings; start, follow and cancel background runs.

The form's boxes are the run options (engine.usecases.runs.run_options), read into the form's record
(demo.handlers.run.RunForm) by each option's type. /run_batch takes them in a fixed order
(FORM_INPUTS); options added later come last and have defaults (the form's initial values), so
scripts written against the older order still work.
"""

from __future__ import annotations

import inspect
from typing import Any

from demo.settings import AppSettings
from demo.tabs.style import TABLE
from demo.toasts import error, with_request
from engine.errors import UserError
from engine.types import MODES
from engine.usecases.runs.model_names import SMOKE, offered_models
from engine.usecases.runs.run_options import OPTIONS, SERVED

PAPER_MODELS_CHOICES = (SMOKE, *offered_models())
# "kind" (run or explain: the Explain tab queues its jobs here too) came last, so that /run_status
# readers by position keep working.
STATUS_COLUMNS = ["job", "state", "queue position", "model", "modes", "progress", "experiment", "message", "kind"]
# The form's boxes the first screen fills with the first run's values, in first_screen's output order.
FIRST_RUN_FIELDS = ("model", "quantize", "limit", "batch_size", "max_new_tokens")
# The form's inputs by their names (the run options' and RunForm's), in the order /run_batch and
# /plan_run take them: the first 13 came first and have no default; each added later came last.
FORM_INPUTS = ("model", "dataset", "metadata", "label_a", "label_b", "consideration", "modes", "quantize", "limit",
               "batch_size", "max_new_tokens", "experiment", "hf_token", "top_k", "order", "few_shot", "xai", "sample",
               "temperature", "top_p", "sample_top_k", "seed", "top_logprobs", "skip_invalid", "local_path", "study",
               "backend", "ray_address", "actors", "gpus_per_actor", "base_url", "tokenizer", "concurrency",
               "api_key_env", "request_timeout", "relevant_at", "repetition", "label_scope")
REQUIRED_INPUTS = 13
API_NAMES = {"dataset": "dataset_file"}  # the API's name for the upload, kept for the scripts that use it


def _api_default(name: str) -> Any:
    """An input's default in the API: the form's initial value ("" for an empty text box)."""
    if name == "top_k":
        return "all"
    if name == "local_path":
        return None
    option = OPTIONS[name]
    return "" if option.type is str and option.initial is None else option.initial


# The API's signature of the form (/run_batch, /plan_run): each input by its name, with its default.
FORM_SIGNATURE = inspect.Signature([
    inspect.Parameter(API_NAMES.get(name, name), inspect.Parameter.POSITIONAL_OR_KEYWORD,
                      default=inspect.Parameter.empty if i < REQUIRED_INPUTS else _api_default(name))
    for i, name in enumerate(FORM_INPUTS)])


def form_of(*values: Any):
    """The RunForm of the form's values in FORM_INPUTS order (missing ones: their defaults), each
    read by its option's type. A box holding a comma list (a study grid) stays text:
    demo.handlers.grid parses it as `run` parses its lists; a single value is read as it always was."""
    from demo.handlers.run import RunForm

    given = dict(zip(FORM_INPUTS, values, strict=False))
    return RunForm(**{name: _read(name, given.get(name, _api_default(name))) for name in FORM_INPUTS})


def _read(name: str, value: Any) -> Any:
    """One box's value as the form's record holds it; UserError (one line) for a number that is not one."""
    from demo.handlers.run import SAMPLE

    if name == "dataset":
        return value or SAMPLE
    if name == "local_path":
        return value or ""
    if name == "modes":
        return tuple(m for m in MODES if m in (value or []))
    option = OPTIONS[name]
    if name == "top_k":
        return _listed(value) or _cut_off(value)
    if option.grid and option.type is int:
        return _listed(value) or _or(_whole(value, option.label), option.initial)
    if option.type is bool:
        return bool(value)
    if option.type is int:
        number = _whole(value, option.label)
        return option.initial if number is None and option.default is not None else number
    if option.type is float:
        if option.default is None:  # empty: the default is decided later (GPUs per actor: by the cluster)
            return None if value is None or str(value).strip() == "" else _number(str(value).strip(), 0.0, option.label)
        return _number(value, option.initial, option.label)
    if option.initial is not None:  # a choice or a grid box: empty means its initial value
        return str(value).strip() if value not in (None, "") else option.initial
    return (value or "").strip() if option.group == SERVED else value or ""


def build(app: Any, settings: AppSettings, jobs: Any) -> None:
    import gradio as gr
    import pandas as pd
    import torch

    from demo.handlers import grid as grid_handlers
    from demo.handlers import run as run_handlers
    from demo.visitors import client_key, visitor_id

    defaults = run_handlers.RunForm()
    gpu = torch.cuda.is_available()
    # Which model the first run uses asks the Hub (seconds when it does not answer): asked once,
    # when an empty store's first screen is shown, not at build time.
    chosen: list[Any] = []

    def first_run():
        if not chosen:
            chosen.append(run_handlers.first_run(settings, gpu=gpu))
        return chosen[0]

    # Gradio passes the request only to a parameter it can see: FORM_SIGNATURE's inputs, the plan
    # Start showed and the request, given last.
    @with_request
    def start(*values):
        # `planned`: the form whose plan Start's first step showed (a session State, never an API
        # input: None for /run_batch callers, who are shown no plan).
        *values, request = values
        planned = values[len(FORM_INPUTS)] if len(values) > len(FORM_INPUTS) else None
        try:
            form = form_of(*values[:len(FORM_INPUTS)])
            # The form is read again here, after the plan step: a box changed in between is refused.
            grid_handlers.check_plan_shown(planned, form)
            job_id = grid_handlers.run_form(jobs, settings, form, visitor_id(request, settings),
                                            client=client_key(request, settings))
        except UserError as err:
            raise error(err, "run") from None
        # The token box is emptied: the token was for this load only and must not linger.
        return job_id, ""

    start.__signature__ = FORM_SIGNATURE.replace(  # type: ignore[attr-defined]
        parameters=[*FORM_SIGNATURE.parameters.values(),
                    inspect.Parameter("planned", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
                    inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)])

    def plan(*values):
        """The grid's plan, and its form (what Start may run: the shown plan's session State)."""
        form = form_of_values(values, "plan")
        try:
            head, rows = grid_handlers.plan_run(settings, form)
        except UserError as err:
            raise error(err, "plan") from None
        return head, pd.DataFrame(rows, columns=grid_handlers.PLAN_COLUMNS), grid_handlers.planned_form(form)

    def plan_before_start(*values):
        """Start on a grid shows its plan first (a refusal stops the start); a single run hides the
        plan. A form that is not the plan on screen (`shown`, the last input) leaves that plan as it
        is and passes it on: the next step refuses it, naming the box (grid_handlers.check_plan_shown;
        refused here, the error would mark the plan itself). Outputs: the plan, the plan shown now,
        and the form the next step must still find (None: no check)."""
        *values, shown = values
        form = form_of_values(values, "run")
        try:
            grid = grid_handlers.is_grid(form)
        except UserError as err:
            raise error(err, "run") from None
        if grid and shown is not None and grid_handlers.planned_form(form) != shown:
            return gr.skip(), gr.skip(), shown, shown
        if not grid:
            return (gr.update(value=""), gr.update(value=pd.DataFrame(columns=grid_handlers.PLAN_COLUMNS)),
                    None, None)
        head, table, planned = plan(*values)
        return head, table, planned, planned

    def form_of_values(values, where):
        try:
            return form_of(*values)
        except UserError as err:
            raise error(err, where) from None

    # The API shows /plan_run's inputs by the form's names, with its defaults (as /run_batch).
    plan.__signature__ = FORM_SIGNATURE  # type: ignore[attr-defined]
    plan_before_start.__signature__ = FORM_SIGNATURE.replace(  # type: ignore[attr-defined]
        parameters=[*FORM_SIGNATURE.parameters.values(),
                    inspect.Parameter("shown", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)])

    # Each visitor (Gradio session) sees and cancels only their own jobs; the operator all.
    @with_request
    def status(job_id, request=None):
        return pd.DataFrame(run_handlers.run_status(jobs, job_id or None, visitor_id(request, settings)),
                            columns=STATUS_COLUMNS)

    @with_request
    def metrics(job_id, request=None):
        return run_handlers.partial_metrics(jobs, settings, (job_id or "").strip() or None,
                                            visitor_id(request, settings))

    @with_request
    def cancel(job_id, request=None):
        return run_handlers.cancel_run(jobs, (job_id or "").strip(), visitor_id(request, settings))

    def in_progress():
        try:
            rows = run_handlers.store_progress(settings)
        except UserError:
            rows = []  # the store is busy or unreadable for a moment: the next tick tries again
        return pd.DataFrame(rows, columns=run_handlers.STORE_PROGRESS_COLUMNS)

    def check_dataset(dataset_file, top_k):
        try:
            k = _cut_off(top_k)
        except UserError:
            k = None
        return run_handlers.validate_upload(settings, dataset_file, k)

    def custom_boxes(metadata):
        # A grid's list ("gender,race") needs the label boxes only when it names a custom type.
        custom = any(m.strip() not in run_handlers.BUILT_IN_METADATA for m in (metadata or "").split(","))
        return [gr.update(visible=custom)] * 3

    def first_screen():
        if settings.read_only or not run_handlers.store_is_empty(settings.db_path):
            return gr.update(visible=False), *([gr.skip()] * (1 + len(FIRST_RUN_FIELDS)))
        choice = first_run()
        # The form under the panel shows the first run's own values (it said `item limit 10`
        # under "5 items"): what the button runs is what Start would run.
        return (gr.update(visible=True), run_handlers.first_screen_text(choice),
                *(getattr(choice.form, name) for name in FIRST_RUN_FIELDS))

    def fill_first_run():
        f = first_run().form
        return (f.model, None, "", f.metadata, list(f.modes), f.quantize, f.limit, f.batch_size, f.max_new_tokens,
                gr.update(visible=False))

    @with_request
    def banner(job_id, note="", request=None):
        job = (job_id or "").strip() or None
        visitor = visitor_id(request, settings)
        return (run_handlers.job_banner(jobs, job, note or "", visitor),
                gr.update(visible=run_handlers.job_active(jobs, job, visitor)))

    def first_note():
        choice = first_run()
        return f"The first run uses {choice.form.model}: {choice.why}"

    with gr.Tab("Run"):
        if settings.read_only:
            gr.Markdown("This app is read-only: browse the stored runs in the other tabs.")
        # The job started here, at the top where the visitor looks: shown the moment it is
        # queued, its progress, and a failure's whole message (the jobs table is far below).
        with gr.Row():
            job_banner = gr.HTML(elem_id="pe-job-banner")
            cancel_button = gr.Button("Cancel", variant="stop", size="sm", scale=0,
                                      min_width=220, visible=False)
        first_note_text = gr.State("")  # why the first run's model: shown in the banner under the job
        with gr.Group(visible=False) as empty_panel:
            first_intro = gr.Markdown("**Nothing is stored yet.**")
            first_button = gr.Button("Run the bundled sample", variant="primary")
        box: dict[str, Any] = {}  # the form's inputs by their names (FORM_INPUTS)
        gr.Markdown("### Model")
        with gr.Row():
            model = box["model"] = gr.Dropdown(list(PAPER_MODELS_CHOICES), value=defaults.model, allow_custom_value=True,
                                elem_id="pe-model",
                                label="model: a paper model, smoke, or any Hugging Face id"
                                + (" or local folder" if settings.allow_local_paths else ""))
            quantize = box["quantize"] = gr.Dropdown(list(OPTIONS["quantize"].choices), value=defaults.quantize,
                                   label="quantization (auto: 4-bit on a GPU, none on a CPU)")
            hf_token = box["hf_token"] = gr.Textbox(label="Hugging Face token (gated models; used for this load only)",
                                  type="password")
        gr.Markdown("### Dataset")
        with gr.Row():
            dataset_file = box["dataset"] = gr.File(label=f"dataset: .jsonl, .json or .parquet, native, seed-library or ALCE "
                                   f"layout, up to {settings.max_upload_mb} MB (empty: the bundled sample)",
                                   type="filepath", file_types=[".jsonl", ".json", ".parquet"])
            with gr.Column():
                dataset_info = gr.Textbox(label="dataset check", interactive=False,
                                          value=run_handlers.validate_upload(settings, None))
                local_path = box["local_path"] = gr.Textbox(label="or a dataset path on this machine", visible=settings.allow_local_paths)
                box["skip_invalid"] = gr.Checkbox(value=defaults.skip_invalid,
                                           label="skip invalid items (recorded with the run) instead of refusing")
        gr.Markdown("### Prompt")
        with gr.Row():
            metadata = box["metadata"] = gr.Dropdown(list(run_handlers.BUILT_IN_METADATA) + ["custom"], value=defaults.metadata,
                                   allow_custom_value=True, label="metadata type (type a new name for your own)")
            label_a = box["label_a"] = gr.Textbox(label="custom label A (on relevant documents in base)", visible=False)
            label_b = box["label_b"] = gr.Textbox(label="custom label B (on the others)", visible=False)
            consideration = box["consideration"] = gr.Textbox(label="custom consideration sentence", visible=False)
        with gr.Row():
            modes = box["modes"] = gr.CheckboxGroup(list(MODES), value=list(defaults.modes), label="modes")
            # A dropdown, not a Number: a browser's number box cannot be empty, and "all" is the default.
            top_k = box["top_k"] = gr.Dropdown(["all", "3", "5", "10"], value="all", allow_custom_value=True,
                                label="cut-off k: the first k documents (type any k)")
            # Custom values: a comma list ("ranked,random") in any of these boxes makes a study grid.
            box["order"] = gr.Dropdown(list(OPTIONS["order"].choices), value=defaults.order, allow_custom_value=True, label="document order")
            box["few_shot"] = gr.Dropdown(list(OPTIONS["few_shot"].choices), value=defaults.few_shot, allow_custom_value=True,
                                   label="few-shot examples")
            box["xai"] = gr.Dropdown(list(OPTIONS["xai"].choices), value=defaults.xai, allow_custom_value=True, label="XAI variant")
        with gr.Row():  # the battery (docs/method.md): each a list box too
            box["relevant_at"] = gr.Dropdown(list(OPTIONS["relevant_at"].choices), value=defaults.relevant_at, allow_custom_value=True,
                                      label="relevant documents at (ranked: where they are)")
            box["repetition"] = gr.Dropdown(list(OPTIONS["repetition"].choices), value=defaults.repetition, allow_custom_value=True,
                                     label="repetition (distractor: a non-relevant document shown again last)")
            box["label_scope"] = gr.Dropdown(list(OPTIONS["label_scope"].choices), value=defaults.label_scope, allow_custom_value=True,
                                      label="labels on (all, only the relevant, only the others)")
        gr.Markdown("Comma lists in model, metadata type, cut-off k, order, few-shot, XAI or the three above (`gender,race`, "
                    "`5,10`) make a **study grid**: one experiment per combination, queued as one job, as "
                    "`python -m engine run` with lists. *Show plan* lists every configuration before Start.",
                    elem_id="pe-grid-note")
        gr.Markdown("### Generation")
        with gr.Row():
            box["sample"] = gr.Checkbox(value=defaults.sample, label="sample (off: greedy)")
            box["temperature"] = gr.Number(value=defaults.temperature, label="temperature")
            box["top_p"] = gr.Number(value=defaults.top_p, label="top-p")
            box["sample_top_k"] = gr.Number(value=defaults.sample_top_k, precision=0, label="sampling top-k (0: off)")
            box["seed"] = gr.Number(value=defaults.seed, precision=0, label="seed (sampling and random order)")
            box["top_logprobs"] = gr.Number(value=defaults.top_logprobs, precision=0, label="top log-probs kept per token")
        with gr.Row():
            limit = box["limit"] = gr.Number(value=defaults.limit, precision=0,
                              label="item limit" + (f" (at most {settings.max_items})" if settings.max_items else ""))
            batch_size = box["batch_size"] = gr.Number(value=defaults.batch_size, precision=0, label="batch size")
            max_new_tokens = box["max_new_tokens"] = gr.Number(value=defaults.max_new_tokens, precision=0, label="max new tokens")
            box["experiment"] = gr.Textbox(label="experiment name (optional; the same name and settings resume)")
            box["study"] = gr.Textbox(value="", label="study name (a grid; optional: the same name resumes it)")
        # Where answers are generated (BACKENDS). Ray and a server reach other machines: the desktop
        # only (AppSettings.allow_ray, allow_server). The boxes stay in the API's inputs either way;
        # each backend's own boxes show only when it is chosen.
        offered = [b for b in grid_handlers.BACKENDS
                   if b == "local" or (b == "ray" and settings.allow_ray) or (b == "server" and settings.allow_server)]
        with gr.Row(visible=len(offered) > 1):
            backend = box["backend"] = gr.Radio(offered, value=defaults.backend,
                               label="backend (local: this app's worker; ray: a pool of Ray actors; server: an "
                               "OpenAI-compatible server, the model box naming the served model)")
        with gr.Row(visible=False) as ray_row:
            box["ray_address"] = gr.Textbox(value="", label="Ray address (HOST:PORT or auto; empty: start Ray on this machine)")
            box["actors"] = gr.Number(value=defaults.actors, precision=0, label="Ray actors (model replicas)")
            # A text box: a browser's number box cannot be empty, and empty (Ray's choice) is the default.
            box["gpus_per_actor"] = gr.Textbox(value="", label="GPUs per actor (empty: 1 with GPUs, else 0)")
        with gr.Row(visible=False) as server_row:
            box["base_url"] = gr.Textbox(value="", label="server base URL (e.g. http://127.0.0.1:8000/v1)")
            box["tokenizer"] = gr.Textbox(value="", label="tokenizer (optional: a Hub id or folder; empty: the chat endpoint)")
            # A text box: empty (fit the server: its slots, else probed from 1) is the default.
            box["concurrency"] = gr.Textbox(value="", label="requests in flight (empty: as many as the server takes)")
            # The NAME only: the key is read from this app's environment, never typed into a page.
            box["api_key_env"] = gr.Textbox(value="", label="API key's environment variable NAME (empty: OPENAI_API_KEY "
                                     "when set; never the key)")
            box["request_timeout"] = gr.Number(value=defaults.request_timeout, label="request timeout (seconds)")
        with gr.Row():
            plan_button = gr.Button("Show plan", interactive=not settings.read_only)
            start_button = gr.Button("Start run", variant="primary", interactive=not settings.read_only)
        plan_text = gr.Markdown(elem_id="pe-plan")
        plan_table = gr.Dataframe(**TABLE, headers=grid_handlers.PLAN_COLUMNS, interactive=False,
                                  label="the grid's plan: one row per configuration, then the total", elem_id="pe-plan-table")
        # Kept for the API (/run_batch returns it, /run_status and /cancel_run take it); the banner
        # above shows the job to visitors, so these are not boxes that look like inputs.
        job_id = gr.Textbox(label="job", visible=False)
        cancel_message = gr.Textbox(label="cancel", interactive=False, visible=False)
        status_table = gr.Dataframe(**TABLE, headers=STATUS_COLUMNS, label="jobs", interactive=False)
        metrics_table = gr.Dataframe(**TABLE, headers=run_handlers.METRIC_COLUMNS, interactive=False,
                                     label="the job's runs so far: answers stored (n), citation precision, recall and "
                                     "F1 (x100), exact match")
        store_table = gr.Dataframe(**TABLE, headers=run_handlers.STORE_PROGRESS_COLUMNS, interactive=False,
                                   label="runs in progress in the store: started here or from the command line "
                                   "(interrupted: its process is gone; the same settings resume it)")
        timer = gr.Timer(1.0)
        # The store's other runs change slowly and cost a read of the file: every few seconds is enough.
        store_timer = gr.Timer(3.0)

        form_inputs = [box[name] for name in FORM_INPUTS]
        # Start runs the plan on screen or nothing (grid_handlers.check_plan_shown): a late page event
        # (the first screen's load filling limit and sizes) once changed the limit between Show plan
        # and Start, and a plan of 2 items ran 5. The plan's form is kept in the session, and Start
        # holds the form to it twice: when it shows its plan, and when it reads the form again to queue.
        # Start's progress and a refusal's red "Error" go on the hidden job box, not on the token box (an
        # output only because Start empties it): the toast says what was refused.
        plan_shown = gr.State(None)  # the form (no token) of the grid plan on screen, None when none is
        to_start = gr.State(None)  # the form Start's plan step showed; None for a single run and the API
        plan_button.click(plan, form_inputs, [plan_text, plan_table, plan_shown], api_name="plan_run",
                          api_visibility="public")
        started = start_button.click(plan_before_start, [*form_inputs, plan_shown],
                                     [plan_text, plan_table, plan_shown, to_start], api_visibility="private").success(
            start, [*form_inputs, to_start], [job_id, hf_token], api_name="run_batch", api_visibility="public",
            show_progress_on=[job_id])
        started.success(lambda: "", None, first_note_text, api_visibility="private").then(
            banner, [job_id, first_note_text], [job_banner, cancel_button], api_visibility="private").then(
            None, None, None, js=_SHOW_BANNER_JS, api_visibility="private")
        # The one-click first run fills the form, then goes through the same function as /run_batch.
        first_button.click(
            fill_first_run, None,
            [model, dataset_file, local_path, metadata, modes, quantize, limit, batch_size, max_new_tokens, empty_panel],
            api_visibility="private",
        ).then(start, form_inputs, [job_id, hf_token], api_visibility="private", show_progress_on=[job_id]).success(
            first_note, None, first_note_text, api_visibility="private").then(
            banner, [job_id, first_note_text], [job_banner, cancel_button], api_visibility="private")
        timer.tick(banner, [job_id, first_note_text], [job_banner, cancel_button], api_visibility="private",
                   show_progress="hidden")
        dataset_file.change(check_dataset, [dataset_file, top_k], dataset_info, api_name="validate_dataset",
                            api_visibility="public")
        top_k.change(check_dataset, [dataset_file, top_k], dataset_info, api_visibility="private")
        metadata.change(custom_boxes, metadata, [label_a, label_b, consideration], api_visibility="private")
        backend.change(lambda chosen: (gr.update(visible=chosen == "ray"), gr.update(visible=chosen == "server")),
                       backend, [ray_row, server_row], api_visibility="private")
        timer.tick(status, [job_id], status_table, api_name="run_status", api_visibility="public",
                   show_progress="hidden")
        timer.tick(metrics, [job_id], metrics_table, api_name="run_metrics", api_visibility="public",
                   show_progress="hidden")
        cancel_button.click(cancel, [job_id], cancel_message, api_name="cancel_run", api_visibility="public")
        for trigger in (app.load, store_timer.tick):
            trigger(in_progress, None, store_table, api_visibility="private", show_progress="hidden")
        app.load(None, None, None, js=_MODEL_ENTER_JS, api_visibility="private")
        app.load(first_screen, None, [empty_panel, first_intro, model, quantize, limit, batch_size, max_new_tokens],
                 api_visibility="private")


# After a start: the banner is at the top of the tab and the Start button at the bottom of a
# long form, so the page scrolls to where the job shows.
_SHOW_BANNER_JS = """() => {
  const banner = document.getElementById("pe-job-banner");
  if (banner) { banner.scrollIntoView({behavior: "smooth", block: "start"}); }
}"""


# Enter in the model box keeps the name as typed. Gradio's dropdown highlights the first choice
# that contains the typed text and Enter takes it: `smok` + Enter became `smoke`, a model the
# visitor never named. Here Enter only commits the text (the box allows custom values; leaving
# it keeps the text exactly), unless a choice was picked with the arrow keys. The server then
# checks the name as the CLI does (engine.usecases.runs.model_names.check_models_load: "did you mean smoke?").
_MODEL_ENTER_JS = """() => {
  if (window.__peModelEnter) { return; }
  window.__peModelEnter = true;
  let picked = false;
  const modelBox = (e) => e.target instanceof HTMLInputElement && e.target.closest("#pe-model");
  document.addEventListener("input", (e) => { if (modelBox(e)) { picked = false; } }, true);
  document.addEventListener("focusin", (e) => { if (modelBox(e)) { picked = false; } }, true);
  document.addEventListener("keydown", (e) => {
    if (!modelBox(e)) { return; }
    if (["ArrowUp", "ArrowDown", "Home", "End"].includes(e.key)) { picked = true; return; }
    if (e.key !== "Enter" || picked) { return; }
    e.stopPropagation();
    e.preventDefault();
    e.target.blur();
  }, true);
}"""


def _whole(value: Any, what: str) -> int | None:
    """A whole number from the form or the API (None stays None); UserError for anything else."""

    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{what} must be a whole number, not '{value}'") from None
    if not number.is_integer():
        raise UserError(f"{what} must be a whole number, not {value}")
    return int(number)


def _listed(value: Any) -> str | None:
    """A box's comma list as typed (a grid's axis), else None."""
    return str(value).strip() if value is not None and "," in str(value) else None


def _cut_off(value: Any) -> int | None:
    """The cut-off box: "all" (or empty) shows every document, else a whole number."""
    if value is None or str(value).strip().lower() in ("", "all"):
        return None
    return _whole(str(value).strip(), "the cut-off k")


def _or(value: int | None, default: int) -> int:
    """An empty box means the default; a 0 stays 0, so that the CLI's check can refuse it."""
    return default if value is None else value


def _number(value: Any, default: float, what: str) -> float:
    if value is None or value == "":
        return default
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UserError(f"{what} must be a number, not '{value}'") from None
