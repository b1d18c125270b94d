"""Reads for `compare`: which runs a reference names, and two or more runs' per-item
metrics paired by item id.

The metrics are query_metrics' (the views are the one definition of every metric), with two
derived per item: cites_nothing (1 when the answer cites nothing) and mean_probability (the mean
probability of its citations, NULL where none was recorded). store/views.sql defines
the same per-item columns as SQL (the compare_item_metrics view and the compare_runs(a, b)
table macro); tests/engine/usecases/compare/test_compare.py checks the two agree. A complete run's rows are kept by the
writer (item_metric_rows, store/kept_metrics.py) and read from there while current. The citation
flips are counted in SQL: store/queries/citation_flips.py.

Everything is read in one read-only transaction per call and returned as tuples and numpy
arrays: the use case (engine.usecases.compare.compare) builds the DataFrames.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import FieldError
from engine.types import COMPARED_METRICS, MODES
from store.queries._read import Readable, reading

# The per-item metrics: the compared ones of engine.types.ANSWER_METRICS, in their order (which
# engine.statistics.compare_stats.METRICS shares).
METRIC_COLUMNS = COMPARED_METRICS

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


def _run(row: tuple) -> CompareRun:
    fields = (*row[:13], json.loads(row[13]) if row[13] else {})  # the 13 columns, then config_json read
    return CompareRun(*fields)


def resolve_side(db: Readable, reference: str) -> Side | None:
    """The runs `reference` names, or None if it names nothing. In this order: a run id; an
    experiment (id or name) with a mode after a colon, "EXP:base"; a whole experiment, each
    mode's newest complete run (else its newest run, which may still be running)."""
    with reading(db) as conn:
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


def read_paired(db: Readable, runs: Sequence[CompareRun], *, pair_by_id: bool = False) -> PairedItems:
    """The runs' per-item metrics on the items all of them hold. Runs over different datasets
    (content hashes) are refused unless pair_by_id: the same id may be another question."""
    runs = tuple(runs)
    labels = {run.dataset_sha: run.dataset_label for run in runs}
    if len(labels) > 1 and not pair_by_id:
        first, second = runs[0], next(r for r in runs if r.dataset_sha != runs[0].dataset_sha)
        raise FieldError(
            "pair_by_id", "run {a} and run {b} use different datasets ({a_data} and {b_data}): the same item id may "
            "be another question; {pair_by_id} pairs them anyway", a=first.run_id, b=second.run_id,
            a_data=first.dataset_label, b_data=second.dataset_label)
    from store.kept_metrics import current_item_runs

    with reading(db) as conn:
        kept = set(current_item_runs(conn, [run.run_id for run in runs]))
        per_run = [_item_metrics(conn, run.run_id, run.run_id in kept) for run in runs]
    # Each run's rows come sorted by item id, one per item: the common ids, sorted, pick each
    # run's rows in the same order (columns of numbers: rows as Python tuples were most of a
    # million items' read).
    ids = [columns["item_id"] for columns in per_run]
    where_each: list[Any]  # per run: its rows of the common items, in their order
    if all(len(other) == len(ids[0]) and np.array_equal(other, ids[0]) for other in ids[1:]):
        # Runs over the same items, the usual case: intersecting would sort a million ids again
        # for each run (3.5 s of a 1M-item compare).
        common, where_each = ids[0], [slice(None)] * len(ids)
    else:
        common = ids[0]
        for other in ids[1:]:
            common = np.intersect1d(common, other, assume_unique=True)
        # (np.isin compares object arrays pair by pair: minutes at 1M)
        where_each = [np.intersect1d(common, other, assume_unique=True, return_indices=True)[2] for other in ids]
    item_ids = tuple(common.tolist())
    metrics = [{name: columns[name][where] for name in METRIC_COLUMNS}
               for columns, where in zip(per_run, where_each, strict=True)]
    left_out = tuple(len(columns["item_id"]) - len(item_ids) for columns in per_run)
    return PairedItems(runs, item_ids, tuple(metrics), left_out, len(labels) > 1)


def _item_metrics(conn: Any, run_id: str, kept: bool) -> dict[str, np.ndarray]:
    """One run's compare_item_metrics as columns sorted by item id (item_id an object array, the
    metrics float with NaN for NULL): the rows the writer kept when the run completed where they
    are still its rows (`kept`: store.kept_metrics.current_item_runs), else computed through the view."""
    from store.kept_metrics import ITEM_METRICS

    source = "SELECT * FROM item_metric_rows WHERE run_id = $run" if kept else ITEM_METRICS
    got = conn.execute(f"SELECT item_id, {', '.join(METRIC_COLUMNS)} FROM ({source}) ORDER BY item_id",
                       {"run": run_id}).fetchnumpy()
    out = {"item_id": np.asarray(got["item_id"], dtype=object)}
    for name in METRIC_COLUMNS:
        out[name] = np.ma.filled(np.ma.asarray(got[name], dtype=float), np.nan)
    return out
