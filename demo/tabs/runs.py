"""The Runs tab: the stored experiments, filtered and paged on the server."""

from __future__ import annotations

from typing import Any

from demo.settings import AppSettings

RUNS_COLUMNS = ["experiment", "name", "model", "dataset", "metadata", "modes", "status", "items", "created (UTC)"]


def build(app: Any, settings: AppSettings, jobs: Any) -> None:
    import gradio as gr
    import pandas as pd

    from demo.handlers import runs as runs_handlers
    from engine.errors import UserError

    def runs(page, model_filter, metadata_filter):
        try:
            rows = runs_handlers.runs_page(settings.db_path, int(page or 1), model=model_filter or None,
                                           metadata=metadata_filter or None)
        except UserError as err:
            raise gr.Error(str(err)) from None
        return pd.DataFrame(rows, columns=RUNS_COLUMNS)

    with gr.Tab("Runs") as runs_tab:
        with gr.Row():
            page = gr.Number(value=1, precision=0, label="page")
            model_filter = gr.Textbox(label="model")
            metadata_filter = gr.Textbox(label="metadata type")
            refresh = gr.Button("Show")
        runs_table = gr.Dataframe(headers=RUNS_COLUMNS, label="experiments", interactive=False)
        refresh.click(runs, [page, model_filter, metadata_filter], runs_table, api_name="runs",
                      api_visibility="public")
        # Opening the tab shows what was stored meanwhile (a run started here or from the CLI).
        for trigger in (app.load, runs_tab.select):
            trigger(runs, [page, model_filter, metadata_filter], runs_table, api_visibility="private")
