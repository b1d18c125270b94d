"""The Query tab: one item of an experiment across vanilla, base and cf (`/query_detail`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from demo.settings import AppSettings


def build(app: Any, settings: AppSettings, jobs: Any) -> None:
    import gradio as gr

    from demo.handlers import query as query_handlers

    def query(experiment_ref, item_id):
        if not Path(settings.db_path).is_file():
            raise gr.Error("nothing is stored yet: start a run first")
        return query_handlers.query_detail(settings.db_path, (experiment_ref or "").strip(), (item_id or "").strip())

    with gr.Tab("Query"):
        with gr.Row():
            query_experiment = gr.Textbox(label="experiment (id or name)")
            query_item = gr.Textbox(label="item id")
            query_button = gr.Button("Show")
        # Rendered by demo.render, which escapes every piece of model and dataset text.
        query_html = gr.HTML()
        query_metrics = gr.Dataframe(label="metrics per mode", interactive=False)
        query_button.click(query, [query_experiment, query_item], [query_html, query_metrics],
                           api_name="query_detail", api_visibility="public")
