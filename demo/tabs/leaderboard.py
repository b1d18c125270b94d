"""The Leaderboard tab: the models of the store ranked by label bias (CAB) per label type, with
tiers by Holm-corrected pairwise tests, the rerun floor and the items (`/leaderboard`)."""

from __future__ import annotations

from typing import Any

from demo.handlers import leaderboard as handlers
from demo.settings import AppSettings
from demo.tabs.style import TABLE
from demo.toasts import error
from engine.errors import UserError
from engine.usecases.bias.leaderboard import DEFAULT_METRIC, METRICS


def build(app: Any, settings: AppSettings, jobs: Any) -> None:
    import gradio as gr
    import pandas as pd

    def show(metric):
        try:
            view = handlers.leaderboard_view(settings.db_path, metric, settings.private_items)
        except UserError as err:
            raise error(str(err), "leaderboard") from None
        return pd.DataFrame(view.rows, columns=handlers.COLUMNS), view.caption

    with gr.Tab("Leaderboard") as tab:
        with gr.Row():
            metric = gr.Radio(choices=list(METRICS), value=DEFAULT_METRIC, label="CAB on citation", scale=3)
            button = gr.Button("Show", variant="primary", scale=0, min_width=120)
        table = gr.Dataframe(**TABLE, headers=handlers.COLUMNS, label="models by label bias", interactive=False,
                             elem_id="pe-leaderboard")
        caption = gr.HTML(elem_id="pe-leaderboard-caption")
        button.click(show, metric, [table, caption], api_name="leaderboard", api_visibility="public")
        for trigger in (app.load, tab.select):
            trigger(show, metric, [table, caption], api_visibility="private")
