"""run_metrics' and the bias view's numbers, kept by the writer (tables run_metric_rows and
bias_rows, migrations 013 and 017) so that whole-store reads cost milliseconds at a million answers;
and each run's per-item metrics (item_metric_rows, migrations 023 and 024), read by
`compare` and the Bias report while the run's content is what they were kept from
(item_metric_runs, `current_item_runs`).

`python -m engine report` reads run_metrics for every run and the bias view for every
experiment: computed from query_metrics, 12-25 s at 1M answers. The numbers change
only when a run's answers do, so the writer keeps them when a run is marked complete
(store.run_scores.store_scores, called by store.run_store and store.merge), computed through
the views themselves (run_metric_wide, bias), one run or pair at a time (an equality on run_id
is pushed into the tables). Readers (`run_metric_rows_sql`, `bias_rows_sql`) use a kept row only
while the counts it was computed from equal the runs' current counts of generations, and for
bias only while its runs are still a pair of bias_pairs; everything else is read from the views.

Every definition is store/views.sql's: which runs are paired (bias_pairs), the per-run numbers
(run_metric_wide) and what run_metrics makes of them (run_metrics_over, over the computed or
the kept numbers); the tables take the views' columns by name.
"""

from __future__ import annotations

import duckdb

from store.answer_metrics import keep_from_item_rows
from store.db import utc_now
from store.derived import run_contents

# One `run_id = ?` (or `run_a = ? AND run_b = ?`) per run or pair: DuckDB pushes an equality
# through the views into the tables, but neither list_contains nor an IN list.
_LIVE_RUN = "SELECT * FROM run_metrics WHERE run_id = ?"
_LIVE_PAIR = "SELECT * FROM bias WHERE run_a = ? AND run_b = ?"
# One run's compare_item_metrics rows (store/views.sql defines them; tests/engine/usecases/compare/test_compare.py checks
# the two agree): citations filtered by run inside the average, so the run's equality reaches
# both tables (the view's own average groups every run's citations first).
ITEM_METRICS = """
SELECT q.run_id, q.item_id, q.precision, q.recall, q.f1, q.exact_match, q.squad_em, q.answer_recall,
       CAST(q.n_citations AS DOUBLE) AS n_citations,
       CASE WHEN q.n_citations = 0 THEN 1.0 ELSE 0.0 END AS cites_nothing,
       p.mean_probability,
       q.n_citations > q.out_of_range_citations AS cites_in_range
FROM query_metrics q
LEFT JOIN (SELECT item_id, avg(probability) AS mean_probability FROM citations
           WHERE run_id = $run GROUP BY item_id) p USING (item_id)
WHERE q.run_id = $run
"""


def counts(conn: duckdb.DuckDBPyConnection, run_ids: list[str]) -> dict[str, int]:
    """Generations per run, for these runs (those without any are left out)."""
    if not run_ids:
        return {}
    if len(run_ids) > 64:  # a store's worth: one grouped scan beats a long IN list
        wanted = set(run_ids)
        rows = conn.execute("SELECT run_id, count(*) FROM generations GROUP BY run_id").fetchall()
        return {run_id: n for run_id, n in rows if run_id in wanted}
    marks = ", ".join("?" * len(run_ids))
    return dict(conn.execute(
        f"SELECT run_id, count(*) FROM generations WHERE run_id IN ({marks}) GROUP BY run_id", run_ids).fetchall())


def keep_run(conn: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Write the run's run_metrics numbers and its experiment's bias rows, in the caller's transaction."""
    n_answers = counts(conn, [run_id]).get(run_id, 0)
    conn.execute("DELETE FROM run_metric_rows WHERE run_id = ?", [run_id])
    if n_answers:
        conn.execute("INSERT INTO run_metric_rows BY NAME SELECT *, ? AS n_answers, ? AS computed_utc "
                     "FROM run_metric_wide WHERE run_id = ?", [n_answers, utc_now(), run_id])
    keep_item_metrics(conn, run_id)
    row = conn.execute("SELECT experiment_id FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if row is not None:  # the run is the caller's, in the caller's transaction: always there
        keep_experiment_bias(conn, row[0])


def keep_item_metrics(conn: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Replace the run's kept per-item metrics (none when it has no answers), and note what they
    were computed from."""
    conn.execute("DELETE FROM item_metric_rows WHERE run_id = ?", [run_id])
    conn.execute("DELETE FROM item_metric_runs WHERE run_id = ?", [run_id])
    conn.execute(f"INSERT INTO item_metric_rows BY NAME SELECT *, $now AS computed_utc FROM ({ITEM_METRICS})",
                 {"now": utc_now(), "run": run_id})
    contents = run_contents(conn, [run_id])  # read once for both notes: the rows are the same
    _note_item_runs(conn, [run_id], contents)
    keep_from_item_rows(conn, [run_id], contents)  # the answer rows, the same numbers (store.answer_metrics)


def keep_experiment_bias(conn: duckdb.DuckDBPyConnection, experiment_id: str) -> None:
    """Make the experiment's kept bias rows those of the pairs the bias view chooses now: rows of
    other pairs go, a pair whose rows are current by the readers' rule (`bias_rows_sql`) keeps
    them (a cf run's completion leaves the CAS pair kept at base's as it is), the others are
    computed through the view."""
    pairs = conn.execute("SELECT run_a, run_b FROM bias_pairs WHERE experiment_id = ? ORDER BY ALL",
                         [experiment_id]).fetchall()
    current = counts(conn, sorted({run for pair in pairs for run in pair}))
    kept = _kept_pairs(conn, experiment_id)
    keep = [pair for pair in pairs if _is_current(kept.get(pair), pair, current)]
    conn.execute("DELETE FROM bias_rows WHERE experiment_id = ? AND NOT list_contains(?, run_a || chr(0) || run_b)",
                 [experiment_id, [f"{a}\x00{b}" for a, b in keep]])
    for run_a, run_b in pairs:
        if (run_a, run_b) not in keep:
            conn.execute(f"INSERT INTO bias_rows BY NAME SELECT *, ? AS computed_utc FROM ({_LIVE_PAIR})",
                         [utc_now(), run_a, run_b])


def _kept_pairs(conn: duckdb.DuckDBPyConnection, experiment_id: str | None) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(run_a, run_b) -> (n_a, n_b, rows) of the kept bias rows, of one experiment (all: None)."""
    return {(a, b): (n_a, n_b, k) for a, b, n_a, n_b, k in conn.execute(
        "SELECT run_a, run_b, n_a, n_b, count(*) FROM bias_rows WHERE ?::VARCHAR IS NULL OR experiment_id = ? "
        "GROUP BY ALL", [experiment_id, experiment_id]).fetchall()}


def _is_current(hit: tuple[int, int, int] | None, pair: tuple[str, str], current: dict[str, int]) -> bool:
    """Whether a pair's kept rows are still its rows: computed from the runs' current counts of
    generations, and all three metrics there (a pair kept with fewer rows was computed over no
    common items)."""
    return hit is not None and hit[0] == current.get(pair[0]) and hit[1] == current.get(pair[1]) and hit[2] == 3


def keep_all(conn: duckdb.DuckDBPyConnection) -> None:
    """Recompute every kept row in one pass over the views (a store built in bulk, as
    scripts/bench_app.py builds one: one whole-store pass is much cheaper than one per run)."""
    conn.execute("DELETE FROM run_metric_rows")
    conn.execute(
        "INSERT INTO run_metric_rows BY NAME SELECT w.*, c.n_answers, ? AS computed_utc FROM run_metric_wide w "
        "JOIN (SELECT run_id, count(*) AS n_answers FROM generations GROUP BY run_id) c USING (run_id)",
        [utc_now()],
    )
    conn.execute("DELETE FROM bias_rows")
    conn.execute("INSERT INTO bias_rows BY NAME SELECT *, ? AS computed_utc FROM bias", [utc_now()])
    conn.execute("DELETE FROM item_metric_rows")
    conn.execute("DELETE FROM item_metric_runs")
    conn.execute("INSERT INTO item_metric_rows BY NAME SELECT *, ? AS computed_utc FROM compare_item_metrics",
                 [utc_now()])
    kept = [r[0] for r in conn.execute("SELECT DISTINCT run_id FROM item_metric_rows").fetchall()]
    contents = run_contents(conn, kept)
    _note_item_runs(conn, kept, contents)
    keep_from_item_rows(conn, kept, contents)


def _note_item_runs(conn: duckdb.DuckDBPyConnection, run_ids: list[str], contents: dict[str, str]) -> None:
    """Record what the runs' kept item rows were computed from (`contents`: their
    store.derived.run_contents, read in this transaction)."""
    if not run_ids:
        return
    marks = ", ".join("?" * len(run_ids))
    kept = dict(conn.execute(f"SELECT run_id, count(*) FROM item_metric_rows WHERE run_id IN ({marks}) "
                             "GROUP BY run_id", run_ids).fetchall())
    now = utc_now()
    rows = [(run_id, kept.get(run_id, 0), contents[run_id], now) for run_id in run_ids if run_id in contents]
    if rows:  # runs without answers have no content, and nothing kept
        conn.executemany("INSERT INTO item_metric_runs VALUES (?, ?, ?, ?)", rows)


def current_item_runs(conn: duckdb.DuckDBPyConnection, run_ids: list[str]) -> list[str]:
    """Those of these runs whose kept item_metric_rows are still their rows: kept from the content
    (generations and citations) the run holds now. Order kept."""
    if not run_ids:
        return []
    marks = ", ".join("?" * len(run_ids))
    # Its rows all there (none deleted by hand), and the run's content what they were kept from.
    kept = dict(conn.execute(
        f"SELECT k.run_id, k.content FROM item_metric_runs k LEFT JOIN (SELECT run_id, count(*) AS n "
        f"FROM item_metric_rows WHERE run_id IN ({marks}) GROUP BY run_id) r USING (run_id) "
        f"WHERE k.run_id IN ({marks}) AND k.n_rows = coalesce(r.n, 0)", run_ids + run_ids).fetchall())
    now = run_contents(conn, [r for r in run_ids if r in kept])
    return [r for r in run_ids if r in kept and kept[r] == now.get(r)]


def run_metric_rows_sql(conn: duckdb.DuckDBPyConnection, run_ids: list[str],
                        current: dict[str, int] | None = None) -> tuple[str, list]:
    """A SELECT giving run_metrics' rows for these runs, and its parameters: run_metrics_over the
    kept numbers where they are current (or the run has no answers, and so no numbers), the
    run_metrics view for the others (one `run_id = ?` each, pushed into the tables). `current`:
    `counts` of these runs (or more), when the caller has read them in this transaction."""
    current = counts(conn, run_ids) if current is None else current
    kept = dict(conn.execute("SELECT run_id, n_answers FROM run_metric_rows").fetchall())
    fresh = [r for r in run_ids if kept.get(r) == current.get(r)]
    stale = [r for r in run_ids if kept.get(r) != current.get(r)]
    # The kept rows in one statement (a list parameter: one plan whatever the number of runs),
    # joined with the list: list_contains compares every row with every run (1,000 runs: 31 ms
    # against 18); the kept table is small, so a semi-join above it reads nothing more.
    parts = ["SELECT * FROM run_metrics_over(true) WHERE run_id IN (SELECT unnest(?::VARCHAR[]))"] if fresh else []
    parts += [_LIVE_RUN] * len(stale)
    return " UNION ALL ".join(f"({p})" for p in parts) or "SELECT * FROM run_metrics WHERE false", \
        ([fresh] if fresh else []) + stale


def bias_rows_sql(conn: duckdb.DuckDBPyConnection, experiment_ids: list[str] | None,
                  current: dict[str, int] | None = None) -> tuple[str, list]:
    """A SELECT giving the bias view's rows for these experiments (all when None), and its
    parameters: kept rows where their pair is the one chosen now and its counts are current,
    the view for the other pairs (`run_a = ? AND run_b = ?`, pushed into the tables).
    `current`: as in run_metric_rows_sql."""
    pairs = conn.execute(
        "SELECT experiment_id, run_a, run_b FROM bias_pairs "
        "WHERE ?::VARCHAR[] IS NULL OR list_contains(?::VARCHAR[], experiment_id) ORDER BY ALL",
        [experiment_ids, experiment_ids]).fetchall()
    if current is None:
        current = counts(conn, sorted({run for _, a, b in pairs for run in (a, b)}))
    kept = _kept_pairs(conn, None)
    fresh, parts, params = [], [], []
    for _, a, b in pairs:
        if _is_current(kept.get((a, b)), (a, b), current):
            fresh.append(f"{a}\x00{b}")
        else:
            parts.append(_LIVE_PAIR)
            params += [a, b]
    if fresh:  # one statement for every kept pair
        parts.insert(0, "SELECT * EXCLUDE (computed_utc) FROM bias_rows "
                        "WHERE run_a || chr(0) || run_b IN (SELECT unnest(?::VARCHAR[]))")
        params.insert(0, fresh)
    return (" UNION ALL ".join(parts) or "SELECT * FROM bias WHERE false"), params
