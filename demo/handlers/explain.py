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
