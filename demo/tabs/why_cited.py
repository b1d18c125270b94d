"""The Bias tab's "Why was it cited?" panel (`/why_cited`): the citation choice model of the
experiments chosen at the top of the tab, pooled, with a forest plot of its odds ratios and the
suppression rates (demo/handlers/why_cited.py; engine.usecases.bias.why_cited); and the study model
(`/why_cited_study`) of the study chosen there: one model of label bias across it, the label
effect per configuration, the tests of whether it differs, Holm-corrected pairs
(demo/handlers/why_cited_study.py; engine.usecases.study.effects), fitted the same bounded way.

`/why_cited` takes (text, experiments, position, interactions, modes) and returns the page as a
dict; the panel shows it as Markdown, two tables and a figure. A fit is bounded by the operator's
PATTRIEVAL_MAX_FIT_DECISIONS, runs in a bounded child process (PATTRIEVAL_FIT_MEMORY_MB,
PATTRIEVAL_FIT_TIMEOUT_S), PATTRIEVAL_MAX_FITS at a time with a few visitors waiting their turn,
and is kept per store state (the handler).
"""

from __future__ import annotations

from typing import Any

from demo.fit_child import FitBounds
from demo.handlers import why_cited as handlers
from demo.handlers import why_cited_study as study_handlers
from demo.settings import AppSettings
from demo.tabs.style import TABLE
from demo.toasts import error, refused, with_request
from engine.errors import UserError
from engine.types import MODES


def build(settings: AppSettings, experiment_text: Any, chosen: Any, study: Any) -> None:
    """The panel, inside the Bias tab's block, reading the tab's experiment and study inputs."""
    import gradio as gr
    import pandas as pd

    from demo import plots
    from demo.visitors import fair_key
    from engine.presentation.formatting import format_p, format_ratio

    gate = handlers.fit_gate(settings.max_fits)
    bounds = FitBounds(settings.fit_memory_mb * 1024**2, settings.fit_timeout_s)

    def page(text, experiments, position, interactions, modes, request):
        try:
            # Keyed by the client's address where strangers are served (sessions are free).
            return handlers.why_cited_page(settings.db_path, text or "", experiments or [], position or "group",
                                           interactions or "", modes or [], max_decisions=settings.max_fit_decisions,
                                           owner=fair_key(request, settings), bounds=bounds, gate=gate)
        except UserError as err:
            raise error(str(err), "why_cited") from None

    @with_request
    def api(text: str, experiments: list[str] | None = None, position: str = "group", interactions: str = "",
            modes: list[str] | None = None, request=None) -> dict:
        """The citation choice model of the chosen experiments: odds ratios with 95% intervals, in
        words, and the suppression rates with their tests."""
        return page(text, experiments, position, interactions, modes, request).as_dict()

    @with_request
    def show(text, experiments, position, interactions, modes, request=None):
        p = page(text, experiments, position, interactions, modes, request)
        return (
            p.summary,
            # As the command prints them: ratios in 3 digits with their zeros ("1.40"), p as "0.137" or "<0.001".
            pd.DataFrame(p.effects, columns=handlers.EFFECT_COLUMNS).style.format(
                {c: format_p if c.endswith("p") else format_ratio for c in handlers.EFFECT_COLUMNS[1:]}),
            gr.Plot(value=plots.forest_figure(p.forest), visible=bool(p.forest)),
            pd.DataFrame(p.suppression, columns=handlers.SUPPRESSION_COLUMNS).style.format(
                {"rate": "{:.1%}", "ci_low": "{:.1%}", "ci_high": "{:.1%}"}, na_rep="-"),
            p.suppression_note,
        )

    def cleared():
        return ("", pd.DataFrame(columns=handlers.EFFECT_COLUMNS), gr.Plot(value=None, visible=False),
                pd.DataFrame(columns=handlers.SUPPRESSION_COLUMNS), "")

    gr.Markdown("### Why was it cited? The citation choice model, pooled\n"
                "Which of the documents shown together an answer cites, as a conditional logit of relevance, "
                "position, label and repetition, pooled over the chosen experiments: each effect an odds ratio "
                "with its 95% interval (`python -m engine why-cited`). For a study, the study model below "
                "gives the label effect per configuration.")
    with gr.Row():
        position = gr.Radio(label="position", choices=list(handlers.POSITIONS), value="group",
                            info="first/middle/last, or a number (per step down the list)")
        interactions = gr.Textbox(label="interactions", placeholder="e.g. label:relevant",
                                  info="pairs of relevant, position, label, repeated")
        modes = gr.CheckboxGroup(label="modes", choices=list(MODES), value=[], info="none ticked: all")
        fit = gr.Button("Fit the choice model", scale=0)
    summary = gr.Markdown()
    effects = gr.Dataframe(**TABLE, headers=handlers.EFFECT_COLUMNS, label="effects (odds ratios of being cited)",
                           interactive=False)
    forest = gr.Plot(label="odds ratios with 95% intervals", visible=False)
    suppression = gr.Dataframe(**TABLE, headers=handlers.SUPPRESSION_COLUMNS, interactive=False,
                               label="suppression: answers citing no shown document, per experiment and mode")
    suppression_note = gr.Markdown()
    inputs = [experiment_text, chosen, position, interactions, modes]
    outputs = [summary, effects, forest, suppression, suppression_note]
    # One concurrency group with room for every fit the gate admits: the gate, not Gradio's single
    # default slot per event, decides who waits (Gradio's queue has no bound per visitor).
    room: dict[str, Any] = dict(concurrency_id="why_cited", concurrency_limit=gate.slots + gate.max_waiting + 4)
    fit.click(show, inputs, outputs, api_visibility="private", **room).failure(cleared, None, outputs,
                                                                               api_visibility="private")
    gr.api(api, api_name="why_cited", api_visibility="public", **room)
    _study_panel(settings, study, position, modes, gate, bounds, room)


def _study_panel(settings: AppSettings, study: Any, position: Any, modes: Any, gate: Any, bounds: Any,
                 room: dict[str, Any]) -> None:
    """The study model of the tab's chosen study, with the pooled panel's position and modes."""
    import gradio as gr
    import pandas as pd

    from demo import plots
    from demo.visitors import fair_key

    def page(name, position_, modes_, request):
        return study_handlers.study_model_page(settings.db_path, name, modes_ or [], position_ or "group",
                                               max_decisions=settings.max_fit_decisions,
                                               owner=fair_key(request, settings), bounds=bounds, gate=gate)

    @with_request
    def api(study: str, modes: list[str] | None = None, position: str = "group", request=None) -> dict:
        """One model of label bias across the study: per configuration the label effect (odds ratio
        with an item-clustered 95% interval), the Wald tests of whether it differs, and every two
        configurations' difference with Holm's correction."""
        try:
            return page(study, position, modes, request).as_dict()
        except UserError as err:
            raise error(str(err), "why_cited_study") from None

    @with_request
    def show(name, position_, modes_, request=None):
        try:
            p = page(name, position_, modes_, request)
        except UserError as err:  # shown in place of the results, in one line
            return (f"**Not fitted:** {study_handlers.markdown_text(refused(err, 'why_cited_study'))}",
                    pd.DataFrame(columns=study_handlers.EFFECT_COLUMNS), gr.Plot(value=None, visible=False), "",
                    gr.Dataframe(value=pd.DataFrame(columns=study_handlers.PAIRWISE_COLUMNS)))
        return (p.summary, pd.DataFrame(p.effects, columns=study_handlers.EFFECT_COLUMNS),
                gr.Plot(value=plots.forest_figure(p.forest, study_handlers.TITLE, study_handlers.AXIS_TITLE),
                        visible=True),
                p.tests, gr.Dataframe(value=pd.DataFrame(p.pairwise, columns=study_handlers.PAIRWISE_COLUMNS),
                                      label=p.pairwise_title))

    gr.Markdown("### One model of label bias across the study\n"
                "For the study chosen at the top of the tab: one conditional logit across all its configurations, "
                "the label effect (label A against label B) in each with a 95% interval clustered by item, the Wald "
                "tests of whether it differs between configurations, and every two configurations' difference "
                "with Holm's correction (`python -m engine why-cited --study NAME`). " + study_handlers.BOUND_NOTE)
    fit = gr.Button("Fit the study model", scale=0)
    summary = gr.Markdown()
    effects = gr.Dataframe(**TABLE, headers=study_handlers.EFFECT_COLUMNS, interactive=False,
                           label="label effect per configuration (odds ratio of citing label A over label B)")
    forest = gr.Plot(label="label effect per configuration with 95% intervals", visible=False)
    tests = gr.Markdown()
    pairwise = gr.Dataframe(**TABLE, headers=study_handlers.PAIRWISE_COLUMNS, interactive=False,
                            label="pairwise differences of the label effect, Holm-corrected")
    fit.click(show, [study, position, modes], [summary, effects, forest, tests, pairwise], api_visibility="private",
              **room)
    gr.api(api, api_name="why_cited_study", api_visibility="public", **room)
