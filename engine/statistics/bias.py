"""CAS and CAB between the runs of one experiment, from per-item metrics (no database here):
the one definition of their values, intervals, tests and verdicts, which every face prints
(`python -m engine bias`, `report`, the app's Bias tab, engine.api). docs/method.md states them.

- CAS (sensitivity) = mean over items of |M_vanilla - M_base|. Its interval is the percentile
  bootstrap over items. No test of CAS: a mean of absolute values is above 0 whenever anything
  varies. The p beside it is a signed test of vanilla against base (null: vanilla and base cite
  alike on average), labelled as such.
- CAB (bias) = mean over items of (M_base - M_cf), with a percentile-bootstrap interval and a
  paired test of base against cf (null: base and cf cite alike; see `difference_test`), whose
  p gives the verdict. CAB > 0 favours label A, the label relevant documents carry in base.
- Undefined where no answer of the two runs cites a shown document: every M is 0 by
  construction, so 0 would read as "no bias" of a model that never cites.

M is citation precision, recall or F1 per item; values are in points (x100), so the bootstrap
intervals stay within [-100, 100] (CAB) and [0, 100] (CAS). Items are paired by item_id, in
sorted order, and every run must cover the same items. The bootstrap is engine/statistics/stats.py's, one
shared set of resamples per experiment.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from engine.errors import UserError
from engine.prompting.prompts import METADATA_TYPES
from engine.statistics.asymptotic import ASYMPTOTIC_ABOVE
from engine.statistics.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    bootstrap_mean_ci,
    interval_note,
    sign_flip_test,
    t_sf2,
)
from engine.types import MODES, Mode

METRICS = ("precision", "recall", "f1")
Measure = Literal["CAS", "CAB"]
# Which runs each measure compares: (measure, mode a, mode b); the value is M_a - M_b per item.
COMPARISONS: tuple[tuple[Measure, Mode, Mode], ...] = (("CAS", "vanilla", "base"), ("CAB", "base", "cf"))
# Up to this many items whose M differs between the two runs, the test is the sign-flip
# permutation test (exact up to 16, else 4,999 seeded sign patterns: 0.05 s at 1,000); above it,
# the paired t-test, whose size under the null (symmetric differences) is nominal by then. It is
# compare's number (one rule for both, chosen by simulation: engine.statistics.asymptotic). The
# bias view lists the non-zero differences up to this many, so a kept row gives the same p.
PERMUTATION_MAX = ASYMPTOTIC_ABOVE
SIGNIFICANCE = 0.05  # the verdict's level, as Table 2's star
_NULLS = {"CAB": "null: base and cf cite alike", "CAS": "null: vanilla and base cite alike on average"}


@dataclass(frozen=True)
class Labels:
    """Short display names of label A (relevant documents in base) and label B."""

    a: str
    b: str


@dataclass(frozen=True)
class MetricTable:
    """Per-item precision, recall and F1 of one run, rows in `item_ids` order; `cites` says per
    item whether the answer cites a shown document (None where not known)."""

    item_ids: tuple[str, ...]
    values: np.ndarray  # shape (n, 3): METRICS columns
    cites: np.ndarray | None = None  # shape (n,), bool


@dataclass(frozen=True)
class DifferenceTest:
    """A two-sided paired test of mean difference 0, and what it was."""

    p: float
    n_differ: int  # items whose M differs between the two runs
    name: str  # "sign-flip permutation test (exact)" ...
    short: str  # "sign-flip" or "t-test", as verdicts name it


@dataclass(frozen=True)
class BiasResult:
    """CAS or CAB for one metric, in points (x100); NaN value, interval and p where undefined."""

    measure: Measure
    metric: str  # precision | recall | f1
    value: float
    ci_low: float  # percentile bootstrap, 95%; NaN for fewer than two items
    ci_high: float
    p: float  # CAB: the test of base vs cf; CAS: the signed test of vanilla vs base, not of CAS
    n: int  # paired items
    n_differ: int  # items whose M differs between the two runs
    n_cite_a: int | None  # paired items whose answer cites a shown document, in run a / run b
    n_cite_b: int | None
    direction: str | None  # the verdict in words, naming its test; CAS: None unless undefined
    test: str  # which test gave p, and its null
    undefined_reason: str | None  # why value is undefined (NaN), else None
    # "approximate ..." below BOOTSTRAP_APPROXIMATE_BELOW items, "none: ..." where there is no
    # interval (one item, or no spread: engine.statistics.stats.interval_note), else None
    interval_note: str | None


def difference_test(diffs: Sequence[float] | np.ndarray, *, seed: int = DEFAULT_SEED) -> DifferenceTest:
    """The paired test of mean difference 0 behind every bias p, on the per-item differences
    M_a - M_b in item order: the sign-flip permutation test (engine.statistics.stats.sign_flip_test) while at
    most PERMUTATION_MAX items differ, the paired t-test above.

    Its null: in each item, either run's M was as likely to be the higher one (the labels are
    exchangeable within an item). The sign-flip p is valid at every n (exact, or Monte Carlo
    with scipy's +1); the t-test takes over only where its size is nominal.
    """
    arr = np.asarray(diffs, dtype=float)
    nonzero = arr[arr != 0.0]
    sd = float(arr.std(ddof=1)) if arr.size > 1 else math.nan
    return summary_test(nonzero if nonzero.size <= PERMUTATION_MAX else None, int(nonzero.size), int(arr.size),
                        float(arr.mean()) if arr.size else math.nan, sd, seed=seed)


def summary_test(nonzero: Sequence[float] | np.ndarray | None, n_differ: int, n: int, mean: float, sd: float, *,
                 seed: int = DEFAULT_SEED) -> DifferenceTest:
    """difference_test from what the bias view keeps: the non-zero differences in item order
    (None where more than PERMUTATION_MAX), their count, and all n differences' mean and sd."""
    if n_differ <= PERMUTATION_MAX:
        test = sign_flip_test(np.asarray(nonzero if nonzero is not None else (), dtype=float), seed=seed)
        how = "exact" if test.exact else f"{test.resamples:,} random sign patterns"
        return DifferenceTest(test.p, test.m, f"sign-flip permutation test ({how})", "sign-flip")
    if sd == 0.0:  # every difference equal and non-zero: as scipy's ttest_rel, p = 0
        p = 0.0
    else:
        p = t_sf2(mean / (sd / math.sqrt(n)), n - 1)
    return DifferenceTest(p, n_differ, "paired t-test", "t-test")


def view_row_test(row: Mapping[str, Any], *, seed: int = DEFAULT_SEED) -> DifferenceTest | None:
    """The test of a bias view row (its n, n_differ, mean_diff, sd_diff, differences): the p that
    compute_bias, so `python -m engine bias`, gives at the same seed. None where undefined."""
    if row.get("undefined_reason") or _absent(row.get("mean_diff")):
        return None
    listed = row.get("differences")
    nonzero = None if listed is None or (isinstance(listed, float) and math.isnan(listed)) else list(listed)
    sd = row.get("sd_diff")
    return summary_test(nonzero, int(row["n_differ"]), int(row["n"]), float(row["mean_diff"]),
                        math.nan if sd is None or _absent(sd) else float(sd), seed=seed)


def _absent(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def verdict(value: float, test: DifferenceTest | None, labels: Labels | None, reason: str | None = None) -> str:
    """CAB in words, naming the test that decides: the label the citations favour where its p is
    below SIGNIFICANCE, else that it found no significant difference (or that no item differs);
    "undefined: <reason>" where CAB is undefined."""
    if reason:
        return f"undefined: {reason}"
    if test is None or math.isnan(value):
        return "undefined"
    if test.n_differ == 0:
        return f"no item differs ({test.short} p = 1)"
    if test.p < SIGNIFICANCE and value != 0:
        a, b = (labels.a, labels.b) if labels else ("label A", "label B")
        return f"favours {a if value > 0 else b} ({test.short} p < {SIGNIFICANCE})"
    return f"no significant difference ({test.short} p >= {SIGNIFICANCE})"


def test_name(measure: str, a: str, b: str, test: DifferenceTest | None) -> str:
    """What a bias p tests, with its null, as every face prints it ("none" where undefined)."""
    if test is None:
        return "none (undefined)"
    signed = ", signed: a test of the mean difference, not of CAS" if measure == "CAS" else ""
    return f"{test.name} of {a} vs {b}{signed}; {_NULLS[measure]}"


def undefined_reason(run_a: str, run_b: str) -> str:
    """Why CAS or CAB of two runs is undefined (the bias view writes the same words)."""
    return f"no answer in runs {run_a}/{run_b} cites a shown document"


def labels_for(metadata_type: str | None, config: Mapping[str, Any] | None = None) -> Labels | None:
    """Label names from a run's stored configuration, else from the built-in metadata types."""
    for meta in ((config or {}).get("prompt", {}) or {}).get("metadata"), (config or {}).get("metadata"):
        if isinstance(meta, Mapping) and meta.get("short_a") and meta.get("short_b"):
            return Labels(str(meta["short_a"]), str(meta["short_b"]))
    if metadata_type is None:
        return None

    known = METADATA_TYPES.get(metadata_type)
    return Labels(known.short_a, known.short_b) if known else None


def metric_table(records: Any) -> MetricTable:
    """A MetricTable from a DataFrame, ItemMetrics objects, dicts, or an existing table. Whether
    an answer cites a shown document is read from n_citations and out_of_range_citations (as
    query_metrics and ItemMetrics hold them) or a boolean `cites`, where present."""
    if isinstance(records, MetricTable):
        return records
    if hasattr(records, "columns"):  # a pandas DataFrame, without importing pandas
        frame_ids = tuple(str(x) for x in records["item_id"].tolist())
        values = records[list(METRICS)].to_numpy(dtype=float)
        cites = None
        if "cites" in records.columns:
            cites = records["cites"].to_numpy(dtype=bool)
        elif {"n_citations", "out_of_range_citations"} <= set(records.columns):
            cites = (records["n_citations"] - records["out_of_range_citations"]).to_numpy() > 0
        return MetricTable(frame_ids, values.reshape(len(frame_ids), len(METRICS)), cites)
    ids: list[str] = []
    rows: list[list[float]] = []
    cited: list[bool | None] = []
    for rec in records:
        get: Callable[..., Any] = rec.get if isinstance(rec, Mapping) else (lambda k, d=None, r=rec: getattr(r, k, d))
        ids.append(str(get("item_id")))
        rows.append([float(get(m)) for m in METRICS])
        if get("cites") is not None:
            cited.append(bool(get("cites")))
        elif get("n_citations") is not None and get("out_of_range_citations") is not None:
            cited.append(get("n_citations") - get("out_of_range_citations") > 0)
        else:
            cited.append(None)
    cites = None if None in cited else np.asarray(cited, dtype=bool)
    return MetricTable(tuple(ids), np.asarray(rows, dtype=float).reshape(len(ids), len(METRICS)), cites)


def align(tables: Mapping[str, MetricTable], names: Mapping[str, str] | None = None
          ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray | None]]:
    """The tables' values and `cites` in one common item order (sorted item ids, so that the
    bootstrap and the sign flips draw items as the bias view lists them); UserError unless all
    cover the same items."""
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
    order = sorted(reference)
    values, cites = {}, {}
    for mode in modes:
        index = {item_id: i for i, item_id in enumerate(tables[mode].item_ids)}
        rows = [index[x] for x in order]
        values[mode] = tables[mode].values[rows]
        table_cites = tables[mode].cites
        cites[mode] = None if table_cites is None else np.asarray(table_cites, dtype=bool)[rows]
    return values, cites


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


def mode_tables(per_mode: Mapping[str, Any], also: Iterable[str] = ()
                ) -> tuple[dict[str, MetricTable], list[tuple[Measure, Mode, Mode]]]:
    """`per_mode`'s MetricTables in MODES order and the COMPARISONS they allow; UserError for an
    unknown mode (among per_mode's and `also`) or for no pair to compare."""
    unknown = (set(per_mode) | set(also)) - set(MODES)
    if unknown:
        raise UserError(f"unknown mode(s) {', '.join(sorted(unknown))} (choose from {', '.join(MODES)})")
    tables: dict[str, MetricTable] = {m: metric_table(per_mode[m]) for m in MODES if m in per_mode}
    comparisons = possible_comparisons(tables)
    if not comparisons:
        have = ", ".join(tables) or "none"
        raise UserError(f"need base and cf runs for CAB, or vanilla and base for CAS (have: {have})")
    return tables, comparisons


def compute_bias(
    per_mode: Mapping[str, Any],
    labels: Labels | None = None,
    *,
    run_ids: Mapping[str, str] | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> tuple[BiasResult, ...]:
    """CAS (needs vanilla and base) and CAB (needs base and cf) for precision, recall and F1:
    value, bootstrap interval, the paired test (`difference_test`, same seed) and verdict.

    `per_mode` maps "vanilla" / "base" / "cf" to per-item metrics in any form `metric_table`
    takes (a DataFrame with item_id, precision, recall, f1; ItemMetrics; dicts). Where they say
    whether each answer cites a shown document, a comparison in which none does is undefined.
    """
    tables, comparisons = mode_tables(per_mode)
    values, cites = align(tables, run_ids)
    signed, shown = [], []
    for measure, a, b in comparisons:
        diff = 100.0 * (values[a] - values[b])
        signed.append(diff)
        shown.append(np.abs(diff) if measure == "CAS" else diff)
    n = len(signed[0])
    low, high = map(np.atleast_1d, bootstrap_mean_ci(np.hstack(shown), n_resamples=n_resamples, seed=seed))  # (n, k) in: arrays
    results = []
    for k, (measure, a, b) in enumerate(comparisons):
        n_cite_a = None if (cited_a := cites[a]) is None else int(cited_a.sum())
        n_cite_b = None if (cited_b := cites[b]) is None else int(cited_b.sum())
        reason = None
        if n_cite_a == 0 and n_cite_b == 0:
            names = run_ids or {}
            reason = undefined_reason(names.get(a, a), names.get(b, b))
        for j, metric in enumerate(METRICS):
            col = k * len(METRICS) + j
            test = None if reason else difference_test(signed[k][:, j], seed=seed)
            column = shown[k][:, j]
            value = math.nan if reason else float(column.mean())
            spread = n > 1 and bool(np.any(column != column[0]))
            defined = reason is None and spread
            results.append(BiasResult(
                measure, metric, value,
                float(low[col]) if defined else math.nan, float(high[col]) if defined else math.nan,
                test.p if test else math.nan, n, int(np.count_nonzero(signed[k][:, j])), n_cite_a, n_cite_b,
                verdict(value, test, labels, reason) if measure == "CAB" or reason else None,
                test_name(measure, a, b, test),
                reason,
                None if reason else interval_note(n, spread, float(column[0])),
            ))
    return tuple(results)


def cas(vanilla: Any, base: Any, **kwargs: Any) -> tuple[BiasResult, ...]:
    """CAS for precision, recall and F1 (see compute_bias)."""
    return compute_bias({"vanilla": vanilla, "base": base}, **kwargs)


def cab(base: Any, cf: Any, labels: Labels | None = None, **kwargs: Any) -> tuple[BiasResult, ...]:
    """CAB for precision, recall and F1 (see compute_bias)."""
    return compute_bias({"base": base, "cf": cf}, labels, **kwargs)
