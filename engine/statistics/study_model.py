"""One model of label bias across a whole study: the label effect in each configuration of the grid.

A study runs one experiment per configuration (a level combination of the axes it varies: model,
metadata type, cut-off, order, few-shot, XAI, the battery's axes). fit_study_model fits one
conditional logit of `cited` over every configuration's document-level rows (the citation_decisions
view): each answer a stratum, as engine.statistics.choice_model, with

    cited ~ (relevant + position + label[other]) per configuration + label[A] + label[A] x configuration

where label[A] is 1 for a document carrying label A of its configuration's metadata type (the side
CAB > 0 favours; label B is the reference, DESIGN.md's sign convention), label[other] marks a
document with no label or a label that is neither A nor B (a nuisance term), and label[A] x
configuration are the interactions of the label with every configuration but the first. The
nuisance terms get a coefficient of their own in each configuration ("relevant:model=m2"): two
models weigh relevance and position differently, and one shared coefficient misfits both and
moves the label effects (scripts/study_model_coverage.py, scenario relevance_differs). The axes'
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

The answers come folded into patterns (engine.statistics.study_answers: `why-cited --study` reads
them a chunk of runs at a time, and never holds a study's decision rows at once); fit_study_answers
fits them through choice_fit's fit_strata, and fit_study_model folds a decisions frame first.

What cannot be estimated (engine.statistics.study_checks) is refused in one line naming it (UserError): no answer citing some but
not all of its documents; a configuration with one item (its cluster-robust variance has no
second cluster to compare with) or no informative answer; a configuration where the label does not
vary within answers, or moves with relevance or position (base or cf answers alone). An axis with
one level is no axis: it is left out and named in `dropped_axes`. Pure: no DuckDB; statsmodels and
scipy are imported on use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import combinations
from typing import TYPE_CHECKING

import numpy as np

from engine.errors import UserError
from engine.statistics.stats import holm
from engine.statistics.study_answers import STUDY_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

    from engine.statistics.choice_patterns import AnswerPatterns, ShapePatterns
    from engine.statistics.study_answers import StudyAnswers

CORRECTION = "Holm"  # the pairwise differences' multiple-comparison correction (Holm's step-down; see holm)
COVARIANCE = "cluster-robust (sandwich) by item"
_Z = 1.959963984540054  # the 97.5% normal quantile: Wald intervals at 95%


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
    axis: str = ""  # the axis a per-axis test is about ("" for the joint test)


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


def varying_axes(answers: StudyAnswers) -> tuple[list[str], list[tuple[str, str]]]:
    """The axes with two or more levels among the configurations with rows, and (axis, why) for the others."""
    present = _present(answers)
    kept, dropped = [], []
    for axis in (a for a, _ in answers.levels[0]) if answers.levels else ():
        levels = list(dict.fromkeys(dict(answers.levels[c])[axis] for c in present))  # in the order they appear
        if len(levels) > 1:
            kept.append(axis)
        else:
            dropped.append((axis, f"one level ({levels[0] if levels else 'none'}): not an axis"))
    return kept, dropped


def _present(answers: StudyAnswers) -> list[int]:
    """The configurations some row is in, in the order first seen."""
    groups = np.flatnonzero(answers.label_rows.sum(axis=(1, 2)) > 0)
    return sorted({int(c) for c in answers.configuration[groups] if c >= 0})


def fit_study_model(frame: pd.DataFrame, axes: Sequence[str], *, position: str = "group") -> StudyModelFit:
    """Fit the study model (the module doc) to a decisions frame (engine.statistics.study_answers'
    COLUMNS, each axis's column, `label` (the label's text, optional) and `position` when position
    is "number"), folded in by study_answers.frame_answers as the store's answers are."""
    from engine.statistics.study_answers import frame_answers

    return fit_study_answers(frame_answers(frame, axes, position=position), position=position)


def fit_study_answers(answers: StudyAnswers, *, position: str = "group") -> StudyModelFit:
    """Fit the study model (the module doc) to a study's answers folded into patterns
    (engine.statistics.study_answers): what `why-cited --study` reads a chunk of runs at a time."""
    from engine.statistics.choice_fit import fit_strata, k_subsets, pattern_block
    from engine.statistics.choice_model import separation_reason
    from engine.statistics.study_checks import check_configurations

    if position not in ("group", "number"):
        raise UserError(f"position must be group or number, not {position!r}")
    if answers.patterns.columns != STUDY_COLUMNS:
        raise ValueError(f"the study model reads patterns of {STUDY_COLUMNS}, not {answers.patterns.columns}")
    kept_axes, dropped_axes = varying_axes(answers)
    coarse: dict[tuple[str, ...], int] = {}
    coarse_of = np.full(max(1, len(answers.levels)), -1, dtype=np.int64)
    for c in _present(answers):
        levels = dict(answers.levels[c])
        coarse_of[c] = coarse.setdefault(tuple(levels[a] for a in kept_axes), len(coarse))
    order = [", ".join(f"{a}={v}" for a, v in zip(kept_axes, key, strict=True)) or "all" for key in coarse]
    config_levels = {name: tuple(zip(kept_axes, key, strict=True)) for name, key in zip(order, coarse, strict=True)}
    group_cfg = np.where(answers.configuration >= 0, coarse_of[np.maximum(answers.configuration, 0)], -1)
    patterns = answers.patterns
    if patterns.n_citing == 0:
        raise UserError(f"no citing answers: none of the {patterns.n_answers:,} answers cites a shown document")
    if patterns.n_informative == 0:
        raise UserError(f"no answer cites some but not all of its documents (of {patterns.n_answers:,}): "
                        "nothing to fit")
    shapes = _by_configuration(patterns, group_cfg, len(order))
    flat = np.concatenate([x.rows.reshape(-1, x.rows.shape[2]) for x in shapes])
    row_cfg = np.concatenate([np.repeat(x.configuration, x.shape.n) for x in shapes])
    offsets = np.cumsum([0] + [len(x.rows) for x in shapes[:-1]])
    row_groups = np.concatenate([np.repeat(o + np.arange(len(x.rows)), x.shape.n) for o, x in zip(offsets, shapes, strict=True)])
    row_weights = np.concatenate([np.repeat(x.count, x.shape.n) for x in shapes]).astype(float)
    shared = _nuisance(flat, position)
    label_a = (flat[:, STUDY_COLUMNS.index("side")] == 0).astype(float)
    clusters = 1 + max(int(s.cluster.max()) for s in patterns.shapes)
    pairs = np.unique(np.concatenate([x.answer_configuration * clusters + x.shape.cluster for x in shapes]))
    items = [pairs[pairs // clusters == i] % clusters for i in range(len(order))]
    check_configurations(order, row_cfg, row_groups, row_weights, label_a, shared, items, answers.item_name)
    kept_nuisance, notes = _identified_per_configuration(shared, order, label_a, row_cfg, row_groups, row_weights)
    label_terms = ["label[A]", *(f"label[A]:{c}" for c in order[1:])]
    terms = [*kept_nuisance, *label_terms]
    blocks = []
    for x in shapes:
        design = _per_configuration(_nuisance(x.rows, position), x.configuration[:, None], order)
        a = (x.rows[..., STUDY_COLUMNS.index("side")] == 0).astype(float)
        columns = [design[k] for k in kept_nuisance] + [a] + [a * (x.configuration == i)[:, None]
                                                              for i in range(1, len(order))]
        blocks.append(pattern_block(np.stack(columns, axis=-1), k_subsets(x.shape.n, x.shape.k), x.index,
                                    x.shape.chosen, x.shape.cluster))
    fit = fit_strata(blocks, len(terms))
    bad = [terms[j] for j in range(len(terms)) if not np.isfinite(fit.params[j])]
    words = _term_words(terms, order)
    reasons = {terms[j]: separation_reason(terms, sep, patterns.n_informative, words=words, after=i > 0)
               for i, sep in enumerate(fit.separations) for j in sep.columns}
    unmoved = "not estimable once the separated choices are ruled out (it no longer varies among the documents left)"
    label_bad = [t for t in bad if t.startswith("label[A]")]
    if label_bad:
        t = next((t for t in label_bad if t in reasons), label_bad[0])
        raise UserError(f"the label separates cited from uncited documents: {reasons.get(t, f'{t}: {unmoved}')}; "
                        "no interval can be given")
    notes += [f"{reasons.get(t, f'{t}: {unmoved}')}; the label effects are its limit fit" for t in bad]
    # A separated nuisance term has no estimate (NaN) and no weight in any label contrast: zeros
    # keep 0 x NaN out of the contrasts' variances.
    b, v, v_model = (np.nan_to_num(m, nan=0.0) for m in (fit.params, fit.cov_cluster, fit.cov))
    first = len(kept_nuisance)
    contrasts = np.zeros((len(order), len(terms)))
    contrasts[:, first] = 1.0
    for i in range(1, len(order)):
        contrasts[i, first + i] = 1.0
    labels = _label_words(answers, group_cfg, order)
    n_answers = np.sum([np.bincount(x.answer_configuration, minlength=len(order)) for x in shapes], axis=0)
    effects = []
    for i, name in enumerate(order):
        est, se, se_m = _combine(contrasts[i], b, v, v_model)
        effects.append(ConfigurationEffect(name, config_levels[name], *labels[i], int(n_answers[i]), len(items[i]),
                                           est, se, est - _Z * se, est + _Z * se, _p(est, se), se_m))
    interaction = None
    per_axis: list[WaldTest] = []
    if len(order) > 1:
        r = np.zeros((len(order) - 1, len(terms)))
        r[:, first + 1:] = np.eye(len(order) - 1)
        interaction = wald(r, b, v, "the label effect is the same in every configuration "
                                      "(all label x configuration interactions are 0)")
        for axis in kept_axes:
            r_axis = _axis_contrasts(axis, config_levels, order, contrasts)
            if len(r_axis):
                test = wald(r_axis, b, v, f"the label effect does not depend on {axis} (equal in every two "
                                          f"configurations that differ in {axis} alone)")
                per_axis.append(replace(test, axis=axis))
    return StudyModelFit(tuple(kept_axes), tuple(dropped_axes), tuple(effects), interaction, tuple(per_axis),
                         _pairwise(order, contrasts, b, v, v_model), CORRECTION, COVARIANCE, tuple(terms),
                         tuple(float(p) for p in fit.params), patterns.n_answers, patterns.n_informative, fit.n_clusters,
                         fit.converged, fit.llf, tuple(notes))


@dataclass(frozen=True)
class _ShapeByConfiguration:
    """One shape's answers with each distinct (pattern, configuration) once: the design's patterns."""

    shape: ShapePatterns
    rows: np.ndarray  # (P, n, len(STUDY_COLUMNS)): each (pattern, configuration)'s raw rows
    configuration: np.ndarray  # (P,): its configuration
    count: np.ndarray  # (P,): the answers it stands for
    index: np.ndarray  # (G,): each answer's (pattern, configuration)
    answer_configuration: np.ndarray  # (G,): each answer's configuration


def _by_configuration(patterns: AnswerPatterns, group_cfg: np.ndarray, n_configurations: int) -> list[_ShapeByConfiguration]:
    """Each shape's distinct (pattern, configuration) pairs: the checks read their rows weighted by
    their counts, the fit reads them as its patterns."""
    out = []
    for s in patterns.shapes:
        cfg = group_cfg[s.tag]
        found, index = np.unique(s.pattern.astype(np.int64) * n_configurations + cfg, return_inverse=True)
        index = index.ravel()
        out.append(_ShapeByConfiguration(s, s.rows[found // n_configurations], found % n_configurations,
                                         np.bincount(index, minlength=len(found)), index, cfg))
    return out


def _nuisance(raw: np.ndarray, position: str) -> dict[str, np.ndarray]:
    """The nuisance columns of documents given by their raw covariates (STUDY_COLUMNS, the last axis)."""
    column = {name: raw[..., j] for j, name in enumerate(STUDY_COLUMNS)}
    nuisance = {"relevant": column["relevant"].astype(float)}
    if position == "group":
        for code, g in ((1, "middle"), (2, "last")):
            nuisance[f"position[{g}]"] = (column["position_group"] == code).astype(float)
    else:
        nuisance["position"] = column["position"].astype(float)
    nuisance["label[other]"] = (column["side"] < 0).astype(float)
    return nuisance


def _per_configuration(nuisance: dict[str, np.ndarray], cfg: np.ndarray, order: list[str]) -> dict[str, np.ndarray]:
    """Each nuisance column once per configuration, "relevant:model=m2" (cfg: each row's
    configuration, broadcast against the columns; one configuration: the columns as they are).
    Two models can weigh relevance or position differently: one coefficient shared by every
    configuration would then misfit both, and the misfit leaks into the label effects and their
    tests (the joint test rejected 18.6% at 5% nominal where only the relevance odds ratios
    differed, 2 against 10: scripts/study_model_coverage.py). A column of its own per configuration,
    not a main effect and differences, so that what one configuration cannot identify, or what
    separates there, is named by that configuration."""
    if len(order) == 1:
        return dict(nuisance)
    return {f"{name}:{c}": column * (cfg == i) for name, column in nuisance.items() for i, c in enumerate(order)}


def _term_words(terms: list[str], order: list[str]) -> dict[str, str]:
    """Each term with its level and configuration in words, for the separations' sentences."""
    from engine.statistics.choice_model import describe_term

    def level(name: str) -> str:
        if name == "label[other]":
            return "a label neither A nor B, or none (against label B)"
        return "label A (against label B)" if name == "label[A]" else describe_term(name, None)

    out = {}
    for t in terms:
        name, _, where = t.partition(":")
        if where:
            out[t] = f"'{name}' in configuration {where}, {level(name)}"
        else:
            out[t] = f"'{name}'" + (" in every configuration" if len(order) > 1 and name == "label[A]" else "") \
                     + f", {level(name)}"
    return out


def _identified_per_configuration(shared: dict[str, np.ndarray], order: list[str], label_a: np.ndarray,
                                  cfg: np.ndarray, groups: np.ndarray, weights: np.ndarray) -> tuple[list[str], list[str]]:
    """study_checks.identified_nuisance of the per-configuration columns (_per_configuration), one
    configuration at a time: an answer belongs to one configuration, so a configuration's columns
    are 0 in every other's answers and orthogonal to their columns within answers; one pass over
    every column at once costs columns squared times rows (100 s of a 33-configuration study)."""
    from engine.statistics.study_checks import identified_nuisance

    scales = {k: max(1.0, float(np.abs(v).max())) for k, v in shared.items()}
    kept: set[str] = set()
    notes: list[str] = []
    for i, c in enumerate(order):
        rows = cfg == i
        names = {k: f"{k}:{c}" if len(order) > 1 else k for k in shared}
        found, said = identified_nuisance({names[k]: v[rows] for k, v in shared.items()},
                                          {names[k]: v for k, v in scales.items()}, label_a[rows],
                                          np.zeros(int(rows.sum()), dtype=np.int64), groups[rows], weights[rows])
        kept.update(found)
        notes += said
    terms = [f"{k}:{c}" if len(order) > 1 else k for k in shared for c in order]
    return [t for t in terms if t in kept], notes


def _label_words(answers: StudyAnswers, group_cfg: np.ndarray, order: list[str]) -> list[tuple[str, str]]:
    """Per configuration the labels A and B as shown: the text most rows of each side carry (the
    first in alphabetical order among equals), "A" or "B" where none carries one."""
    out = []
    names = answers.label_names
    for i in range(len(order)):
        rows = answers.label_rows[group_cfg == i].sum(axis=0)  # (3 sides, labels + 1)
        words = []
        for side, fallback in enumerate(("A", "B")):
            counts = rows[side, :len(names)]
            top = counts.max(initial=0)
            words.append(min(names[j] for j in np.flatnonzero(counts == top)) if top > 0 else fallback)
        out.append((words[0], words[1]))
    return out


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
