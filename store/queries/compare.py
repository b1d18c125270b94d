"""Reads for `compare` (issue 17): which runs a reference names, and two or more runs' per-item
metrics paired by item id.

The metrics are query_metrics' (the views are the one definition of every metric), with two
derived per item: cites_nothing (1 when the answer cites nothing) and mean_probability (the mean
probability of its citations, NULL where none was recorded). store/views.sql defines
the same per-item columns as SQL (the compare_item_metrics view and the compare_runs(a, b)
table macro); tests/test_compare.py checks the two agree.

Everything is read in one read-only transaction per call and returned as tuples and numpy
arrays: the use case (engine.usecases.compare) builds the DataFrames.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import UserError
from engine.types import MODES
from store.db import DbLike, as_database

# The per-item metrics, in engine.statistics.compare_stats.METRICS order (kept in step by a test).
METRIC_COLUMNS = ("precision", "recall", "f1", "exact_match", "squad_em", "answer_recall", "n_citations",
                  "cites_nothing", "mean_probability")

# One run's per-item metrics. The probability average reads citations filtered by run, so a
# run_id filter reaches both tables (see 006 for why query_metrics is filtered the same way).
_ITEM_METRICS = """
SELECT q.item_id, q.precision, q.recall, q.f1, q.exact_match, q.squad_em, q.answer_recall,
       CAST(q.n_citations AS DOUBLE) AS n_citations,
       CASE WHEN q.n_citations = 0 THEN 1.0 ELSE 0.0 END AS cites_nothing,
       p.mean_probability
FROM query_metrics q
LEFT JOIN (SELECT item_id, avg(probability) AS mean_probability FROM citations
           WHERE run_id = $run GROUP BY item_id) p USING (item_id)
WHERE q.run_id = $run
ORDER BY q.item_id
"""

# One run's shown documents and cited documents (shown ones only) per item.
_ITEM_CITATIONS = """
SELECT g.item_id, g.shown_doc_ids,
       coalesce(list(DISTINCT c.doc_id) FILTER (WHERE c.doc_id IS NOT NULL), []) AS cited,
       coalesce(list(DISTINCT c.doc_id) FILTER (WHERE c.relevant), []) AS cited_relevant
FROM generations g LEFT JOIN citations c ON c.run_id = g.run_id AND c.item_id = g.item_id
WHERE g.run_id = $run
GROUP BY g.item_id, g.shown_doc_ids
"""

_RUN_COLUMNS = """
SELECT r.run_id, r.experiment_id, coalesce(e.name, r.experiment_id), r.rag_mode, r.status, r.model,
       r.quantization, r.metadata_type, r.dataset, r.dataset_sha, dataset_label(r.dataset, r.dataset_sha),
       r.n_items, (SELECT count(*) FROM generations g WHERE g.run_id = r.run_id), r.config_json
FROM runs r LEFT JOIN experiments e USING (experiment_id)
"""


@dataclass(frozen=True)
class CompareRun:
    """One run as compare shows it."""

    run_id: str
    experiment_id: str
    experiment_name: str  # the `run --experiment` name, else the id
    rag_mode: str
    status: str  # running | complete | failed
    model: str
    quantization: str | None
    metadata_type: str | None
    dataset: str | None
    dataset_sha: str
    dataset_label: str  # e.g. "sample_nq.jsonl (3f2a9c1d)"
    n_items: int | None  # planned
    n_done: int  # stored so far
    config: dict[str, Any]


@dataclass(frozen=True)
class Side:
    """What one reference names: a run, one mode of an experiment, or a whole experiment."""

    reference: str
    kind: str  # "run" | "mode" | "experiment"
    runs: dict[str, CompareRun]  # per mode, in MODES order; one entry unless kind is experiment
    ignored: tuple[CompareRun, ...]  # an experiment's other runs (older, or not complete)


@dataclass(frozen=True)
class PairedItems:
    """Runs' per-item metrics on the items they all hold, aligned by item id (sorted)."""

    runs: tuple[CompareRun, ...]
    item_ids: tuple[str, ...]
    metrics: tuple[dict[str, np.ndarray], ...]  # per run: metric -> values aligned with item_ids (NaN: none)
    left_out: tuple[int, ...]  # per run: its items that are not paired
    pair_by_id: bool  # the datasets differ and the items were paired by id on request
    # Per paired item, for the citation flips (two runs only): shown in both runs, cited in the
    # first, cited in the second, cited documents that hold the answer (either run).
    citations: tuple[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...]


def _run(row: tuple) -> CompareRun:
    fields = (*row[:13], json.loads(row[13]) if row[13] else {})  # the 13 columns, then config_json read
    return CompareRun(*fields)


def resolve_side(db: DbLike, reference: str) -> Side | None:
    """The runs `reference` names, or None if it names nothing. In this order: a run id; an
    experiment (id or name) with a mode after a colon, "EXP:base"; a whole experiment, each
    mode's newest complete run (else its newest run, which may still be running)."""
    with as_database(db).connect(read_only=True) as conn:
        row = conn.execute(_RUN_COLUMNS + "WHERE r.run_id = ?", [reference]).fetchone()
        if row:
            run = _run(row)
            return Side(reference, "run", {run.rag_mode: run}, ())
        experiment, _, mode = reference.rpartition(":")
        if experiment and mode in MODES:
            side = _experiment(conn, experiment, reference)
            if side is None or mode not in side.runs:
                return side and Side(reference, "mode", {}, tuple(side.runs.values()) + side.ignored)
            others = tuple(r for m, r in side.runs.items() if m != mode) + side.ignored
            return Side(reference, "mode", {mode: side.runs[mode]}, others)
        return _experiment(conn, reference, reference)


def _experiment(conn, experiment: str, reference: str) -> Side | None:
    rows = conn.execute(
        _RUN_COLUMNS + "WHERE r.experiment_id = (SELECT experiment_id FROM runs WHERE experiment_id = $ref "
        "UNION ALL SELECT experiment_id FROM experiments WHERE name = $ref LIMIT 1) "
        "ORDER BY r.status = 'complete', r.created_utc, r.run_id",
        {"ref": experiment},
    ).fetchall()
    if not rows:
        return None
    runs = [_run(r) for r in rows]
    newest = {run.rag_mode: run for run in runs}  # complete ones last, newest last: they win
    chosen: dict[str, CompareRun] = {mode: newest[mode] for mode in MODES if mode in newest}
    kept = {run.run_id for run in chosen.values()}
    return Side(reference, "experiment", chosen, tuple(run for run in runs if run.run_id not in kept))


def read_paired(db: DbLike, runs: Sequence[CompareRun], *, pair_by_id: bool = False,
                with_citations: bool = False) -> PairedItems:
    """The runs' per-item metrics on the items all of them hold. Runs over different datasets
    (content hashes) are refused unless pair_by_id: the same id may be another question."""
    runs = tuple(runs)
    labels = {run.dataset_sha: run.dataset_label for run in runs}
    if len(labels) > 1 and not pair_by_id:
        first, second = runs[0], next(r for r in runs if r.dataset_sha != runs[0].dataset_sha)
        raise UserError(
            f"run {first.run_id} and run {second.run_id} use different datasets ({first.dataset_label} and "
            f"{second.dataset_label}): the same item id may be another question; give --pair-by-id to pair them anyway"
        )
    with as_database(db).connect(read_only=True) as conn:
        per_run = []
        for run in runs:
            cursor = conn.execute(_ITEM_METRICS, {"run": run.run_id})
            per_run.append({row[0]: row[1:] for row in cursor.fetchall()})
        shown = []
        if with_citations:
            for run in runs:
                rows = conn.execute(_ITEM_CITATIONS, {"run": run.run_id}).fetchall()
                shown.append({r[0]: (tuple(r[1]), tuple(r[2]), tuple(r[3])) for r in rows})
    common = set(per_run[0])
    for rows in per_run[1:]:
        common &= set(rows)
    item_ids = tuple(sorted(common))
    metrics = []
    for rows in per_run:
        values = np.array([[np.nan if v is None else v for v in rows[i]] for i in item_ids], dtype=float)
        values = values.reshape(len(item_ids), len(METRIC_COLUMNS))
        metrics.append({name: values[:, j] for j, name in enumerate(METRIC_COLUMNS)})
    citations: tuple[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...] = ()
    if with_citations and len(runs) == 2:
        citations = tuple(_item_citations(shown[0][i], shown[1][i]) for i in item_ids)
    return PairedItems(runs, item_ids, tuple(metrics), tuple(len(rows) - len(common) for rows in per_run),
                       len(labels) > 1, citations)


def _item_citations(a: tuple, b: tuple) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    shown_b = set(b[0])
    shown_both = tuple(d for d in a[0] if d in shown_b)
    relevant = tuple(sorted(set(a[2]) | set(b[2])))
    return shown_both, tuple(sorted(a[1])), tuple(sorted(b[1])), relevant
