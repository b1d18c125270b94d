"""The Bias tab (`/bias_table`): CAS and CAB of chosen experiments with tests and intervals,
citation confidence, the paper's Tables 1 and 2, and plots of CAB and citation probability.

`/bias_table` takes (text, experiments): the text box holds an id or name, or several separated
by commas (what API users send, the multiselect left at its default []); the multiselect offers
the stored experiments, refreshed when the tab opens. Either may be empty, not both.

Per run, where stored, the beyond-metric shares: explanations that give a label as a reason and
AttrScore verification classes (also `/bias_shares`, same inputs; `/bias_table` keeps its outputs).

Choosing a study (`/bias_study`: a name in, its experiment ids out) fills the multiselect with
all its experiments (the app groups by study).
"""

from __future__ import annotations

from typing import Any

from demo.handlers import bias as bias_handlers
from demo.hints import hint_text, is_hint, show_hint_when_free
from demo.settings import AppSettings
from demo.tabs import why_cited
from demo.tabs.style import TABLE
from demo.toasts import error
from engine.bounds import PAGE_LABEL_CHARS, PAGE_MAX_CHOICES, for_page
from engine.errors import UserError
from engine.usecases.runs.listing import experiment_choices


def build(app: Any, settings: AppSettings, jobs: Any) -> None:
    import gradio as gr
    import pandas as pd

    from demo import plots

    def bias(text, chosen):
        try:
            page = bias_handlers.bias_page(settings.db_path, text or "", chosen or [])
        except UserError as err:
            raise error(str(err), "bias") from None
        has_cab = any(b.metric in plots.CAB_METRICS and b.value is not None for b in page.cab_bars)
        has_boxes = any(b.n for b in page.probability_boxes)
        return (
            page.summary,
            # Shown rounded; the values sent (and what API users get) stay exact.
            # An undefined CAS or CAB (no answer cites a shown document) reads "undefined", never 0;
            # a CAS row has no direction (its test is of vanilla against base): "-", not "nan".
            pd.DataFrame(page.results, columns=bias_handlers.PAGE_RESULT_COLUMNS).style.format(
                {"value": "{:.2f}"}, na_rep="undefined", subset=["value"]).format(
                {"ci_low": "{:.2f}", "ci_high": "{:.2f}", "p": "{:.3g}"}, na_rep="-",
                subset=["ci_low", "ci_high", "p", "direction"]),
            pd.DataFrame(page.confidence, columns=bias_handlers.PAGE_CONFIDENCE_COLUMNS).style.format(
                {"mean_probability": "{:.3f}"}, na_rep="-"),
            pd.DataFrame(page.table1[1:], columns=page.table1[0]),
            pd.DataFrame(page.table2[1:], columns=page.table2[0]),
            page.cab_note,
            plots.cab_figure(page.cab_bars) if has_cab else None,
            page.probability_note,
            plots.probability_figure(page.probability_boxes, page.panels) if has_boxes else None,
            # Through a State, which the API leaves out: /bias_table keeps its nine outputs
            # (callers unpack them); API users get the shares from /bias_shares.
            (page.explanation_shares, page.verification_shares),
        )

    def show_beyond(beyond):
        explained, verified = beyond or ([], [])
        return (
            bias_handlers.beyond_note(explained, verified),
            gr.Dataframe(value=pd.DataFrame(explained, columns=bias_handlers.EXPLANATION_SHARE_COLUMNS).style.format(
                {"label_share": "{:.3f}"}, na_rep="-"), visible=bool(explained)),
            gr.Dataframe(value=pd.DataFrame(verified, columns=bias_handlers.VERIFICATION_SHARE_COLUMNS).style.format(
                {c: "{:.3f}" for c in bias_handlers.VERIFICATION_SHARE_COLUMNS if c.endswith("_share")}, na_rep="-"),
                visible=bool(verified)),
        )

    def shares_api(text: str, experiments: list[str] | None = None) -> dict:
        """The beyond-metric shares per run of the experiments /bias_table shows (same inputs):
        explanations giving a label as a reason, and AttrScore verification classes."""
        try:
            found = bias_handlers.bias_shares(settings.db_path, text or "", experiments or [])
        except UserError as err:
            raise error(str(err), "bias") from None
        return {
            "experiments": list(found.experiment_ids),
            "explanation_shares": [dict(zip(bias_handlers.EXPLANATION_SHARE_COLUMNS, row, strict=True))
                                   for row in found.explanation_shares],
            "verification_shares": [dict(zip(bias_handlers.VERIFICATION_SHARE_COLUMNS, row, strict=True))
                                    for row in found.verification_shares],
        }

    def shown(cab, probability):
        # An experiment without cf yet has no CAB: its note stands in place of the plot, not an
        # empty frame. Done after the endpoint, so that API users get the figures themselves.
        return gr.Plot(visible=cab is not None), gr.Plot(visible=probability is not None)

    def choices(current=None):
        """The stored experiments; the only one is chosen when nothing is (no blank first page)."""
        if not settings.db_path.is_file():
            return gr.Dropdown(choices=[])
        try:
            found = experiment_choices(settings.db_path)
        except UserError:  # a damaged file: the Show button says so in one line
            found = ()
        # Newest first, at most PAGE_MAX_CHOICES, each label cut: the browser gets a bounded list.
        listed = [(_choice_label(c), c.experiment_id) for c in found[:PAGE_MAX_CHOICES]]
        if not current and len(listed) == 1:
            return gr.Dropdown(choices=listed, value=[listed[0][1]])
        return gr.Dropdown(choices=listed)

    def first_show(text, chosen, summary):
        """After the tab opens: the chosen experiments shown if nothing is shown yet; with none
        chosen, the line that says where to start, into the hidden box (the last output): the
        summary shows it only if it still holds nothing or a hint when it arrives, so that a
        Show bias clicked meanwhile keeps its result (demo.hints.show_hint_when_free)."""
        if not is_hint(summary):
            return (*(gr.skip() for _ in bias_outputs), "")
        if not (chosen or (text or "").strip()):
            return (*(gr.skip() for _ in bias_outputs), hint_text(settings.db_path, "bias"))
        try:
            return (*bias(text, chosen), "")
        except gr.Error:
            return (*cleared(text, chosen), "")

    def cleared(text, chosen):
        """After a refusal: every panel emptied and the one line in the summary, so that nothing
        of the previous experiment stays beside the error (its toast goes away)."""
        try:
            bias_handlers.bias_page(settings.db_path, text or "", chosen or [])
            line = "could not show these experiments"
        except UserError as err:
            line = str(err)
        return (f"**Not shown:** {bias_handlers.markdown_text(' '.join(line.split()))}",
                pd.DataFrame(columns=bias_handlers.PAGE_RESULT_COLUMNS),
                pd.DataFrame(columns=bias_handlers.PAGE_CONFIDENCE_COLUMNS),
                pd.DataFrame(columns=table1_head), pd.DataFrame(columns=table2_head), "", None, "", None, ([], []))

    def studies():
        try:
            return gr.Dropdown(choices=bias_handlers.study_choices(settings.db_path))
        except UserError:  # a damaged file: the Show button says so in one line
            return gr.Dropdown(choices=[])

    def choose_study(study):
        if not (study or "").strip():  # the picker cleared: the experiments chosen stay
            return gr.skip(), ""
        try:
            selection = bias_handlers.study_selection(settings.db_path, study)
        except UserError as err:
            raise error(str(err), "bias") from None
        # A study replaces the selection, it does not add to it.
        return selection.experiment_ids, selection.note

    with gr.Tab("Bias") as bias_tab:
        with gr.Row():
            bias_study = gr.Dropdown(label="study", choices=[], value=None, allow_custom_value=True,
                                     info="choosing one selects all its experiments")
            bias_experiment = gr.Textbox(label="experiment (id or name)", placeholder="several: separate with commas")
            # Custom values allowed: an API call sees the choices the app was built with (none),
            # not those the tab loaded; the handler refuses an unknown experiment in one line.
            bias_chosen = gr.Dropdown(label="experiments", choices=[], value=[], multiselect=True,
                                      allow_custom_value=True, info="stored experiments (complete modes in brackets)")
            bias_button = gr.Button("Show bias", variant="primary", scale=0)
        study_note = gr.Markdown()
        bias_summary = gr.Markdown()
        hint = gr.Textbox(visible="hidden")  # the hint, until the page knows it may show it
        bias_results = gr.Dataframe(**TABLE, headers=bias_handlers.PAGE_RESULT_COLUMNS, label="CAS and CAB (x100)",
                                    interactive=False)
        bias_confidence = gr.Dataframe(**TABLE, headers=bias_handlers.PAGE_CONFIDENCE_COLUMNS,
                                       label="citation confidence by relevance and label", interactive=False)
        # Their headers before anything is shown, or after a refusal (not Gradio's "1 | 2 | 3").
        table1_head, table2_head = bias_handlers.table_headers()
        table1 = gr.Dataframe(**TABLE, headers=table1_head,
                              label="Table 1: attribution quality and answer correctness ('-' = vanilla)",
                              interactive=False)
        table2 = gr.Dataframe(**TABLE, headers=table2_head, label="Table 2: attribution bias (CAB x100; > 0 favours label A)", interactive=False)
        cab_note = gr.Markdown()
        cab_plot = gr.Plot(label="CAB with 95% intervals", visible=False)
        probability_note = gr.Markdown()
        probability_plot = gr.Plot(label="citation probability by relevance and label", visible=False)
        # Beyond the metrics: shown only where the runs have explanations or verifications.
        beyond = gr.State(([], []))
        beyond_note = gr.Markdown()
        explanation_shares = gr.Dataframe(**TABLE, headers=bias_handlers.EXPLANATION_SHARE_COLUMNS, interactive=False,
                                          label="explanations that give a label as a reason, per run", visible=False)
        verification_shares = gr.Dataframe(**TABLE, headers=bias_handlers.VERIFICATION_SHARE_COLUMNS, interactive=False,
                                           label="AttrScore verification of citations, per run", visible=False)
        # API only (inside the tab: gr.Tabs holds nothing but tabs).
        gr.api(shares_api, api_name="bias_shares", api_visibility="public")
        why_cited.build(settings, bias_experiment, bias_chosen, bias_study)
        bias_outputs = [bias_summary, bias_results, bias_confidence, table1, table2, cab_note, cab_plot,
                        probability_note, probability_plot, beyond]

        def after(event):
            event.then(shown, [cab_plot, probability_plot], [cab_plot, probability_plot], api_visibility="private").then(
                show_beyond, beyond, [beyond_note, explanation_shares, verification_shares], api_visibility="private")

        shown_now = bias_button.click(bias, [bias_experiment, bias_chosen], bias_outputs, api_name="bias_table",
                                      api_visibility="public")
        after(shown_now)
        after(shown_now.failure(cleared, [bias_experiment, bias_chosen], bias_outputs, api_visibility="private"))
        # Opening the tab offers what was stored meanwhile (a run from this app or the CLI).
        for trigger in (app.load, bias_tab.select):
            trigger(studies, None, bias_study, api_visibility="private")
        app.load(choices, None, bias_chosen, api_visibility="private")
        opened = bias_tab.select(choices, bias_chosen, bias_chosen, api_visibility="private").then(
            first_show, [bias_experiment, bias_chosen, bias_summary], [*bias_outputs, hint], api_visibility="private")
        after(opened)
        show_hint_when_free(opened, hint, bias_summary)
        # After the multiselect's choices are loaded; only a visitor's choice (input) fires it.
        bias_study.input(choose_study, bias_study, [bias_chosen, study_note], api_name="bias_study",
                         api_visibility="public")


def _choice_label(choice: Any) -> str:
    """An experiment in the multiselect: its name or id, model, metadata type and complete modes."""
    name = f"{choice.name} ({choice.experiment_id})" if choice.name else choice.experiment_id
    modes = "+".join(choice.complete_modes) or "no complete run"
    return for_page(f"{name} · {for_page(choice.model, 60)} · {for_page(choice.metadata_type or 'no metadata', 60)} [{modes}]",
                    PAGE_LABEL_CHARS + 60)
