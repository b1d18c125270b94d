"""Inspect's scorer and metrics for PAttriEval's tasks: each sample's citation precision, recall and
F1 in every mode it was answered in, and CAS and CAB over the samples.

Per sample, the answer's citations are read with our parser (engine.prompting.citations) and
scored as the store's query_metrics view scores them (store/views.sql): `cited` holds every
distinct cited number, a number no document was shown under counting against precision (the
"paper" syntax leaves it out, as that view does for such runs); `gold` holds the positions of
the relevant documents shown. tests/engine/inspect_tasks/test_inspect_task.py imports a log of this task into a store
and holds these values equal to the view's.

CAS and CAB are engine.statistics.bias.compute_bias's: value, percentile-bootstrap interval,
the paired test's p, and "undefined" (NaN) where no answer of the two modes cites a shown
document. Inspect metrics are numbers, so the verdict's words and the test's name go in the
metric's description; `python -m engine import --inspect LOG` then gives every page of ours.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from inspect_ai.scorer import Metric, SampleScore, Score, Scorer, Target, metric, scorer
from inspect_ai.solver import TaskState

from engine.prompting.citations import parse_citations
from engine.types import MODES

# How ours leave the tool: in full, since another suite's "CAB" (ETH's "Counterfactual
# Assessment of Bias", COMPL-AI) is another measure under the same letters.
CAB_NAME = "citation attribution bias (Abolghasemi et al.)"
CAS_NAME = "citation attribution sensitivity (Abolghasemi et al.)"
METRIC_NAMES = ("precision", "recall", "f1")
# What each metric's keys mean, kept in the log with the scorer (its metadata), since Inspect
# keeps a metric as a number without words.
MEASURES = {
    "CAB": f"{CAB_NAME}: mean over items of M_base - M_cf, x100, M = citation precision, recall or F1; > 0 "
           "favours label A (on relevant documents in base); _ci_low/_ci_high: percentile-bootstrap 95% interval; "
           "_p: paired test of base against cf (sign-flip permutation test, or the paired t-test above 1,000 "
           "differing items; null: base and cf cite alike); NaN: undefined, no answer of the two modes cites a "
           "shown document",
    "CAS": f"{CAS_NAME}: mean over items of |M_vanilla - M_base|, x100; _ci_low/_ci_high: percentile-bootstrap "
           "95% interval; _p: a signed test of vanilla against base (null: vanilla and base cite alike on "
           "average), not a test of CAS; NaN: undefined, no answer of the two modes cites a shown document",
}
# Where the solver leaves its answers in the sample's metadata (the log keeps it as the sample's).
ANSWERS_KEY = "answers"
SHOWN_KEY = "shown_doc_ids"


def item_scores(answer: str, shown_relevant: Sequence[bool], syntax: str = "ours") -> dict[str, float | bool]:
    """One answer's citation precision, recall and F1 against the relevant documents shown, and
    whether it cites a shown document (`cites`), as query_metrics computes them."""
    numbers = parse_citations(answer, syntax)
    n_shown = len(shown_relevant)
    in_range = [n for n in numbers if 1 <= n <= n_shown]
    cited = set(in_range if syntax == "paper" else numbers)
    gold = {p for p, relevant in enumerate(shown_relevant, start=1) if relevant}
    hits = len(cited & gold)
    return {
        "precision": hits / len(cited) if cited else 0.0,
        "recall": hits / len(gold) if gold else 0.0,
        "f1": 2 * hits / (len(cited) + len(gold)) if cited or gold else 0.0,
        "cites": bool(in_range),
    }


def _per_mode(scores: list[SampleScore]) -> dict[str, list[dict[str, Any]]]:
    """Each mode's per-item rows for engine.statistics.bias (item_id, the three metrics, cites)."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for sample_score in scores:
        value = sample_score.score.value
        if not isinstance(value, Mapping):
            continue
        item_id = str(sample_score.sample_id)
        for mode in MODES:
            if f"{mode}_precision" not in value:
                continue
            row: dict[str, Any] = {"item_id": item_id, "cites": bool(value.get(f"{mode}_cites"))}
            row.update({m: float(value[f"{mode}_{m}"] or 0) for m in METRIC_NAMES})
            rows.setdefault(mode, []).append(row)
    return rows


def bias_values(scores: list[SampleScore], measure: str, labels: Any = None) -> dict[str, float]:
    """CAS or CAB for precision, recall and F1 from the samples' scores, with their 95% interval
    and p, by engine.statistics.bias.compute_bias; NaN where undefined or not computable."""
    from engine.statistics.bias import COMPARISONS, compute_bias

    _, a, b = next(c for c in COMPARISONS if c[0] == measure)
    per_mode = _per_mode(scores)
    out = {f"{measure}_{m}{suffix}": math.nan for m in METRIC_NAMES for suffix in ("", "_ci_low", "_ci_high", "_p")}
    if a not in per_mode or b not in per_mode:
        return out
    for result in compute_bias({a: per_mode[a], b: per_mode[b]}, labels):
        if result.measure != measure:
            continue
        out[f"{measure}_{result.metric}"] = result.value
        out[f"{measure}_{result.metric}_ci_low"] = result.ci_low
        out[f"{measure}_{result.metric}_ci_high"] = result.ci_high
        out[f"{measure}_{result.metric}_p"] = result.p
    return out


@metric(name="citation_attribution_bias")
def citation_attribution_bias() -> Metric:
    """CAB, citation attribution bias (Abolghasemi et al.): mean over items of M_base - M_cf, x100
    (> 0 favours label A, the label relevant documents carry in base), with its percentile-bootstrap
    95% interval and the paired test's p (null: base and cf cite alike); NaN where undefined."""

    def compute(scores: list[SampleScore]) -> Any:
        return bias_values(scores, "CAB")

    return compute


@metric(name="citation_attribution_sensitivity")
def citation_attribution_sensitivity() -> Metric:
    """CAS, citation attribution sensitivity (Abolghasemi et al.): mean over items of
    |M_vanilla - M_base|, x100, with its percentile-bootstrap 95% interval; its p is a signed test
    of vanilla against base, not a test of CAS; NaN where undefined."""

    def compute(scores: list[SampleScore]) -> Any:
        return bias_values(scores, "CAS")

    return compute


@scorer(metrics=[citation_attribution_sensitivity(), citation_attribution_bias()], measures=MEASURES)
def citation_scorer(citation_syntax: str = "ours") -> Scorer:
    """Each mode's citation precision, recall and F1 (and whether it cites a shown document) of
    one sample, from the answers the three-mode solver left in its metadata."""

    async def score(state: TaskState, target: Target) -> Score:
        answers: Mapping[str, str] = state.metadata.get(ANSWERS_KEY) or {}
        shown: Mapping[str, Sequence[str]] = state.metadata.get(SHOWN_KEY) or {}
        relevant = {d["id"]: bool(d["relevant"]) for d in state.metadata["documents"]}
        value: dict[str, float | bool] = {}
        for mode in MODES:
            if mode not in answers:
                continue
            flags = [relevant[doc_id] for doc_id in shown[mode]]
            for key, number in item_scores(answers[mode], flags, citation_syntax).items():
                value[f"{mode}_{key}"] = float(number)
        return Score(value=value, answer=answers.get("vanilla"),
                     explanation="; ".join(f"{m}: {answers[m]}" for m in MODES if m in answers))

    return score
