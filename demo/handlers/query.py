"""The query drill-down (`/query_detail`): one item of an experiment across vanilla, base and cf."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

    from store.db import DbLike

METRIC_COLUMNS = ("mode", "run_id", "precision", "recall", "f1", "exact_match")
_LONGEST_SHOWN = 200  # characters of a visitor's reference echoed back in a message


def query_detail(db: DbLike, experiment: str, item_id: str) -> tuple[str, pd.DataFrame]:
    """The drill-down HTML and a per-mode metrics table; a one-line message (and an empty
    table) for an unknown experiment or item, or a store that cannot be read."""
    import pandas as pd

    from demo import render
    from demo.settings import without_server_paths
    from store import queries
    from store.db import as_database

    empty = pd.DataFrame(columns=list(METRIC_COLUMNS))
    experiment, item_id = (experiment or "").strip(), (item_id or "").strip()
    if not experiment:
        return render.message("choose an experiment"), empty
    if not item_id:
        return render.message("choose an item"), empty
    try:
        detail = queries.query_detail(db, experiment, item_id)
        if detail is None:
            if queries.resolve_experiment(db, experiment) is None:
                return render.message(f"unknown experiment '{_shown(experiment)}'"), empty
            return render.message(f"experiment '{_shown(experiment)}' has no item '{_shown(item_id)}'"), empty
    except UserError as err:
        # Store messages name the database file; a visitor sees only what went wrong.
        return render.message(without_server_paths(str(err), as_database(db).path, shown="file")), empty
    frame = pd.DataFrame(
        [
            (m.mode, m.run_id, *(getattr(m.metrics, c) if m.metrics else None for c in METRIC_COLUMNS[2:]))
            for m in detail.modes
        ],
        columns=list(METRIC_COLUMNS),
    )
    return render.query_page(detail), frame


def _shown(reference: str) -> str:
    """A visitor's reference, cut to one short line for a message."""
    one_line = " ".join(reference.split())
    return one_line if len(one_line) <= _LONGEST_SHOWN else one_line[: _LONGEST_SHOWN - 1] + "…"
