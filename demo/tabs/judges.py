"""The Judges tab: the judges of an experiment's (or chosen runs') citations, how far
they agree (`/agreement`, the use case's JSON), the citations two of them disagree on (a clicked
row opens the item in the Query tab), and people's labels imported from a CSV or JSONL upload.
Each of these runs in a bounded child process in the visitor's turn (demo.handlers.judges)."""

from __future__ import annotations

from typing import Any

from demo.handlers import judges as handlers
from demo.handlers.query import experiment_choices
from demo.hints import hint_html, show_hint_when_free
from demo.settings import AppSettings
from demo.tabs.links import JudgesLinks
from demo.tabs.style import TABLE
from demo.toasts import error, info, refused, with_request
from engine.errors import UserError

TAB_ID = "judges"


def build(app: Any, settings: AppSettings, jobs: Any) -> JudgesLinks:
    import gradio as gr
    import pandas as pd

    from demo.visitors import fair_key

    db = settings.db_path
    bounds = handlers.judges_bounds(settings)

    def turn(request) -> dict:
        # Keyed by the client's address where strangers are served (sessions are free).
        return {"owner": fair_key(request, settings), "bounds": bounds}

    @with_request
    def agreement_api(experiment: str, runs: list[str] | None = None, request=None) -> dict:
        """How far the judges of an experiment's (id or name) or of chosen runs' citations agree:
        per judge its verdicts; per pair Cohen's kappa with its 95% interval, the confusion table and
        raw agreement; the panel's Fleiss' kappa and Krippendorff's alpha; each model judge against
        each human one; the PPI-corrected attribution rate. Give the experiment or runs, not both."""
        try:
            return handlers.agreement_api(db, experiment, runs, **turn(request))
        except UserError as err:
            raise error(str(err), "judges") from None

    def empty_outputs(line: str):
        return (handlers.refusal_html(line), pd.DataFrame(columns=handlers.JUDGE_COLUMNS),
                pd.DataFrame(columns=["judge"]), pd.DataFrame(columns=handlers.HUMAN_COLUMNS),
                pd.DataFrame(columns=handlers.PPI_COLUMNS), gr.Dropdown(choices=[], value=None))

    @with_request
    def show(experiment, runs, request=None):
        """The page: a refusal is one line in the summary, every table emptied (see the Compare tab)."""
        try:
            view = handlers.agreement_view(db, experiment, runs, **turn(request))
        except UserError as err:
            return empty_outputs(refused(str(err), "judges"))
        first = view.pairs[0][1] if view.pairs else None
        return (view.summary, view.judges, view.matrix, view.humans, view.ppi,
                gr.Dropdown(choices=view.pairs, value=first))

    @with_request
    def list_disagreements(experiment, runs, pair, request=None):
        if not pair:
            return pd.DataFrame(columns=handlers.DISAGREEMENT_KEY), ""
        try:
            return handlers.disagreement_rows(db, experiment, runs, pair, **turn(request))
        except UserError as err:
            raise error(str(err), "judges") from None

    @with_request
    def reshow(experiment_, runs_, request=None):
        """After an import: the page again with the new labels, where runs are chosen (else the hint stays)."""
        if not (experiment_ or "").strip() and not runs_:
            return tuple(gr.skip() for _ in outputs)
        return show(experiment_, runs_, request)

    @with_request
    def upload(path, judge, request=None):
        try:
            line = handlers.import_labels_file(settings, path, judge, owner=fair_key(request, settings))
        except UserError as err:
            raise error(str(err), "judges") from None
        info(line)
        return line

    def choices():
        # The choices only (a value chosen meanwhile stays), and the line that says where to start.
        return (gr.Dropdown(choices=experiment_choices(db)), gr.Dropdown(choices=handlers.run_choices(db)),
                hint_html(db, "judges"))

    with gr.Tab("Judges", id=TAB_ID) as judges_tab:
        gr.Markdown("How far the **judges** of the cited documents agree: model judges (`python -m engine verify`) "
                    "and people's labels (imported below). κ is Cohen's kappa with its 95% interval; agree is the "
                    "raw agreement; n the cited documents both judged.")
        with gr.Row():
            experiment = gr.Dropdown(label="experiment (id or name)", choices=[], value=None,
                                     allow_custom_value=True, scale=2)
            runs = gr.Dropdown(label="or runs", choices=[], value=[], multiselect=True, allow_custom_value=True,
                               scale=3)
            show_button = gr.Button("Show agreement", variant="primary", scale=0, min_width=160)
        summary = gr.HTML()
        hint = gr.Textbox(visible="hidden")  # the hint, until the page knows it may show it
        matrix = gr.Dataframe(**TABLE, headers=["judge"], label="agreement matrix (Cohen's κ [95% CI] · agree · n)",
                              interactive=False)
        judges = gr.Dataframe(**TABLE, headers=handlers.JUDGE_COLUMNS, label="judges", interactive=False)
        humans = gr.Dataframe(**TABLE, headers=handlers.HUMAN_COLUMNS,
                              label="against human labels (Wilson 95% intervals)", interactive=False)
        ppi = gr.Dataframe(**TABLE, headers=handlers.PPI_COLUMNS,
                           label="attribution rate corrected by the human sample (prediction-powered inference)",
                           interactive=False)
        gr.Markdown("#### Where two judges disagree")
        pair = gr.Dropdown(label="pair of judges", choices=[], value=None)
        note = gr.Markdown()
        disagreements = gr.Dataframe(**TABLE, headers=handlers.DISAGREEMENT_KEY, label="disagreements",
                                     interactive=False, max_height=500)
        with gr.Accordion("Import people's labels (CSV or JSONL)", open=False):
            gr.Markdown("Columns `item_id`, `run` (or `experiment` and `mode`), `position` (the cited document's "
                        "number) and `label` (attributable or not_attributable). The whole file is checked first; "
                        "the first problem refuses it and nothing is stored."
                        + (" **This app is read-only.**" if settings.read_only else ""))
            with gr.Row():
                labels_file = gr.File(label=f"labels: .csv or .jsonl, up to {settings.max_upload_mb} MB",
                                      type="filepath", file_types=[".csv", ".jsonl"],
                                      interactive=not settings.read_only, elem_id="pe-labels-file")
                with gr.Column():
                    judge_name = gr.Textbox(label="judge (who labelled: a person or a team)",
                                            interactive=not settings.read_only)
                    import_button = gr.Button("Import labels", interactive=not settings.read_only)
                    imported = gr.Textbox(label="import", interactive=False)
        # Carries /agreement (the JSON); inside the tab, as gr.Tabs holds nothing but tabs.
        api_button = gr.Button(visible=False)
        api_json = gr.JSON(visible=False)

    for box in (experiment,):  # free text: the API's type is a string
        box.api_info = lambda: {"type": "string"}  # type: ignore[method-assign]
    inputs = [experiment, runs]
    outputs = [summary, judges, matrix, humans, ppi, pair]
    api_button.click(agreement_api, inputs, api_json, api_name="agreement", api_visibility="public")
    shown = show_button.click(show, inputs, outputs, api_visibility="private")
    listing = [disagreements, note]
    shown.then(list_disagreements, [*inputs, pair], listing, api_visibility="private")
    pair.input(list_disagreements, [*inputs, pair], listing, api_visibility="private")
    import_button.click(upload, [labels_file, judge_name], imported, api_visibility="private").success(
        reshow, inputs, outputs, api_visibility="private").then(
        list_disagreements, [*inputs, pair], listing, api_visibility="private")
    for trigger in (app.load, judges_tab.select):
        show_hint_when_free(trigger(choices, None, [experiment, runs, hint], api_visibility="private"), hint, summary)

    # app.build_app wires a clicked disagreement to the Query tab.
    return JudgesLinks(disagreements)
