"""The Compare tab: two runs, two experiments' modes (EXP:mode) or two whole experiments
on the same items, with the paired statistics of `python -m engine compare` (`/compare`), a plot
of the differences, the flips and the items that differ most; a clicked item opens the Query tab
with both runs side by side (`/compare_item`); the per-item comparison as CSV or Parquet
(`/compare_export`)."""

from __future__ import annotations

from typing import Any

from demo.handlers import compare as handlers
from demo.hints import hint_html, show_hint_when_free
from demo.settings import AppSettings
from demo.tabs.links import CompareLinks, Opener
from demo.tabs.style import TABLE
from demo.toasts import error, refused, with_request
from engine.errors import UserError
from engine.types import EXPORT_FORMATS
from engine.usecases.compare.sides import large_sample_above

TAB_ID = "compare"  # the Runs tab's "Compare" button selects it


def build(app: Any, settings: AppSettings, jobs: Any, tabs: Any) -> CompareLinks:
    """The tab inside `tabs` (the app's gr.Tabs, which the Runs tab's Compare button selects)."""
    import gradio as gr
    import pandas as pd

    from demo.downloads import limits_of
    from demo.visitors import fair_key

    db = settings.db_path

    def compare_api(a: str, b: str, metrics: list[str] | None = None, margin: str | None = None,
                    pair_by_id: bool = False, exact: bool = False) -> dict:
        """Compare B against A on the items both hold: per metric the means, B − A with its 95%
        interval, the verdict's p and its Holm correction, TOST where a margin applies, the verdict;
        the pairing, the flips and the items that differ most. A and B: run ids, experiments (id or
        name) or EXP:mode. margin: "5" (every metric in points) or "precision=5,n_citations=0.2".
        exact: the permutation and exact tests at any size (else the large-sample ones above
        1,000 differing pairs)."""
        try:
            return handlers.compare_api(db, a, b, metrics, margin, pair_by_id, exact)
        except UserError as err:
            raise error(str(err), "compare") from None

    def show(a, b, metrics, margin, pair_by_id, exact):
        """The page: a refusal is one line in the summary, every other panel emptied. Raised, it
        put an "Error" pill on each output besides the toast (three for an unknown run)."""
        try:
            view = handlers.compare_view(db, a, b, metrics, margin, pair_by_id, exact)
        except UserError as err:
            line = refused(str(err), "compare")
            return (handlers.refusal_html(line), pd.DataFrame(columns=handlers.TABLE_COLUMNS), gr.Plot(visible=False),
                    pd.DataFrame(columns=handlers.ITEM_KEY_COLUMNS), {}, gr.Accordion(visible=False))
        return (view.summary, view.table, gr.Plot(value=view.figure, visible=True), view.items, view.pairs,
                gr.Accordion(visible=True))

    @with_request
    def export(a, b, metrics, margin, pair_by_id, exact, fmt, request=None):
        try:
            return str(handlers.export_items(db, a, b, metrics, margin, pair_by_id, fmt, exact=exact,
                                             owner=fair_key(request, settings), limits=limits_of(settings)))
        except UserError as err:
            raise error(str(err), "compare") from None

    def item_api(run_a: str, run_b: str, item_id: str) -> str:
        """One item with run A's and run B's answers, citations and documents side by side (HTML)."""
        return handlers.pair_page(db, run_a, run_b, item_id)

    def choices():
        # The choices only: a value typed meanwhile stays (the tab's select answers after a click);
        # and the line that says where to start, which the page shows only where nothing is compared.
        listed = handlers.side_choices(db)
        return gr.Dropdown(choices=listed), gr.Dropdown(choices=listed), hint_html(db, "compare")

    with gr.Tab("Compare", id=TAB_ID) as compare_tab:
        gr.Markdown("Compare **B against A** on the items both hold: two runs, two experiments (mode by mode, "
                    "with CAS and CAB), or one mode of each (type `EXP:base`). Differences are B − A in points "
                    "(x100); citations per answer in citations.")
        with gr.Row():
            side_a = gr.Dropdown(label="A (run, experiment or EXP:mode)", choices=[], value=None,
                                 allow_custom_value=True, scale=3)
            side_b = gr.Dropdown(label="B (run, experiment or EXP:mode)", choices=[], value=None,
                                 allow_custom_value=True, scale=3)
            compare_button = gr.Button("Compare", variant="primary", scale=0, min_width=120)
        with gr.Accordion("Options: metrics, equivalence margin, pairing, exact tests", open=False):
            every = handlers.metric_choices()
            metrics = gr.CheckboxGroup(choices=every, value=[n for _, n in every],
                                       label="metrics (Holm-corrected together)")
            with gr.Row():
                margin = gr.Textbox(value="", label="equivalence margins (blank: no TOST)",
                                    placeholder="5, or per metric: precision=5,recall=5,n_citations=0.2",
                                    info="a plain number applies to every metric in points (x100), not to "
                                         "citations per answer; NAME=M gives a metric its own")
                pair_by_id = gr.Checkbox(value=False, label="pair by id",
                                         info="pair items by id even when the two datasets differ in content")
                exact = gr.Checkbox(value=False, label="exact tests at any size",
                                    info=f"above {large_sample_above():,} differing pairs a metric is tested with the "
                                         "paired t-test or McNemar's chi-square; tick for the permutation and "
                                         "exact tests (minutes at a million items)")
        summary = gr.HTML()
        hint = gr.Textbox(visible="hidden")  # the hint, until the page knows it may show it
        table = gr.Dataframe(**TABLE, headers=handlers.TABLE_COLUMNS, label="per metric (B − A)", interactive=False)
        plot = gr.Plot(label="differences with 95% intervals", visible=False)
        gr.Markdown("**The items that differ most** (by F1 where compared; Δ = B − A): click a row to open it in "
                    "the Query tab with both runs side by side.")
        items = gr.Dataframe(**TABLE, headers=handlers.ITEM_KEY_COLUMNS, label="items", interactive=False,
                             max_height=500)
        pairs = gr.State({})  # comparison -> (run A, run B), for a clicked item
        with gr.Accordion("Export the per-item comparison", open=False, visible=False) as export_box:
            with gr.Row():
                export_format = gr.Radio(choices=list(EXPORT_FORMATS), value="csv", label="format")
                export_button = gr.Button("Export", scale=0)
            export_out = gr.File(label="per-item comparison", interactive=False)
        gr.api(item_api, api_name="compare_item", api_visibility="public")
        # Carries /compare (the JSON) where the Compare button draws the page; inside the tab, as
        # gr.Tabs holds nothing but tabs.
        api_button = gr.Button(visible=False)
        api_json = gr.JSON(visible=False)

    for box in (side_a, side_b):  # free text: the API's type is a string
        box.api_info = lambda: {"type": "string"}  # type: ignore[method-assign]
    inputs = [side_a, side_b, metrics, margin, pair_by_id, exact]
    outputs = [summary, table, plot, items, pairs, export_box]
    api_button.click(compare_api, inputs, api_json, api_name="compare", api_visibility="public")
    compare_button.click(show, inputs, outputs, api_visibility="private")
    export_button.click(export, [*inputs, export_format], export_out, api_name="compare_export",
                        api_visibility="public")
    for trigger in (app.load, compare_tab.select):
        show_hint_when_free(trigger(choices, None, [side_a, side_b, hint], api_visibility="private"), hint, summary)

    # app.build_app wires these to the other tabs: a clicked item opens the Query tab (pair view),
    # and the Runs tab's two ticked experiments fill A and B here and compare them.
    fill = Opener(lambda a, b: (gr.Tabs(selected=TAB_ID), a, b), [tabs, side_a, side_b],
                  lambda event: event.success(show, inputs, outputs, api_visibility="private"))
    return CompareLinks(items, pairs, fill)
