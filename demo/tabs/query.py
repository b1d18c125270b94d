"""The Query tab: one item of an experiment across vanilla, base and cf (`/query_detail`), with
an experiment dropdown, previous / next over the item list (searched and filtered on the server),
and a permalink (`?experiment=…&item=…`) that opens the same view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from demo.handlers import compare as compare_handlers
from demo.handlers import query as query_handlers
from demo.hints import hint_html, show_hint_when_free
from demo.settings import AppSettings
from demo.tabs.links import Opener, QueryLinks
from demo.tabs.style import TABLE
from demo.toasts import error
from engine.errors import UserError

TAB_ID = "query"  # the Query tab's id in the app's gr.Tabs: a permalink selects it
# Runs in the browser after each view change: the address bar shows the permalink, so that a
# reload or a copied address opens the same view. Only a query string ("?…") is ever put there.
_REPLACE_URL_JS = """(link) => {
  if (typeof link === "string" && link.startsWith("?")) { window.history.replaceState(null, "", link); }
}"""


def build(app: Any, settings: AppSettings, jobs: Any, tabs: Any) -> QueryLinks:
    """The tab inside `tabs` (the app's gr.Tabs, which a permalink and the other tabs' links select)."""
    import gradio as gr

    def stored() -> bool:
        return Path(settings.db_path).is_file()

    def query(experiment_ref, item_id):
        if not stored():
            raise error("nothing is stored yet: start a run first", "query")
        return query_handlers.query_detail(settings.db_path, experiment_ref, item_id)

    def items_api(experiment: str, search: str = "", changed: str = "all") -> list[str]:
        """The item ids of an experiment (id or name) in dataset order, kept by a search over
        question text and item ids and by a filter: all, modes (citations changed between
        modes) or base_cf (changed between base and cf)."""
        if not stored():
            raise error("nothing is stored yet: start a run first", "query")
        try:
            return query_handlers.query_items(settings.db_path, experiment, search, changed)
        except UserError as err:
            raise error(str(err), "query") from None

    def experiments_update():
        return gr.Dropdown(choices=query_handlers.experiment_choices(settings.db_path))

    def view_outputs(view, *, with_choices: bool = True):
        """(item dropdown, position, permalink, html, metrics) for a QueryView."""
        if with_choices:
            item = gr.Dropdown(choices=list(view.choices), value=view.item_id, allow_custom_value=True)
        else:  # a step within the same list: only the value changes
            item = gr.Dropdown(value=view.item_id, allow_custom_value=True)
        return item, view.position, view.permalink, view.page, view.metrics

    def open_item(experiment_ref, item_id, search, changed):
        """A new list (experiment chosen, search, filter): the item if still listed, else the first."""
        if not stored():
            raise error("nothing is stored yet: start a run first", "query")
        listed = item_id
        try:
            listing = query_handlers.item_list(settings.db_path, experiment_ref, search, changed)
            if listing.position(query_handlers.clean_input(item_id, "item id")) is None:
                listed = ""  # not in the new list: open its first item
        except UserError:
            pass  # open_view says what is wrong, in one line
        return view_outputs(query_handlers.open_view(settings.db_path, experiment_ref, listed, search, changed))

    def step(experiment_ref, item_id, search, changed, by):
        if not stored():
            raise error("nothing is stored yet: start a run first", "query")
        view = query_handlers.open_view(settings.db_path, experiment_ref, item_id, search, changed, step=by)
        return view_outputs(view, with_choices=False)

    def after_show(experiment_ref, item_id, search, changed):
        """After `/query_detail` drew the page: the position in the list and the permalink."""
        if not stored():
            return gr.skip(), "", ""
        choices, line, permalink = query_handlers.locate(settings.db_path, experiment_ref, item_id, search, changed)
        return gr.Dropdown(choices=list(choices)), line, permalink

    def load(request):
        """The experiments to choose from; with `?experiment=…&item=…`, that view, in this tab.
        The last output is the hidden hint box (the page shows the hint only where it is free)."""
        experiments = experiments_update()
        params = query_handlers.view_from_params(dict(request.query_params) if request is not None else None)
        if params is None and stored() and len(experiments.choices) == 1:
            # The only experiment, open before the tab is (see select_tab), staying on this tab.
            only = experiments.choices[0][1]
            view = query_handlers.open_view(settings.db_path, only, "")
            experiment = gr.Dropdown(choices=experiments.choices, value=only)
            item, position, _, page, metrics = view_outputs(view)
            # No permalink here: the address bar would take it, and a reload would then open Query.
            return (experiment, item, position, "", page, metrics, gr.skip(), gr.skip(), "")
        if params is None or not stored():
            # Nothing opened: the page says where to start (no runs yet, or choose an experiment),
            # unless the visitor opened an item before this answer came (show_hint_when_free).
            return experiments, *([gr.skip()] * 7), hint_html(settings.db_path, "query")
        experiment_ref, item_id = params
        view = query_handlers.open_view(settings.db_path, experiment_ref, item_id)
        experiment = gr.Dropdown(choices=experiments.choices, value=experiment_ref, allow_custom_value=True)
        return (experiment, *view_outputs(view), "all", gr.Tabs(selected=TAB_ID), "")

    with gr.Tab("Query", id=TAB_ID) as query_tab:
        # The Compare tab's drill-down: one item of two runs side by side, shown above
        # this tab's own view of run A's experiment; hidden until an item is opened from Compare.
        with gr.Column(visible=False) as pair_box:
            with gr.Row():
                gr.Markdown("### Two compared runs side by side")
                pair_close = gr.Button("close the side-by-side view", size="sm", scale=0, min_width=220)
            pair_html = gr.HTML()
        with gr.Row():
            # Custom values: an experiment's name (or an id not listed yet) can be typed in.
            query_experiment = gr.Dropdown(label="experiment (id or name)", choices=[], value=None,
                                           allow_custom_value=True, scale=2)
            query_item = gr.Dropdown(label="item id", choices=[], value=None, allow_custom_value=True)
            query_button = gr.Button("Show", variant="primary", scale=0)
        with gr.Row():
            search = gr.Textbox(label="search questions and item names", placeholder="text, then Enter", scale=2)
            changed = gr.Radio(choices=list(query_handlers.CHANGED_CHOICES), value="all", label="which items", scale=3)
        with gr.Row():
            previous_button = gr.Button("◀ previous", scale=0)
            position = gr.Textbox(label="position", interactive=False, scale=2)
            next_button = gr.Button("next ▶", scale=0)
            link = gr.Textbox(label="permalink", info="add it to the app's address to open this view",
                              interactive=False, buttons=["copy"], scale=3)
        # Rendered by demo.render, which escapes every piece of model and dataset text.
        query_html = gr.HTML()
        hint = gr.Textbox(visible="hidden")  # the hint, until the page knows it may show it
        # The page's HTML shows the metrics per mode already; this table is /query_detail's second
        # output for API users (exact values, one row per mode), so it stays off the page.
        query_metrics = gr.Dataframe(**TABLE, label="metrics per mode", interactive=False, visible=False)
        # API only (inside the tab: gr.Tabs holds nothing but tabs).
        gr.api(items_api, api_name="query_items", api_visibility="public")

    # The free-text dropdowns' API type is a string: their choices arrive only when the page loads.
    for box in (query_experiment, query_item):
        box.api_info = lambda: {"type": "string"}  # type: ignore[method-assign]

    view = [query_item, position, link, query_html, query_metrics]
    nav_inputs = [query_experiment, query_item, search, changed]

    def then_url(event):
        event.then(None, [link], None, js=_REPLACE_URL_JS, api_visibility="private")

    shown = query_button.click(query, [query_experiment, query_item], [query_html, query_metrics],
                               api_name="query_detail", api_visibility="public")
    then_url(shown.then(after_show, nav_inputs, [query_item, position, link], api_visibility="private"))

    # A choice from a list, a search or a filter opens a new list: the current item if it is
    # still there, else the first. A typed value is shown with the Show button.
    for event in (query_experiment.select, query_item.select, search.submit, changed.input):
        then_url(event(open_item, nav_inputs, view, api_visibility="private"))
    for button, by in ((previous_button, -1), (next_button, 1)):
        then_url(button.click(lambda e, i, s, c, by=by: step(e, i, s, c, by), nav_inputs, view,
                              api_visibility="private"))

    def open_experiment(experiment_id):
        """Another tab's choice (a row clicked in Runs): this tab, on the experiment's first item."""
        experiments = experiments_update()
        view_ = query_handlers.open_view(settings.db_path, experiment_id, "")
        experiment_box = gr.Dropdown(choices=experiments.choices, value=experiment_id, allow_custom_value=True)
        return (gr.Tabs(selected=TAB_ID), experiment_box, *view_outputs(view_), "", "all")


    def open_pair(run_a, run_b, item_id):
        """The Compare tab's clicked item: both runs side by side, and below, run A's experiment on
        that item in this tab's own view (so that previous / next and the permalink work as ever)."""
        page, experiment_id = compare_handlers.pair_view(settings.db_path, run_a, run_b, item_id)
        experiments = experiments_update()
        if not experiment_id:
            return (gr.Tabs(selected=TAB_ID), gr.Column(visible=True), page, experiments,
                    *([gr.skip()] * len(view)), gr.skip(), gr.skip())
        view_ = query_handlers.open_view(settings.db_path, experiment_id, item_id)
        experiment_box = gr.Dropdown(choices=experiments.choices, value=experiment_id, allow_custom_value=True)
        return (gr.Tabs(selected=TAB_ID), gr.Column(visible=True), page, experiment_box, *view_outputs(view_),
                "", "all")

    # The side-by-side view is of one item: closed by its button, and by any step to another view here.
    for trigger in (pair_close.click, query_button.click, query_experiment.select, query_item.select, search.submit,
                    changed.input, previous_button.click, next_button.click):
        trigger(lambda: gr.Column(visible=False), None, pair_box, api_visibility="private")

    def select_tab(current):
        """Opening the tab: the experiments stored meanwhile; the only one is opened (no blank
        page); where nothing is chosen, the line that says where to start, into the hidden box
        (last): the page shows it only where it holds nothing or a hint when the answer arrives,
        which on a loaded server may be after the visitor opened an item (show_hint_when_free)."""
        experiments = experiments_update()
        if (current or "").strip() or len(experiments.choices) != 1 or not stored():
            new = "" if (current or "").strip() else hint_html(settings.db_path, "query")
            return (experiments, *([gr.skip()] * 5), new)
        only = experiments.choices[0][1]
        view_ = query_handlers.open_view(settings.db_path, only, "")
        return (gr.Dropdown(choices=experiments.choices, value=only), *view_outputs(view_), "")

    then_url(show_hint_when_free(query_tab.select(select_tab, [query_experiment], [query_experiment, *view, hint],
                                                  api_visibility="private"), hint, query_html))
    # Gradio passes the request to a parameter annotated gr.Request; with postponed annotations
    # the string "gr.Request" cannot be resolved from this module's globals, so it is set here.
    load.__annotations__ = {"request": gr.Request}
    then_url(show_hint_when_free(app.load(load, None, [query_experiment, *view, changed, tabs, hint],
                                          api_visibility="private"), hint, query_html))
    # app.build_app wires these to the Runs, Compare and Judges tabs.
    return QueryLinks(
        experiment=Opener(open_experiment, [tabs, query_experiment, *view, search, changed], then_url),
        pair=Opener(open_pair, [tabs, pair_box, pair_html, query_experiment, *view, search, changed], then_url))
