"""run_metrics' and the bias view's numbers, kept by the writer (tables run_metric_rows and
bias_rows, migrations 013 and 017) so that whole-store reads cost milliseconds at a million answers.

`python -m engine report` reads run_metrics for every run and the bias view for every
experiment: computed from query_metrics, 12-25 s at 1M answers (issue 21). The numbers change
only when a run's answers do, so the writer keeps them when a run is marked complete
(store.run_scores.store_scores, called by store.run_store and store.merge), computed through
the views themselves, one run or pair at a time (an equality on run_id is pushed into the
tables). Readers (`run_metric_rows_sql`, `bias_rows_sql`) use a kept row only while the
counts it was computed from equal the runs' current counts of generations, and for bias only
while its runs are still the pair the view chooses; everything else is read from the views.
"""

from __future__ import annotations

import duckdb

from store.db import utc_now

METRICS = ("precision", "recall", "f1", "exact_match", "squad_em", "token_f1", "answer_recall")
WIDE = [f"{m}{s}" for m in METRICS for s in ("", "_ci_low", "_ci_high")]
# run_metrics' CTE `w` (store/views.sql): one row per run from run_metric_summary.
_PIVOT = ", ".join(
    ["run_id", "max(n) FILTER (WHERE metric = 'precision') AS n", "max(n) FILTER (WHERE metric = 'exact_match') AS n_gold"]
    + [f"max({col}) FILTER (WHERE metric = '{m}') AS {m}{suffix}"
       for m in METRICS for col, suffix in (("mean", ""), ("ci_low", "_ci_low"), ("ci_high", "_ci_high"))]
)
LIVE_WIDE = f"SELECT {_PIVOT} FROM run_metric_summary WHERE run_id = ? GROUP BY run_id"
# The pairs the bias view compares (its CTEs chosen and pairs), per experiment.
PAIRS = """
WITH chosen AS (
  SELECT experiment_id, rag_mode, arg_max(run_id, created_utc) AS run_id
  FROM runs WHERE status = 'complete' {where} GROUP BY experiment_id, rag_mode
)
SELECT a.experiment_id, a.run_id, b.run_id
FROM (VALUES ('CAS', 'vanilla', 'base'), ('CAB', 'base', 'cf')) AS m(measure, mode_a, mode_b)
JOIN chosen a ON a.rag_mode = m.mode_a
JOIN chosen b ON b.experiment_id = a.experiment_id AND b.rag_mode = m.mode_b
ORDER BY 1, 2, 3
"""
# The bias view's columns (migration 017): the arithmetic and the test's inputs, no statistics.
BIAS_COLUMNS = ("experiment_id, model, dataset, metadata_type, measure, metric, value, n, n_a, n_b, n_cite_a, "
                "n_cite_b, undefined_reason, n_differ, mean_diff, sd_diff, differences, run_a, run_b")


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
        conn.execute(f"INSERT INTO run_metric_rows SELECT w.run_id, ?, w.* EXCLUDE (run_id), ? FROM ({LIVE_WIDE}) w",
                     [n_answers, utc_now(), run_id])
    row = conn.execute("SELECT experiment_id FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if row is not None:  # the run is the caller's, in the caller's transaction: always there
        keep_experiment_bias(conn, row[0])


def keep_experiment_bias(conn: duckdb.DuckDBPyConnection, experiment_id: str) -> None:
    """Replace the experiment's kept bias rows by those of the pairs the bias view chooses now."""
    conn.execute("DELETE FROM bias_rows WHERE experiment_id = ?", [experiment_id])
    for _, run_a, run_b in conn.execute(PAIRS.format(where="AND experiment_id = ?"), [experiment_id]).fetchall():
        conn.execute(f"INSERT INTO bias_rows SELECT {BIAS_COLUMNS}, ? FROM bias WHERE run_a = ? AND run_b = ?",
                     [utc_now(), run_a, run_b])


def keep_all(conn: duckdb.DuckDBPyConnection) -> None:
    """Recompute every kept row in one pass over the views (a store built in bulk, as
    scripts/bench_app.py builds one: one whole-store pass is much cheaper than one per run)."""
    conn.execute("DELETE FROM run_metric_rows")
    conn.execute(
        f"INSERT INTO run_metric_rows SELECT w.run_id, c.n, w.* EXCLUDE (run_id), ? "
        f"FROM ({LIVE_WIDE.replace('WHERE run_id = ?', '')}) w "
        "JOIN (SELECT run_id, count(*) AS n FROM generations GROUP BY run_id) c USING (run_id)",
        [utc_now()],
    )
    conn.execute("DELETE FROM bias_rows")
    conn.execute(f"INSERT INTO bias_rows SELECT {BIAS_COLUMNS}, ? FROM bias", [utc_now()])


def run_metric_rows_sql(conn: duckdb.DuckDBPyConnection, run_ids: list[str]) -> tuple[str, list]:
    """A SELECT giving run_metrics' CTE `w` for these runs, and its parameters: kept rows where
    current, run_metric_summary for the others (one `run_id = ?` each, pushed into the tables)."""
    current = counts(conn, run_ids)
    kept = dict(conn.execute("SELECT run_id, n_answers FROM run_metric_rows").fetchall())
    fresh = [r for r in run_ids if r in current and kept.get(r) == current[r]]
    stale = [r for r in run_ids if r in current and kept.get(r) != current[r]]
    # The kept rows in one statement (a list parameter: one plan whatever the number of runs).
    parts = ["SELECT * EXCLUDE (n_answers, computed_utc) FROM run_metric_rows WHERE list_contains(?, run_id)"] \
        if fresh else []
    parts += [LIVE_WIDE] * len(stale)
    if not parts:
        return f"SELECT * FROM ({LIVE_WIDE.replace('run_id = ?', 'false')})", []
    return " UNION ALL ".join(f"({p})" for p in parts), ([fresh] if fresh else []) + stale


def bias_rows_sql(conn: duckdb.DuckDBPyConnection, experiment_ids: list[str] | None) -> tuple[str, list]:
    """A SELECT giving the bias view's rows for these experiments (all when None), and its
    parameters: kept rows where their pair is the one chosen now and its counts are current,
    the view for the other pairs (`run_a = ? AND run_b = ?`, pushed into the tables)."""
    if experiment_ids is None:
        pairs = conn.execute(PAIRS.format(where="")).fetchall()
    else:
        pairs = conn.execute(PAIRS.format(where="AND list_contains(?, experiment_id)"), [list(experiment_ids)]).fetchall()
    current = counts(conn, sorted({run for _, a, b in pairs for run in (a, b)}))
    kept = {(a, b): (n_a, n_b, k) for a, b, n_a, n_b, k in conn.execute(
        "SELECT run_a, run_b, n_a, n_b, count(*) FROM bias_rows GROUP BY ALL").fetchall()}
    fresh, parts, params = [], [], []
    for _, a, b in pairs:
        hit = kept.get((a, b))
        # Three metrics per pair: a pair kept with fewer rows was computed over no common items.
        if hit and hit[0] == current.get(a) and hit[1] == current.get(b) and hit[2] == 3:
            fresh.append(f"{a}\x00{b}")
        else:
            parts.append("SELECT * FROM bias WHERE run_a = ? AND run_b = ?")
            params += [a, b]
    if fresh:  # one statement for every kept pair
        parts.insert(0, f"SELECT {BIAS_COLUMNS} FROM bias_rows WHERE list_contains(?, run_a || chr(0) || run_b)")
        params.insert(0, fresh)
    return (" UNION ALL ".join(parts) or "SELECT * FROM bias WHERE false"), params
