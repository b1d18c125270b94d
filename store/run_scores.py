"""Per-run averages of query_metrics, cached in `run_scores` (migration 007) by the writer.

The app's Runs tab shows each run's mean precision, recall, F1 and exact match. Computing them
from the query_metrics view costs per answer (seconds for a page of a 1M-generation store), so
the writer stores them when a run is marked complete (store.run_store) and when a merge copies
complete runs (store.merge). A stored row is only a cache: readers use it when its `n_answers`
equals the run's current number of generations and compute the run live otherwise (a running
run, a run extended with a larger --limit, a store written by code that did not keep the table).

Both sides take the same averages (`SCORES_OVER`), one run at a time: the writer over the run's
per-item rows it has just kept (store.kept_metrics), a reader over query_metrics, where DuckDB
pushes a `run_id = ?` filter through the view into the tables (milliseconds for a small run),
which it does not do for an IN-list.
"""

from __future__ import annotations

from typing import NamedTuple

import duckdb

from store.db import utc_now

# The same averages the Runs tab showed from query_metrics before the cache; count(*) is the
# number of answers (one query_metrics row per generation). Without GROUP BY, a run with no
# answers yet gives one row of 0 and NULLs.
SCORES_OVER = """
SELECT count(*), avg(precision), avg(recall), avg(f1), avg(exact_match)
FROM {source} WHERE run_id = ?
"""


class RunScores(NamedTuple):
    """A run's mean metrics over its `n_answers` answers (None while it has none)."""

    n_answers: int
    precision: float | None
    recall: float | None
    f1: float | None
    exact_match: float | None  # None also when no item has usable gold


def live_scores(conn: duckdb.DuckDBPyConnection, run_id: str, source: str = "query_metrics") -> RunScores:
    """The run's averages computed now from `source`: query_metrics, or a table of its rows."""
    row = conn.execute(SCORES_OVER.format(source=source), [run_id]).fetchone()
    if row is None:  # an aggregate without GROUP BY gives one row, even for no answers
        raise RuntimeError(f"run {run_id}: {source} gave no scores row")
    return RunScores(*row)


def store_scores(conn: duckdb.DuckDBPyConnection, run_id: str) -> RunScores:
    """Keep the run's derived values (store.kept_metrics: its per-item metrics, run_metrics
    numbers and its experiment's bias rows) and write (or replace) its run_scores row, in the
    caller's transaction. The averages are taken over the per-item rows just kept, which are
    query_metrics' rows of the run: the same numbers as live_scores', without planning the view
    once more (for a small run, planning is most of a query's cost)."""
    from store.kept_metrics import keep_run

    keep_run(conn, run_id)
    scores = live_scores(conn, run_id, "item_metric_rows")
    conn.execute("INSERT OR REPLACE INTO run_scores VALUES (?, ?, ?, ?, ?, ?, ?)",
                 [run_id, *scores, utc_now()])
    return scores
