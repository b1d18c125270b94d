"""A leaderboard of label bias: the models of a store ranked by CAB, per label type and dataset,
with tiers by Holm-corrected pairwise tests (engine.statistics.tiers), each model's rerun floor
where measured and its number of items. `python -m engine leaderboard`, the app's Leaderboard tab
and engine.api.

One experiment per model and board: the newest with complete base and cf runs; the others are
named in the notes, never dropped silently. An items filter keeps a private split of items out of
every number (`exclude_items`), or computes the board on a chosen split only (`only_items`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.paths import require_store

METRICS = ("precision", "recall", "f1")
DEFAULT_METRIC = "precision"
# A file of item ids is read whole: a split is a list of ids, not a dataset.
MAX_ITEM_FILE_BYTES = 16 * 1024 * 1024
CAB_NAME = "citation attribution bias (Abolghasemi et al.)"


@dataclass(frozen=True)
class LeaderboardRequest:
    """Which store, which metric of CAB, and which items count (None: all)."""

    db: Path
    metric: str = DEFAULT_METRIC
    exclude_items: frozenset[str] | None = None  # a private split: never in any number
    only_items: frozenset[str] | None = None  # only these items count
    resamples: int | None = None
    seed: int = 0


@dataclass(frozen=True)
class LeaderboardRow:
    """One model on one board. NaN CAB, interval and p where undefined (`undefined_reason` says why)."""

    rank: int  # position in the board's order, 1 first
    tier: int | None  # None where CAB is undefined
    model: str
    experiment_id: str
    cab: float  # points, signed: > 0 favours label A
    ci_low: float
    ci_high: float
    p: float  # CAB's own paired test of base against cf
    verdict: str
    floor: float  # the rerun floor of CAB, NaN where not measured
    floor_low: float
    floor_high: float
    floor_note: str  # "measured over K reruns", or why there is none
    n_items: int
    undefined_reason: str | None


@dataclass(frozen=True)
class Board:
    """The models of one label type (and label pair) on one dataset."""

    metadata_type: str
    label_a: str
    label_b: str
    dataset: str
    rows: tuple[LeaderboardRow, ...]
    pairs: tuple[Any, ...]  # engine.statistics.tiers.PairTest, every pair of models with a defined CAB
    test: str  # the tiers' test, named


@dataclass(frozen=True)
class Leaderboard:
    """Every board of the store, and what was left out and why."""

    metric: str
    boards: tuple[Board, ...]
    notes: tuple[str, ...]
    items_note: str | None  # how the items were filtered, where they were
    measure: str = field(default=CAB_NAME)

    def frame(self) -> Any:
        """Every board's rows as one DataFrame, in the CLI's columns."""
        import pandas as pd

        return pd.DataFrame.from_records(board_records(self))


def board_records(board: Leaderboard) -> list[dict[str, Any]]:
    """One plain dict per row of every board (JSON-ready: None for undefined numbers)."""
    out = []
    for b in board.boards:
        for r in b.rows:
            out.append({"label_type": b.metadata_type, "labels": f"{b.label_a} / {b.label_b}", "dataset": b.dataset,
                        "rank": r.rank, "tier": r.tier, "model": r.model, "experiment": r.experiment_id,
                        "cab": _finite(r.cab), "ci_low": _finite(r.ci_low), "ci_high": _finite(r.ci_high),
                        "p": _finite(r.p), "verdict": r.verdict, "rerun_floor": _finite(r.floor),
                        "floor_low": _finite(r.floor_low), "floor_high": _finite(r.floor_high),
                        "floor_note": r.floor_note, "n_items": r.n_items})
    return out


def pair_records(board: Leaderboard) -> list[dict[str, Any]]:
    """Every board's pairwise tests behind the tiers, one plain dict each (JSON-ready)."""
    return [{"label_type": b.metadata_type, "dataset": b.dataset, "a": t.a, "b": t.b, "n_items": t.n,
             "difference": _finite(t.difference), "p": _finite(t.p), "p_holm": _finite(t.p_holm), "test": t.test,
             "told_apart": t.told_apart} for b in board.boards for t in b.pairs]


def _finite(x: float) -> float | None:
    return None if isinstance(x, float) and not math.isfinite(x) else x


def read_item_ids(path: str | Path) -> frozenset[str]:
    """Item ids from a text file, one a line (blank lines and lines starting with # skipped);
    UserError in one line for a missing, oversized or empty file."""

    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_ITEM_FILE_BYTES:
            raise UserError(f"{path}: {size:,} bytes, more than a list of item ids may hold "
                            f"({MAX_ITEM_FILE_BYTES:,})")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"no item list at {path}") from None
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not UTF-8 text (byte {err.start})") from None
    except IsADirectoryError:
        raise UserError(f"{path} is a folder; give a file of item ids, one a line") from None
    except OSError as err:  # unreadable: permissions, a device
        raise UserError(f"cannot read the item list {path}: {err.strerror}") from None
    ids = frozenset(s for line in text.splitlines() if (s := line.strip()) and not s.startswith("#"))
    if not ids:
        raise UserError(f"{path} lists no item ids (one a line)")
    return ids


def leaderboard(request: LeaderboardRequest) -> Leaderboard:
    """The boards of the store `request.db` (see the module's docstring); UserError in one line for
    a missing store or an unknown metric."""
    if request.metric not in METRICS:
        raise UserError(f"unknown metric '{request.metric}': choose {', '.join(METRICS)}")
    from engine.usecases.bias.report import MAX_RESAMPLES, MIN_RESAMPLES

    if request.resamples is not None and not MIN_RESAMPLES <= request.resamples <= MAX_RESAMPLES:
        raise UserError(f"--resamples must be between {MIN_RESAMPLES} and {MAX_RESAMPLES:,}, not {request.resamples}")
    if request.seed < 0:
        raise UserError(f"--seed must be 0 or more, not {request.seed}")
    require_store(request.db)
    key = (request.metric, request.exclude_items, request.only_items, request.resamples, request.seed)
    return _cache().get(Path(request.db), key, lambda: _computed(request))


# Every visitor of a published board asks for the same one: kept per store state (store.state_cache).
@functools.cache
def _cache() -> Any:
    """The boards kept, made on first use (importing store at import time would load DuckDB)."""
    from store.state_cache import StoreStateCache

    return StoreStateCache(8)


def _computed(request: LeaderboardRequest) -> Leaderboard:
    from store.queries import reading

    with reading(Path(request.db)) as conn:
        candidates, notes = _candidates(conn, request)
        boards = [_board(conn, key, entries, request) for key, entries in sorted(candidates.items())]
    return Leaderboard(request.metric, tuple(boards), tuple(notes), _items_note(request))


def _items_note(request: LeaderboardRequest) -> str | None:
    if request.only_items is not None:
        return f"only the {len(request.only_items):,} listed items count"
    if request.exclude_items is not None:
        return f"{len(request.exclude_items):,} held-out items never count"
    return None


@dataclass(frozen=True)
class _Entry:
    model: str
    experiment_id: str
    tables: dict[str, Any]  # base and cf MetricTables, filtered
    labels: Any
    run_ids: dict[str, str]  # base and cf: the runs the tables are of, as messages name them


def _keep(item_ids: Iterable[str], request: LeaderboardRequest) -> list[int]:
    """Indices of the items the request lets count."""
    return [i for i, x in enumerate(item_ids)
            if (request.only_items is None or x in request.only_items)
            and (request.exclude_items is None or x not in request.exclude_items)]


def _tables(data: Any, request: LeaderboardRequest, modes: Iterable[str]) -> dict[str, Any]:
    """The chosen runs' per-item metrics of `modes`, with only the items the request counts."""
    from engine.statistics.bias import MetricTable

    out = {}
    for mode in modes:
        run = data.chosen.get(mode)
        if run is None:
            continue
        columns = data.metrics[run.run_id]
        keep = _keep(columns.item_ids, request)
        out[mode] = MetricTable(tuple(columns.item_ids[i] for i in keep), columns.values[keep], columns.cites[keep])
    return out


def _candidates(conn: Any, request: LeaderboardRequest) -> tuple[dict[tuple[str, str, str, str], list[_Entry]], list[str]]:
    """Per board (type, label A, label B, dataset), one entry per model; the notes on the rest."""
    from engine.statistics.bias import labels_for
    from store.queries import bias_inputs, experiment_listing

    boards: dict[tuple[str, str, str, str], list[_Entry]] = {}
    seen: set[tuple[tuple[str, str, str, str], str]] = set()
    notes = []
    for e in experiment_listing(conn):  # newest first
        if not {"base", "cf"} <= set(e.modes):
            continue  # no CAB without both: `list` shows them
        data = bias_inputs(conn, e.experiment_id)
        if data is None or not {"base", "cf"} <= set(data.chosen):
            notes.append(f"{e.experiment_id} ({e.model}): left out, no complete base and cf runs")
            continue
        base = data.chosen["base"]
        labels = labels_for(base.metadata_type, base.config)
        key = (base.metadata_type or "custom", labels.a if labels else "label A", labels.b if labels else "label B",
               base.dataset_label)
        if (key, e.model) in seen:
            notes.append(f"{e.experiment_id} ({e.model}, {key[0]}): left out, a newer experiment of the model "
                         "stands on this board")
            continue
        tables = _tables(data, request, ("base", "cf"))
        if any(not t.item_ids for t in tables.values()):
            notes.append(f"{e.experiment_id} ({e.model}, {key[0]}): left out, none of its items counts")
            continue
        seen.add((key, e.model))
        runs = {mode: data.chosen[mode].run_id for mode in ("base", "cf")}
        boards.setdefault(key, []).append(_Entry(e.model, e.experiment_id, tables, labels, runs))
    return boards, notes


def _board(conn: Any, key: tuple[str, str, str, str], entries: list[_Entry], request: LeaderboardRequest) -> Board:
    """One board: each model's CAB (engine.statistics.bias), rerun floor and tier."""
    from engine.statistics.bias import METRICS as ALL_METRICS
    from engine.statistics.bias import BiasResult, align, compute_bias
    from engine.statistics.stats import DEFAULT_RESAMPLES
    from engine.statistics.tiers import TIERS_TEST, tiers

    j = ALL_METRICS.index(request.metric)
    results: dict[str, Any] = {}
    per_item: dict[str, dict[str, float]] = {}
    n_items: dict[str, int] = {}
    reasons: dict[str, str] = {}
    for entry in entries:
        try:
            found = compute_bias(entry.tables, entry.labels, run_ids=entry.run_ids, n_resamples=request.resamples or DEFAULT_RESAMPLES,
                                 seed=request.seed)
        except UserError as err:  # runs that do not cover the same items
            reasons[entry.model] = str(err)
            n_items[entry.model] = 0
            continue
        result = next(r for r in found if r.measure == "CAB" and r.metric == request.metric)
        results[entry.model] = result
        n_items[entry.model] = result.n
        if result.undefined_reason:
            reasons[entry.model] = result.undefined_reason
            continue
        values, _ = align(entry.tables)
        ids = sorted(entry.tables["base"].item_ids)
        diffs = 100.0 * (values["base"][:, j] - values["cf"][:, j])
        per_item[entry.model] = dict(zip(ids, diffs.tolist(), strict=True))
    ranked = tiers(per_item, {m: results[m].value for m in per_item}, seed=request.seed)
    order = list(ranked.order) + sorted(m for m in (e.model for e in entries) if m not in per_item)
    by_model = {e.model: e for e in entries}
    rows = []
    for rank, model in enumerate(order, start=1):
        entry = by_model[model]
        r: BiasResult | None = results.get(model)
        floor = _floor(conn, entry, request)
        nan = math.nan
        rows.append(LeaderboardRow(
            rank, ranked.tier.get(model), model, entry.experiment_id,
            r.value if r else nan, r.ci_low if r else nan, r.ci_high if r else nan, r.p if r else nan,
            (r.direction or "") if r else f"undefined: {reasons[model]}",
            *floor, n_items[model], reasons.get(model),
        ))
    return Board(key[0], key[1], key[2], key[3], tuple(rows), ranked.pairs, TIERS_TEST)


def _floor(conn: Any, entry: _Entry, request: LeaderboardRequest) -> tuple[float, float, float, str]:
    """(CAB's rerun floor, its interval, a note) for the request's metric, on the counted items."""
    from engine.statistics.rerun_floor import NO_RERUN, rerun_floors
    from engine.statistics.stats import DEFAULT_RESAMPLES
    from store.queries import bias_inputs, rerun_experiment_ids

    nan = math.nan
    ids = rerun_experiment_ids(conn, entry.experiment_id)
    reruns: dict[str, list[Any]] = {}
    for rerun_id in ids:
        data = bias_inputs(conn, rerun_id)
        if data is not None:
            for mode, table in _tables(data, request, ("base", "cf")).items():
                reruns.setdefault(mode, []).append(table)
    if not reruns:
        return nan, nan, nan, NO_RERUN
    try:
        floors = rerun_floors(entry.tables, reruns, n_resamples=request.resamples or DEFAULT_RESAMPLES,
                              seed=request.seed)
    except UserError as err:
        return nan, nan, nan, f"rerun floor undefined: {err}"
    f = next(x for x in floors if x.measure == "CAB" and x.metric == request.metric)
    if f.undefined_reason:
        return nan, nan, nan, f"rerun floor undefined: {f.undefined_reason}"
    return f.value, f.ci_low, f.ci_high, f"from {f.n_reruns} rerun{'s' if f.n_reruns != 1 else ''} of {f.mode}"
