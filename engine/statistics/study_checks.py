"""What the study model can estimate, told before it is fitted: each configuration's label effect
(check_configurations) and the nuisance columns (identified_nuisance).

Both read the informative answers' rows within answers (each row less its answer's mean). The
study model passes each distinct (pattern, configuration) once with its count as weights: an
answer's within-answer rows are its pattern's, so the weighted sums of squares and inner products
over the patterns are those over every answer's rows, and ten million answers cost a few thousand
rows. Without weights every row counts once. Pure numpy; UserError names what fails.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from engine.errors import UserError

TOL = 1e-9  # relative size under which a within-answer column counts as zero (exact 0/1 data)


def within(x: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """x minus its mean within each group."""
    _, index = np.unique(groups, return_inverse=True)
    sums = np.bincount(index, weights=x)
    counts = np.bincount(index)
    return x - (sums / counts)[index]


def check_configurations(order: Sequence[str], cfg: np.ndarray, groups: np.ndarray, weights: np.ndarray,
                         label_a: np.ndarray, nuisance: dict[str, np.ndarray], items: Sequence[np.ndarray],
                         item_name: Callable[[int], str]) -> None:
    """Refuse, naming it, a configuration the model cannot estimate a label effect in. The arrays
    are the informative rows (cfg: each row's configuration, an index into order; groups: its
    answer or pattern; weights: how many answers each row stands for); items: each
    configuration's distinct items (cluster codes) among its informative answers."""
    root = np.sqrt(weights)
    for i, c in enumerate(order):
        rows = cfg == i
        if not rows.any():
            raise UserError(f"configuration {c} has no answer that cites some but not all of its documents: "
                            "its label effect cannot be estimated")
        if len(items[i]) < 2:
            raise UserError(f"configuration {c} has one item ({item_name(int(items[i][0]))}): its label effect's "
                            "interval, clustered by item, needs two or more")
        label = within(label_a[rows], groups[rows])
        if np.abs(label).max() <= TOL:
            raise UserError(f"the label does not vary among the documents of any answer in configuration {c} "
                            "(vanilla answers, or one label on every document): no label effect to estimate")
        basis = np.column_stack([within(nuisance[k][rows], groups[rows]) for k in nuisance]) * root[rows, None]
        label = label * root[rows]
        coef, *_ = np.linalg.lstsq(basis, label, rcond=None)
        if np.linalg.norm(label - basis @ coef) <= 1e-7 * np.linalg.norm(label):
            raise UserError(f"in configuration {c} the label moves with relevance or position within every answer "
                            "(base or cf answers alone): give both modes to tell them apart")


def identified_nuisance(nuisance: dict[str, np.ndarray], scales: dict[str, float], label_a: np.ndarray,
                        cfg: np.ndarray, groups: np.ndarray,
                        weights: np.ndarray | None = None) -> tuple[list[str], list[str]]:
    """The nuisance columns the informative answers identify beside the label columns, and notes
    naming the others (a column taking one value within every answer, or fixed by the others).
    The arrays hold the informative rows (groups: each row's answer or pattern, weights: how many
    answers it stands for, None: one each); `scales` is each column's largest magnitude, at least 1.

    Within answers, the label columns span label[A] within each configuration: an answer belongs
    to one configuration, so those columns have disjoint rows and a column's part in their span is
    one ratio per configuration. What is left is orthogonalised against the nuisance columns kept
    so far (Gram-Schmidt, twice: stable to the last bits that matter at the 1e-7 test below).
    The least-squares residual over every column at once needed them all as float64 rows, 1.8 GB
    at a million answers; the residual is the same."""
    group = np.unique(groups, return_inverse=True)[1]
    counts = np.bincount(group)
    w = np.ones(len(group)) if weights is None else np.asarray(weights, dtype=float)

    def centred(column: np.ndarray) -> np.ndarray:
        return column - (np.bincount(group, weights=column) / counts)[group]

    def norm(v: np.ndarray) -> float:
        return float(np.sqrt(w @ (v * v)))

    label = centred(label_a.astype(float))
    label_norm = np.bincount(cfg, weights=w * label * label)
    safe = np.where(label_norm > 0, label_norm, 1.0)
    kept: list[str] = []
    notes: list[str] = []
    basis: list[np.ndarray] = []  # orthonormal in the weighted inner product, each orthogonal to the label columns
    for name, column in nuisance.items():
        x = centred(column)
        if np.abs(x).max() <= TOL * scales[name]:
            if not name.startswith("label[other]"):
                notes.append(f"{name}: takes one value within every answer, left out")
            continue
        r = x.copy()
        for _ in range(2):
            r -= np.where(label_norm > 0, np.bincount(cfg, weights=w * r * label, minlength=len(label_norm)) / safe,
                          0.0)[cfg] * label
            for q in basis:
                r -= ((w * q) @ r) * q
        if norm(r) <= 1e-7 * norm(x):
            notes.append(f"{name}: fixed by the other terms within answers, left out")
            continue
        kept.append(name)
        basis.append(r / norm(r))
    return kept, notes
