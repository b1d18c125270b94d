"""The Explain tab (`/explain`): one item of an experiment with the stored Prompt 5 explanations of
its answers per mode, beside the answer and the documents; and (`/explain_run`) a whole run's
explanations as a table with the run's label share. Plain functions: values in, values out.

The experiment and item choices are the Query tab's (demo.handlers.query): the same dropdowns,
the same refusals of an unknown experiment or an over-long reference."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from demo import explain_render, render
from demo.handlers.query import clean_input, shown_reference, visitor_line
from demo.job_specs import ExplainSpec
from demo.quotas import check_explain_quota
from engine.errors import UserError
from engine.usecases.runs.items import explainable_runs, item_detail, run_explanations
from engine.usecases.runs.model_names import SMOKE, typed_name
from engine.usecases.runs.run import resolved

if TYPE_CHECKING:
    import pandas as pd


EXPLANATION_COLUMNS = ("mode", "run_id", "explainer_model", "mentioned_docs", "mentioned_labels",
                       "mentions_label", "finish_reason", "text")


def explain_view(db: Path, experiment: Any, item_id: Any) -> tuple[str, pd.DataFrame]:
    """The page's HTML (question, documents with what the explanations name, per mode the answer
    and its explanations) and a table of the explanations, one row each; a one-line message and
    an empty table for a missing choice, an unknown experiment or item, or an unreadable store."""
    import pandas as pd

    empty = pd.DataFrame(columns=list(EXPLANATION_COLUMNS))
    try:
        experiment = clean_input(experiment, "experiment")
        item_id = clean_input(item_id, "item id")
        if not experiment:
            return render.message("choose an experiment"), empty
        if not item_id:
            return render.message("choose an item"), empty
        lookup = item_detail(db, experiment, item_id, with_explanations=True)
        detail, explanations = lookup.detail, lookup.explanations
        if detail is None:
            if not lookup.known_experiment:
                return render.message(f"unknown experiment '{shown_reference(experiment)}'"), empty
            return render.message(f"experiment '{shown_reference(experiment)}' has no item '{shown_reference(item_id)}'"), empty
    except UserError as err:
        return render.message(visitor_line(err, db)), empty
    frame = pd.DataFrame(
        [(e.rag_mode, e.run_id, e.explainer_model, list(e.mentioned_docs), list(e.mentioned_labels),
          e.mentions_label, e.finish_reason, e.text) for e in explanations],
        columns=list(EXPLANATION_COLUMNS),
    )
    return explain_render.explain_page(detail, explanations), frame


# ---------------------------------------------------------------- a whole run

RUN_EXPLANATION_COLUMNS = ("item", "explainer_model", "mentioned_docs", "labels_given_as_reasons", "text")
TEXT_SHOWN = 200  # characters of an explanation in the run table; the item view shows it whole


def run_choices(db: Path, experiment: Any) -> list[tuple[str, str]]:
    """(label, run id) of the experiment's runs, in mode order, for the run picker; empty for a
    missing or unknown experiment."""
    experiment = clean_input(experiment, "experiment")
    if not experiment or not Path(db).is_file():
        return []
    runs = explainable_runs(db, experiment) or ()
    return [(f"{r.rag_mode} · {r.run_id} ({r.n_answers} answer{'' if r.n_answers == 1 else 's'})", r.run_id)
            for r in runs]


def explain_run_view(db: Path, experiment: Any, run_id: Any) -> tuple[str, pd.DataFrame]:
    """A run's stored explanations: the HTML line with its label share (per explainer model, from
    the explanation_rates view) and a table, one row per explanation (RUN_EXPLANATION_COLUMNS,
    the text cut at TEXT_SHOWN characters); a one-line message and an empty table for a missing
    choice, an unknown experiment or run, or a run of another experiment."""
    import pandas as pd

    empty = pd.DataFrame(columns=list(RUN_EXPLANATION_COLUMNS))
    try:
        experiment = clean_input(experiment, "experiment")
        run_id = clean_input(run_id, "run id")
        if not experiment:
            return render.message("choose an experiment"), empty
        if not run_id:
            return render.message("choose a run"), empty
        found = run_explanations(db, experiment, run_id)
        if found is None:
            return render.message(f"unknown experiment '{shown_reference(experiment)}'"), empty
        run, explanations, rates = found.run, found.explanations, found.rates
        if run is None:
            return render.message(f"experiment '{shown_reference(experiment)}' has no run '{shown_reference(run_id)}'"), empty
    except UserError as err:
        return render.message(visitor_line(err, db)), empty
    frame = pd.DataFrame(
        [(e.item_id, e.explainer_model, list(e.mentioned_docs), list(e.mentioned_labels), shorten(e.text))
         for e in explanations],
        columns=list(RUN_EXPLANATION_COLUMNS),
    )
    return explain_render.run_summary(run, rates), frame


def shorten(text: str, limit: int = TEXT_SHOWN) -> str:
    """An explanation on one line of a table: white space folded, cut with an ellipsis past `limit`."""
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"


# ---------------------------------------------------------------- generating, in the background worker

GENERATE_SCOPES = (("this item", "item"), ("every answer of the chosen run", "run"),
                   ("every answer of the experiment", "all"))


def explain_spec(settings, experiment: Any, item_id: Any, scope: str = "item", run_id: Any = None):
    """The worker's ExplainSpec for the chosen item, the chosen run (`run_id`, one of the
    experiment's), or every answer of an experiment, explained by the model that answered;
    UserError in one line where the app may not or cannot do it."""
    from demo.handlers.run import _looks_like_path, operator_token_serves
    from engine.api import PromptConfig, RunRequest

    if settings.read_only:
        raise UserError("this app is read-only: explanations are made elsewhere")
    if scope not in [value for _, value in GENERATE_SCOPES]:
        raise UserError(f"unknown scope '{shown_reference(str(scope))}' (choose item, run or all)")
    experiment = clean_input(experiment, "experiment")
    item_id = clean_input(item_id, "item id")
    run_id = clean_input(run_id, "run id")
    if not experiment:
        raise UserError("choose an experiment")
    if scope == "item" and not item_id:
        raise UserError("choose an item")
    if scope == "run" and not run_id:
        raise UserError("choose a run")
    runs = explainable_runs(settings.db_path, experiment)
    if runs is None:
        raise UserError(f"unknown experiment '{shown_reference(experiment)}'")
    if scope == "run":
        runs = tuple(r for r in runs if r.run_id == run_id)
        if not runs:
            raise UserError(f"experiment '{shown_reference(experiment)}' has no run '{shown_reference(run_id)}'")
    answered = [r for r in runs if r.n_answers]
    if not answered:
        what = f"run '{shown_reference(run_id)}'" if scope == "run" else f"experiment '{shown_reference(experiment)}'"
        raise UserError(f"{what} has no answers to explain yet")
    models = sorted({r.model for r in answered})
    if len(models) > 1:
        raise UserError(f"the runs were answered by {len(models)} models; explain them run by run "
                        "(every answer of the chosen run)")
    name = typed_name(models[0])
    if settings.allowed_models is not None and name not in settings.allowed_models + (SMOKE,):
        raise UserError(f"model '{shown_reference(name)}' is not offered here")
    if not settings.allow_local_paths and name != SMOKE and _looks_like_path(name):
        raise UserError("the runs were answered by a model folder on another machine; explain them there")
    # What loads and how the store names it, after every check: smoke writes its model on first use.
    request = resolved(RunRequest(model=name, modes=tuple(r.rag_mode for r in answered), prompt=PromptConfig(),
                                  environment_token=operator_token_serves(settings, name)))
    # The operator's bounds on a run bound every job a visitor queues: answers per job
    # (the item cap) and new tokens per answer.
    tokens = min(ExplainSpec.max_new_tokens, settings.max_new_tokens or ExplainSpec.max_new_tokens)
    # The store quota: at most one explanation per answer asked for, within the cap.
    rows = len(answered) if scope == "item" else sum(r.n_answers for r in answered)
    check_explain_quota(settings, min(rows, settings.max_items or rows), tokens)
    return ExplainSpec(tuple(r.run_id for r in answered), request, settings.db_path,
                       item_id=item_id if scope == "item" else None, max_answers=settings.max_items,
                       max_new_tokens=tokens, max_store_mb=settings.max_store_mb)


def job_line(status) -> str:
    """One line for the tab: the job's state, progress and message."""
    if status is None:
        return ""
    progress = f" {status.n_done} of {status.n_total}" if status.n_total is not None else ""
    return f"{status.job_id} {status.state}{progress}: {status.message}"
