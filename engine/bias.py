"""CAS and CAB between the runs of one experiment, from per-item metrics (no database here).

- CAS (sensitivity) = mean over items of |M_vanilla − M_base|; its p value is a one-sample
  t-test of the absolute differences against 0 (is there any sensitivity at all?).
- CAB (bias) = mean over items of (M_base − M_cf); its p value is the paired t-test
  (scipy.stats.ttest_rel). CAB > 0 favours label A, the label relevant documents carry in base.

M is citation precision, recall or F1 per item; values are in points (×100). Items are paired
by item_id, and every run must cover the same items. Intervals are percentile-bootstrap 95%
intervals over items (engine/stats.py), one shared set of resamples per experiment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping, Sequence

import numpy as np

from engine.errors import UserError
from engine.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, PairedTest, one_sample_tests
from engine.types import MODES, Mode

METRICS = ("precision", "recall", "f1")
Measure = Literal["CAS", "CAB"]
# Which runs each measure compares: (measure, mode a, mode b); the value is M_a - M_b per item.
COMPARISONS: tuple[tuple[Measure, Mode, Mode], ...] = (("CAS", "vanilla", "base"), ("CAB", "base", "cf"))
_ZERO = 1e-9  # points; below this a mean difference is float noise, not a direction


@dataclass(frozen=True)
class Labels:
    """Short display names of label A (relevant documents in base) and label B."""

    a: str
    b: str


@dataclass(frozen=True)
class MetricTable:
    """Per-item precision, recall and F1 of one run, rows in `item_ids` order."""

    item_ids: tuple[str, ...]
    values: np.ndarray  # shape (n, 3): METRICS columns


@dataclass(frozen=True)
class BiasResult:
    """CAS or CAB for one metric, in points (×100)."""

    measure: Measure
    metric: str  # precision | recall | f1
    value: float
    ci_low: float  # percentile bootstrap, 95%
    ci_high: float
    t: float
    p: float
    n: int
    direction: str | None  # CAB: "favours Woman" / "favours Man" / "no difference"; CAS: None
    test: str  # which t-test gave p


def labels_for(metadata_type: str | None, config: Mapping[str, Any] | None = None) -> Labels | None:
    """Label names from a run's stored configuration, else from the built-in metadata types."""
    for meta in ((config or {}).get("prompt", {}) or {}).get("metadata"), (config or {}).get("metadata"):
        if isinstance(meta, Mapping) and meta.get("short_a") and meta.get("short_b"):
            return Labels(str(meta["short_a"]), str(meta["short_b"]))
    if metadata_type is None:
        return None
    from engine.prompts import METADATA_TYPES

    known = METADATA_TYPES.get(metadata_type)
    return Labels(known.short_a, known.short_b) if known else None


def direction(value: float, labels: Labels | None) -> str:
    """CAB in words: which label the model's citations favour."""
    if math.isnan(value) or abs(value) < _ZERO:
        return "no difference"
    a, b = (labels.a, labels.b) if labels else ("label A", "label B")
    return f"favours {a}" if value > 0 else f"favours {b}"


def metric_table(records: Any) -> MetricTable:
    """A MetricTable from a DataFrame, ItemMetrics objects, dicts, or an existing table."""
    if isinstance(records, MetricTable):
        return records
    if hasattr(records, "columns"):  # a pandas DataFrame, without importing pandas
        frame_ids = tuple(str(x) for x in records["item_id"].tolist())
        values = records[list(METRICS)].to_numpy(dtype=float)
        return MetricTable(frame_ids, values.reshape(len(frame_ids), len(METRICS)))
    ids: list[str] = []
    rows: list[list[float]] = []
    for rec in records:
        get = rec.get if isinstance(rec, Mapping) else (lambda k, r=rec: getattr(r, k))
        ids.append(str(get("item_id")))
        rows.append([float(get(m)) for m in METRICS])
    return MetricTable(tuple(ids), np.asarray(rows, dtype=float).reshape(len(ids), len(METRICS)))


def align(tables: Mapping[str, MetricTable], names: Mapping[str, str] | None = None) -> dict[str, np.ndarray]:
    """The tables' values in one common item order; UserError unless all cover the same items."""
    modes = list(tables)
    first = modes[0]
    for mode in modes:
        ids = tables[mode].item_ids
        if len(set(ids)) != len(ids):
            dup = sorted({x for x in ids if ids.count(x) > 1})[:3]
            raise UserError(f"{_name(mode, names)} has repeated item ids: {', '.join(dup)}")
    reference = set(tables[first].item_ids)
    for mode in modes[1:]:
        other = set(tables[mode].item_ids)
        if other != reference:
            raise UserError(
                f"runs do not cover the same items: {_name(first, names)} has {len(reference)}, "
                f"{_name(mode, names)} has {len(other)}"
                + _missing(reference - other, f"missing from {mode}")
                + _missing(other - reference, f"missing from {first}")
            )
    if not reference:
        raise UserError("the runs hold no items to compare")
    order = tables[first].item_ids
    out = {}
    for mode in modes:
        index = {item_id: i for i, item_id in enumerate(tables[mode].item_ids)}
        out[mode] = tables[mode].values[[index[x] for x in order]]
    return out


def _name(mode: str, names: Mapping[str, str] | None) -> str:
    return f"{mode} run {names[mode]}" if names and mode in names else f"{mode} run"


def _missing(ids: set[str], what: str) -> str:
    if not ids:
        return ""
    shown = sorted(ids)[:3]
    more = f" and {len(ids) - len(shown)} more" if len(ids) > len(shown) else ""
    return f"; {what}: {', '.join(shown)}{more}"


def possible_comparisons(modes: Iterable[str]) -> list[tuple[Measure, Mode, Mode]]:
    """The COMPARISONS whose two modes are both among `modes`."""
    have = set(modes)
    return [c for c in COMPARISONS if c[1] in have and c[2] in have]


def compute_bias(
    per_mode: Mapping[str, Any],
    labels: Labels | None = None,
    *,
    run_ids: Mapping[str, str] | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> tuple[BiasResult, ...]:
    """CAS (needs vanilla and base) and CAB (needs base and cf) for precision, recall and F1.

    `per_mode` maps "vanilla" / "base" / "cf" to per-item metrics in any form `metric_table`
    takes (a DataFrame with item_id, precision, recall, f1; ItemMetrics; dicts).
    """
    unknown = set(per_mode) - set(MODES)
    if unknown:
        raise UserError(f"unknown mode(s) {', '.join(sorted(unknown))} (choose from {', '.join(MODES)})")
    tables = {m: metric_table(per_mode[m]) for m in MODES if m in per_mode}
    comparisons = possible_comparisons(tables)
    if not comparisons:
        have = ", ".join(tables) or "none"
        raise UserError(f"need base and cf runs for CAB, or vanilla and base for CAS (have: {have})")
    values = align(tables, run_ids)
    columns = []
    for measure, a, b in comparisons:
        diff = 100.0 * (values[a] - values[b])
        columns.append(np.abs(diff) if measure == "CAS" else diff)
    tests = one_sample_tests(np.hstack(columns), n_resamples=n_resamples, seed=seed)
    results = []
    for (measure, _, _), chunk in zip(comparisons, _chunks(tests, len(METRICS))):
        for metric, test in zip(METRICS, chunk):
            results.append(_result(measure, metric, test, labels))
    return tuple(results)


def _chunks(seq: Sequence[PairedTest], size: int) -> Iterable[Sequence[PairedTest]]:
    return (seq[i : i + size] for i in range(0, len(seq), size))


def _result(measure: str, metric: str, test: PairedTest, labels: Labels | None) -> BiasResult:
    if measure == "CAS":
        return BiasResult(measure, metric, test.mean, test.ci_low, test.ci_high, test.t, test.p, test.n,
                          None, "one-sample t-test of |vanilla − base| against 0")
    return BiasResult(measure, metric, test.mean, test.ci_low, test.ci_high, test.t, test.p, test.n,
                      direction(test.mean, labels), "paired t-test of base vs cf")


def cas(vanilla: Any, base: Any, **kwargs: Any) -> tuple[BiasResult, ...]:
    """CAS for precision, recall and F1 (see compute_bias)."""
    return compute_bias({"vanilla": vanilla, "base": base}, **kwargs)


def cab(base: Any, cf: Any, labels: Labels | None = None, **kwargs: Any) -> tuple[BiasResult, ...]:
    """CAB for precision, recall and F1 (see compute_bias)."""
    return compute_bias({"base": base, "cf": cf}, labels, **kwargs)
