"""The Runs tab: the stored experiments, filtered (model, metadata, dataset, mode, study) and
paged on the server (`/runs`), each with the studies it belongs to, and the
export of chosen experiments' per-item results as CSV or Parquet, or their Every Eval Ever records (`/export`)."""

from __future__ import annotations

from typing import Any

from demo.handlers import query as query_handlers
from demo.handlers import runs as runs_handlers
from demo.handlers.compare import tick_choices
from demo.settings import AppSettings
from demo.tabs.links import RunsLinks
from demo.tabs.style import TABLE
from demo.toasts import error, with_request
from engine.errors import UserError
from engine.types import EXPORT_FORMATS

MODE_FILTERS = [("any", ""), ("vanilla", "vanilla"), ("base", "base"), ("cf", "cf")]


def build(app: Any, settings: AppSettings, jobs: Any) -> RunsLinks:
    import gradio as gr
    import pandas as pd

    from demo.downloads import limits_of
    from demo.visitors import fair_key

    # study_filter came last, with "" for any study: older /runs calls keep working.
    def runs(page, model_filter, metadata_filter, dataset_filter="", mode_filter="", study_filter=""):
        try:
            view = runs_handlers.runs_view(settings.db_path, page, model=model_filter, metadata=metadata_filter,
                                           dataset=dataset_filter, mode=mode_filter, study=study_filter)
        except UserError as err:
            raise error(str(err), "runs") from None
        # The caption goes through a State, which the API leaves out: /runs keeps returning the table alone.
        return pd.DataFrame(view.rows, columns=runs_handlers.RUNS_COLUMNS), view.caption

    def choices():
        return gr.Dropdown(choices=query_handlers.experiment_choices(settings.db_path))

    def studies():
        try:
            return gr.Dropdown(choices=runs_handlers.study_choices(settings.db_path))
        except UserError:  # a damaged file: the Show button says so in one line
            return gr.Dropdown(choices=[("any", "")])

    @with_request
    def export(chosen, typed, fmt, request=None):
        try:
            return str(runs_handlers.export_file(settings.db_path, chosen, typed, fmt,
                                                 owner=fair_key(request, settings),
                                                 limits=limits_of(settings)))
        except UserError as err:
            raise error(str(err), "runs") from None

    def ticks(frame, ticked):
        listed = tick_choices(frame)
        kept = [t for t in ticked or () if t in {value for _, value in listed}]
        return gr.CheckboxGroup(choices=listed, value=kept)

    with gr.Tab("Runs") as runs_tab:
        with gr.Row():
            page = gr.Number(value=1, precision=0, minimum=1, label="page")
            model_filter = gr.Textbox(label="model (part of the name)")
            metadata_filter = gr.Textbox(label="metadata type")
            dataset_filter = gr.Textbox(value="", label="dataset (part of the name)")
            mode_filter = gr.Dropdown(choices=MODE_FILTERS, value="", label="mode")
            # Custom values allowed: an API call sees the choices the app was built with, not those
            # the tab loaded; the handler refuses an unknown study in one line.
            study_filter = gr.Dropdown(choices=[("any", "")], value="", allow_custom_value=True, label="study")
            refresh = gr.Button("Show", variant="primary", scale=0)
        page_info = gr.Markdown()
        caption = gr.State("")
        runs_table = gr.Dataframe(**TABLE, headers=runs_handlers.RUNS_COLUMNS, label="experiments", interactive=False)
        gr.Markdown("Metrics per mode are those of the mode's newest run: citation precision, recall and F1 "
                    "(x100) and exact match, means over the answers stored so far.")
        # Tick two experiments of this page and compare them (mode by mode) in the Compare tab.
        with gr.Row():
            compare_pick = gr.CheckboxGroup(choices=[], label="tick two experiments to compare (B against A, in "
                                            "the order ticked)", scale=4)
            compare_button = gr.Button("Compare", scale=0, min_width=120)
        with gr.Accordion("Export per-item results", open=False):
            with gr.Row():
                export_choice = gr.Dropdown(choices=[], multiselect=True, allow_custom_value=True,
                                            label="experiments")
                export_typed = gr.Textbox(label="or ids / names (comma-separated)")
                export_format = gr.Radio(choices=[*((f, f) for f in EXPORT_FORMATS), ("Every Eval Ever (zip)", "eee")],
                                         value="csv", label="format")
                export_button = gr.Button("Export")
            export_out = gr.File(label="export", interactive=False)
        filters = [page, model_filter, metadata_filter, dataset_filter, mode_filter, study_filter]
        refresh.click(runs, filters, [runs_table, caption], api_name="runs", api_visibility="public").then(
            lambda text: text, caption, page_info, api_visibility="private")
        runs_table.change(ticks, [runs_table, compare_pick], compare_pick, api_visibility="private")
        export_button.click(export, [export_choice, export_typed, export_format], export_out, api_name="export",
                            api_visibility="public")
        # Opening the tab shows what was stored meanwhile (a run started here or from the CLI).
        for trigger in (app.load, runs_tab.select):
            trigger(runs, filters, [runs_table, caption], api_visibility="private").then(
                lambda text: text, caption, page_info, api_visibility="private")
            trigger(choices, None, export_choice, api_visibility="private")
            trigger(studies, None, study_filter, api_visibility="private")
    # app.build_app opens a clicked row in the Query tab, and the two ticked in the Compare tab.
    return RunsLinks(runs_table, compare_pick, compare_button)
