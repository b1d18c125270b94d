"""The rerun floor of CAS and CAB: each measure between a mode and a rerun of that mode under the
same configuration (the same prompts, generated again), so that only the engine's noise differs
(batch composition, padding, the sampling seed). docs/method.md, "The rerun floor", states it.

- CAS floor, per item: the mean over the K reruns of |M_a - M_a^(k)|, where a is vanilla when
  vanilla has reruns, else base. In both cases one of CAS's two runs is replaced by a rerun of
  the other, so the floor is what CAS reads when the labels change nothing.
- CAB floor, per item: M_base - mean_k M_base^(k) (base has reruns), else mean_k M_cf^(k) - M_cf:
  again the second run of CAB replaced by a rerun of the first, or the first by a rerun of the
  second. Its expectation under noise alone is 0; its interval shows how far noise moves CAB.
- The test of CAS against its floor, one-sided: per item, |a - o| (o: the other run of CAS)
  against the mean of |a - a^(k)|. Under the null (no label effect) o and the K reruns are
  exchangeable draws given a, so within each item any of the K + 1 draws could have played o.
  That is scipy.stats.permutation_test(permutation_type="samples", alternative="greater") on
  (o, a^(1), ..., a^(K)) with the statistic mean_i(|a_i - x0_i| - mean_k |a_i - xk_i|) = CAS -
  floor; for K = 1 the one-sided sign-flip test of |a - o| - |a - a'|. The statistic depends only
  on which draw sits first, so the test draws that index, uniformly per item, instead of whole
  permutations: the same null distribution, at 0.7-1.0 s for 10,000 differing items and 9,999
  draws where scipy's own loop took 9 s (K = 1) and about 27 s (K = 3, from 999 draws). Exact
  (every assignment enumerated) while (K + 1)^m <= EXACT_ASSIGNMENTS for m items whose draws
  differ, where the p is scipy's exact p; Monte Carlo above, with scipy's +1 (valid at every n).
- No test of CAB against its floor: CAB's own sign-flip test (engine.statistics.bias) is already
  valid under engine noise. Its null is that base and cf are exchangeable within items; with no
  label effect they are two draws of the same noisy engine, so noise alone cannot make it reject
  more often than its level. CAS needs the floor because a mean of absolute values has no such
  null: it is above 0 whenever anything varies.

Undefined (NaN, with the reason) where there is no rerun, or no answer of the mode and its reruns
cites a shown document (every M is 0 by construction, as in compute_bias). The interval is NaN for
one item and where every item's floor is the same (no spread: no interval from round-off). The
test is undefined for one item, where CAS is undefined, and where no item's draws differ.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import UserError
from engine.statistics.bias import (
    METRICS,
    SIGNIFICANCE,
    BiasResult,
    Measure,
    align,
    metric_table,
    mode_tables,
    undefined_reason,
)
from engine.statistics.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, bootstrap_mean_ci, interval_note

FLOOR_PERMUTATIONS = 9999  # random assignments of the Monte Carlo test: p's error about 0.002 at 0.05
EXACT_ASSIGNMENTS = 2**16  # up to this many assignments, all enumerated (the sign flip's bound)
ASSIGNMENT_CELLS = 4_000_000  # assignment x item draws held at once: 32 MB of indices, 32 MB of values
NO_RERUN = "no rerun floor: `run --reruns 1` measures it"
CAB_NO_TEST = ("none: CAB's own sign-flip test holds under engine noise (with no label effect, base "
               "and cf are exchangeable draws)")


@dataclass(frozen=True)
class FloorTest:
    """The one-sided within-item permutation test of CAS against its rerun floor."""

    p: float
    statistic: float  # CAS - floor, in points
    n_differ: int  # items whose K + 1 absolute differences are not all equal
    exact: bool  # every assignment enumerated; else `resamples` random ones
    resamples: int


@dataclass(frozen=True)
class RerunFloor:
    """One measure's rerun floor for one metric, in points (x100); NaN value, interval and p where
    undefined. For CAB there is no test: p is NaN, `test` says why, verdict is None."""

    measure: Measure
    metric: str  # precision | recall | f1
    value: float
    ci_low: float  # percentile bootstrap, 95% (compute_bias's seed, so the same resampled items)
    ci_high: float
    n: int  # items
    n_reruns: int  # K: reruns of `mode` averaged
    mode: str | None  # the mode whose reruns gave the floor; None where there is none
    p: float  # CAS: the test of CAS against this floor; CAB: NaN
    n_differ: int  # CAS: items whose draws differ (the test's m); CAB: items whose floor is not 0
    test: str  # which test gave p, and its null
    verdict: str | None  # CAS: "above its floor (...)", "not above ...", "undefined: ..."; CAB: None
    undefined_reason: str | None  # why the floor is undefined (NaN), else None
    interval_note: str | None  # "approximate ..." below BOOTSTRAP_APPROXIMATE_BELOW items, or why none


def floor_test(anchor: Sequence[float] | np.ndarray, other: Sequence[float] | np.ndarray,
               reruns: Sequence[Sequence[float] | np.ndarray], *, permutations: int = FLOOR_PERMUTATIONS,
               seed: int = DEFAULT_SEED) -> FloorTest:
    """The test of mean_i(|a_i - o_i| - mean_k |a_i - r_ki|) > 0 for anchor a, other run o and the
    anchor's reruns r_k (one value per item, aligned): scipy.stats.permutation_test's p on
    (o, r_1, ..., r_K), permutation_type="samples", alternative="greater" (see the module's
    docstring). No differing item: p = 1, as scipy gives."""
    a = np.asarray(anchor, dtype=float)
    draws = np.vstack([np.asarray(other, dtype=float)] + [np.asarray(r, dtype=float) for r in reruns])
    k = draws.shape[0] - 1
    if k < 1:
        raise ValueError("the test needs at least one rerun")
    dist = np.abs(a - draws)  # (K + 1, n)
    total = dist.sum(axis=0)
    # Item i's term when draw j sits first: |a - x_j| - mean of the others, = ((K+1)|a - x_j| - sum) / K.
    terms = ((k + 1) * dist - total) / k
    n = a.size
    statistic = float(terms[0].mean()) if n else math.nan
    differ = np.any(dist != dist[0], axis=0)
    m = int(differ.sum())
    if m == 0:
        return FloorTest(1.0, statistic, 0, True, 0)
    u = terms[:, differ]  # only these items move under an assignment; the rest add 0 to every one
    observed = float(u[0].sum())
    # A null sum counts as extreme within this band: far above round-off (m eps of the largest sum),
    # far below a real difference of M; counting more as extreme only makes p larger.
    tol = 1e-9 * float(np.abs(u).max(axis=0).sum())
    exact = (k + 1) ** m <= max(permutations, EXACT_ASSIGNMENTS)
    greater = 0
    if exact:
        total_count = (k + 1) ** m
        powers = (k + 1) ** np.arange(m, dtype=np.int64)
        for start in range(0, total_count, 1 << 14):
            codes = np.arange(start, min(total_count, start + (1 << 14)), dtype=np.int64)
            first = (codes[:, None] // powers) % (k + 1)
            greater += int(np.count_nonzero(u[first, np.arange(m)].sum(axis=1) >= observed - tol))
        return FloorTest(greater / total_count, statistic, m, True, 0)
    rng = np.random.default_rng(seed)
    flat = u.T.ravel()  # item-major: item i's draw j at i (K + 1) + j
    offsets = (np.arange(m, dtype=np.int64) * (k + 1)).astype(np.intp)
    rows = max(1, ASSIGNMENT_CELLS // m)
    for start in range(0, permutations, rows):
        count = min(rows, permutations - start)
        first = rng.integers(0, k + 1, (count, m), dtype=np.intp)
        first += offsets
        greater += int(np.count_nonzero(np.take(flat, first).sum(axis=1) >= observed - tol))
    return FloorTest((greater + 1) / (permutations + 1), statistic, m, False, permutations)


def rerun_floors(per_mode: Mapping[str, Any], reruns: Mapping[str, Sequence[Any]], *,
                 n_resamples: int = DEFAULT_RESAMPLES, permutations: int = FLOOR_PERMUTATIONS,
                 seed: int = DEFAULT_SEED) -> tuple[RerunFloor, ...]:
    """The rerun floor of CAS (vanilla and base given) and CAB (base and cf given) for precision,
    recall and F1, in compute_bias's order: value, bootstrap interval, and for CAS the test
    against its floor and its verdict.

    `per_mode` is compute_bias's (per-item metrics in any form bias.metric_table takes); `reruns`
    maps a mode to a sequence of its reruns in the same forms. CAS's floor comes from vanilla's
    reruns where there are any, else base's; CAB's from base's, else cf's. A measure with no
    rerun of either of its modes gives rows undefined "no rerun of ...". Every run must cover
    the same items (UserError otherwise, as compute_bias).
    """
    tables, comparisons = mode_tables(per_mode, also=reruns)
    orphans = [m for m in reruns if reruns[m] and m not in per_mode]
    if orphans:
        raise UserError(f"a rerun of {', '.join(sorted(orphans))} needs its run")
    rerun_keys: dict[str, list[str]] = {}
    for mode in list(tables):
        for j, records in enumerate(reruns.get(mode, ()) or (), start=1):
            key = f"{mode} rerun {j}"
            tables[key] = metric_table(records)
            rerun_keys.setdefault(mode, []).append(key)
    values, cites = align(tables)
    n = len(values[next(iter(values))])
    plans: list[_Plan] = []
    for measure, a, b in comparisons:
        anchor = a if rerun_keys.get(a) else b if rerun_keys.get(b) else None
        if anchor is None:
            plans.append(_Plan(measure, a, b, None, None, [], None, f"no rerun of {a} or {b}"))
            continue
        other = b if anchor == a else a
        keys = rerun_keys[anchor]
        again = np.stack([values[key] for key in keys])  # (K, n, 3)
        if measure == "CAS":
            floor = 100.0 * np.abs(values[anchor] - again).mean(axis=0)
        elif anchor == a:  # base - its reruns: the rerun stands in for cf
            floor = 100.0 * (values[anchor] - again.mean(axis=0))
        else:  # cf's reruns - cf: the rerun stands in for base
            floor = 100.0 * (again.mean(axis=0) - values[anchor])
        reason = None
        if all(_cites_none(cites[x]) for x in [anchor, *keys]):
            reason = f"no answer in {anchor} or its reruns cites a shown document"
        plans.append(_Plan(measure, a, b, anchor, other, keys, None if reason else floor, reason))
    stacked = [plan.floor if plan.floor is not None else np.zeros((n, len(METRICS))) for plan in plans]
    # (n, k) in: (k,) arrays out; compute_bias's seed and n, so the same resampled items.
    low, high = map(np.atleast_1d, bootstrap_mean_ci(np.hstack(stacked), n_resamples=n_resamples, seed=seed))
    out = []
    for c, plan in enumerate(plans):
        measure, keys, floor, reason = plan.measure, plan.keys, plan.floor, plan.reason
        for j, metric in enumerate(METRICS):
            col = c * len(METRICS) + j
            if floor is None:
                out.append(RerunFloor(measure, metric, math.nan, math.nan, math.nan, n, len(keys), plan.anchor,
                                      math.nan, 0, "none (undefined)",
                                      f"undefined: {reason}" if measure == "CAS" else None, reason, None))
                continue
            column = floor[:, j]
            spread = n > 1 and bool(np.any(column != column[0]))
            note = interval_note(n, spread, float(column[0]))
            lo, hi = (float(low[col]), float(high[col])) if spread else (math.nan, math.nan)
            if measure == "CAB":
                out.append(RerunFloor(measure, metric, float(column.mean()), lo, hi, n, len(keys), plan.anchor,
                                      math.nan, int(np.count_nonzero(column)), CAB_NO_TEST, None, None, note))
                continue
            test, name, verdict = _cas_test(values, cites, plan, j, n, permutations=permutations, seed=seed)
            out.append(RerunFloor(measure, metric, float(column.mean()), lo, hi, n, len(keys), plan.anchor,
                                  test.p if test else math.nan, test.n_differ if test else 0, name, verdict,
                                  None, note))
    return tuple(out)


@dataclass(frozen=True)
class _Plan:
    """Where one measure's floor comes from: the anchor (the mode with reruns), the other run of
    the measure, the reruns' keys, and the per-item floor (n, 3), or why there is none."""

    measure: Measure
    a: str
    b: str
    anchor: str | None
    other: str | None
    keys: list[str]
    floor: np.ndarray | None
    reason: str | None


def _cites_none(cites: np.ndarray | None) -> bool:
    """Known to cite no shown document in any item (None: not known)."""
    return cites is not None and not cites.any()


def _cas_test(values: Mapping[str, np.ndarray], cites: Mapping[str, np.ndarray | None], plan: _Plan, j: int,
              n: int, *, permutations: int, seed: int) -> tuple[FloorTest | None, str, str]:
    """(the test or None, its name, the verdict) of CAS's metric j against its floor."""
    a, b, anchor, other, keys = plan.a, plan.b, plan.anchor, plan.other, plan.keys
    assert anchor is not None and other is not None  # the plan has a floor
    if _cites_none(cites[a]) and _cites_none(cites[b]):
        return None, "none (undefined)", f"undefined: CAS is undefined ({undefined_reason(a, b)})"
    if n < 2:
        return None, "none (undefined)", "undefined: one item"
    runs = [values[anchor][:, j], values[other][:, j], *(values[key][:, j] for key in keys)]
    if all(np.array_equal(runs[0], r) for r in runs[1:]):
        return None, "none (undefined)", f"undefined: no item differs between {a}, {b} and the reruns"
    test = floor_test(100.0 * runs[0], 100.0 * runs[1], [100.0 * r for r in runs[2:]],
                      permutations=permutations, seed=seed)
    if test.n_differ == 0:
        return None, "none (undefined)", (f"undefined: in no item does |{anchor} - {other}| differ from "
                                          f"|{anchor} - its rerun|")
    k = len(keys)
    how = f"exact over all {k + 1}^{test.n_differ} assignments" if test.exact else \
        f"{test.resamples:,} random assignments"
    name = (f"one-sided permutation test within items of |{anchor} - {other}| against |{anchor} - rerun| "
            f"({how}); null: {other} and the {k} rerun(s) of {anchor} are exchangeable (no label effect)")
    return test, name, floor_verdict(test.p, test.statistic)


def floor_verdict(p: float, statistic: float) -> str:
    """CAS against its floor in words, naming the test: above it where the one-sided p is below
    SIGNIFICANCE (and CAS is above the floor), else not above it."""
    if math.isnan(p):
        return "undefined"
    if p < SIGNIFICANCE and statistic > 0:
        return f"above its floor (one-sided permutation {_p(p)})"
    return f"not above its floor (one-sided permutation p >= {SIGNIFICANCE})"


def _p(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3g}"


def no_rerun_line() -> str:
    """The line a face prints in place of floors where no mode has a rerun."""
    return NO_RERUN


def floor_line(result: BiasResult, floor: RerunFloor) -> str:
    """One line of a measure beside its floor, e.g. "CAS precision 4.1 [2.0, 6.3]; rerun floor 1.2
    [0.5, 2.0]; above its floor (one-sided permutation p = 0.003)"; CAB's signed, without a test."""
    if (result.measure, result.metric) != (floor.measure, floor.metric):
        raise ValueError(f"{result.measure} {result.metric} beside the floor of {floor.measure} {floor.metric}")
    sign = "+" if result.measure == "CAB" else ""
    head = f"{result.measure} {result.metric} "
    if result.undefined_reason:
        head += f"undefined: {result.undefined_reason}"
    else:
        head += _with_interval(result.value, result.ci_low, result.ci_high, sign)
    if floor.mode is None:
        return f"{head}; {NO_RERUN}"
    if floor.undefined_reason:
        return f"{head}; rerun floor undefined: {floor.undefined_reason}"
    line = f"{head}; rerun floor {_with_interval(floor.value, floor.ci_low, floor.ci_high, sign)}"
    return f"{line}; {floor.verdict}" if floor.verdict else line


def _with_interval(value: float, low: float, high: float, sign: str) -> str:
    if math.isnan(low) or math.isnan(high):
        return f"{value:{sign}.1f} (no interval)"
    return f"{value:{sign}.1f} [{low:{sign}.1f}, {high:{sign}.1f}]"
