"""The Run tab: choose a model, dataset and settings; start, follow and cancel background runs."""

from __future__ import annotations

from typing import Any

from demo.settings import AppSettings

PAPER_MODELS_CHOICES = (
    "smoke",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "openchat/openchat-3.6-8b-20240522",
    "meta-llama/Meta-Llama-3-8B-Instruct",
    "Qwen/Qwen2.5-0.5B-Instruct",
)
STATUS_COLUMNS = ["job", "state", "queue position", "model", "modes", "progress", "experiment", "message"]


def build(app: Any, settings: AppSettings, jobs: Any) -> None:
    import gradio as gr
    import pandas as pd

    from demo.handlers import run as run_handlers
    from engine.errors import UserError
    from engine.types import MODES

    def start(model, dataset_file, metadata, label_a, label_b, consideration, modes, quantize, limit, batch_size,
              max_new_tokens, experiment, hf_token):
        form = run_handlers.RunForm(
            model=(model or "smoke").strip(),
            dataset=dataset_file or run_handlers.SAMPLE,
            metadata=metadata,
            label_a=label_a or "",
            label_b=label_b or "",
            consideration=consideration or "",
            modes=tuple(m for m in MODES if m in (modes or [])),
            quantize=quantize,
            limit=int(limit) if limit else None,
            batch_size=int(batch_size),
            max_new_tokens=int(max_new_tokens),
            experiment=experiment or "",
            hf_token=hf_token or "",
        )
        try:
            job_id = run_handlers.run_batch(jobs, settings, form)
        except UserError as err:
            raise gr.Error(str(err)) from None
        # The token box is emptied: the token was for this load only and must not linger.
        return job_id, ""

    def status(job_id):
        return pd.DataFrame(run_handlers.run_status(jobs, job_id or None), columns=STATUS_COLUMNS)

    def cancel(job_id):
        return run_handlers.cancel_run(jobs, (job_id or "").strip())

    with gr.Tab("Run"):
        if settings.read_only:
            gr.Markdown("This app is read-only: browse the stored runs in the other tabs.")
        with gr.Row():
            model = gr.Dropdown(list(PAPER_MODELS_CHOICES), value="smoke", allow_custom_value=True,
                                label="model (a Hub id or local folder works too)")
            quantize = gr.Dropdown(["auto", "4bit", "8bit", "none"], value="auto", label="quantization")
            hf_token = gr.Textbox(label="Hugging Face token (gated models; used for this load only)",
                                  type="password")
        with gr.Row():
            dataset_file = gr.File(label="dataset (empty: the bundled sample)", type="filepath")
            metadata = gr.Dropdown(["gender", "race", "hai", "custom"], value="gender", label="metadata type")
            label_a = gr.Textbox(label="custom label A (relevant documents in base)")
            label_b = gr.Textbox(label="custom label B")
            consideration = gr.Textbox(label="custom consideration sentence")
        with gr.Row():
            modes = gr.CheckboxGroup(list(MODES), value=list(MODES), label="modes")
            limit = gr.Number(value=10, precision=0, label="item limit")
            batch_size = gr.Number(value=8, precision=0, label="batch size")
            max_new_tokens = gr.Number(value=48, precision=0, label="max new tokens")
            experiment = gr.Textbox(label="experiment name (optional)")
        start_button = gr.Button("Start run", variant="primary", interactive=not settings.read_only)
        job_id = gr.Textbox(label="job")
        cancel_button = gr.Button("Cancel after the batch in flight")
        cancel_message = gr.Textbox(label="cancel", interactive=False)
        status_table = gr.Dataframe(headers=STATUS_COLUMNS, label="jobs", interactive=False)
        timer = gr.Timer(1.0)

        start_button.click(
            start,
            [model, dataset_file, metadata, label_a, label_b, consideration, modes, quantize, limit, batch_size,
             max_new_tokens, experiment, hf_token],
            [job_id, hf_token],
            api_name="run_batch",
            api_visibility="public",
        )
        timer.tick(status, [job_id], status_table, api_name="run_status", api_visibility="public",
                   show_progress="hidden")
        cancel_button.click(cancel, [job_id], cancel_message, api_name="cancel_run", api_visibility="public")
