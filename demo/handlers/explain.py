"""The Explain tab (`/explain`): one item of an experiment with the stored Prompt 5 explanations of
its answers per mode, beside the answer and the documents. Plain functions: values in, values out.

The experiment and item choices are the Query tab's (demo.handlers.query): the same dropdowns,
the same refusals of an unknown experiment or an over-long reference."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

    from store.db import DbLike

EXPLANATION_COLUMNS = ("mode", "run_id", "explainer_model", "mentioned_docs", "mentioned_labels",
                       "mentions_label", "finish_reason", "text")


def explain_view(db: DbLike, experiment: Any, item_id: Any) -> tuple[str, pd.DataFrame]:
    """The page's HTML (question, documents with what the explanations name, per mode the answer
    and its explanations) and a table of the explanations, one row each; a one-line message and
    an empty table for a missing choice, an unknown experiment or item, or an unreadable store."""
    import pandas as pd

    from demo import explain_render, render
    from demo.handlers.query import _shown, _visitor_line, clean_input
    from store import queries

    empty = pd.DataFrame(columns=list(EXPLANATION_COLUMNS))
    try:
        experiment = clean_input(experiment, "experiment")
        item_id = clean_input(item_id, "item id")
        if not experiment:
            return render.message("choose an experiment"), empty
        if not item_id:
            return render.message("choose an item"), empty
        detail = queries.query_detail(db, experiment, item_id)
        if detail is None:
            if queries.resolve_experiment(db, experiment) is None:
                return render.message(f"unknown experiment '{_shown(experiment)}'"), empty
            return render.message(f"experiment '{_shown(experiment)}' has no item '{_shown(item_id)}'"), empty
        explanations = queries.item_explanations(db, [m.run_id for m in detail.modes], detail.item_id)
    except UserError as err:
        return render.message(_visitor_line(err, db)), empty
    frame = pd.DataFrame(
        [(e.rag_mode, e.run_id, e.explainer_model, list(e.mentioned_docs), list(e.mentioned_labels),
          e.mentions_label, e.finish_reason, e.text) for e in explanations],
        columns=list(EXPLANATION_COLUMNS),
    )
    return explain_render.explain_page(detail, explanations), frame


# ---------------------------------------------------------------- generating, in the background worker

GENERATE_SCOPES = (("this item", "item"), ("every answer of the experiment", "all"))


def explain_spec(settings, experiment: Any, item_id: Any, scope: str = "item"):
    """The worker's ExplainSpec for the chosen item (or every answer) of an experiment, explained
    by the model that answered; UserError in one line where the app may not or cannot do it."""
    from demo.handlers.query import _shown, clean_input
    from demo.handlers.run import _looks_like_path
    from demo.jobs import ExplainSpec
    from engine.model_choice import SMOKE, SMOKE_LABEL, resolve_model
    from engine.prompts import PromptConfig
    from engine.runner import RunRequest
    from store import queries

    if settings.read_only:
        raise UserError("this app is read-only: explanations are made elsewhere")
    if scope not in [value for _, value in GENERATE_SCOPES]:
        raise UserError(f"unknown scope '{_shown(str(scope))}' (choose item or all)")
    experiment = clean_input(experiment, "experiment")
    item_id = clean_input(item_id, "item id")
    if not experiment:
        raise UserError("choose an experiment")
    if scope == "item" and not item_id:
        raise UserError("choose an item")
    runs = queries.explain_runs(settings.db_path, experiment=experiment)
    if runs is None:
        raise UserError(f"unknown experiment '{_shown(experiment)}'")
    answered = [r for r in runs if r.n_answers]
    if not answered:
        raise UserError(f"experiment '{_shown(experiment)}' has no answers to explain yet")
    models = sorted({r.model for r in answered})
    if len(models) > 1:
        raise UserError(f"the runs were answered by {len(models)} models; use `python -m engine explain --model`")
    name = SMOKE if models[0] == SMOKE_LABEL else models[0]
    if settings.allowed_models is not None and name not in settings.allowed_models + (SMOKE,):
        raise UserError(f"model '{_shown(name)}' is not offered here")
    if not settings.allow_local_paths and name != SMOKE and _looks_like_path(name):
        raise UserError("the runs were answered by a model folder on another machine; explain them there")
    model, label = resolve_model(name)
    request = RunRequest(model=model, modes=tuple(r.rag_mode for r in answered), prompt=PromptConfig(),
                         model_label=label)
    return ExplainSpec(tuple(r.run_id for r in answered), request, settings.db_path,
                       item_id=item_id if scope == "item" else None)


def job_line(status) -> str:
    """One line for the tab: the job's state, progress and message."""
    if status is None:
        return ""
    progress = f" {status.n_done} of {status.n_total}" if status.n_total is not None else ""
    return f"{status.job_id} {status.state}{progress}: {status.message}"
