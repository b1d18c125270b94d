"""Answers as patterns of shown documents, folded in a chunk of answers at a time.

The choice model reads an answer only through its documents' covariates, which of them it
cited, and its cluster. With the battery's 0/1 covariates and positions, ten million answers show
a few thousand distinct lists of documents: the patterns. AnswerPatterns keeps each pattern's
raw covariates once, and per answer three small integers (its pattern, the subset it cited, its
cluster). So a fit over ten million answers never holds their hundred million decision rows:
engine.usecases.bias.why_cited reads them a chunk of runs at a time and folds each chunk in here, and
choice_model.fit_patterns fits what is left. The raw covariates are codes, not the design: the
label levels, their reference and the position coding are applied to the patterns once every
chunk is in, since they depend on every row. The study model folds its answers here too, with its
own raw covariates and each answer's run as its tag (engine.statistics.study_answers).

Only informative answers (citing some but not all of their documents) are kept as patterns; the
others are counted, as are the label codes and unknown position groups any row carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.errors import UserError

# The raw covariates of a document, in this order: relevant and repeated 0/1, position 1-based,
# position_group 0 first / 1 middle / 2 last / -1 none of these, label a code into the caller's
# list of labels (-1: shown without a label).
RAW_COLUMNS = ("relevant", "position", "position_group", "label", "repeated")
GROUP, LABEL = RAW_COLUMNS.index("position_group"), RAW_COLUMNS.index("label")


def position_group_codes(groups) -> np.ndarray:
    """A column of position group names as RAW_COLUMNS codes them: first 0, middle 1, last 2, -1
    for anything else (store.queries.decisions codes the store's rows the same way)."""
    return np.select([np.asarray(groups == g, dtype=bool) for g in ("first", "middle", "last")], [0, 1, 2], -1)


@dataclass(frozen=True)
class ShapePatterns:
    """The informative answers of one shape: n documents shown, k cited."""

    n: int
    k: int
    rows: np.ndarray  # (P, n, len(RAW_COLUMNS)) float: each pattern's documents
    pattern: np.ndarray  # (G,) int: each answer's pattern
    chosen: np.ndarray  # (G,) int: each answer's cited documents, an index into choice_fit.k_subsets(n, k)
    cluster: np.ndarray  # (G,) int: each answer's cluster code
    tag: np.ndarray  # (G,) int: each answer's tag (the study model's run code; 0 where none was given)


@dataclass(frozen=True)
class AnswerPatterns:
    """Every answer folded in: the informative ones by shape (sorted by n, k), and what the checks
    read of all rows."""

    shapes: tuple[ShapePatterns, ...]
    n_answers: int  # every answer, informative or not
    label_codes: frozenset[int]  # the label codes any row carries (-1: a document without a label)
    unknown_groups: bool  # some row's position_group is none of first, middle, last
    n_citing: int = 0  # answers citing one or more of their documents, informative or not
    columns: tuple[str, ...] = RAW_COLUMNS  # the raw covariates of the patterns' rows, in order

    @property
    def n_informative(self) -> int:
        return sum(len(s.pattern) for s in self.shapes)

    @property
    def n_documents(self) -> int:
        """Rows (shown documents) of the informative answers."""
        return sum(len(s.pattern) * s.n for s in self.shapes)

    @property
    def cited_counts(self) -> tuple[tuple[int, int], ...]:
        """(k, informative answers citing k documents), by k."""
        counts: dict[int, int] = {}
        for s in self.shapes:
            counts[s.k] = counts.get(s.k, 0) + len(s.pattern)
        return tuple(sorted(counts.items()))


@dataclass
class _Shape:
    """One shape's patterns while chunks come in: each distinct pattern's bytes, its index."""

    subsets: np.ndarray
    index: dict[bytes, int] = field(default_factory=dict)
    rows: list[np.ndarray] = field(default_factory=list)
    pattern: list[np.ndarray] = field(default_factory=list)
    chosen: list[np.ndarray] = field(default_factory=list)
    cluster: list[np.ndarray] = field(default_factory=list)
    tag: list[np.ndarray] = field(default_factory=list)


class PatternBuilder:
    """Folds chunks of answers into AnswerPatterns: add() each chunk, then patterns(). columns:
    the raw covariates' names (RAW_COLUMNS for the choice model; the study model has its own);
    the label codes and unknown position groups are tracked where there are such columns."""

    def __init__(self, columns: tuple[str, ...] = RAW_COLUMNS) -> None:
        self._columns = columns
        self._label = columns.index("label") if "label" in columns else None
        self._group = columns.index("position_group") if "position_group" in columns else None
        self._shapes: dict[tuple[int, int], _Shape] = {}
        self._answers = 0
        self._citing = 0
        self._labels: set[int] = set()
        self._unknown_groups = False

    def add(self, answer: np.ndarray, cited: np.ndarray, raw: np.ndarray, cluster: np.ndarray,
            tag: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Fold in the rows of whole answers, each answer's rows together and in position order:
        answer (rows,) codes, equal on an answer's rows and different from the next answer's;
        cited (rows,) 0/1; raw (rows, len(columns)) covariates; cluster and tag (rows,) integer
        codes (an answer's first row's are its own; tag None: 0). An answer must not be split
        across chunks. Returns each answer's first row and how many documents it cites, for what
        else the caller keeps per answer."""
        from engine.statistics.choice_fit import chosen_subsets, k_subsets, row_keys

        if not len(answer):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        raw = np.asarray(raw, dtype=float) + 0.0  # -0.0 as 0.0: equal rows, equal bytes
        cited = np.asarray(cited, dtype=bool)
        starts = np.flatnonzero(np.r_[True, answer[1:] != answer[:-1]])
        sizes = np.diff(np.r_[starts, len(answer)])
        cites = np.add.reduceat(cited.astype(np.int64), starts)
        self._answers += len(starts)
        self._citing += int((cites > 0).sum())
        if self._label is not None:
            self._labels.update(int(v) for v in np.unique(raw[:, self._label]))
        if self._group is not None:
            self._unknown_groups = self._unknown_groups or bool((raw[:, self._group] < 0).any())
        informative = (cites > 0) & (cites < sizes)
        shapes = np.unique(np.column_stack([sizes, cites])[informative], axis=0)
        for n, k in ((int(a), int(b)) for a, b in shapes):
            if (n, k) not in self._shapes:
                try:
                    self._shapes[(n, k)] = _Shape(k_subsets(n, k))
                except ValueError as err:  # a stratum too large to enumerate
                    raise UserError(f"the answers cannot be fitted: {err}") from None
            shape = self._shapes[(n, k)]
            first_rows = starts[informative & (sizes == n) & (cites == k)]
            rows = first_rows[:, None] + np.arange(n)  # (G, n)
            block = raw[rows]  # (G, n, columns)
            _, first, inverse = np.unique(row_keys(block), return_index=True, return_inverse=True)
            known = np.empty(len(first), dtype=np.int64)
            for j, f in enumerate(first):  # a chunk's distinct patterns: thousands at most
                key = block[f].tobytes()
                if key not in shape.index:
                    shape.index[key] = len(shape.index)
                    shape.rows.append(block[f])
                known[j] = shape.index[key]
            shape.pattern.append(known[inverse.ravel()].astype(np.int32))
            shape.chosen.append(chosen_subsets(shape.subsets, cited[rows]).astype(np.int32))
            shape.cluster.append(np.asarray(cluster)[first_rows].astype(np.int64))
            shape.tag.append(np.zeros(len(first_rows), dtype=np.int64) if tag is None
                             else np.asarray(tag)[first_rows].astype(np.int64))
        return starts, cites

    def patterns(self) -> AnswerPatterns:
        """What was folded in."""
        shapes = tuple(ShapePatterns(n, k, np.stack(s.rows), np.concatenate(s.pattern), np.concatenate(s.chosen),
                                     np.concatenate(s.cluster), np.concatenate(s.tag))
                       for (n, k), s in sorted(self._shapes.items()))
        return AnswerPatterns(shapes, self._answers, frozenset(self._labels), self._unknown_groups, self._citing,
                              self._columns)
