"""Each answer's citation precision, recall and F1, kept in the transaction that writes the answer
(tables answer_metrics and answer_metric_runs, migration 028).

The Bias report needs every item's precision, recall and F1 of an experiment's three runs. The
rows kept when a run completes (store.kept_metrics' item_metric_rows) serve complete runs; a
run whose kept rows are not current (running, failed, resumed, a store whose kept rows were
lost or never written) was read through query_metrics: its text matching and joins for 30,000
answers, most of the Bias page's computed path at 1M answers. Every writer of answers keeps
them here as it writes them instead:
- RunStore.write_batch (`run`, a study, `import` of any layout), for the batch's new answers;
- RunStore.copy_generations, for the answers it copies;
- a run's completion and a merge (store.kept_metrics.keep_item_metrics), from the run's kept
  item rows, which hold the same numbers.
A run's rows are read only while its content (store.derived.run_contents) is what they were
kept from (`current_answer_runs`), so a writer that keeps nothing (SQL typed by hand, an older
version of this code) sends the run back to query_metrics rather than to stale numbers.

The numbers are query_metrics' own (store/views.sql), computed by the view for the answers just
written: tests/store/test_answer_metrics.py holds them equal to a fresh computation and to the
Python oracle (tests/support/metrics_oracle.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

from store.db import utc_now
from store.derived import run_contents

# A batch up to this many answers names them in an IN list of placeholders, which DuckDB pushes
# into the view's scans: the batch's rows alone are computed, not the run's. Larger ones (an
# import writes every answer in one batch) are a semi-join above the whole run.
_PUSHED = 256
_COLUMNS = "run_id, item_id, precision, recall, f1, n_citations > out_of_range_citations AS cites_in_range"


def keep_answers(conn: duckdb.DuckDBPyConnection, run_id: str, item_ids: Sequence[str]) -> None:
    """Keep the metrics of these answers of the run, just written in the caller's transaction,
    and note the run's content now."""
    ids = sorted(set(item_ids))
    if not ids:
        return
    if len(ids) <= _PUSHED:
        marks = ", ".join("?" * len(ids))
        conn.execute(f"DELETE FROM answer_metrics WHERE run_id = ? AND item_id IN ({marks})", [run_id, *ids])
        conn.execute(f"INSERT INTO answer_metrics SELECT {_COLUMNS} FROM query_metrics "
                     f"WHERE run_id = ? AND item_id IN ({marks})", [run_id, *ids])
    else:
        conn.execute("DELETE FROM answer_metrics WHERE run_id = $run AND item_id IN (SELECT unnest($ids))",
                     {"run": run_id, "ids": ids})
        conn.execute(f"INSERT INTO answer_metrics SELECT {_COLUMNS} FROM query_metrics "
                     "WHERE run_id = $run AND item_id IN (SELECT unnest($ids))", {"run": run_id, "ids": ids})
    note_runs(conn, [run_id])


def keep_from_item_rows(conn: duckdb.DuckDBPyConnection, run_ids: Sequence[str],
                        contents: dict[str, str] | None = None) -> None:
    """Replace the runs' answer rows by the item rows just kept for them (item_metric_rows: the
    same query_metrics numbers, computed for the whole run), in the caller's transaction.
    `contents`: the runs' run_contents, when the caller has read them in this transaction."""
    ids = list(run_ids)
    if not ids:
        return
    conn.execute("DELETE FROM answer_metrics WHERE run_id IN (SELECT unnest(?::VARCHAR[]))", [ids])
    conn.execute("INSERT INTO answer_metrics SELECT run_id, item_id, precision, recall, f1, cites_in_range "
                 "FROM item_metric_rows WHERE run_id IN (SELECT unnest(?::VARCHAR[]))", [ids])
    note_runs(conn, ids, contents)


def note_runs(conn: duckdb.DuckDBPyConnection, run_ids: Sequence[str],
              contents: dict[str, str] | None = None) -> None:
    """Record the runs' content now (`contents`, when the caller has read it in this
    transaction) as what their answer rows were kept from."""
    ids = list(run_ids)
    contents = run_contents(conn, ids) if contents is None else contents
    conn.execute("DELETE FROM answer_metric_runs WHERE run_id IN (SELECT unnest(?::VARCHAR[]))", [ids])
    now = utc_now()
    rows = [(run_id, contents[run_id], now) for run_id in ids if run_id in contents]
    if rows:  # a run without answers has no content, and no rows
        conn.executemany("INSERT INTO answer_metric_runs VALUES (?, ?, ?)", rows)


def current_answer_runs(conn: duckdb.DuckDBPyConnection, run_ids: Sequence[str]) -> list[str]:
    """Those of these runs whose answer rows are current: kept from the content the run holds
    now (every answer and citation written by a writer that keeps them). Order kept."""
    ids = list(run_ids)
    if not ids:
        return []
    # Its rows all there (none deleted by hand: as many as the answers its content counts), and
    # the run's content what they were kept from.
    kept = dict(conn.execute(
        "SELECT k.run_id, k.content FROM answer_metric_runs k LEFT JOIN (SELECT run_id, count(*) AS n "
        "FROM answer_metrics WHERE run_id IN (SELECT unnest($ids)) GROUP BY run_id) r USING (run_id) "
        "WHERE k.run_id IN (SELECT unnest($ids)) AND split_part(k.content, ':', 1) = coalesce(r.n, 0)::VARCHAR",
        {"ids": ids}).fetchall())
    now = run_contents(conn, [r for r in ids if r in kept])
    return [r for r in ids if r in kept and kept[r] == now.get(r)]
