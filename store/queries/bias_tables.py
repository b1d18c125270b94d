"""Evaluation reads: what `python -m engine bias` and `report` read, and the app's Bias tab.

The views are defined in store/views.sql. `bias_inputs` returns tuples, numpy columns and
dataclasses, never DataFrames, so `bias` runs without pandas. The tab's reads take several
experiments at once and filter the views on run ids given as constants (`run_id = ?`,
`run_a = ? AND run_b = ?`), which DuckDB pushes into their scans; a filter on experiment_id
alone, or on a subquery, makes the bias and run_metrics views compute every run in the store first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np

from engine.types import MODES
from store.answer_metrics import current_answer_runs
from store.db import DbLike
from store.kept_metrics import bias_rows_sql, counts, current_item_runs, run_metric_rows_sql
from store.queries._read import (
    RESOLVE_EXPERIMENT,
    Readable,
    fetch,
    fetch_frame,
    frame,
    marks,
    mode_order,
    not_rerun,
    reading,
)
from store.queries.session import ReadSession, read_session
from store.run_scores import live_scores

if TYPE_CHECKING:
    import pandas as pd

# derived_values' kind for report_bias_rows' rows of one experiment (bump the number when they change).
BIAS_ROWS = "bias_rows/2"  # /2: the view's columns of migration 017


@dataclass(frozen=True)
class BiasRun:
    """One run of an experiment, as `bias` reads it."""

    run_id: str
    rag_mode: str
    status: str
    model: str
    quantization: str | None
    metadata_type: str | None
    config: dict[str, Any]
    dataset: str | None
    dataset_sha: str
    dataset_label: str  # file name and content hash prefix, e.g. "sample_nq.jsonl (3f2a9c1d)"


@dataclass(frozen=True)
class RunItemMetrics:
    """One run's per-item metrics as columns, items in id order."""

    item_ids: tuple[str, ...]
    values: np.ndarray  # (items, 3): precision, recall, f1; NaN where undefined
    cites: np.ndarray  # (items,) bool: the answer cites a shown document


@dataclass(frozen=True)
class BiasInputs:
    """Everything `bias` needs of one experiment, read in one transaction."""

    experiment_id: str
    runs: tuple[BiasRun, ...]  # every run, oldest first
    chosen: dict[str, BiasRun]  # per mode (MODES order), the newest complete run
    metrics: dict[str, RunItemMetrics]  # per chosen run's id (one with no answer: no items)
    confidence: tuple[tuple[Any, ...], ...]  # rag_mode, cited_docs, label, mean_probability, n_with_probability, n_citations


def bias_inputs(db: DbLike, reference: str) -> BiasInputs | None:
    """Runs, per-item metrics and citation confidence of one experiment, given by id or name;
    None if there is no such experiment."""
    with reading(db) as conn:
        # Resolved in the same connection: each open costs more than all of bias's queries.
        found = conn.execute(RESOLVE_EXPERIMENT, {"ref": reference}).fetchone()
        if not found:
            return None
        experiment_id = found[0]
        runs = tuple(
            BiasRun(*(*row[:6], json.loads(row[6]) if row[6] else {}, *row[7:]))  # config_json read
            for row in conn.execute(
                "SELECT run_id, rag_mode, status, model, quantization, metadata_type, config_json, "
                "dataset, dataset_sha, dataset_label(dataset, dataset_sha) "
                "FROM runs WHERE experiment_id = ? ORDER BY created_utc, run_id",
                [experiment_id],
            ).fetchall()
        )
        if not runs:
            return None
        newest = {run.rag_mode: run for run in runs if run.status == "complete"}  # oldest first: newest wins
        chosen: dict[str, BiasRun] = {mode: newest[mode] for mode in MODES if mode in newest}
        ids = [run.run_id for run in chosen.values()]
        if not ids:  # no complete run: bias says so; `IN ()` is not SQL
            return BiasInputs(experiment_id, runs, chosen, {}, ())
        # One placeholder per run: DuckDB pushes `run_id IN (?, ?, ?)` into the views' scans;
        # `IN (SELECT unnest(?))` is a semi-join above the view, which then reads the whole store.
        # Ordered: the bootstrap draws items by position, so an order that followed the plan
        # (parallel hash tables) would give other intervals for the same seed now and then.
        # A run's per-item metrics as the writer kept them (item_metric_rows, store/kept_metrics.py)
        # while they are still its rows; query_metrics for the others (0.2-0.5 s for an experiment
        # of 10,000 items a run at 1M answers). The same numbers.
        kept = current_item_runs(conn, ids)
        # The others' per-answer rows kept as their answers were written (store.answer_metrics:
        # a run running, failed or resumed, or whose completion's rows are lost), the same numbers.
        answers = current_answer_runs(conn, [run_id for run_id in ids if run_id not in kept])
        computed = [run_id for run_id in ids if run_id not in kept and run_id not in answers]
        parts = [f"SELECT run_id, item_id, precision, recall, f1, cites_in_range FROM item_metric_rows "
                 f"WHERE run_id IN ({marks(kept)})"] if kept else []
        if answers:
            parts.append(f"SELECT run_id, item_id, precision, recall, f1, cites_in_range FROM answer_metrics "
                         f"WHERE run_id IN ({marks(answers)})")
        if computed:
            parts.append("SELECT run_id, item_id, precision, recall, f1, n_citations > out_of_range_citations "
                         f"FROM query_metrics WHERE run_id IN ({marks(computed)})")
        # As columns: 30,000 rows as Python tuples took 40-60 ms at 1M answers, the columns 15.
        columns = conn.execute(" UNION ALL ".join(f"({p})" for p in parts) + " ORDER BY run_id, item_id",
                               kept + answers + computed).fetchnumpy()
        metrics = _per_run(ids, columns)
        confidence = conn.execute(
            "SELECT rag_mode, cited_docs, label, mean_probability, n_with_probability, n_citations "
            f"FROM citation_confidence WHERE run_id IN ({marks(ids)}) "
            f"ORDER BY {mode_order('rag_mode')}, cited_docs DESC",
            ids,
        ).fetchall()
    return BiasInputs(experiment_id, runs, chosen, metrics, tuple(confidence))


def rerun_targets(db: DbLike) -> frozenset[str]:
    """The experiments that some rerun (`run --reruns`) repeats."""
    with reading(db) as conn:
        return frozenset(row[0] for row in conn.execute(
            "SELECT DISTINCT json_extract_string(config_json, '$.rerun.of') FROM runs WHERE NOT "
            + not_rerun()).fetchall())


def rerun_experiment_ids(db: DbLike, experiment_id: str) -> tuple[str, ...]:
    """The experiments that rerun `experiment_id` (`run --reruns`: their runs' config_json holds
    rerun.of), in rerun order."""
    with reading(db) as conn:
        return tuple(row[0] for row in conn.execute(
            "SELECT experiment_id FROM runs WHERE json_extract_string(config_json, '$.rerun.of') = ? GROUP BY "
            "experiment_id ORDER BY min(TRY_CAST(json_extract_string(config_json, '$.rerun.k') AS INTEGER)), experiment_id",
            [experiment_id],
        ).fetchall())


def _per_run(run_ids: list[str], columns: dict[str, np.ndarray]) -> dict[str, RunItemMetrics]:
    """bias_inputs' rows (sorted by run and item) cut into each run's columns; NULL metrics as NaN
    and a NULL cites_in_range as False, as the rows' tuples gave them."""
    names = list(columns)  # run_id, item_id, precision, recall, f1, cites
    run_col, item_col = columns[names[0]], columns[names[1]]
    values: np.ndarray = np.column_stack([np.ma.filled(np.ma.asarray(columns[n], dtype=float), np.nan)
                                          for n in names[2:5]])
    cites: np.ndarray = np.ma.filled(np.ma.asarray(columns[names[5]], dtype=bool), False)
    out: dict[str, RunItemMetrics] = {}
    for run_id in run_ids:
        rows = np.flatnonzero(run_col == run_id)  # contiguous: the rows are sorted by run
        first, stop = (int(rows[0]), int(rows[-1]) + 1) if rows.size else (0, 0)
        out[run_id] = RunItemMetrics(tuple(item_col[first:stop].tolist()), values[first:stop], cites[first:stop])
    return out


def kept_derived(session: ReadSession, kind: str, reference: str, key: str) -> tuple[str, Any] | None:
    """(experiment id, the value kept for `kind` and `key` while the experiment is unchanged, or
    None) of an experiment given by id or name (store.derived); None if there is no such experiment."""
    experiment_id = session.experiment_id(reference)
    if experiment_id is None:
        return None
    return experiment_id, session.kept(kind, experiment_id, key)


def metrics_for_run(db: DbLike, run_id: str) -> pd.DataFrame:
    """The query_metrics rows of one run (one per stored answer), ordered by item_id."""
    return fetch_frame(db, "SELECT * FROM query_metrics WHERE run_id = ? ORDER BY item_id", [run_id])


def run_metric_table(db: DbLike, status: str | None = "complete", *, reruns: bool = True) -> pd.DataFrame:
    """run_metrics rows (one per run, oldest first) with dataset_name and dataset_label; only runs
    with `status` unless it is None.

    The per-run numbers come from run_metric_rows where the writer kept them for the run's
    current answers (store.kept_metrics), from the views otherwise: the same rows as
    `SELECT * FROM run_metrics`, in milliseconds rather than seconds a run at 1M answers.
    `reruns=False` leaves out the runs of reruns (`run --reruns`), as the report does.
    """
    with reading(db) as conn:
        return _run_metric_frame(conn, status, reruns=reruns)


def _run_metric_frame(conn: duckdb.DuckDBPyConnection, status: str | None,
                      current: dict[str, int] | None = None, reruns: bool = True,
                      experiment_id: str | None = None) -> pd.DataFrame:
    conditions = (([] if reruns else [not_rerun()]) + (["status = ?"] if status else [])
                  + (["experiment_id = ?"] if experiment_id else []))
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    ids = [row[0] for row in conn.execute(f"SELECT run_id FROM runs {where}",
                                          [v for v in (status, experiment_id) if v]).fetchall()]
    rows, params = run_metric_rows_sql(conn, ids, current)
    return frame(conn.execute(
        "SELECT *, dataset_name(dataset) AS dataset_name, dataset_label(dataset, dataset_sha) AS dataset_label "
        f"FROM ({rows}) ORDER BY created_utc, run_id", params))


def bias_table(db: DbLike, experiment_id: str | None = None) -> pd.DataFrame:
    """bias view rows (CAS and CAB per experiment and metric) with the base run's start time,
    dataset hash, name and label, and the short names of label A and B.

    Only the experiment asked for is read when one is given; rows come from bias_rows where the
    writer kept them for the pairs and answers the view would use now (store.kept_metrics).
    """
    with reading(db) as conn:
        return _bias_frame(conn, experiment_id)


def _bias_frame(conn: duckdb.DuckDBPyConnection, experiment_id: str | None,
                current: dict[str, int] | None = None) -> pd.DataFrame:
    return _bias_frame_of(conn, [experiment_id] if experiment_id else None, current)


def _bias_frame_of(conn: duckdb.DuckDBPyConnection, experiment_ids: list[str] | None,
                   current: dict[str, int] | None = None) -> pd.DataFrame:
    """bias_table's rows for these experiments (all when None)."""
    if experiment_ids is None:  # every experiment but the reruns, whose place is beside theirs (`bias`)
        experiment_ids = [row[0] for row in conn.execute(
            f"SELECT DISTINCT experiment_id FROM runs WHERE {not_rerun()} ORDER BY 1").fetchall()]
    rows, params = bias_rows_sql(conn, experiment_ids, current)
    return frame(conn.execute(
        "SELECT b.*, r.created_utc, r.dataset_sha, dataset_name(r.dataset) AS dataset_name, "
        "dataset_label(r.dataset, r.dataset_sha) AS dataset_label, "
        "label_short_a(r.config_json, r.metadata_type) AS label_a, "
        "label_short_b(r.config_json, r.metadata_type) AS label_b "
        f"FROM ({rows}) b "
        "JOIN runs r ON r.run_id = CASE b.measure WHEN 'CAS' THEN b.run_b ELSE b.run_a END "
        "ORDER BY r.created_utc, b.experiment_id, b.measure DESC, b.metric",
        params,
    ))


def report_frames(db: Readable, experiment_id: str | None = None, *,
                  runs_of_experiment: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """run_metric_table(db, status=None) and bias_table(db, experiment_id), as `report` reads
    them: in one transaction, the runs' answers counted once for both. The run frame holds every
    run (a scan of the whole generations table: about 10 ms at 1M answers, 20 at 10M), or with
    `runs_of_experiment` only experiment_id's (its runs' row groups alone are read)."""
    with reading(db) as conn:
        only = experiment_id if runs_of_experiment else None
        ids = [row[0] for row in conn.execute("SELECT run_id FROM runs WHERE ?::VARCHAR IS NULL OR experiment_id = ?",
                                              [only, only]).fetchall()]
        current = counts(conn, ids)
        return (_run_metric_frame(conn, None, current, reruns=False, experiment_id=only),
                _bias_frame(conn, experiment_id, current))


def run_summaries(db: DbLike, run_ids: list[str]) -> pd.DataFrame:
    """The short table `run` prints: per run, citation precision/recall/F1 (x100) and EM."""
    ids = list(dict.fromkeys(run_ids))
    # One `run_id = ?` per run: DuckDB pushes an equality through run_metrics into the tables,
    # but neither list_contains nor an IN list (at 1M generations: 0.3 s a run against 12-16 s).
    runs = " UNION ALL ".join("SELECT * FROM run_metrics WHERE run_id = ?" for _ in ids)
    return fetch_frame(
        db,
        "SELECT run_id, rag_mode AS mode, coalesce(label_relevant, '-') AS relevant_label, n, "
        "round(100 * precision, 1) AS precision, round(100 * recall, 1) AS recall, "
        "round(100 * f1, 1) AS f1, round(exact_match, 3) AS em "
        f"FROM ({runs or 'SELECT * FROM run_metrics WHERE false'}) ORDER BY created_utc",
        ids,
    )


def report_run_metrics(db: DbLike, experiment_ids: list[str] | tuple[str, ...]) -> pd.DataFrame:
    """run_metric_table's rows (same columns, oldest first) for the complete runs of these experiments."""
    with reading(db) as conn:
        runs = [row[0] for row in conn.execute(
            "SELECT run_id FROM runs WHERE status = 'complete' AND list_contains(?, experiment_id)",
            [list(experiment_ids)],
        ).fetchall()]
        # One `run_id = ?` per run: DuckDB pushes an equality through run_metrics, not an IN list.
        union = " UNION ALL ".join("SELECT * FROM run_metrics WHERE run_id = ?" for _ in runs)
        return frame(conn.execute(
            "SELECT *, dataset_name(dataset) AS dataset_name, dataset_label(dataset, dataset_sha) AS dataset_label "
            f"FROM ({union or 'SELECT * FROM run_metrics WHERE false'}) ORDER BY created_utc, run_id",
            runs,
        ))


def table1_runs(db: DbLike, experiment_ids: list[str] | tuple[str, ...]) -> pd.DataFrame:
    """What Table 1 reads of the complete runs of these experiments (report_run_metrics' columns
    it uses, oldest first): provenance, labels, n, and the mean precision, recall and exact match.

    The means come from run_scores where its row covers every answer the run holds, and are
    computed for that run alone otherwise: run_metrics works out every metric's interval for
    each run (0.2 s a run at 1M generations), which Table 1 does not show.
    """
    with reading(db) as conn:
        rows = conn.execute(
            """
            WITH chosen AS (SELECT * FROM runs WHERE status = 'complete' AND list_contains($ids, experiment_id)),
            done AS (SELECT run_id, count(*) AS n_done FROM generations
                     WHERE run_id IN (SELECT run_id FROM chosen) GROUP BY run_id)
            SELECT r.run_id, r.experiment_id, r.created_utc, r.model, r.dataset, r.dataset_sha,
                   dataset_name(r.dataset), dataset_label(r.dataset, r.dataset_sha), r.metadata_type, r.rag_mode,
                   label_relevant(r.rag_mode, r.config_json, r.metadata_type),
                   label_nonrelevant(r.rag_mode, r.config_json, r.metadata_type),
                   c.n_answers IS NOT DISTINCT FROM coalesce(d.n_done, 0), c.n_answers, c.precision, c.recall,
                   c.exact_match
            FROM chosen r LEFT JOIN done d USING (run_id) LEFT JOIN run_scores c USING (run_id)
            ORDER BY r.created_utc, r.run_id
            """,
            {"ids": list(experiment_ids)},
        ).fetchall()
        records = []
        for *meta, fresh, n, precision, recall, em in rows:
            if not fresh:
                n, precision, recall, _f1, em = live_scores(conn, meta[0])
            records.append((*meta, n or 0, precision, recall, em))
    import pandas as pd

    return pd.DataFrame.from_records(records, columns=[
        "run_id", "experiment_id", "created_utc", "model", "dataset", "dataset_sha", "dataset_name", "dataset_label",
        "metadata_type", "rag_mode", "label_relevant", "label_nonrelevant", "n", "precision", "recall", "exact_match"])


def uncited_runs(db: DbLike, run_ids: list[str] | tuple[str, ...]) -> frozenset[str]:
    """The runs of `run_ids` none of whose answers cites a shown document (query_metrics'
    n_citations > out_of_range_citations, as the bias view reads a citing answer), or that hold
    no answer: their mean citation precision averages only the 0 given to an answer without a
    citation, so it is undefined, not 0. Only runs whose mean is 0 or missing need asking."""
    ids = list(dict.fromkeys(run_ids))
    if not ids:
        return frozenset()
    # One `run_id = ?` per run: DuckDB pushes an equality through query_metrics, not an IN list.
    union = " UNION ALL ".join(
        "SELECT ? AS run_id, count(*) FILTER (WHERE n_citations > out_of_range_citations) AS n_citing "
        "FROM query_metrics WHERE run_id = ?" for _ in ids)
    rows = fetch(db, f"SELECT run_id FROM ({union}) WHERE n_citing = 0",
                 [v for run_id in ids for v in (run_id, run_id)])
    return frozenset(row[0] for row in rows)


@dataclass(frozen=True)
class RunSetting:
    """What tells a run's experiment apart from others in the report's tables."""

    run_id: str
    experiment_id: str
    experiment_name: str | None  # `run --experiment NAME`; None when unnamed
    config: dict[str, Any]  # config_json: the prompt and generation settings, and `shared_from` of a copied vanilla run


def run_settings(db: DbLike, experiment_ids: list[str] | tuple[str, ...]) -> dict[str, RunSetting]:
    """Per complete run of these experiments (by run id): its configuration and its experiment's name."""
    with reading(db) as conn:
        rows = conn.execute(
            "SELECT r.run_id, r.experiment_id, e.name, r.config_json FROM runs r "
            "LEFT JOIN experiments e USING (experiment_id) "
            "WHERE r.status = 'complete' AND list_contains(?, r.experiment_id) ORDER BY r.created_utc, r.run_id",
            [list(dict.fromkeys(experiment_ids))],
        ).fetchall()
    return {run_id: RunSetting(run_id, experiment_id, name, json.loads(config) if config else {})
            for run_id, experiment_id, name, config in rows}


def report_bias_rows(db: DbLike | ReadSession, experiment_ids: list[str] | tuple[str, ...]) -> pd.DataFrame:
    """bias_table's rows (same columns and order) for these experiments.

    An experiment's rows are taken from derived_values while its signature is unchanged
    (store.derived); in a request's ReadSession, those computed now join what it keeps.
    """
    import pandas as pd

    with read_session(db) as session:
        records: list[dict[str, Any]] = []
        columns: list[str] = []
        missing = []
        for experiment_id in dict.fromkeys(experiment_ids):
            kept = session.kept(BIAS_ROWS, experiment_id, "")
            if kept is None:
                missing.append(experiment_id)
            else:
                columns, rows = kept["columns"], kept["rows"]
                records += rows
        if missing:
            computed = _bias_rows(session.conn, missing)
            computed["created_utc"] = computed["created_utc"].map(lambda t: None if pd.isna(t) else t.isoformat())
            columns = list(computed.columns)
            fresh = computed.astype(object).where(computed.notna(), None).to_dict("records")
            records += fresh
            for experiment_id in missing:
                rows = [r for r in fresh if r["experiment_id"] == experiment_id]
                session.computed(BIAS_ROWS, experiment_id, "",
                                 json.dumps({"columns": columns, "rows": rows}, default=_plain_json))
        if not columns:  # no experiment asked for
            columns = list(_bias_rows(session.conn, []).columns)
    # The order of bias_table: the base run's start, experiment, CAS before CAB, metric.
    records.sort(key=lambda r: (r["created_utc"], r["experiment_id"], _desc(r["measure"]), r["metric"]))
    result = pd.DataFrame.from_records(records, columns=columns)
    result["created_utc"] = pd.to_datetime(result["created_utc"])
    return result


def _plain_json(value: Any) -> Any:
    """numpy scalars and arrays (the view's `differences`) as Python values (json knows float64,
    not int64, bool_ or ndarray)."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


def _desc(text: str) -> tuple[int, ...]:
    """A sort key ordering strings in descending order."""
    return tuple(-ord(ch) for ch in text) + (0,)


def _bias_rows(conn: Any, experiment_ids: list[str]) -> pd.DataFrame:
    """bias_table's rows for these experiments: the writer's kept bias_rows where they are
    current, the bias view pair by pair otherwise (store.kept_metrics; 0.2 s a request at 1M
    answers through the view)."""
    return _bias_frame_of(conn, list(experiment_ids))


@dataclass(frozen=True)
class ProbabilitySummary:
    """The citation probabilities of one run's citations to relevant, or to non-relevant, shown documents."""

    run_id: str
    relevant: bool
    n: int  # citations with a probability
    minimum: float
    q1: float  # quartiles interpolated as quantile_cont (numpy's default) computes them
    median: float
    q3: float
    maximum: float
    mean: float


def citation_probability_summaries(db: DbLike, run_ids: list[str] | tuple[str, ...]) -> tuple[ProbabilitySummary, ...]:
    """Per run and relevance of the cited document, the spread of citation probabilities; out-of-range
    numbers (no document) are left out, as in citation_confidence, and runs without probabilities
    (imported answers) give no row."""
    ids = list(dict.fromkeys(run_ids))
    if not ids:
        return ()
    return fetch(
        db,
        "SELECT run_id, relevant, count(*), min(probability), quantile_cont(probability, [0.25, 0.5, 0.75]), "
        "max(probability), avg(probability) FROM citations "
        f"WHERE run_id IN ({marks(ids)}) AND relevant IS NOT NULL AND probability IS NOT NULL "
        "GROUP BY run_id, relevant ORDER BY run_id, relevant DESC",
        ids,
        into=lambda run_id, relevant, n, low, quartiles, high, mean: ProbabilitySummary(
            run_id, relevant, n, low, quartiles[0], quartiles[1], quartiles[2], high, mean),
    )
