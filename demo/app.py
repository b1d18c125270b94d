"""The Gradio app's layout: tabs wired to the handlers, each action a named public API endpoint.

Nothing is loaded at import time; `build_app(settings)` builds the Blocks (gradio itself is
imported there), and the handlers in demo/handlers/ do the work as plain functions.
"""

from __future__ import annotations

from typing import Any

from demo.handlers.compare import clicked_item, two_ticked
from demo.handlers.judges import clicked_disagreement
from demo.settings import AppSettings
from demo.tabs import leaderboard
from demo.tabs.links import CompareLinks, JudgesLinks, Opener, RunsLinks
from demo.tabs.style import APP_CSS
from demo.toasts import error
from engine.errors import UserError

UPLOAD_MAX_AGE_S = 3600

def build_app(settings: AppSettings, jobs: Any = None):
    """The app as gr.Blocks; `jobs` defaults to a new background JobQueue."""
    import gradio as gr

    from demo.handlers.run import store_note
    from demo.jobs import JobQueue

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
            if settings.private_items is not None:
                # A private split of items: every tab but the Leaderboard shows items, so it stands alone.
                leaderboard.build(app, settings, jobs)
            else:
                _every_tab(app, settings, jobs, tabs)
    from demo.uploads import take_uploads_only

    take_uploads_only(app)  # a file given as a link would be downloaded whole, past the upload bounds
    app.jobs = jobs  # the launcher shuts the worker down with the app
    return app


def _every_tab(app: Any, settings: AppSettings, jobs: Any, tabs: Any) -> None:
    """Every tab in the order shown, then the links by which one tab opens another."""
    from demo.tabs import bias, compare, explain, judges, leaderboard, query, run, runs, sql

    run.build(app, settings, jobs)
    runs_links = runs.build(app, settings, jobs)
    compare_links = compare.build(app, settings, jobs, tabs)
    query_links = query.build(app, settings, jobs, tabs)
    bias.build(app, settings, jobs)
    leaderboard.build(app, settings, jobs)
    explain.build(app, settings, jobs)
    judges_links = judges.build(app, settings, jobs)
    sql.build(app, settings, jobs)
    _open_clicked_rows(runs_links, query_links.experiment)
    _wire_compare(runs_links, compare_links, query_links.pair)
    _wire_judges(judges_links, query_links.pair)


def _open_clicked_rows(runs_links: RunsLinks, opener: Opener) -> None:
    """A row clicked in the Runs table opens that experiment in the Query tab."""
    import gradio as gr

    def clicked(event):
        row = getattr(event, "row_value", None) or []
        experiment_id = str(row[0]).strip() if row else ""
        if not experiment_id:  # a click on an empty table
            return tuple(gr.skip() for _ in opener.outputs)
        return opener.open(experiment_id)

    # Gradio passes the click to a parameter annotated gr.SelectData; with postponed annotations
    # the string cannot be resolved from this module, so it is set here.
    clicked.__annotations__ = {"event": gr.SelectData}
    opener.then(runs_links.table.select(clicked, None, opener.outputs, api_visibility="private"))


def _wire_compare(runs_links: RunsLinks, compare_links: CompareLinks, opener: Opener) -> None:
    """An item clicked in the Compare tab opens the Query tab with both runs side by
    side; the Runs tab's two ticked experiments fill the Compare tab, which compares them."""
    import gradio as gr

    def clicked(pairs_, event):
        chosen = clicked_item(pairs_, getattr(event, "row_value", None))
        if chosen is None:  # a click on an empty table
            return tuple(gr.skip() for _ in opener.outputs)
        return opener.open(*chosen)

    clicked.__annotations__ = {"event": gr.SelectData}  # see _open_clicked_rows
    opener.then(compare_links.items.select(clicked, compare_links.pairs, opener.outputs, api_visibility="private"))
    fill = compare_links.fill

    def compare_ticked(chosen):
        try:
            a, b = two_ticked(chosen)
        except UserError as err:
            raise error(str(err), "runs") from None
        return fill.open(a, b)

    fill.then(runs_links.compare_button.click(compare_ticked, runs_links.compare_pick, fill.outputs,
                                              api_visibility="private"))


def _wire_judges(judges_links: JudgesLinks, opener: Opener) -> None:
    """A disagreement clicked in the Judges tab opens its item in the Query tab: the
    Compare tab's opener on the one run, with the side-by-side view left closed."""
    import gradio as gr

    def clicked(event):
        chosen = clicked_disagreement(getattr(event, "row_value", None))
        if chosen is None:  # a click on an empty table
            return tuple(gr.skip() for _ in opener.outputs)
        run_id, item_id = chosen
        # outputs: tabs, the side-by-side box, its HTML, then the Query tab's own view
        opened = list(opener.open(run_id, run_id, item_id))
        opened[1], opened[2] = gr.Column(visible=False), gr.skip()
        return tuple(opened)

    clicked.__annotations__ = {"event": gr.SelectData}  # see _open_clicked_rows
    opener.then(judges_links.disagreements.select(clicked, None, opener.outputs, api_visibility="private"))


PRIVATE_BANNER = ("This page shows the leaderboard only: the operator keeps a private split of items, "
                  "which counts in none of its numbers.")


def _gpu_banner() -> str:
    import torch

    if torch.cuda.is_available():
        return f"GPU: {torch.cuda.get_device_name(0)}."
    return ("**No GPU here.** Browsing and SQL work as usual; runs on real 7-8B models need a GPU, "
            "and the smoke model (tiny, random weights) shows the whole pipeline on a CPU.")
