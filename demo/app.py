"""The Gradio app's layout: tabs wired to the handlers, each action a named public API endpoint.

Nothing is loaded at import time; `build_app(settings)` builds the Blocks (gradio itself is
imported there), and the handlers in demo/handlers/ do the work as plain functions.
"""

from __future__ import annotations

from pathlib import Path
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
RUNS_COLUMNS = ["experiment", "name", "model", "dataset", "metadata", "modes", "status", "items", "created (UTC)"]


def build_app(settings: AppSettings, jobs: Any = None):
    """The app as gr.Blocks; `jobs` defaults to a new background JobQueue."""
    import gradio as gr
    import pandas as pd

    from demo.handlers import bias as bias_handlers
    from demo.handlers import query as query_handlers
    from demo.handlers import run as run_handlers
    from demo.handlers import runs as runs_handlers
    from demo.jobs import JobQueue
    from engine.errors import UserError
    from engine.types import MODES

    if jobs is None:
        jobs = JobQueue()

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

    def runs(page, model_filter, metadata_filter):
        try:
            rows = runs_handlers.runs_page(settings.db_path, int(page or 1), model=model_filter or None,
                                           metadata=metadata_filter or None)
        except UserError as err:
            raise gr.Error(str(err)) from None
        return pd.DataFrame(rows, columns=RUNS_COLUMNS)

    def bias(experiment_ref):
        try:
            summary, results, confidence = bias_handlers.bias_table(settings.db_path, experiment_ref or "")
        except UserError as err:
            raise gr.Error(str(err)) from None
        return (summary, pd.DataFrame(results, columns=bias_handlers.RESULT_COLUMNS),
                pd.DataFrame(confidence, columns=bias_handlers.CONFIDENCE_COLUMNS))

    def query(experiment_ref, item_id):
        if not Path(settings.db_path).is_file():
            raise gr.Error("nothing is stored yet: start a run first")
        return query_handlers.query_detail(settings.db_path, (experiment_ref or "").strip(), (item_id or "").strip())

    with gr.Blocks(title="PAttriEval") as app:
        gr.Markdown("# PAttriEval: do RAG models cite the right sources, and does a label change what they cite?")
        gr.Markdown(_gpu_banner())
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
    app.jobs = jobs  # the launcher shuts the worker down with the app
    return app


def _gpu_banner() -> str:
    import torch

    if torch.cuda.is_available():
        return f"GPU: {torch.cuda.get_device_name(0)}."
    return ("**No GPU here.** Browsing and SQL work as usual; runs on real 7-8B models need a GPU, "
            "and the smoke model (tiny, random weights) shows the whole pipeline on a CPU.")
