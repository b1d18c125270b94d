"""Compare two runs, two experiments' modes or two whole experiments on the same items.

`compare(CompareRequest(a, b), db)` returns a typed Comparison: per pair of runs a table of
metrics (mean in A and in B, B - A with its 95% interval, the p value of the test that gives
the verdict with its Holm correction, TOST where a margin applies, the smallest difference the
items could detect), the flips, and a DataFrame of the items; between two whole experiments
also the CAS and CAB of one against the other's, item by item. The statistics and their rules
are engine.statistics.compare_stats' (docs/method.md, "Comparing two runs").

A reference is a run id, an experiment (id or name) with a mode ("EXP:base"), or a whole
experiment (then mode by mode). The statistics are engine.statistics.compare_stats'; the reads are
store.queries.compare'.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.errors import FieldError, UserError, WordedError
from engine.paths import default_db_path, require_store
from engine.statistics.asymptotic import ASYMPTOTIC_ABOVE
from engine.statistics.compare_stats import (
    DEFAULT_METRICS,
    METRICS,
    PERMUTATIONS,
    MetricComparison,
    MetricSpec,
    compare_metric,
    compare_metrics,
    large_sample,
    paired_permutations,
    with_holm,
)
from engine.statistics.flips import CitationFlips, EmFlips, em_flips
from engine.statistics.stats import BOOTSTRAP_APPROXIMATE_BELOW, DEFAULT_RESAMPLES
from engine.types import MODES
from engine.usecases.compare.sides import json_ready
from engine.usecases.runs.rerun_marks import PairRerunMarks, pair_marks

if TYPE_CHECKING:
    import pandas as pd

    from store.db import DbLike
    from store.queries._read import Readable
    from store.queries.compare import CompareRun, PairedItems, Side

MIN_RESAMPLES = 100
MAX_RESAMPLES = 100_000
# CAS and CAB (engine/statistics/bias.py): per item |M_vanilla - M_base| and M_base - M_cf, for these.
BIAS_METRICS = ("precision", "recall", "f1")
BIAS_MODES = {"CAS": ("vanilla", "base"), "CAB": ("base", "cf")}
# Every name a margin can be given for: the metrics, and CAS and CAB of two experiments.
MARGIN_NAMES = (*METRICS, *(f"{m}_{x}" for m in BIAS_MODES for x in BIAS_METRICS))


@dataclass(frozen=True)
class Margins:
    """Equivalence margins (TOST) in the units shown. `points` applies to every metric measured
    in points (x100: all but n_citations, CAS and CAB included); `named` gives a metric its own,
    over `points`. A metric with neither gets no equivalence test: one number cannot mean the
    same for a share in points and for citations per answer."""

    points: float | None = None
    named: tuple[tuple[str, float], ...] = ()

    def for_metric(self, spec: MetricSpec) -> float | None:
        """This metric's margin, or None."""
        own = dict(self.named).get(spec.name)
        if own is not None:
            return own
        return self.points if spec.scale == 100.0 else None

    def as_dict(self) -> dict[str, Any]:
        return {"points": self.points, "named": dict(self.named)}

    def __str__(self) -> str:
        parts = [] if self.points is None else [f"{self.points:g}"]
        return ",".join(parts + [f"{k}={v:g}" for k, v in self.named])


def parse_margins(value: Any) -> Margins | None:
    """Margins from a number (the margin in points) or text: "5", "precision=5,recall=5",
    "5,n_citations=0.2" (a bare number is the margin in points, names override it). Blank: None.
    One-line UserError for a bad entry; the values are checked by compare (positive, finite)."""
    if value is None or isinstance(value, Margins):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Margins(points=float(value))
    text = str(value).strip()
    if not text:
        return None
    points: float | None = None
    named: dict[str, float] = {}
    for entry in (e.strip() for e in text.replace(";", ",").split(",")):
        if not entry:
            continue
        name, eq, number = entry.rpartition("=")
        name = name.strip()
        if eq and not name:
            raise UserError(f"margin entry '{entry[:40]}' has no metric name before '='")
        try:
            margin = float(number)
        except ValueError:
            raise UserError(f"margin '{entry[:40]}' is not NAME=NUMBER or a number (e.g. 5 or precision=5,recall=5)") \
                from None
        if not eq:
            if points is not None:
                raise UserError(f"give one plain margin (the margin in points), not {points:g} and {margin:g}")
            points = margin
        elif name not in MARGIN_NAMES:
            raise UserError(f"margin for unknown metric '{name[:40]}'; choose from {', '.join(MARGIN_NAMES)}")
        elif name in named:
            raise UserError(f"two margins for {name}")
        else:
            named[name] = margin
    if points is None and not named:
        return None
    return Margins(points, tuple(named.items()))


@dataclass(frozen=True)
class CompareRequest:
    """What to compare and how. Margins are in the units shown (Margins): points (x100) for
    shares and scores, citations for n_citations."""

    a: str
    b: str
    metrics: tuple[str, ...] = DEFAULT_METRICS
    margins: Margins | str | float | None = None  # text or a number is read by parse_margins
    pair_by_id: bool = False
    resamples: int = DEFAULT_RESAMPLES
    seed: int = 0
    permutations: int = PERMUTATIONS
    exact: bool = False  # the permutation and exact tests at any size, not the large-sample ones


@dataclass(frozen=True)
class Pairing:
    """How many items were paired, and how many of each side's were left out."""

    n_paired: int
    only_a: int
    only_b: int
    pair_by_id: bool  # the datasets differ and the items were paired by id on request


@dataclass(frozen=True)
class RunComparison:
    """Run B against run A on the items both hold."""

    title: str  # the mode, or "runs"
    run_a: CompareRun
    run_b: CompareRun
    pairing: Pairing
    metrics: tuple[MetricComparison, ...]  # Holm-corrected together
    em_flips: EmFlips | None  # None when no paired item has gold answers
    citation_flips: CitationFlips
    # item_id, <metric>_a, <metric>_b, <metric>_diff (units shown), changes_on_rerun (None without
    # a rerun of either run); sorted by sort_metric
    items: pd.DataFrame
    sort_metric: str  # items are sorted by |<sort_metric>_diff|, largest first
    notes: tuple[str, ...]  # runs still running or failed
    reruns: PairRerunMarks  # how many items change on a rerun of run A or B too

    def table(self) -> pd.DataFrame:
        """One row per metric (the columns of MetricComparison, equivalence flattened)."""
        return metric_table(self.metrics)

    def top_items(self, n: int) -> pd.DataFrame:
        """The n items whose sort_metric differs most between the runs."""
        return self.items.head(n)


@dataclass(frozen=True)
class BiasComparison:
    """CAS or CAB of experiment B against experiment A, item by item on the items all four runs hold."""

    measure: str  # "CAS" | "CAB"
    runs_a: tuple[CompareRun, CompareRun]  # the two modes the measure compares, in experiment A
    runs_b: tuple[CompareRun, CompareRun]
    pairing: Pairing  # only_a / only_b: items of A's (B's) runs left out
    metrics: tuple[MetricComparison, ...]
    items: pd.DataFrame  # item_id, <measure>_<metric>_a, _b, _diff

    def table(self) -> pd.DataFrame:
        return metric_table(self.metrics)


@dataclass(frozen=True)
class Comparison:
    """Everything `compare A B` found."""

    request: CompareRequest
    side_a: Side
    side_b: Side
    runs: tuple[RunComparison, ...]  # one, or one per mode both experiments hold
    bias: tuple[BiasComparison, ...]  # between two whole experiments: CAS and CAB where both have the modes

    @property
    def approximate_below(self) -> int:
        """Bootstrap intervals on fewer items than this are approximate (each metric's ci_approximate):
        what a face says beside them."""
        return BOOTSTRAP_APPROXIMATE_BELOW

    def table(self) -> pd.DataFrame:
        """Every metric of every comparison, one row each, the comparison named in `comparison`."""
        import pandas as pd

        frames = [r.table().assign(comparison=r.title) for r in self.runs]
        frames += [b.table().assign(comparison=b.measure) for b in self.bias]
        frame = pd.concat(frames, ignore_index=True)
        return frame[["comparison", *[c for c in frame.columns if c != "comparison"]]]

    def items(self) -> pd.DataFrame:
        """Every pair's per-item rows, with the comparison and both run ids (to open an item)."""
        import pandas as pd

        frames = [r.items.assign(comparison=r.title, run_a=r.run_a.run_id, run_b=r.run_b.run_id) for r in self.runs]
        frame = pd.concat(frames, ignore_index=True)
        first = ["comparison", "run_a", "run_b", "item_id"]
        return frame[first + [c for c in frame.columns if c not in first]]

    def as_dict(self, items: int | None = 10) -> dict[str, Any]:
        """JSON-ready (NaN as None), with at most `items` items per pair (None: all)."""
        return json_ready({
            "a": self.request.a, "b": self.request.b,
            "margins": m.as_dict() if (m := parsed_margins(self.request)) else None,
            "bootstrap": {"method": "percentile", "resamples": self.request.resamples, "seed": self.request.seed},
            "large_sample_above": None if self.request.exact else ASYMPTOTIC_ABOVE,  # differing pairs
            "difference": "B - A",
            "runs": [{
                "comparison": r.title, "run_a": asdict(r.run_a), "run_b": asdict(r.run_b),
                "pairing": asdict(r.pairing), "metrics": [asdict(m) for m in r.metrics],
                "em_flips": asdict(r.em_flips) if r.em_flips else None,
                "citation_flips": asdict(r.citation_flips), "notes": list(r.notes), "sort_metric": r.sort_metric,
                "reruns": {**asdict(r.reruns), "line": r.reruns.line()},
                "items": (r.items if items is None else r.items.head(items)).to_dict("records"),
            } for r in self.runs],
            "bias": [{
                "measure": b.measure, "runs_a": [x.run_id for x in b.runs_a], "runs_b": [x.run_id for x in b.runs_b],
                "pairing": asdict(b.pairing), "metrics": [asdict(m) for m in b.metrics],
            } for b in self.bias],
        })


TOST_COLUMNS = {"margin": "margin", "tost_method": "method", "tost_p": "p", "tost_p_holm": "p_holm",
                "tost_undefined": "undefined"}


def metric_table(metrics: tuple[MetricComparison, ...]) -> pd.DataFrame:
    """MetricComparisons as rows; the equivalence test flattened into TOST_COLUMNS (None where
    no margin applies)."""
    import pandas as pd

    rows = []
    for m in metrics:
        row = asdict(m)
        eq = row.pop("equivalence")
        row.update({column: eq[field] if eq else None for column, field in TOST_COLUMNS.items()})
        rows.append(row)
    return pd.DataFrame(rows, columns=[*(f for f in MetricComparison.__dataclass_fields__ if f != "equivalence"),
                                       *TOST_COLUMNS])


def compare(request: CompareRequest, db: DbLike | None = None) -> Comparison:
    """Compare B against A (see the module docstring) in the store `db` (a path or a
    store.db.Database; default: $PATTRIEVAL_DB or results/pattrieval.duckdb). User mistakes
    raise UserError."""
    request = replace(request, margins=parse_margins(request.margins))
    _check(request)
    db = require_store(default_db_path() if db is None else db)
    from store.queries import reading

    with reading(db) as conn:  # both references in one open of the store
        side_a, side_b = _resolved(conn, request.a), _resolved(conn, request.b)
    for side in (side_a, side_b):
        if not side.runs:
            mode = side.reference.rpartition(":")[2]
            has = ", ".join(sorted({r.rag_mode for r in side.ignored})) or "none"
            raise UserError(f"'{side.reference}' names no {mode} run (its experiment has: {has})")
    pairs = _pairs(side_a, side_b)
    runs = tuple(_compare_runs(db, request, title, ra, rb) for title, ra, rb in pairs)
    bias: tuple[BiasComparison, ...] = ()
    if side_a.kind == side_b.kind == "experiment":
        bias = tuple(_compare_bias(db, request, measure, side_a, side_b) for measure, (m1, m2) in BIAS_MODES.items()
                     if all(m in side.runs for side in (side_a, side_b) for m in (m1, m2)))
    return Comparison(request, side_a, side_b, runs, bias)


def _resolved(db: Readable, reference: str) -> Side:
    from store.queries.compare import resolve_side

    side = resolve_side(db, reference)
    if side is None:
        raise WordedError("'{reference}' is neither a run id nor an experiment (id or name, optionally with "
                          ":vanilla, :base or :cf); {see_runs}", reference=reference)
    return side


def _check(request: CompareRequest) -> None:
    unknown = [m for m in request.metrics if m not in METRICS]
    if unknown:
        raise UserError(f"unknown metric {', '.join(unknown)}; choose from {', '.join(METRICS)}")
    if not request.metrics:
        raise UserError("give at least one metric")
    if not MIN_RESAMPLES <= request.resamples <= MAX_RESAMPLES:
        raise UserError(f"--resamples must be between {MIN_RESAMPLES} and {MAX_RESAMPLES:,}, not {request.resamples}")
    if request.seed < 0:
        raise UserError(f"--seed must be 0 or more, not {request.seed}")
    margins = parsed_margins(request)
    if margins is not None:
        entries = ([("", margins.points)] if margins.points is not None else []) + list(margins.named)
        for name, margin in entries:
            if not (math.isfinite(margin) and margin > 0):
                which = f": {name}" if name else ""
                raise FieldError("margin", "{margin}{which} must be a positive number (in points for shares), "
                                 "not {value}", which=which, value=f"{margin:g}")
            if name and name not in MARGIN_NAMES:
                raise FieldError("margin", "{margin}: unknown metric '{name}'; choose from {names}", name=name,
                                 names=", ".join(MARGIN_NAMES))


def _pairs(side_a: Side, side_b: Side) -> list[tuple[str, CompareRun, CompareRun]]:
    """Which runs to compare: the two runs; mode by mode for two experiments; a single run
    against the same mode of an experiment."""
    if side_a.kind != "experiment" and side_b.kind != "experiment":
        (ra,), (rb,) = side_a.runs.values(), side_b.runs.values()
        return [("runs" if ra.rag_mode != rb.rag_mode else ra.rag_mode, ra, rb)]
    if side_a.kind == side_b.kind == "experiment":
        modes = [m for m in MODES if m in side_a.runs and m in side_b.runs]
        if not modes:
            raise UserError(f"experiments '{side_a.reference}' ({', '.join(side_a.runs)}) and '{side_b.reference}' "
                            f"({', '.join(side_b.runs)}) have no mode in common")
        return [(m, side_a.runs[m], side_b.runs[m]) for m in modes]
    single, whole = (side_a, side_b) if side_b.kind == "experiment" else (side_b, side_a)
    (run,) = single.runs.values()
    if run.rag_mode not in whole.runs:
        raise UserError(f"experiment '{whole.reference}' has no {run.rag_mode} run to compare with run {run.run_id} "
                        f"(it has {', '.join(whole.runs)})")
    other = whole.runs[run.rag_mode]
    ra, rb = (run, other) if single is side_a else (other, run)
    return [(run.rag_mode, ra, rb)]


def _notes(runs: tuple[CompareRun, ...], names: tuple[str, ...]) -> tuple[str, ...]:
    out = []
    for name, run in zip(names, runs, strict=True):
        if run.status != "complete":
            planned = f" of {run.n_items}" if run.n_items is not None else ""
            out.append(f"{name}: run {run.run_id} is {run.status} ({run.n_done}{planned} items stored); "
                       "compared on the items stored so far")
    return tuple(out)


def _read(db: Readable, request: CompareRequest, runs: tuple[CompareRun, ...]) -> PairedItems:
    from store.queries.compare import read_paired

    paired = read_paired(db, runs, pair_by_id=request.pair_by_id)
    if not paired.item_ids:
        held = " and ".join(f"run {r.run_id} holds {r.n_done}" for r in runs)
        raise UserError(f"no item is held by all of {', '.join(r.run_id for r in runs)} ({held}): nothing to pair")
    return paired


def _compare_runs(db: DbLike, request: CompareRequest, title: str, run_a: CompareRun, run_b: CompareRun) -> RunComparison:
    import pandas as pd

    from store.queries import reading
    from store.queries.citation_flips import citation_flip_counts
    from store.queries.rerun_changes import rerun_changes

    # The metrics, the citation flips and the reruns' changes in one read transaction: of a run
    # still being written, all count the same answers.
    with reading(db) as conn:
        paired = _read(conn, request, (run_a, run_b))
        # Counted in the store: pairing every item's document lists in Python cost seconds per
        # million items; citation_flip_counts is citation_flips' definition in SQL.
        cited = CitationFlips(*citation_flip_counts(conn, run_a.run_id, run_b.run_id))
        reruns, on_rerun = pair_marks(rerun_changes(conn, (run_a.run_id, run_b.run_id)), run_a.run_id,
                                      run_b.run_id, paired.item_ids)
    a, b = paired.metrics
    metrics = _silent(compare_metrics(a, b, request.metrics, margins=_margins(request, request.metrics),
                                      n_resamples=request.resamples, seed=request.seed,
                                      permutations=request.permutations, exact=request.exact), a, b)
    compared = [m.metric for m in metrics]
    sort_metric = "f1" if "f1" in compared else (compared[0] if compared else request.metrics[0])
    columns: dict[str, Any] = {"item_id": list(paired.item_ids)}
    for name in request.metrics:
        scale = METRICS[name].scale
        columns[f"{name}_a"] = a[name] * scale
        columns[f"{name}_b"] = b[name] * scale
        columns[f"{name}_diff"] = (b[name] - a[name]) * scale
    columns["changes_on_rerun"] = pd.array(on_rerun, dtype="boolean")
    items = pd.DataFrame(columns)
    order = np.argsort(-np.nan_to_num(np.abs(items[f"{sort_metric}_diff"].to_numpy()), nan=-1.0), kind="stable")
    items = items.iloc[order].reset_index(drop=True)
    flips = em_flips(a["exact_match"], b["exact_match"])
    return RunComparison(
        title, run_a, run_b, Pairing(len(paired.item_ids), paired.left_out[0], paired.left_out[1], paired.pair_by_id),
        metrics, flips if flips.n else None, cited, items, sort_metric,
        _notes((run_a, run_b), ("A", "B")) + tuple(
            f"{name}: no paired item has a value in both runs; left out" for name in request.metrics
            if name not in compared) + _margin_notes(request, compared),
        reruns,
    )


NEITHER_CITES = "undefined: no paired answer of either run cites anything (every citation metric is 0 by construction)"


def _silent(metrics: tuple[MetricComparison, ...], a: dict[str, Any], b: dict[str, Any]) -> tuple[MetricComparison, ...]:
    """Where no paired answer of either run cites, precision, recall and F1 are 0 on both sides by
    construction: no test, no p, and a verdict that says so (as `bias` says "undefined"), never
    "no significant difference"."""
    nothing_a, nothing_b = (np.asarray(x["cites_nothing"], dtype=float) for x in (a, b))
    if not (nothing_a.size and np.all(nothing_a == 1.0) and np.all(nothing_b == 1.0)):
        return metrics
    return tuple(replace(m, p=math.nan, p_holm=math.nan, verdict=NEITHER_CITES, equivalence=None)
                 if m.metric in BIAS_METRICS else m for m in metrics)


def parsed_margins(request: CompareRequest) -> Margins | None:
    """The request's margins once compare() has read them (parse_margins): text or a number left
    here would be a caller that skipped it, a bug, not a user mistake."""
    if request.margins is None or isinstance(request.margins, Margins):
        return request.margins
    raise TypeError(f"CompareRequest.margins not parsed: {request.margins!r}; pass it through parse_margins first")


def _margins(request: CompareRequest, names: tuple[str, ...] | list[str]) -> dict[str, float]:
    """metric -> its equivalence margin, for the metrics that have one."""
    margins = parsed_margins(request)
    if margins is None:
        return {}
    specs = {name: METRICS.get(name) or MetricSpec(name, name, False, 100.0) for name in names}
    return {name: m for name, spec in specs.items() if (m := margins.for_metric(spec)) is not None}


def _margin_notes(request: CompareRequest, compared: list[str]) -> tuple[str, ...]:
    margins = parsed_margins(request)
    if margins is None:
        return ()
    given = _margins(request, compared)
    missing = [name for name in compared if name not in given]
    if not missing:
        return ()
    # One note for all: a margin given by name says nothing of the others, and a plain one is in
    # points, which n_citations is not.
    if margins.points is not None:
        return (f"{', '.join(missing)}: no equivalence margin (the plain margin is in points; give NAME=M in the "
                "metric's units)",)
    # Named margins only: short when none of them is compared here (a CAB margin, say, seen from a mode).
    if not given:
        return (f"no equivalence test here: the margins name only {', '.join(n for n, _ in margins.named)}",)
    return (f"equivalence tested only for the metrics given a margin: {', '.join(given)}",)


def _compare_bias(db: DbLike, request: CompareRequest, measure: str, side_a: Side, side_b: Side) -> BiasComparison:
    import pandas as pd

    m1, m2 = BIAS_MODES[measure]
    runs = (side_a.runs[m1], side_a.runs[m2], side_b.runs[m1], side_b.runs[m2])
    paired = _read(db, request, runs)
    columns: dict[str, Any] = {"item_id": list(paired.item_ids)}
    results = []
    per_metric = {}
    for name in BIAS_METRICS:
        per_item = []
        for first, second in (paired.metrics[:2], paired.metrics[2:]):
            d = first[name] - second[name]
            per_item.append(np.abs(d) if measure == "CAS" else d)
        per_metric[name] = per_item
    # One draw of sign patterns for the permutation tests of the metrics that need one.
    pairs = {name: (p[0] * 100, p[1] * 100) for name, p in per_metric.items()}
    small = [name for name, (x, y) in pairs.items() if not large_sample(x, y, request.exact)]
    tests = dict(zip(small, paired_permutations([pairs[name] for name in small], n_resamples=request.permutations,
                                                seed=request.seed), strict=True))
    for name, per_item in per_metric.items():
        spec = MetricSpec(f"{measure}_{name}", f"{measure} {METRICS[name].label}", False, 100.0)
        results.append(compare_metric(spec, per_item[0], per_item[1], margin=_margins(request, [spec.name]).get(spec.name),
                                      n_resamples=request.resamples, seed=request.seed, exact=request.exact,
                                      permutations=request.permutations, permutation=tests.get(name)))
        columns[f"{spec.name}_a"] = per_item[0] * 100
        columns[f"{spec.name}_b"] = per_item[1] * 100
        columns[f"{spec.name}_diff"] = (per_item[1] - per_item[0]) * 100
    left = paired.left_out
    return BiasComparison(measure, runs[:2], runs[2:],
                          Pairing(len(paired.item_ids), max(left[:2]), max(left[2:]), paired.pair_by_id),
                          with_holm(results), pd.DataFrame(columns))

