"""One model of label bias across a whole study: the label effect in each configuration of the grid.

A study runs one experiment per configuration (a level combination of the axes it varies: model,
metadata type, cut-off, order, few-shot, XAI, the battery's axes). fit_study_model fits one
conditional logit of `cited` over every configuration's document-level rows (the citation_decisions
view): each answer a stratum, as engine.statistics.choice_model, with

    cited ~ relevant + position + label[A] + label[other] + label[A] x configuration

where label[A] is 1 for a document carrying label A of its configuration's metadata type (the side
CAB > 0 favours; label B is the reference, DESIGN.md's sign convention), label[other] marks a
document with no label or a label that is neither A nor B (a nuisance term), and label[A] x
configuration are the interactions of the label with every configuration but the first. The axes'
own main effects are constant within an answer and cancel in the strata (so does anything an item,
a model or a prompt adds to every document of an answer). In a complete grid the interactions span
exactly the label x axis interactions of every order (label x model, label x order, label x model
x order, ...); coded by configuration, an incomplete grid is fitted too.

Why a conditional logit with cluster-robust intervals and not statsmodels' BinomialBayesMixedGLM
with an item random effect: the question is "the label effect per configuration, with intervals
that respect that the same items recur in every configuration", asked as a frequentist interval and
test. The strata absorb every item- and answer-level intercept exactly (no distribution assumed),
and the sandwich covariance clustered by item (the scores of all of an item's answers, in every
configuration and mode, summed before their outer product; G / (G - 1) as statsmodels) makes the
per-configuration intervals, their differences and the Wald tests valid whatever the correlation
of one item's answers across configurations, e.g. an item whose documents pull the label effect the
same way in every configuration. BinomialBayesMixedGLM's intervals are posterior intervals from a
variational (mean-field) approximation whose coverage is not guaranteed, and a document-level
logit with an item intercept would still have to model each answer's choice set. The simulation
(engine.statistics.study_simulation, scripts/study_model_coverage.py) checks the coverage.

The estimates: the label effect of configuration c is b_label + b_c (b_c = 0 for the first), with
variance from the cluster-robust covariance (L V L'); 95% Wald intervals on the log-odds scale,
exponentiated for odds ratios. The test that the label effect differs between configurations is
the Wald test of all label x configuration interactions jointly (chi-square, df = configurations
- 1); per axis, the Wald test that the label effect does not depend on that axis (equal between
every two configurations that differ in that axis alone; df = their independent contrasts); and
every two configurations' difference with Holm's correction (its numbers are statsmodels'
multipletests', checked in the tests).

What cannot be estimated is refused in one line naming it (UserError): no answer citing some but
not all of its documents; a configuration with one item (its cluster-robust variance has no
second cluster to compare with) or no informative answer; a configuration where the label does not
vary within answers, or moves with relevance or position (base or cf answers alone). An axis with
one level is no axis: it is left out and named in `dropped_axes`. Pure: no DuckDB; statsmodels and
scipy are imported on use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING

import numpy as np

from engine.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

    from engine.statistics.choice_fit import CodedDesign

COLUMNS = ("answer", "item", "cited", "relevant", "position_group", "label_side")
CORRECTION = "Holm"  # the pairwise differences' multiple-comparison correction (Holm's step-down; see holm)
COVARIANCE = "cluster-robust (sandwich) by item"
_Z = 1.959963984540054  # the 97.5% normal quantile: Wald intervals at 95%
_TOL = 1e-9


@dataclass(frozen=True)
class ConfigurationEffect:
    """The label effect (label A against label B) in one configuration."""

    configuration: str  # "model=m1, order=ranked" (the varying axes only)
    levels: tuple[tuple[str, str], ...]  # (axis, level)
    label_a: str  # the labels compared in it ("a woman" against "a man"; "A"/"B" when unknown)
    label_b: str
    n_answers: int  # informative answers (cite some but not all of their documents)
    n_items: int
    log_odds: float  # log odds ratio of citing a label-A document against a label-B one
    se: float  # cluster-robust by item
    ci_low: float  # 95% Wald interval of the log odds ratio
    ci_high: float
    p: float
    se_model: float  # model-based (inverse observed information), for comparison

    @property
    def odds_ratio(self) -> float:
        return math.exp(self.log_odds)

    @property
    def or_low(self) -> float:
        return math.exp(self.ci_low)

    @property
    def or_high(self) -> float:
        return math.exp(self.ci_high)


@dataclass(frozen=True)
class WaldTest:
    """A Wald chi-square test on the cluster-robust covariance."""

    hypothesis: str
    chi2: float
    df: int
    p: float


@dataclass(frozen=True)
class PairwiseDifference:
    """Configuration b's label log odds ratio minus configuration a's."""

    a: str
    b: str
    difference: float  # b - a, log odds ratio (exp: the ratio of the two odds ratios)
    se: float
    ci_low: float  # unadjusted 95% interval
    ci_high: float
    p: float  # unadjusted
    p_adjusted: float  # Holm over all pairs
    reject: bool  # p_adjusted < 0.05
    se_model: float = float("nan")


@dataclass(frozen=True)
class StudyModelFit:
    """The fitted study model."""

    axes: tuple[str, ...]  # the axes that vary, in the grid's order
    dropped_axes: tuple[tuple[str, str], ...]  # (axis, why it is no axis here)
    configurations: tuple[ConfigurationEffect, ...]
    interaction: WaldTest | None  # all label x configuration interactions jointly (None: one configuration)
    per_axis: tuple[WaldTest, ...]
    pairwise: tuple[PairwiseDifference, ...]
    correction: str
    covariance: str
    terms: tuple[str, ...]  # the fitted columns, in order
    params: tuple[float, ...]
    n_answers: int
    n_informative: int
    n_items: int  # clusters
    converged: bool
    log_likelihood: float
    notes: tuple[str, ...] = ()  # nuisance terms left out, and why

    def configuration(self, name: str) -> ConfigurationEffect:
        for c in self.configurations:
            if c.configuration == name:
                return c
        raise KeyError(f"no configuration {name!r}: {', '.join(c.configuration for c in self.configurations)}")


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


def varying_axes(frame: pd.DataFrame, axes: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """The axes with two or more levels in the frame, and (axis, why) for the others."""
    kept, dropped = [], []
    for axis in axes:
        levels = list(dict.fromkeys(str(v) for v in frame[axis].unique()))  # in the order they appear
        if len(levels) > 1:
            kept.append(axis)
        else:
            dropped.append((axis, f"one level ({levels[0] if levels else 'none'}): not an axis"))
    return kept, dropped


def fit_study_model(frame: pd.DataFrame, axes: Sequence[str], *, position: str = "group") -> StudyModelFit:
    """Fit the study model (the module doc) to the decisions frame: COLUMNS, each axis's column,
    `label` (the label's text, optional) and `position` when position is "number"."""
    missing = [c for c in (*COLUMNS, *axes) if c not in frame.columns]
    if missing:
        raise UserError(f"the study's decisions frame lacks the column(s) {', '.join(missing)}")
    if position not in ("group", "number"):
        raise UserError(f"position must be group or number, not {position!r}")
    import pandas as pd

    kept_axes, dropped_axes = varying_axes(frame, axes)
    config = configuration_names(frame, kept_axes)
    order = list(config.categories)
    # Answers and items as given (codes or text): they are only grouped and counted.
    answers = frame["answer"].to_numpy()
    cited = frame["cited"].astype(bool).to_numpy()
    per = pd.DataFrame({"answer": answers, "_c": cited}).groupby("answer", sort=False)["_c"].agg(["sum", "size"])
    if int((per["sum"] > 0).sum()) == 0:
        raise UserError(f"no citing answers: none of the {len(per):,} answers cites a shown document")
    informative = per.index[(per["sum"] > 0) & (per["sum"] < per["size"])].to_numpy()
    if not len(informative):
        raise UserError(f"no answer cites some but not all of its documents (of {len(per):,}): nothing to fit")
    keep = np.isin(answers, informative)
    side = frame["label_side"]
    label_a = (side == "A").to_numpy(float)
    nuisance = {"relevant": frame["relevant"].astype(bool).to_numpy(float)}
    if position == "group":
        group = frame["position_group"]
        for g in ("middle", "last"):
            nuisance[f"position[{g}]"] = (group == g).to_numpy(float)
    else:
        nuisance["position"] = frame["position"].to_numpy(float)
    nuisance["label[other]"] = (~side.isin(["A", "B"])).to_numpy(float)
    cfg = config.codes  # each row's configuration, an index into order
    _check_configurations(frame, cfg, order, keep, answers, label_a, nuisance)
    label_terms = ["label[A]", *(f"label[A]:{c}" for c in order[1:])]
    kept_nuisance, notes = _identified_nuisance({k: v[keep] for k, v in nuisance.items()},
                                                {k: max(1.0, float(np.abs(v).max())) for k, v in nuisance.items()},
                                                label_a[keep], cfg[keep], answers[keep])
    terms = [*kept_nuisance, *label_terms]
    x = _design(nuisance, kept_nuisance, label_a, cfg, keep, len(order))
    from engine.statistics.choice_fit import fit_conditional_logit

    items = frame["item"].to_numpy()
    try:
        fit = fit_conditional_logit(cited[keep].astype(float), x, answers[keep], items[keep])
    except ValueError as err:  # a stratum too large to enumerate
        raise UserError(f"the study model cannot be fitted: {err}") from None
    bad = [terms[j] for j in range(len(terms)) if not np.isfinite(fit.params[j])]
    if any(t.startswith("label[A]") for t in bad):
        where = [order[0] if t == "label[A]" else t.split(":", 1)[1] for t in bad if t.startswith("label[A]")]
        raise UserError(f"the label separates cited from uncited documents in configuration {where[0]}: "
                        "its odds ratio is infinite or zero, no interval can be given")
    notes += [f"{t}: separates cited from uncited documents; the label effects are its limit fit" for t in bad]
    b, v, v_model = fit.params, fit.cov_cluster, fit.cov
    first = len(kept_nuisance)
    contrasts = np.zeros((len(order), len(terms)))
    contrasts[:, first] = 1.0
    for i in range(1, len(order)):
        contrasts[i, first + i] = 1.0
    labels = _label_words(frame, cfg, order)
    levels = _config_levels(frame, cfg, order, kept_axes)
    effects = []
    for i, c in enumerate(order):
        rows = keep & (cfg == i)
        est, se, se_m = _combine(contrasts[i], b, v, v_model)
        effects.append(ConfigurationEffect(
            c, levels[c], *labels[c], len(np.unique(answers[rows])), len(np.unique(items[rows])), est, se,
            est - _Z * se, est + _Z * se, _p(est, se), se_m))
    interaction = None
    per_axis: list[WaldTest] = []
    if len(order) > 1:
        r = np.zeros((len(order) - 1, len(terms)))
        r[:, first + 1:] = np.eye(len(order) - 1)
        interaction = wald(r, b, v, "the label effect is the same in every configuration "
                                      "(all label x configuration interactions are 0)")
        for axis in kept_axes:
            r_axis = _axis_contrasts(axis, levels, order, contrasts)
            if len(r_axis):
                per_axis.append(wald(r_axis, b, v, f"the label effect does not depend on {axis} (equal in every two "
                                                   f"configurations that differ in {axis} alone)"))
    return StudyModelFit(tuple(kept_axes), tuple(dropped_axes), tuple(effects), interaction, tuple(per_axis),
                         _pairwise(order, contrasts, b, v, v_model), CORRECTION, COVARIANCE, tuple(terms),
                         tuple(float(p) for p in b), len(per), len(informative), fit.n_clusters, fit.converged,
                         fit.llf, tuple(notes))


def _check_configurations(frame, cfg, order, keep, answers, label_a, nuisance) -> None:
    """Refuse, naming it, a configuration the model cannot estimate a label effect in."""
    items = frame["item"].to_numpy()
    for i, c in enumerate(order):
        rows = keep & (cfg == i)
        if not rows.any():
            raise UserError(f"configuration {c} has no answer that cites some but not all of its documents: "
                            "its label effect cannot be estimated")
        n_items = len(np.unique(items[rows]))
        if n_items < 2:
            raise UserError(f"configuration {c} has one item ({items[rows][0]}): its label effect's interval, "
                            "clustered by item, needs two or more")
        within = _within(label_a[rows], answers[rows])
        if np.abs(within).max() <= _TOL:
            raise UserError(f"the label does not vary among the documents of any answer in configuration {c} "
                            "(vanilla answers, or one label on every document): no label effect to estimate")
        basis = np.column_stack([_within(nuisance[k][rows], answers[rows]) for k in nuisance])
        coef, *_ = np.linalg.lstsq(basis, within, rcond=None)
        if np.linalg.norm(within - basis @ coef) <= 1e-7 * np.linalg.norm(within):
            raise UserError(f"in configuration {c} the label moves with relevance or position within every answer "
                            "(base or cf answers alone): give both modes to tell them apart")


def _within(x: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """x minus its mean within each group."""
    _, index = np.unique(groups, return_inverse=True)
    sums = np.bincount(index, weights=x)
    counts = np.bincount(index)
    return x - (sums / counts)[index]


def _design(nuisance: dict, kept: list[str], label_a: np.ndarray, cfg: np.ndarray, keep: np.ndarray,
            n_configurations: int) -> CodedDesign:
    """The informative rows' design, coded: the kept nuisance columns, label[A], then label[A] x
    each configuration after the first. A row is fixed by its nuisance values, its label side and
    its configuration, so the rows take a few hundred distinct values: each row keeps a code into
    a table of them. The columns over every row were 2.6 GB (float64) of a study of 33
    configurations at a million answers, 1.5 GB as float32 rows (issue 31)."""
    from engine.statistics.choice_fit import CodedDesign

    rows = np.flatnonzero(keep)
    combined = np.zeros(len(rows), dtype=np.int64)
    for name in kept:  # mixed radix: each column's value's rank among its values
        values, rank = np.unique(nuisance[name][rows], return_inverse=True)
        combined = combined * len(values) + rank
    combined = (combined * 2 + label_a[rows].astype(np.int64)) * n_configurations + cfg[rows].astype(np.int64)
    _, first, codes = np.unique(combined, return_index=True, return_inverse=True)
    of = rows[first]  # a row of each distinct code
    table = np.zeros((len(first), len(kept) + n_configurations))
    for j, name in enumerate(kept):
        table[:, j] = nuisance[name][of]
    label, where = label_a[of], cfg[of]
    table[:, len(kept)] = label
    for i in range(1, n_configurations):
        table[:, len(kept) + i] = label * (where == i)
    return CodedDesign(codes.astype(np.int32).ravel(), table)


def _identified_nuisance(nuisance: dict, scales: dict, label_a: np.ndarray, cfg: np.ndarray,
                         answers: np.ndarray) -> tuple[list[str], list[str]]:
    """The nuisance columns the informative answers identify beside the label columns, and notes
    naming the others (a column taking one value within every answer, or fixed by the others).
    The arrays hold the informative rows only; `scales` is each column's largest magnitude over
    every row, at least 1.

    Within answers, the label columns span label[A] within each configuration: an answer belongs
    to one configuration, so those columns have disjoint rows and a column's part in their span is
    one ratio per configuration. What is left is orthogonalised against the nuisance columns kept
    so far (Gram-Schmidt, twice: stable to the last bits that matter at the 1e-7 test below).
    The least-squares residual over every column at once needed them all as float64 rows, 1.8 GB
    at a million answers (issue 31); the residual is the same."""
    group = np.unique(answers, return_inverse=True)[1]
    counts = np.bincount(group)

    def within(column: np.ndarray) -> np.ndarray:
        return column - (np.bincount(group, weights=column) / counts)[group]

    label = within(label_a.astype(float))
    label_norm = np.bincount(cfg, weights=label * label)
    safe = np.where(label_norm > 0, label_norm, 1.0)
    kept: list[str] = []
    notes: list[str] = []
    basis: list[np.ndarray] = []  # orthonormal, each orthogonal to the label columns
    for name, column in nuisance.items():
        x = within(column)
        if np.abs(x).max() <= _TOL * scales[name]:
            if name != "label[other]":
                notes.append(f"{name}: takes one value within every answer, left out")
            continue
        r = x.copy()
        for _ in range(2):
            r -= np.where(label_norm > 0, np.bincount(cfg, weights=r * label, minlength=len(label_norm)) / safe,
                          0.0)[cfg] * label
            for q in basis:
                r -= (q @ r) * q
        if np.linalg.norm(r) <= 1e-7 * np.linalg.norm(x):
            notes.append(f"{name}: fixed by the other terms within answers, left out")
            continue
        kept.append(name)
        basis.append(r / np.linalg.norm(r))
    return kept, notes


def _label_words(frame, cfg, order) -> dict[str, tuple[str, str]]:
    """Per configuration the labels A and B as shown (the most frequent text of each side)."""
    out = {}
    has = "label" in frame.columns
    for i, c in enumerate(order):
        words = []
        for s in ("A", "B"):
            texts = frame.loc[(cfg == i) & (frame["label_side"] == s).to_numpy(), "label"] if has else None
            words.append(str(texts.mode().iloc[0]) if texts is not None and len(texts.dropna()) else s)
        out[c] = (words[0], words[1])
    return out


def _config_levels(frame, cfg, order, axes) -> dict[str, tuple[tuple[str, str], ...]]:
    """Per configuration its (axis, level) pairs, read from its first row."""
    first = np.unique(cfg, return_index=True)[1]
    return {c: tuple((a, str(frame[a].iloc[first[i]])) for a in axes) for i, c in enumerate(order)}


def _combine(row: np.ndarray, b: np.ndarray, v: np.ndarray, v_model: np.ndarray) -> tuple[float, float, float]:
    est = float(row @ b)
    return est, math.sqrt(max(float(row @ v @ row), 0.0)), math.sqrt(max(float(row @ v_model @ row), 0.0))


def _p(est: float, se: float) -> float:
    return math.erfc(abs(est / se) / math.sqrt(2)) if se > 0 and math.isfinite(se) else float("nan")


def wald(r: np.ndarray, b: np.ndarray, v: np.ndarray, hypothesis: str) -> WaldTest:
    """The Wald chi-square of R b = 0 with covariance V: (R b)' (R V R')^-1 (R b), df = rank(R V R')."""
    from scipy.stats import chi2

    rb = r @ b
    middle = r @ v @ r.T
    df = int(np.linalg.matrix_rank(middle))
    stat = float(rb @ np.linalg.pinv(middle) @ rb)
    return WaldTest(hypothesis, stat, df, float(chi2.sf(stat, df)) if df else float("nan"))


def _axis_contrasts(axis: str, config_levels: dict, order: list[str], contrasts: np.ndarray) -> np.ndarray:
    """Rows L_c - L_c' for every two configurations that differ in `axis` alone, reduced to
    independent rows (the first level's configuration against each other level's)."""
    position = {c: i for i, c in enumerate(order)}
    levels = {c: dict(config_levels[c]) for c in order}
    rows = []
    for c in order:
        for d in order:
            if position[d] <= position[c]:
                continue
            lc, ld = levels[c], levels[d]
            if lc[axis] != ld[axis] and all(lc[a] == ld[a] for a in lc if a != axis):
                rows.append(contrasts[position[d]] - contrasts[position[c]])
    if not rows:
        return np.zeros((0, contrasts.shape[1]))
    m = np.array(rows)
    # Keep a maximal independent set (a cycle of three levels repeats one contrast).
    kept: list[np.ndarray] = []
    for row in m:
        trial = np.array([*kept, row])
        if np.linalg.matrix_rank(trial) == len(trial):
            kept.append(row)
    return np.array(kept)


def _pairwise(order, contrasts, b, v, v_model) -> tuple[PairwiseDifference, ...]:
    if len(order) < 2:
        return ()
    found = []
    for i, j in combinations(range(len(order)), 2):
        est, se, se_m = _combine(contrasts[j] - contrasts[i], b, v, v_model)
        found.append((order[i], order[j], est, se, se_m))
    ps = [_p(e, s) for _, _, e, s, _ in found]
    adjusted = holm(ps)
    return tuple(PairwiseDifference(a, c, e, s, e - _Z * s, e + _Z * s, p, q, q < 0.05, sm)
                 for (a, c, e, s, sm), p, q in zip(found, ps, adjusted, strict=True))


def holm(ps: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p values, in the order given: the k-th smallest p times (m - k + 1),
    made non-decreasing and capped at 1. statsmodels' multipletests(method="holm") gives the same
    numbers (tests/test_study_model.py) but runs gc.collect() on every call (about 0.2 s in a
    large process), which the coverage simulation would pay on every draw."""
    p = np.asarray(ps, dtype=float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(np.maximum.accumulate(p[order] * np.arange(m, 0, -1)), 1.0)
    out = np.empty(m)
    out[order] = stepped
    return [float(x) for x in out]
