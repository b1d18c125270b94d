"""The independent oracle for the store's metric views: per-item metrics written in Python.

The product computes every metric in SQL (the `query_metrics` and `run_metrics` views); nothing
in engine/, store/ or demo/ calls these functions. They are written from the paper's definitions
without looking at the SQL, and tests/store/test_views.py checks the views against them over every code
point and on random text, so a change to either side that changes a number fails a test.

Citation quality is the paper's: binary document-level precision, recall and F1 over the shown
documents, as scikit-learn computes them with zero_division=0. Cited numbers are 1-based
positions as shown; a number that was not shown (out of range) is a false positive.

Answer correctness:
- `exact_match` (the paper's EM, the seed library's check_any_string to the character): a
  normalised gold answer (engine/datasets/normalize.py) occurs as a substring of the normalised answer.
  One deliberate difference from the seed: a gold answer that normalises to nothing is left
  out (the seed counts it as found in every answer), and with no usable gold EM is None.
- `squad_em` and `token_f1`: the SQuAD script's definitions (punctuation deleted, articles
  a/an/the dropped, full-string equality; token-overlap F1), best over the gold answers.
- `answer_recall` (QAMPARI-style, for list answers): the fraction of distinct gold answers
  whose normalised form occurs in the normalised answer.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from engine.datasets.normalize import normalize_answer
from engine.prompting.citations import parse_citations
from engine.types import Citation

# Python's str whitespace, as the SQL spells it with RE2 classes.
_SPACE = re.compile(r"\s+")
_PUNCT = re.compile(f"[{re.escape(string.punctuation)}]")
# re.ASCII: RE2's \b only knows ASCII word characters.
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.ASCII)


def _lower(text: str) -> str:
    # SQuAD only (kept as it was): DuckDB's lower() maps U+0130 to "i" and has no final-sigma
    # rule, and the SQuAD normalisation keeps the U+0307 that Python's lower() adds.
    return text.replace("\u0130", "i").lower().replace("\u03c2", "\u03c3")


def normalize_squad(text: str) -> str:
    """The SQuAD normalisation: lowercase, punctuation deleted, articles dropped, whitespace folded."""
    return _SPACE.sub(" ", _ARTICLES.sub(" ", _PUNCT.sub("", _lower(text)))).strip()


@dataclass(frozen=True)
class CitationScores:
    """Citation quality of one answer against the relevant shown documents."""

    cited: tuple[int, ...]  # sorted distinct cited numbers, out-of-range ones included
    gold: tuple[int, ...]  # 1-based positions of the relevant shown documents
    precision: float
    recall: float
    f1: float
    n_citations: int  # citation marks in the answer, repeats included
    out_of_range_citations: int  # marks whose number was not shown, repeats included


def citation_scores(cited_numbers: Sequence[int], shown_relevant: Sequence[bool]) -> CitationScores:
    """Precision, recall and F1 of cited numbers against the relevant flags of the shown docs."""
    k = len(shown_relevant)
    cited = tuple(sorted(set(cited_numbers)))
    gold = tuple(i for i, rel in enumerate(shown_relevant, start=1) if rel)
    hits = len(set(cited).intersection(gold))
    # An out-of-range number is a predicted positive no shown document can match, so it adds
    # to the precision denominator only; sklearn would see it as an extra (0, 1) pair.
    precision = hits / len(cited) if cited else 0.0
    recall = hits / len(gold) if gold else 0.0
    # sklearn's F1 = 2TP / (2TP + FP + FN); written this way it is 0, not NaN, when TP = 0.
    denominator = len(cited) + len(gold)
    f1 = 2 * hits / denominator if denominator else 0.0
    out_of_range = sum(1 for n in cited_numbers if not 1 <= n <= k)
    return CitationScores(cited, gold, precision, recall, f1, len(cited_numbers), out_of_range)


def _golds(golds: Iterable[str], normalize) -> list[str]:
    return [g for g in (normalize(x) for x in golds) if g]


def exact_match(answer: str, golds: Sequence[str]) -> float | None:
    """1.0 when any normalised gold occurs in the normalised answer; None without a usable gold."""
    norm_golds = _golds(golds, normalize_answer)
    if not norm_golds:
        return None  # an empty gold is a substring of everything: no evidence either way
    norm = normalize_answer(answer)
    return 1.0 if any(g in norm for g in norm_golds) else 0.0


def answer_recall(answer: str, golds: Sequence[str]) -> float | None:
    """Fraction of distinct normalised golds occurring in the normalised answer (QAMPARI-style)."""
    norm_golds = set(_golds(golds, normalize_answer))
    if not norm_golds:
        return None
    norm = normalize_answer(answer)
    return sum(1 for g in norm_golds if g in norm) / len(norm_golds)


def squad_exact_match(answer: str, golds: Sequence[str]) -> float | None:
    """SQuAD EM: 1.0 when the SQuAD-normalised answer equals any SQuAD-normalised gold."""
    if not golds:
        return None
    norm = normalize_squad(answer)
    return 1.0 if any(normalize_squad(g) == norm for g in golds) else 0.0


def token_f1(answer: str, golds: Sequence[str]) -> float | None:
    """SQuAD token F1, best over the gold answers."""
    if not golds:
        return None
    pred = normalize_squad(answer).split()
    best = 0.0
    for gold in golds:
        ref = normalize_squad(gold).split()
        if not pred or not ref:
            score = float(pred == ref)  # SQuAD: both empty is a match, one empty is not
        else:
            same = sum((Counter(pred) & Counter(ref)).values())
            # 2PR/(P+R) with P = same/|pred|, R = same/|ref|; this form is what SQL computes.
            score = 2 * same / (len(pred) + len(ref))
        best = max(best, score)
    return best


@dataclass(frozen=True)
class ItemMetrics:
    """Every per-item metric of one stored answer; the columns of the `query_metrics` view."""

    item_id: str
    cited: tuple[int, ...]
    gold: tuple[int, ...]
    precision: float
    recall: float
    f1: float
    exact_match: float | None
    squad_em: float | None
    token_f1: float | None
    answer_recall: float | None
    n_citations: int
    out_of_range_citations: int
    p_relevant: float | None  # mean probability of citation marks to relevant shown docs
    p_nonrelevant: float | None  # ... to non-relevant shown docs (out-of-range marks excluded)


def item_metrics(
    item_id: str,
    answer: str,
    shown_relevant: Sequence[bool],
    golds: Sequence[str],
    citations: Sequence[Citation] | None = None,
) -> ItemMetrics:
    """All metrics of one answer; citations default to those parsed from the answer text."""
    numbers = [c.position for c in citations] if citations is not None else parse_citations(answer)
    scores = citation_scores(numbers, shown_relevant)
    p_rel: list[float] = []
    p_non: list[float] = []
    for c in citations or ():
        if c.probability is None or not 1 <= c.position <= len(shown_relevant):
            continue
        (p_rel if shown_relevant[c.position - 1] else p_non).append(c.probability)
    return ItemMetrics(
        item_id=item_id,
        cited=scores.cited,
        gold=scores.gold,
        precision=scores.precision,
        recall=scores.recall,
        f1=scores.f1,
        exact_match=exact_match(answer, golds),
        squad_em=squad_exact_match(answer, golds),
        token_f1=token_f1(answer, golds),
        answer_recall=answer_recall(answer, golds),
        n_citations=scores.n_citations,
        out_of_range_citations=scores.out_of_range_citations,
        p_relevant=sum(p_rel) / len(p_rel) if p_rel else None,
        p_nonrelevant=sum(p_non) / len(p_non) if p_non else None,
    )


# Metrics averaged per run (the `run_metrics` view's columns, in this order).
RUN_METRICS = ("precision", "recall", "f1", "exact_match", "squad_em", "token_f1", "answer_recall")


@dataclass(frozen=True)
class MetricSummary:
    """Mean of one metric over a run's items, with its t-based 95% interval."""

    mean: float
    ci_low: float
    ci_high: float
    n: int  # items where the metric is defined


def summarize(metrics: Sequence[ItemMetrics]) -> dict[str, MetricSummary]:
    """Per-metric mean, n and t-based 95% CI over items; undefined (None) values are skipped."""
    from engine.statistics.stats import mean_ci

    out: dict[str, MetricSummary] = {}
    for name in RUN_METRICS:
        values = [getattr(m, name) for m in metrics if getattr(m, name) is not None]
        ci = mean_ci(values)
        out[name] = MetricSummary(ci.mean, ci.ci_low, ci.ci_high, ci.n)
    return out
