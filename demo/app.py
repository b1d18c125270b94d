"""The Gradio app's layout: tabs wired to the handlers, each action a named public API endpoint.

Nothing is loaded at import time; `build_app(settings)` builds the Blocks (gradio itself is
imported there), and the handlers in demo/handlers/ do the work as plain functions.
"""

from __future__ import annotations

from typing import Any

from demo.settings import AppSettings

UPLOAD_MAX_AGE_S = 3600

def build_app(settings: AppSettings, jobs: Any = None):
    """The app as gr.Blocks; `jobs` defaults to a new background JobQueue."""
    import gradio as gr

    from demo.handlers.run import store_note
    from demo.jobs import JobQueue
    from demo.tabs import bias, compare, explain, judges, leaderboard, query, run, runs, sql
    from demo.tabs.style import APP_CSS

    if jobs is None:
        jobs = JobQueue()
    # Uploads checked but never run stay in Gradio's cache, where /gradio_api/file= serves them to
    # whoever has the path: every 10 minutes, files older than an hour are deleted (a run's upload
    # leaves the cache at once, see demo.handlers.run.run_batch).
    with gr.Blocks(title="PAttriEval", delete_cache=(600, UPLOAD_MAX_AGE_S)) as app:
        gr.HTML(APP_CSS, elem_id="pe-css", padding=False)
        gr.Markdown("# PAttriEval: do RAG models cite the right sources, and does a label change what they cite?")
        # A published leaderboard (a private split set) has no runs, browsing or SQL to speak of.
        banner = PRIVATE_BANNER if settings.private_items is not None else _gpu_banner()
        gr.Markdown(" ".join(filter(None, (banner, store_note(settings)))))
        with gr.Tabs() as tabs:
            app.tabs = tabs  # a Query permalink (?experiment=…&item=…) selects its tab
            # A private split of items: every tab but the Leaderboard shows items, so it stands alone.
            shown = (leaderboard,) if settings.private_items is not None else (
                run, runs, compare, query, bias, leaderboard, explain, judges, sql)  # in the order shown
            for tab in shown:
                tab.build(app, settings, jobs)
        _open_clicked_rows(app)
        _wire_compare(app)
        _wire_judges(app)
    from demo.uploads import take_uploads_only

    take_uploads_only(app)  # a file given as a link would be downloaded whole, past the upload bounds
    app.jobs = jobs  # the launcher shuts the worker down with the app
    return app


def _open_clicked_rows(app) -> None:
    """A row clicked in the Runs table opens that experiment in the Query tab."""
    import gradio as gr

    opener = getattr(app, "open_in_query", None)
    table = getattr(app, "runs_table", None)
    if opener is None or table is None:
        return
    open_experiment, outputs, then = opener

    def clicked(event):
        row = getattr(event, "row_value", None) or []
        experiment_id = str(row[0]).strip() if row else ""
        if not experiment_id:  # a click on an empty table
            return tuple(gr.skip() for _ in outputs)
        return open_experiment(experiment_id)

    # Gradio passes the click to a parameter annotated gr.SelectData; with postponed annotations
    # the string cannot be resolved from this module, so it is set here.
    clicked.__annotations__ = {"event": gr.SelectData}
    then(table.select(clicked, None, outputs, api_visibility="private"))


def _wire_compare(app) -> None:
    """An item clicked in the Compare tab opens the Query tab with both runs side by
    side; the Runs tab's two ticked experiments fill the Compare tab, which compares them."""
    import gradio as gr

    from demo.handlers.compare import clicked_item, two_ticked
    from demo.toasts import error
    from engine.errors import UserError

    tabs = getattr(app, "tabs", None)
    items = getattr(app, "compare_items", None)
    opener = getattr(app, "open_pair_in_query", None)
    if tabs is not None and items is not None and opener is not None:
        table, pairs = items
        open_pair, outputs, then = opener

        def clicked(pairs_, event):
            chosen = clicked_item(pairs_, getattr(event, "row_value", None))
            if chosen is None:  # a click on an empty table
                return tuple(gr.skip() for _ in outputs)
            return open_pair(*chosen)

        clicked.__annotations__ = {"event": gr.SelectData}  # see _open_clicked_rows
        then(table.select(clicked, pairs, outputs, api_visibility="private"))
    picker = getattr(app, "runs_compare", None)
    filler = getattr(app, "open_in_compare", None)
    if tabs is not None and picker is not None and filler is not None:
        ticked, button = picker
        fill, sides, then = filler

        def compare_ticked(chosen):
            try:
                a, b = two_ticked(chosen)
            except UserError as err:
                raise error(str(err), "runs") from None
            return fill(a, b)

        then(button.click(compare_ticked, ticked, [tabs, *sides], api_visibility="private"))


def _wire_judges(app) -> None:
    """A disagreement clicked in the Judges tab opens its item in the Query tab: the
    Compare tab's opener on the one run, with the side-by-side view left closed."""
    import gradio as gr

    from demo.handlers.judges import clicked_disagreement

    table = getattr(app, "judges_disagreements", None)
    opener = getattr(app, "open_pair_in_query", None)
    if table is None or opener is None:
        return
    open_pair, outputs, then = opener

    def clicked(event):
        chosen = clicked_disagreement(getattr(event, "row_value", None))
        if chosen is None:  # a click on an empty table
            return tuple(gr.skip() for _ in outputs)
        run_id, item_id = chosen
        # outputs: tabs, the side-by-side box, its HTML, then the Query tab's own view
        opened = list(open_pair(run_id, run_id, item_id))
        opened[1], opened[2] = gr.Column(visible=False), gr.skip()
        return tuple(opened)

    clicked.__annotations__ = {"event": gr.SelectData}  # see _open_clicked_rows
    then(table.select(clicked, None, outputs, api_visibility="private"))


PRIVATE_BANNER = ("This page shows the leaderboard only: the operator keeps a private split of items, "
                  "which counts in none of its numbers.")


def _gpu_banner() -> str:
    import torch

    if torch.cuda.is_available():
        return f"GPU: {torch.cuda.get_device_name(0)}."
    return ("**No GPU here.** Browsing and SQL work as usual; runs on real 7-8B models need a GPU, "
            "and the smoke model (tiny, random weights) shows the whole pipeline on a CPU.")
