"""The figures of `python -m engine used`, from the stored document_use rows alone.

Per run, over the answers in scope that have rows: the citations (cited shown documents), the
share of them used (necessity above the threshold), the share cited but not used
("post-rationalised"), and the share of used documents the answer does not cite; the used share
at a quarter of, and four times, the threshold shows what the threshold does.

For base and cf runs of one experiment, CAB is computed twice by engine.statistics.bias.cab, on
the items read in both: on the cited documents, and on the used ones (per item, precision,
recall and F1 of that set of shown documents against the relevant ones, as query_metrics
defines them). CAB on used > 0 says the label changes which documents the answer draws on; the
part of CAB on cited that CAB on used does not carry is the label changing only which are cited.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

THRESHOLD_FACTORS = (0.25, 1.0, 4.0)  # the used share is shown at these multiples of the threshold


@dataclass(frozen=True)
class RunUse:
    """One run's citations, used or not."""

    run_id: str
    rag_mode: str
    n_answers: int  # answers with rows
    n_documents: int  # shown documents read
    n_cited: int
    n_used: int
    n_cited_used: int
    # Over the answers that cite a shown document: logp(only cited) - logp(full); NaN when none
    # does. An answer citing nothing would have its "only cited" prompt hold no document at all,
    # another quantity (how much the answer owes to every document), so it is left out.
    mean_sufficiency: float
    used_share_at: tuple[tuple[float, float], ...]  # (threshold, share of citations used)
    n_citing: int = 0  # answers that cite a shown document: those mean_sufficiency is over

    @property
    def share_used(self) -> float:
        return self.n_cited_used / self.n_cited if self.n_cited else math.nan

    @property
    def share_post_rationalised(self) -> float:
        return (self.n_cited - self.n_cited_used) / self.n_cited if self.n_cited else math.nan

    @property
    def share_used_not_cited(self) -> float:
        return (self.n_used - self.n_cited_used) / self.n_used if self.n_used else math.nan


@dataclass(frozen=True)
class CabSplit:
    """CAB (engine.statistics.bias.BiasResult per metric) on the cited and on the used documents."""

    base_run: str
    cf_run: str
    n_items: int
    cited: tuple[Any, ...]
    used: tuple[Any, ...]


@dataclass(frozen=True)
class UsedResult:
    """What `used` prints: per run, the CAB split where base and cf were read, and what was skipped."""

    model: str  # as the store names it
    threshold: float
    runs: tuple[RunUse, ...]
    cab: CabSplit | None
    cab_note: str | None  # why there is no CAB split, where there is none
    n_measured_now: int
    skipped: tuple[tuple[str, str, str], ...]  # (run_id, item_id, reason)

    @property
    def skipped_by_reason(self) -> dict[str, int]:
        return dict(Counter(reason for _, _, reason in self.skipped))


def set_metrics(chosen: Iterable[int], relevant: Sequence[bool]) -> tuple[float, float, float]:
    """Precision, recall and F1 of the shown positions `chosen` against the relevant ones, as
    query_metrics defines them (0 where the denominator is 0)."""
    s = set(chosen)
    gold = {n for n, rel in enumerate(relevant, start=1) if rel}
    hits = len(s & gold)
    return (hits / len(s) if s else 0.0, hits / len(gold) if gold else 0.0,
            2 * hits / (len(s) + len(gold)) if s or gold else 0.0)


def _records(rows: dict[str, list[tuple]], relevant: dict[str, tuple[bool, ...]], items: list[str],
             threshold: float, on: str) -> list[dict[str, Any]]:
    out = []
    for item_id in items:
        chosen = [r[2] for r in rows[item_id] if (r[8] if on == "cited" else r[6] > threshold)]
        precision, recall, f1 = set_metrics(chosen, relevant[item_id])
        out.append({"item_id": item_id, "precision": precision, "recall": recall, "f1": f1, "cites": bool(chosen)})
    return out


def _cab_split(plan: Any, by_run: dict[str, dict[str, list[tuple]]], threshold: float
               ) -> tuple[CabSplit | None, str | None]:
    from engine.statistics.bias import cab, labels_for

    first: dict[str, Any] = {}
    for run in plan.runs:
        first.setdefault(run.rag_mode, run)
    if "base" not in first or "cf" not in first:
        return None, "no CAB split: it needs a base and a cf run"
    base, cf = first["base"], first["cf"]
    if base.experiment_id != cf.experiment_id:
        return None, "no CAB split: the base and cf runs are of different experiments"
    items = sorted(set(by_run.get(base.run_id, {})) & set(by_run.get(cf.run_id, {})))
    if not items:
        return None, "no CAB split: no item was read in both the base and the cf run"
    relevant = {(run.run_id, a.item_id): a.relevant for run, a in plan.scope}
    rel = {m: {i: relevant[run.run_id, i] for i in items} for m, run in (("base", base), ("cf", cf))}
    labels = labels_for(base.metadata_type, base.config)
    split = {on: cab(_records(by_run[base.run_id], rel["base"], items, threshold, on),
                     _records(by_run[cf.run_id], rel["cf"], items, threshold, on), labels,
                     run_ids={"base": base.run_id, "cf": cf.run_id})
             for on in ("cited", "used")}
    return CabSplit(base.run_id, cf.run_id, len(items), split["cited"], split["used"]), None


def _run_use(run: Any, rows: dict[str, list[tuple]], threshold: float) -> RunUse:
    flat = [r for item in rows.values() for r in item]
    cited = [r for r in flat if r[8]]
    shares = tuple((t, sum(r[6] > t for r in cited) / len(cited) if cited else math.nan)
                   for t in (threshold * f for f in THRESHOLD_FACTORS))
    sufficiency = [item[0][7] for item in rows.values() if any(r[8] for r in item)]
    return RunUse(run.run_id, run.rag_mode, len(rows), len(flat), len(cited), sum(r[6] > threshold for r in flat),
                  sum(r[6] > threshold for r in cited),
                  sum(sufficiency) / len(sufficiency) if sufficiency else math.nan, shares, len(sufficiency))


def used_figures(plan: Any, threshold: float, *, n_now: int, skipped: tuple[tuple[str, str, str], ...]) -> UsedResult:
    """The figures of the answers `plan` covers, from the store's rows."""
    from store.queries.document_use import stored_document_use

    in_scope = {(run.run_id, a.item_id) for run, a in plan.scope}
    by_run: dict[str, dict[str, list[tuple]]] = {}
    for row in stored_document_use(plan.db, [r.run_id for r in plan.runs], plan.label):
        if (row[0], row[1]) in in_scope:
            by_run.setdefault(row[0], {}).setdefault(row[1], []).append(row)
    runs = tuple(_run_use(run, by_run.get(run.run_id, {}), threshold) for run in plan.runs)
    split, note = _cab_split(plan, by_run, threshold)
    return UsedResult(plan.label, threshold, runs, split, note, n_now, skipped)
