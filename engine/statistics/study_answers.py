"""A study's answers as the study model reads them: patterns of shown documents, each answer's
group (its run, or its configuration), and what each group's rows carry.

The study model (engine.statistics.study_model) reads an answer only through its documents'
relevance, position and label side (A, B or neither), which it cited, its item (the cluster) and
its configuration. Ten million answers show a few thousand distinct lists of such documents, so
they are folded into engine.statistics.choice_patterns' patterns a chunk of runs at a time
(engine.usecases.study.effects), and the hundred million decision rows are never held at once.
The configuration is not in a pattern's rows: each answer carries its group (the store's run), and
`configuration` maps groups to configurations once every chunk is in, since a vanilla run takes
the levels of its experiment's first labelled run, which a later chunk may hold. frame_answers folds
a decisions frame the same way, in one piece, each configuration its own group. Pure: no DuckDB.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

    from engine.statistics.choice_patterns import AnswerPatterns

# The raw covariates of a study's document: relevant 0/1, position 1-based, position_group
# (0 first, 1 middle, 2 last, -1 none of these) and side (SIDES' index: 0 label A, 1 label B,
# -1 neither: no label, or another).
STUDY_COLUMNS = ("relevant", "position", "position_group", "side")
SIDES = ("A", "B")
COLUMNS = ("answer", "item", "cited", "relevant", "position_group", "label_side")  # a decisions frame's


@dataclass(frozen=True)
class StudyAnswers:
    """A study's answers folded in (the module doc)."""

    patterns: AnswerPatterns  # raw covariates STUDY_COLUMNS; each answer's tag: its group
    configuration: np.ndarray  # (groups,) int: each group's configuration (-1: a group with no rows)
    levels: tuple[tuple[tuple[str, str], ...], ...]  # each configuration's (axis, level), in the order first seen
    label_names: tuple[str, ...]  # the text of each label code of label_rows
    label_rows: np.ndarray  # (groups, 3, labels + 1): rows per group, side (A, B, neither), label (last: none)
    item_names: tuple[str, ...] | None = None  # each cluster code's item as said in a message (None: the code)

    def item_name(self, code: int) -> str:
        return str(code) if self.item_names is None else self.item_names[code]


def label_rows(group: np.ndarray, side: np.ndarray, label: np.ndarray, n_groups: int, n_labels: int,
               rows: np.ndarray | None = None) -> np.ndarray:
    """(n_groups, 3, n_labels + 1) counts of rows by group, side (0 A, 1 B; -1 or 2 neither) and
    label code (-1, none, counted last); rows: how many rows each entry stands for (None: one)."""
    side_index = np.where((side < 0) | (side > 1), 2, side).astype(np.int64)
    label_index = np.where(label < 0, n_labels, label).astype(np.int64)
    flat = (np.asarray(group, dtype=np.int64) * 3 + side_index) * (n_labels + 1) + label_index
    counts = np.bincount(flat, weights=rows, minlength=n_groups * 3 * (n_labels + 1))
    return np.rint(counts).astype(np.int64).reshape(n_groups, 3, n_labels + 1)


def configuration_names(frame: pd.DataFrame, axes: Sequence[str]) -> pd.Categorical:
    """Each row's configuration as text: 'axis=level, ...' over the axes given ('all' without), a
    categorical whose categories are the configurations in the order they first appear. Named
    once per configuration, not per row: a million answers' ten million rows as text took seconds
    and a gigabyte."""
    import pandas as pd

    if not axes:
        return pd.Categorical.from_codes(np.zeros(len(frame), dtype=np.int8), categories=["all"])
    codes = frame.groupby(list(axes), sort=False, observed=True, dropna=False).ngroup().to_numpy()
    first = np.unique(codes, return_index=True)[1]
    names = [", ".join(f"{axis}={frame[axis].iloc[i]}" for axis in axes) for i in first]
    return pd.Categorical.from_codes(codes, categories=pd.Index(names, dtype=object))


def frame_answers(frame: pd.DataFrame, axes: Sequence[str], *, position: str = "group") -> StudyAnswers:
    """A decisions frame's answers folded in: COLUMNS, each axis's column, `position` (needed
    when position is "number"; 0 where absent) and `label` (the label's text, optional). Each
    configuration of the axes given is a group of its own."""
    import pandas as pd

    from engine.statistics.choice_model import codes
    from engine.statistics.choice_patterns import PatternBuilder, position_group_codes

    needed = (*COLUMNS, *axes, *(("position",) if position == "number" else ()))
    missing = [c for c in dict.fromkeys(needed) if c not in frame.columns]
    if missing:
        raise UserError(f"the study's decisions frame lacks the column(s) {', '.join(missing)}")
    config = configuration_names(frame, axes)
    cfg = np.asarray(config.codes, dtype=np.int64)
    first = np.unique(cfg, return_index=True)[1]
    levels = tuple(tuple((a, str(frame[a].iloc[i])) for a in axes) for i in first)
    side_text = frame["label_side"]
    side = np.select([(side_text == s).to_numpy(bool) for s in SIDES], [0, 1], -1)
    raw = np.column_stack([
        frame["relevant"].astype(bool).to_numpy(float),
        frame["position"].to_numpy(float) if "position" in frame.columns else np.zeros(len(frame)),
        position_group_codes(frame["position_group"]),
        side])
    if "label" in frame.columns:
        label_code, label_names = pd.factorize(frame["label"])  # NaN: -1, no label
        names = tuple(str(v) for v in label_names)
    else:
        label_code, names = np.full(len(frame), -1), ()
    item_code, item_names = pd.factorize(frame["item"], use_na_sentinel=False)
    answers = codes(frame["answer"])
    order = np.argsort(answers, kind="stable")  # each answer's rows together, in the frame's order
    builder = PatternBuilder(STUDY_COLUMNS)
    builder.add(answers[order], frame["cited"].to_numpy(bool)[order], raw[order],
                np.asarray(item_code, dtype=np.int64)[order], cfg[order])
    return StudyAnswers(builder.patterns(), np.arange(len(levels)), levels, names,
                        label_rows(cfg, side, np.asarray(label_code), len(levels), len(names)),
                        tuple(str(v) for v in item_names))
