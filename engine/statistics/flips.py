"""Flips between two runs of the same items: exact match right in one and wrong in the other, and
documents cited by one run only (compare's counts beside its tests)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from engine.statistics.compare_stats import known_pairs


@dataclass(frozen=True)
class EmFlips:
    """Exact match from A to B on items both score: right in A and wrong in B, and the reverse."""

    right_to_wrong: int
    wrong_to_right: int
    n: int


@dataclass(frozen=True)
class CitationFlips:
    """Documents shown in both runs of an item and cited by one only, split by relevance."""

    a_only_relevant: int
    a_only_nonrelevant: int
    b_only_relevant: int
    b_only_nonrelevant: int
    shown_both: int  # (item, document) pairs shown in both runs



def em_flips(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> EmFlips:
    """Exact-match flips from A to B over items both score."""
    x, y = known_pairs(a, b)
    return EmFlips(int(np.sum((x == 1) & (y == 0))), int(np.sum((x == 0) & (y == 1))), int(x.size))


def citation_flips(items: Iterable[tuple[Iterable[str], Iterable[str], Iterable[str], Iterable[str]]]) -> CitationFlips:
    """Per item (shown in both, cited in A, cited in B, relevant document ids): documents shown
    in both runs and cited by one only, split by whether they hold the answer."""
    counts = [0, 0, 0, 0]
    shown_total = 0
    for shown, cited_a, cited_b, relevant in items:
        shown, cited_a, cited_b, relevant = set(shown), set(cited_a), set(cited_b), set(relevant)
        shown_total += len(shown)
        for doc in (cited_a - cited_b) & shown:
            counts[0 if doc in relevant else 1] += 1
        for doc in (cited_b - cited_a) & shown:
            counts[2 if doc in relevant else 3] += 1
    a_relevant, a_nonrelevant, b_relevant, b_nonrelevant = counts
    return CitationFlips(a_relevant, a_nonrelevant, b_relevant, b_nonrelevant, shown_both=shown_total)
