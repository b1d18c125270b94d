"""The Bias tab: CAS and CAB with tests and intervals, and citation confidence (`/bias_table`)."""

from __future__ import annotations

from typing import Any

from demo.settings import AppSettings


def build(app: Any, settings: AppSettings, jobs: Any) -> None:
    import gradio as gr
    import pandas as pd

    from demo.handlers import bias as bias_handlers
    from engine.errors import UserError

    def bias(experiment_ref):
        try:
            summary, results, confidence = bias_handlers.bias_table(settings.db_path, experiment_ref or "")
        except UserError as err:
            raise gr.Error(str(err)) from None
        return (summary, pd.DataFrame(results, columns=bias_handlers.RESULT_COLUMNS),
                pd.DataFrame(confidence, columns=bias_handlers.CONFIDENCE_COLUMNS))

    with gr.Tab("Bias"):
        with gr.Row():
            bias_experiment = gr.Textbox(label="experiment (id or name)")
            bias_button = gr.Button("Show bias")
        bias_summary = gr.Markdown()
        bias_results = gr.Dataframe(headers=bias_handlers.RESULT_COLUMNS, label="CAS and CAB (x100)",
                                    interactive=False)
        bias_confidence = gr.Dataframe(headers=bias_handlers.CONFIDENCE_COLUMNS,
                                       label="citation confidence by relevance and label", interactive=False)
        bias_button.click(bias, [bias_experiment], [bias_summary, bias_results, bias_confidence],
                          api_name="bias_table", api_visibility="public")
