"""The Explain tab (`/explain`): pick an experiment and an item; the stored Prompt 5 explanations
of its answers are shown per mode beside the answer and the documents, with the documents and
labels each explanation names highlighted. Or pick a whole run of the experiment (`/explain_run`):
its explanations as a table (item, mentioned documents, labels given as reasons, text cut short)
with the run's label share. "Generate explanations" queues Prompt 5 for the chosen item, the
chosen run, or every answer of the experiment, in the background worker (demo.jobs, one job at a
time, as runs), by the model that answered; the tab follows the job and shows what it wrote.
`/explain` keeps its inputs and outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from demo.handlers import explain as explain_handlers
from demo.handlers import query as query_handlers
from demo.hints import hint_html, show_hint_when_free
from demo.settings import AppSettings
from demo.tabs.style import TABLE
from demo.toasts import error, with_request
from engine.errors import UserError

TAB_ID = "explain"


def build(app: Any, settings: AppSettings, jobs: Any) -> None:
    import gradio as gr

    from demo.jobs import QueueFull
    from demo.visitors import client_key, visitor_id

    def stored() -> bool:
        return Path(settings.db_path).is_file()

    def explain(experiment_ref, item_id):
        if not stored():
            raise error("nothing is stored yet: start a run first", "explain")
        return explain_handlers.explain_view(settings.db_path, experiment_ref, item_id)

    def experiments_update():
        try:
            return gr.Dropdown(choices=query_handlers.experiment_choices(settings.db_path))
        except UserError:  # a damaged file: the Show button says so in one line
            return gr.Dropdown(choices=[])

    def items_update(experiment_ref):
        """The chosen experiment's items (the first of them chosen), and its view."""
        if not stored():
            raise error("nothing is stored yet: start a run first", "explain")
        try:
            ids = query_handlers.query_items(settings.db_path, experiment_ref)
        except UserError as err:
            raise error(str(err), "explain") from None
        first = ids[0] if ids else None
        shown = ids[: query_handlers.ITEM_CHOICES_MAX]
        return (gr.Dropdown(choices=shown, value=first, allow_custom_value=True),
                *explain_handlers.explain_view(settings.db_path, experiment_ref, first or ""))

    def explain_run(experiment_ref, run_id):
        if not stored():
            raise error("nothing is stored yet: start a run first", "explain")
        return explain_handlers.explain_run_view(settings.db_path, experiment_ref, run_id)

    def runs_update(experiment_ref):
        """The chosen experiment's runs (the first of them chosen), and that run's view."""
        if not stored():
            raise error("nothing is stored yet: start a run first", "explain")
        try:
            choices = explain_handlers.run_choices(settings.db_path, experiment_ref)
        except UserError as err:
            raise error(query_handlers.visitor_line(err, settings.db_path), "explain") from None
        first = choices[0][1] if choices else None
        return (gr.Dropdown(choices=choices, value=first),
                *explain_handlers.explain_run_view(settings.db_path, experiment_ref, first or ""))

    @with_request
    def generate(experiment_ref, item_id, scope, run_id=None, request=None):
        """Queue explanations in the background worker, as the visitor's job (the Run tab's caps
        apply); the timer then follows the job."""
        if not stored():
            raise error("nothing is stored yet: start a run first", "explain")
        visitor = visitor_id(request, settings)
        try:
            spec = explain_handlers.explain_spec(settings, experiment_ref, item_id, scope, run_id)
            job_id = jobs.submit(spec, visitor, max_queued=settings.max_queued_jobs,
                                 max_per_owner=settings.max_jobs_per_visitor, client=client_key(request, settings),
                                 max_per_client=settings.max_jobs_per_client)
        except UserError as err:
            raise error(query_handlers.visitor_line(err, settings.db_path), "explain") from None
        except QueueFull as full:
            raise error(full, "explain") from None
        return job_id, explain_handlers.job_line(jobs.status(job_id, visitor)), gr.Timer(active=True)

    @with_request
    def follow(job_id, experiment_ref, item_id, run_id, request=None):
        """The job's line; once it has finished, the views again (with what it wrote) and the timer off."""
        status = jobs.status(job_id, visitor_id(request, settings)) if job_id else None
        if status is None:
            return "", gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.Timer(active=False)
        if status.state not in ("complete", "cancelled", "failed"):
            return explain_handlers.job_line(status), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
        shown = explain_handlers.explain_view(settings.db_path, experiment_ref, item_id)
        whole = (explain_handlers.explain_run_view(settings.db_path, experiment_ref, run_id) if run_id
                 else (gr.skip(), gr.skip()))
        return (explain_handlers.job_line(status), *shown, *whole, gr.Timer(active=False))

    with gr.Tab("Explain", id=TAB_ID) as explain_tab:
        gr.Markdown("Stored Prompt 5 explanations of each answer (made with `python -m engine explain`, or "
                    "queued here with **Generate explanations**); the documents and labels each explanation "
                    "names are highlighted.")
        with gr.Row():
            experiment = gr.Dropdown(label="experiment (id or name)", choices=[], value=None,
                                     allow_custom_value=True, scale=2)
            item = gr.Dropdown(label="item id", choices=[], value=None, allow_custom_value=True)
            show_button = gr.Button("Show", variant="primary", scale=0)
        with gr.Row():
            scope = gr.Radio(choices=list(explain_handlers.GENERATE_SCOPES), value="item", label="generate for",
                             scale=2)
            generate_button = gr.Button("Generate explanations", interactive=not settings.read_only, scale=0)
            job_status = gr.Textbox(label="explanation job", interactive=False, scale=3)
        job_id = gr.State("")
        timer = gr.Timer(1.0, active=False)
        # Rendered by demo.explain_render, which escapes every piece of model and dataset text.
        page = gr.HTML()
        hint = gr.Textbox(visible="hidden")  # the hint, until the page knows it may show it
        # /explain's second output for API users: one row per explanation, exact values.
        table = gr.Dataframe(**TABLE, label="explanations", interactive=False, visible=False)
        gr.Markdown("#### A whole run")
        with gr.Row():
            run = gr.Dropdown(label="run of the experiment", choices=[], value=None, allow_custom_value=True, scale=2)
            show_run_button = gr.Button("Show run", scale=0)
        run_page = gr.HTML()  # demo.explain_render.run_summary: every piece of stored text escaped
        run_table = gr.Dataframe(**TABLE, headers=list(explain_handlers.RUN_EXPLANATION_COLUMNS), interactive=False,
                                 label="the run's explanations (text cut short; the item view above shows it whole)")
        # Inside the tab: a component directly in gr.Tabs (this State, once) shifted the tabs'
        # order in the browser, and opening the last tab showed it twice in the tab bar.
        prepared = gr.State(None)

    for box in (experiment, item, run):  # free text: the choices arrive only when the tab opens
        box.api_info = lambda: {"type": "string"}  # type: ignore[method-assign]

    show_button.click(explain, [experiment, item], [page, table], api_name="explain", api_visibility="public")
    item.select(explain, [experiment, item], [page, table], api_visibility="private")
    experiment.select(items_update, [experiment], [item, page, table], api_visibility="private")
    experiment.select(runs_update, [experiment], [run, run_page, run_table], api_visibility="private")
    show_run_button.click(explain_run, [experiment, run], [run_page, run_table], api_name="explain_run",
                          api_visibility="public")
    run.select(explain_run, [experiment, run], [run_page, run_table], api_visibility="private")
    def prepare(current):
        """Opening the tab (or the page): the experiments stored meanwhile and, when there is only
        one and none is chosen, its first item's and first run's views, ready to show."""
        experiments = experiments_update()
        choices = list(experiments.choices or [])
        if (current or "").strip() or len(choices) != 1 or not stored():
            return {"choices": choices, "open": None}
        only = choices[0][1]
        try:
            ids = query_handlers.query_items(settings.db_path, only)
            first = ids[0] if ids else ""
            runs_ = explain_handlers.run_choices(settings.db_path, only)
            first_run = runs_[0][1] if runs_ else ""
            views = (*explain_handlers.explain_view(settings.db_path, only, first),
                     *explain_handlers.explain_run_view(settings.db_path, only, first_run))
        except UserError:  # its items or runs cannot be read: the choices alone, as before
            return {"choices": choices, "open": None}
        return {"choices": choices, "open": (only, ids[: query_handlers.ITEM_CHOICES_MAX], first, runs_, first_run,
                                             views)}

    def apply(current, prepared):
        """The prepared views, only if the visitor has still chosen nothing: read when this step
        starts, so that a slow preparation never replaces the visitor's own choice. With nothing
        chosen, the hint goes to the hidden box, never to the page: the page shows it only if it
        still holds nothing or a hint when it arrives (a Show clicked meanwhile keeps its result)."""
        prepared = prepared or {"choices": [], "open": None}
        if prepared["open"] is None or (current or "").strip():
            hint_ = "" if (current or "").strip() else hint_html(settings.db_path, "explain")
            return (gr.Dropdown(choices=prepared["choices"]), *([gr.skip()] * 6), hint_)
        only, ids, first, runs_, first_run, (page_, table_, run_page_, run_table_) = prepared["open"]
        # No hint: a stale one left in the box must not replace an opened page that reads empty.
        return (gr.Dropdown(choices=prepared["choices"], value=only),
                gr.Dropdown(choices=ids, value=first or None, allow_custom_value=True), page_, table_,
                gr.Dropdown(choices=runs_, value=first_run or None), run_page_, run_table_, "")

    # At page load too, so that the only experiment is open before the tab is.
    for trigger in (app.load, explain_tab.select):
        applied = trigger(prepare, experiment, prepared, api_visibility="private").then(
            apply, [experiment, prepared], [experiment, item, page, table, run, run_page, run_table, hint],
            api_visibility="private")
        show_hint_when_free(applied, hint, page)
    generate_button.click(generate, [experiment, item, scope, run], [job_id, job_status, timer],
                          api_visibility="private")
    timer.tick(follow, [job_id, experiment, item, run], [job_status, page, table, run_page, run_table, timer],
               api_visibility="private")
