"""The app's Runs tab (/runs): one page of experiments with their runs' progress and metrics.

Filtered in SQL on the runs table (small: one row per run). Progress and metrics are then read
for the page's runs only, through `run_id IN (subquery)`, which DuckDB pushes into generations'
scan and the query_metrics view: other experiments cost nothing. The metrics cost per stored
answer of the page's runs (query_metrics is computed, not stored): about 0.1 ms each here, so a
page whose runs hold 1M answers takes seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.types import MODES
from store.queries._read import MODE_ORDER, Readable, not_rerun, reading
from store.queries.experiments import ExperimentSummary, interrupted_runs
from store.run_scores import live_scores


@dataclass(frozen=True)
class PageRun:
    """One run of an experiment on a page, with its progress and mean per-item metrics so far."""

    run_id: str
    mode: str
    status: str  # as stored, or interrupted: running, but its process is gone
    n_done: int
    n_total: int
    created_utc: Any
    # Means over the stored answers; None before the first one, and for a run that is not its
    # mode's newest in the experiment (the table shows the newest only).
    precision: float | None
    recall: float | None
    f1: float | None
    exact_match: float | None  # None also when no item has usable gold
    # A served run's usage (config_json's `served`, engine.usecases.served); None for a local run.
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class ExperimentPage:
    """The experiments matching the filters (their count) and one page of them with their runs."""

    total: int
    experiments: tuple[ExperimentSummary, ...]
    runs: dict[str, tuple[PageRun, ...]]  # experiment_id -> its runs, MODES order, oldest first


# Experiments (one row each, newest first) matching the filters, with the count of all matches.
_EXPERIMENT_PAGE_SQL = f"""
SELECT r.experiment_id,
       any_value(e.name),
       arg_min(r.model, r.created_utc),
       arg_min(r.dataset, r.created_utc),
       arg_min(r.dataset_sha, r.created_utc),
       dataset_label(arg_min(r.dataset, r.created_utc), arg_min(r.dataset_sha, r.created_utc)) AS label,
       max(r.metadata_type),
       list(r.rag_mode ORDER BY list_position($modes, r.rag_mode), r.created_utc),
       min(r.created_utc) AS created,
       count(*) OVER () AS total
FROM runs r LEFT JOIN experiments e USING (experiment_id)
WHERE {not_rerun('r')}
GROUP BY r.experiment_id
HAVING ($model IS NULL OR contains(lower(arg_min(r.model, r.created_utc)), lower($model)))
   AND ($dataset IS NULL OR contains(lower(label), lower($dataset)))
   AND ($metadata IS NULL OR max(r.metadata_type) = $metadata)
   AND ($mode IS NULL OR bool_or(r.rag_mode = $mode))
   AND ($study IS NULL OR r.experiment_id IN (SELECT experiment_id FROM study_experiments WHERE study = $study))
ORDER BY created DESC, r.experiment_id DESC
"""


def experiment_page(db: Readable, offset: int, limit: int, *, model: str | None = None, dataset: str | None = None,
                    metadata: str | None = None, mode: str | None = None, study: str | None = None) -> ExperimentPage:
    """Experiments newest first, filtered (model and dataset: substring, any case; metadata type,
    mode and study name: exact), `limit` of them from `offset`, with their runs' progress and metrics."""
    with reading(db) as conn:
        gone = interrupted_runs(conn)
        filters = {"modes": list(MODES), "model": model or None, "dataset": dataset or None,
                   "metadata": metadata or None, "mode": mode or None, "study": study or None}
        rows = conn.execute(f"{_EXPERIMENT_PAGE_SQL} LIMIT $limit OFFSET $offset",
                            {**filters, "limit": max(0, limit), "offset": max(0, offset)}).fetchall()
        if rows:
            total = rows[0][-1]
        else:  # past the last page (or nothing matches): count alone
            counted = conn.execute(f"SELECT count(*) FROM ({_EXPERIMENT_PAGE_SQL})", filters).fetchone()
            total = counted[0] if counted else 0  # count(*) gives one row
        ids = [row[0] for row in rows]
        run_rows = [] if not ids else conn.execute(
            f"""
            WITH page AS (SELECT run_id, experiment_id, rag_mode, status, n_items, created_utc,
                                 TRY_CAST(json_extract_string(config_json, '$.served.prompt_tokens') AS BIGINT) AS pt,
                                 TRY_CAST(json_extract_string(config_json, '$.served.completion_tokens') AS BIGINT) AS ct
                          FROM runs WHERE experiment_id IN (SELECT unnest($ids))),
            done AS (SELECT run_id, count(*) AS n_done FROM generations
                     WHERE run_id IN (SELECT run_id FROM page) GROUP BY run_id),
            -- Metrics are shown for each mode's newest run only.
            shown AS (SELECT run_id FROM page
                      QUALIFY row_number() OVER (PARTITION BY experiment_id, rag_mode
                                                 ORDER BY created_utc DESC, run_id DESC) = 1)
            SELECT r.experiment_id, r.run_id, r.rag_mode, r.status, coalesce(d.n_done, 0), coalesce(r.n_items, 0),
                   r.created_utc, s.run_id IS NOT NULL, c.n_answers IS NOT DISTINCT FROM coalesce(d.n_done, 0),
                   c.precision, c.recall, c.f1, c.exact_match, r.pt, r.ct
            FROM page r LEFT JOIN done d USING (run_id) LEFT JOIN shown s USING (run_id)
            LEFT JOIN run_scores c USING (run_id)
            ORDER BY r.experiment_id, {MODE_ORDER}, r.created_utc, r.run_id
            """,
            {"ids": ids},
        ).fetchall()
        # query_metrics costs per answer, so the averages come from run_scores (kept by the
        # writer, store/run_scores.py) where its row covers every answer the run holds now, and
        # are computed live otherwise: a running or extended run, a missing row. One query per
        # such run, as DuckDB pushes `run_id = ?` into the view but not an IN-list.
        scores: dict[str, tuple] = {}
        for row in run_rows:
            run_id, shown, fresh = row[1], row[7], row[8]
            if shown:
                scores[run_id] = tuple(row[9:13]) if fresh else tuple(live_scores(conn, run_id))[1:]
    runs: dict[str, list[PageRun]] = {}
    for experiment_id, run_id, mode_, status, done, n_total, created, *_, pt, ct in run_rows:
        if status == "running" and run_id in gone:
            status = "interrupted"
        p, r, f, em = scores.get(run_id, (None, None, None, None))
        runs.setdefault(experiment_id, []).append(
            PageRun(run_id, mode_, status, done, n_total, created, p, r, f, em, pt, ct))
    experiments = []
    for exp, name, model_, dataset_, sha, label, meta, modes, created, _total in rows:
        mine = runs.get(exp, [])
        statuses = {run.status for run in mine}
        # The same order of precedence as experiment_listing (`python -m engine list`).
        status = next((s for s in ("running", "interrupted", "failed") if s in statuses), "complete")
        experiments.append(ExperimentSummary(
            exp, name, model_, dataset_, sha, label, meta, tuple(dict.fromkeys(modes)), status, len(mine),
            sum(run.n_done for run in mine), sum(run.n_total for run in mine), created))
    return ExperimentPage(total, tuple(experiments), {k: tuple(v) for k, v in runs.items()})
