"""The SQL tab: read-only SQL over the store through the sandbox (`/sql`)."""

from __future__ import annotations

from typing import Any

from demo.settings import AppSettings


def build(app: Any, settings: AppSettings, jobs: Any) -> None:
    import gradio as gr

    with gr.Tab("SQL"):
        gr.Markdown("The SQL console comes next.")
