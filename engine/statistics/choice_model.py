"""Why was this document cited? A conditional logit over each answer's shown documents.

A citation is a choice among the documents an answer was shown. fit_choice_model fits
statsmodels' ConditionalLogit of `cited` on the documents' covariates, one stratum per answer,
so every factor the battery varies (relevance, position, label, repetition) gets its own odds
ratio with a 95% interval, holding the others fixed. The strata absorb everything an answer's
documents share (the item, the model, the prompt): only differences between the documents of
one answer inform the fit.

The input is the decisions frame (Contract 3; the store's citation_decisions view): one row per
shown document per answer with the columns answer, cited, relevant, position, n_shown,
position_group, label and repeated (and item, when present, for the robust intervals' clusters).
The frame's answers are folded into patterns (engine.statistics.choice_patterns) and fitted by
fit_patterns, which a fit over the store reads a chunk of runs at a time. Suppression is
engine.statistics.suppression's. Pure functions: no DuckDB, no Gradio.

Identification, said in words rather than left to a singular matrix:
- an answer that cites nothing, or cites every document it was shown, carries no information
  about which document was chosen: it is counted (n_answers against n_informative), left out of
  the identification checks, and left out of the fit;
- a column that takes one value within every informative answer (the label when every answer is
  vanilla) is dropped with that reason;
- a column that is a combination of the columns before it within answers (the label against
  relevance when only base answers are given: relevant documents always carry label A) is
  dropped with that reason and what would separate them.
The fit is engine.statistics.choice_fit's: statsmodels' ConditionalLogit likelihood (an answer that cites k of
its n documents is a choice of one k-subset among all C(n, k): the "k-of-n" stratum), maximised by
Newton's method with step halving on a log-sum-exp likelihood, after a linear programme has looked
for separation. A covariate (or a combination) that separates cited from uncited documents is
named, with the answers it determines, and the other effects are the limit of the maximum
likelihood estimate along it (the subsets it rules out dropped). Intervals are Wald intervals from
the observed information (model-based) and, beside them, from the cluster-robust sandwich by item
(the base and cf answers of one item share their documents).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from engine.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

    from engine.statistics.choice_patterns import AnswerPatterns

FACTORS = ("relevant", "position", "label", "repeated")  # the order of the design's columns
FACTOR_WORDS = {"relevant": "relevance", "position": "position", "label": "label", "repeated": "repetition"}
POSITION_CODINGS = ("group", "number")
NO_LABEL = "no label"  # the level of a document shown without a label
COLUMNS = ("answer", "cited", "relevant", "position", "n_shown", "position_group", "label", "repeated")
_TOL = 1e-9  # relative size under which a within-answer column counts as zero (exact 0/1 data)
# How an answer citing several documents enters the fit, in words every face prints beside the count.
MULTI_CITATION = ("an answer citing k of its n documents counts as one choice of those k among all "
                  "k-document subsets (the k-of-n conditional logit): exact if each document is cited "
                  "independently given the answer; if the model instead picks its top k, odds ratios "
                  "are biased away from 1 (docs/method.md)")


@dataclass(frozen=True)
class Effect:
    """One term of the fit: its odds ratio with the 95% Wald interval, p, and the raw coefficient."""

    term: str
    odds_ratio: float
    ci_low: float
    ci_high: float
    p: float
    coef: float  # log odds ratio
    se: float  # its standard error (model-based: the inverse of the observed information)
    sentence: str = ""  # the effect in words, with what it holds fixed
    # The same Wald interval and p from the cluster-robust (sandwich) standard error, clusters
    # being the fit's `cluster` (the item where the frame has one): valid when the answers of
    # one item are correlated, e.g. by documents that differ in quality (docs/method.md).
    robust_se: float = float("nan")
    robust_ci_low: float = float("nan")
    robust_ci_high: float = float("nan")
    robust_p: float = float("nan")
    robust_undefined: str = ""  # why there is no robust interval and p ("" where there is one)
    # The robust interval and p read Student's t with this many degrees of freedom: the clusters
    # the term's robust variance rests on, less one (LogitFit.clusters_effective), as statsmodels'
    # and Stata's cluster-robust t uses G - 1. Where most items' answers coincide, a few clusters
    # carry the variance and the normal quantile is too narrow (docs/method.md).
    robust_df: float = float("nan")


# The sandwich's meat is a sum of each cluster's squared score: where every cluster's score on a
# term is 0 up to round-off (the base and cf answers of each item cite alike, say) there is no
# spread, and a robust interval of width 0 with a p from round-off would claim a certainty.
NO_ROBUST_SPREAD = ("none: every cluster's score on this term is 0 up to round-off (its answers cite alike "
                    "whichever way the term varies), so the sandwich has no spread")


@dataclass(frozen=True)
class ChoiceModelFit:
    """A fitted choice model and what it could not estimate."""

    effects: tuple[Effect, ...]
    n_answers: int  # answers in the frame
    n_informative: int  # answers that cite some but not all of their documents: the fit's strata
    n_documents: int  # rows (shown documents) of the informative answers
    dropped: tuple[tuple[str, str], ...]  # (term, why it could not be estimated)
    converged: bool
    log_likelihood: float
    position: str
    label_reference: str | None  # None when the design has no label column
    # (term, what separates): terms whose odds ratio is infinite or zero because the term (or a
    # combination naming it) separates cited from uncited documents; the effects are then the
    # limit fit of the others (the module doc).
    separated: tuple[tuple[str, str], ...] = ()
    # How many informative answers cite 1, 2, ... documents: (k, answers); MULTI_CITATION says
    # how those citing several are modelled.
    cited_counts: tuple[tuple[int, int], ...] = ()
    cluster: str = "answer"  # the unit of the robust intervals' clusters: "item" or "answer"
    n_clusters: int = 0

    @property
    def n_multi(self) -> int:
        """Informative answers that cite two or more documents."""
        return sum(n for k, n in self.cited_counts if k >= 2)

    def effect(self, term: str) -> Effect:
        """The effect of one term, by name (KeyError naming the terms there are)."""
        for e in self.effects:
            if e.term == term:
                return e
        raise KeyError(f"no term {term!r}; the fit has {', '.join(e.term for e in self.effects)}")


# ---------------------------------------------------------------- the design


def check_frame(frame: pd.DataFrame, needed: Iterable[str]) -> None:
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise UserError(f"the decisions frame lacks the column(s) {', '.join(missing)}")
    if len(frame) == 0:
        raise UserError("the decisions frame is empty: there is no citation decision to model")


def _interaction_pairs(interactions: Iterable[str]) -> list[tuple[str, str]]:
    valid = [f"{a}:{b}" for i, a in enumerate(FACTORS) for b in FACTORS[i + 1:]]
    pairs: list[tuple[str, str]] = []
    for name in interactions:
        parts = [p.strip() for p in str(name).split(":")]
        if len(parts) != 2 or parts[0] == parts[1] or not all(p in FACTORS for p in parts):
            raise UserError(f"unknown interaction {name!r}: choose from {', '.join(valid)}")
        pair = (parts[0], parts[1]) if FACTORS.index(parts[0]) < FACTORS.index(parts[1]) else (parts[1], parts[0])
        if pair not in pairs:
            pairs.append(pair)
    return pairs


def label_levels(frame: pd.DataFrame) -> list[str]:
    """The label levels in the frame: the labels in alphabetical order, then NO_LABEL if any row has none."""
    import pandas as pd

    labels = frame["label"]
    named = sorted({str(v) for v in pd.unique(labels.dropna())})
    return named + ([NO_LABEL] if labels.isna().any() else [])


def default_label_reference(levels: list[str]) -> str:
    """The reference level when the caller names none: the alphabetically first label carried.

    Callers that know the metadata type should pass label B (the label relevant documents carry
    in cf), so that an odds ratio above 1 reads in CAB's direction (favouring label A). NO_LABEL is
    the reference only when no document carries a label (then the label column drops anyway).
    """
    return levels[0]


def _design(raw: np.ndarray, label_names: list[str], levels: list[str], reference: str, position: str,
            pairs: list[tuple[str, str]]) -> tuple[np.ndarray, list[str], dict[str, tuple[str, ...]]]:
    """The covariate columns of documents given by their raw covariates (choice_patterns.RAW_COLUMNS,
    the last axis; label codes index label_names, -1 NO_LABEL): the design (the same shape, its
    last axis the columns), the columns' names and each column's factors."""
    from engine.statistics.choice_patterns import GROUP, LABEL, RAW_COLUMNS

    blocks: dict[str, dict[str, np.ndarray]] = {
        "relevant": {"relevant": raw[..., RAW_COLUMNS.index("relevant")]},
        "position": ({f"position[{g}]": (raw[..., GROUP] == code).astype(float) for code, g in ((1, "middle"), (2, "last"))}
                     if position == "group" else {"position": raw[..., RAW_COLUMNS.index("position")]}),
        "label": {},
        "repeated": {"repeated": raw[..., RAW_COLUMNS.index("repeated")]},
    }
    label = raw[..., LABEL]
    for v in levels:
        if v != reference:
            blocks["label"][f"label[{v}]"] = (label < 0 if v == NO_LABEL else label == label_names.index(v)).astype(float)
    columns: dict[str, np.ndarray] = {}
    factors: dict[str, tuple[str, ...]] = {}
    for f in FACTORS:
        for c, values in blocks[f].items():
            columns[c], factors[c] = values, (f,)
    for a, b in pairs:
        for ca, va in blocks[a].items():
            for cb, vb in blocks[b].items():
                columns[f"{ca}:{cb}"], factors[f"{ca}:{cb}"] = va * vb, (a, b)
    return np.stack(list(columns.values()), axis=-1), list(columns), factors


def _identify(designs: list[np.ndarray], columns: list[str],
              factors: dict[str, tuple[str, ...]]) -> tuple[list[str], list[tuple[str, str]]]:
    """The columns the informative answers can estimate, and (term, reason) for the others.
    designs: each shape's patterns' design (P, n, p). Worked on the distinct within-answer rows
    (each pattern's rows less their mean): the same columns are constant or collinear there as on
    every answer's rows, and ten million answers make few distinct rows."""
    p = len(columns)
    values = _distinct(np.concatenate([(d - d.mean(axis=1, keepdims=True)).reshape(-1, p) for d in designs]))
    kept: list[str] = []
    dropped: list[tuple[str, str]] = []
    for j, col in enumerate(columns):
        x = values[:, j]
        scale = max(1.0, max(float(np.abs(d[..., j]).max()) for d in designs))
        if np.abs(x).max() <= _TOL * scale:
            dropped.append((col, _constant_reason(col, factors[col])))
            continue
        if kept:
            basis = values[:, [columns.index(k) for k in kept]]
            coef, *_ = np.linalg.lstsq(basis, x, rcond=None)
            if np.linalg.norm(x - basis @ coef) <= 1e-7 * np.linalg.norm(x):
                partners = [kept[i] for i in np.flatnonzero(np.abs(coef) > 1e-6)]
                dropped.append((col, _collinear_reason(col, factors, partners)))
                continue
        kept.append(col)
    return kept, dropped


def _distinct(rows: np.ndarray) -> np.ndarray:
    """The distinct rows of a float array (-0.0 counted as 0.0)."""
    flat = np.ascontiguousarray(rows + 0.0)
    keys = flat.view(np.dtype((np.void, flat.dtype.itemsize * max(1, flat.shape[1])))).ravel()
    return flat[np.unique(keys, return_index=True)[1]]


def _constant_reason(col: str, factors: tuple[str, ...]) -> str:
    if factors == ("label",):
        return ("every answer shows its documents with one and the same label (or none, as in vanilla "
                "answers), so the choice among them says nothing about the label")
    return f"'{col}' takes one value within every answer, so the choice among its documents says nothing about it"


def _collinear_reason(col: str, factors: dict[str, tuple[str, ...]], partners: list[str]) -> str:
    named = ", ".join(f"'{p}'" for p in partners)
    reason = f"within answers '{col}' is fixed by {named}, so its effect cannot be told apart from theirs"
    if factors[col] == ("label",) and "relevant" in partners:
        reason += (" (in base or cf answers alone relevant documents always carry the same label: "
                   "adding the cf mode, or answers with a one-sided label scope, separates them)")
    elif factors[col] == ("label",):
        reason += " (the level is then merged with the others it moves with)"
    return reason


# ---------------------------------------------------------------- the fit


def fit_choice_model(frame: pd.DataFrame, *, position: str = "group", interactions: Iterable[str] = (),
                     label_reference: str | None = None) -> ChoiceModelFit:
    """Fit the conditional logit of `cited` among each answer's documents (see the module doc).

    position: "group" (dummies for middle and last, first the reference) or "number" (the
    1-based position: the effect of one step down the list). interactions: "a:b" names from
    relevant, position, label, repeated. label_reference: the label the others are compared
    with (default_label_reference when None). The frame's answers are folded into patterns
    (engine.statistics.choice_patterns) and fitted by fit_patterns, as the store's are.
    """
    import pandas as pd

    from engine.statistics.choice_patterns import PatternBuilder, position_group_codes

    if position not in POSITION_CODINGS:
        raise UserError(f"position must be one of {', '.join(POSITION_CODINGS)}, not {position!r}")
    _interaction_pairs(interactions)
    check_frame(frame, COLUMNS)
    group = frame["position_group"]
    if position == "group":
        unknown = sorted({str(v) for v in pd.unique(group)} - {"first", "middle", "last"})
        if unknown:
            raise UserError(f"position_group must be first, middle or last, not {', '.join(unknown)}")
    named = [v for v in label_levels(frame) if v != NO_LABEL]
    label = frame["label"]
    label_code = np.full(len(frame), -1.0)
    for code, v in enumerate(named):
        label_code[(label == v).to_numpy(bool)] = code
    group_code = position_group_codes(group)
    raw = np.column_stack([frame["relevant"].astype(bool).to_numpy(float), frame["position"].to_numpy(float),
                           group_code, label_code, frame["repeated"].astype(bool).to_numpy(float)])
    cluster = "item" if "item" in frame.columns else "answer"
    answers = codes(frame["answer"])
    order = np.argsort(answers, kind="stable")  # each answer's rows together, in the frame's order
    builder = PatternBuilder()
    builder.add(answers[order], frame["cited"].to_numpy(bool)[order], raw[order], codes(frame[cluster])[order])
    return fit_patterns(builder.patterns(), named, position=position, interactions=interactions,
                        label_reference=label_reference, cluster=cluster)


def fit_patterns(answers: AnswerPatterns, label_names: list[str], *, position: str = "group",
                 interactions: Iterable[str] = (), label_reference: str | None = None,
                 cluster: str = "answer") -> ChoiceModelFit:
    """fit_choice_model's fit of answers already folded into patterns (engine.statistics.choice_patterns);
    label_names: the text of each label code, `cluster`: what the cluster codes are (for the
    robust intervals' words)."""
    from engine.statistics.choice_fit import fit_strata, k_subsets, pattern_block
    from engine.statistics.choice_patterns import RAW_COLUMNS

    if position not in POSITION_CODINGS:
        raise UserError(f"position must be one of {', '.join(POSITION_CODINGS)}, not {position!r}")
    pairs = _interaction_pairs(interactions)
    if answers.columns != RAW_COLUMNS:
        raise ValueError(f"the choice model reads patterns of {RAW_COLUMNS}, not {answers.columns}")
    n_answers, n_informative = answers.n_answers, answers.n_informative
    if n_informative == 0:
        raise UserError(f"no answer can inform the choice model: each of the {n_answers} answers cites nothing "
                        "or cites every document it was shown")
    if position == "group" and answers.unknown_groups:
        raise UserError("position_group must be first, middle or last, and some shown document's is none of them")
    levels = (sorted({label_names[c] for c in answers.label_codes if c >= 0})
              + ([NO_LABEL] if -1 in answers.label_codes else []))
    reference = label_reference if label_reference is not None else default_label_reference(levels)
    if reference not in levels:
        raise UserError(f"label reference {reference!r} is not a label in the data: choose from "
                        f"{', '.join(repr(v) for v in levels)}")
    designs: list[np.ndarray] = []
    for s in answers.shapes:
        design, columns, factors = _design(s.rows, label_names, levels, reference, position, pairs)
        designs.append(design)
    kept, dropped = _identify(designs, columns, factors)
    if len(levels) == 1:  # one label level: the design has no label column to drop, so say why here
        dropped.insert(0, ("label", "no document carries a label" if levels[0] == NO_LABEL
                           else f"every document carries the same label ('{levels[0]}')"))
    if not kept:
        raise UserError("nothing left to estimate: " + "; ".join(f"{t}: {r}" for t, r in dropped))
    use = [columns.index(c) for c in kept]
    blocks = [pattern_block(d[..., use], k_subsets(s.n, s.k), s.pattern, s.chosen, s.cluster)
              for s, d in zip(answers.shapes, designs, strict=True)]
    del designs
    fit = fit_strata(blocks, len(kept))
    words = {c: f"'{c}', " + " together with ".join(describe_term(part, reference) for part in c.split(":"))
             for c in kept}
    separated = list(dict.fromkeys((kept[j], separation_reason(kept, sep, n_informative, words=words, after=i > 0))
                                   for i, sep in enumerate(fit.separations) for j in sep.columns))
    named = {t for t, _ in separated}
    for j, col in enumerate(kept):  # moved by a null direction after separation, not separating itself
        if not np.isfinite(fit.params[j]) and col not in named:
            separated.append((col, "not estimable once the separated choices are ruled out: it no longer varies "
                                   "among the documents an answer could still have cited"))
    main = [f for f in FACTORS if any(factors[c] == (f,) for c in kept)]
    effects = []
    for j, col in enumerate(kept):
        if np.isfinite(fit.params[j]):
            e = _effect(col, float(fit.params[j]), float(fit.bse[j]), float(fit.bse_cluster[j]),
                        float(fit.clusters_effective[j]) if fit.clusters_effective is not None else math.inf)
            effects.append(_with_sentence(e, factors[col], main, reference))
    return ChoiceModelFit(tuple(effects), n_answers, n_informative, answers.n_documents, tuple(dropped),
                          fit.converged, fit.llf, position, reference if "label" in main else None, tuple(separated),
                          answers.cited_counts, cluster, fit.n_clusters)


def codes(column: pd.Series) -> np.ndarray:
    """Integer codes of a column's values, in order of first appearance (answers and clusters as
    numbers: a million answers' labels never become Python strings)."""
    import pandas as pd

    return np.asarray(pd.factorize(column, use_na_sentinel=False)[0], dtype=np.int64)


_Z = 1.959963984540054  # the 97.5% normal quantile: Wald intervals at 95%


def _effect(term: str, coef: float, se: float, robust_se: float, clusters: float = math.inf) -> Effect:
    """The odds ratio with its model-based Wald interval and p (normal) and its cluster-robust ones
    (Student's t with `clusters` - 1 degrees of freedom, at least 1)."""
    from scipy.stats import t

    def p_of(s: float) -> float:
        return math.erfc(abs(coef / s) / math.sqrt(2)) if s > 0 and math.isfinite(s) else float("nan")

    def ci(s: float, z: float = _Z) -> tuple[float, float]:
        return (math.exp(coef - z * s), math.exp(coef + z * s)) if math.isfinite(s) else (math.nan, math.nan)

    low, high = ci(se)
    if math.isfinite(se) and not robust_se > _TOL * se:
        return Effect(term, math.exp(coef), low, high, p_of(se), coef, se, "", robust_se, robust_undefined=NO_ROBUST_SPREAD)
    df = max(clusters - 1.0, 1.0) if math.isfinite(clusters) else math.inf
    r_low, r_high = ci(robust_se, float(t.ppf(0.975, df)) if math.isfinite(df) else _Z)
    r_p = float(2 * t.sf(abs(coef / robust_se), df)) if robust_se > 0 and math.isfinite(robust_se) else math.nan
    return Effect(term, math.exp(coef), low, high, p_of(se), coef, se, "", robust_se, r_low, r_high, r_p, robust_df=df)


def _answers(n: int) -> str:
    return f"{n:,} answer" + ("" if n == 1 else "s")


def separation_reason(kept: list[str], sep, n_informative: int, *, words: dict[str, str] | None = None,
                      after: bool = False) -> str:
    """What separates, in words, with the condition it holds under: the covariate (or combination)
    and its level (`words`: each column's level in words, the column's name where none), the
    answers it holds in (those whose documents differ in it, of all informative ones), where its
    odds ratio goes, and, where an earlier separation's choices were ruled out first (`after`),
    that it holds among the documents still possible. A separation stated without the answers it
    concerns reads as a claim about every answer, which it is not."""
    n = sep.strata_determined
    among = " among the ones it could still cite once the separation above is ruled out" if after else ""
    if len(sep.columns) == 1:
        col, sign = kept[sep.columns[0]], sep.signs[0]
        where = f"in each of {n:,} of the {n_informative:,} informative answers"
        if col == "position":
            text = (f"{where}{f' ({among.strip()})' if after else ''}, the answer cites documents " + ("further down" if sign > 0 else "higher up")
                    + " the list than each one it leaves uncited")
        else:
            side, other = ("with", "without") if sign > 0 else ("without", "with")
            text = (f"{words.get(col, col) if words else col}: {where} (those whose documents differ in it{among}), "
                    f"the answer cites no document {other} it while leaving one {side} it uncited")
        bound = "infinite" if sign > 0 else "0"
        return f"{text}: its odds ratio is {bound} (separation; it decides {_answers(n)})"
    combo = " ".join(f"{'+' if w > 0 else '-'} {abs(w):.3g} x '{kept[j]}'"
                     for j, w in ((j, sep.direction[j]) for j in sep.columns))
    combo = combo[2:] if combo.startswith("+ ") else combo
    return (f"the combination {combo} separates cited from uncited documents: in each of {n:,} of the "
            f"{n_informative:,} informative answers (those whose documents differ on it{among}), the answer cites "
            f"no document lower on it while leaving one higher uncited (it decides {_answers(n)}): "
            "each of its terms is unbounded")


# ---------------------------------------------------------------- in words


def describe_term(col: str, reference: str | None) -> str:
    """A term's level in words, against its reference: "being shown last (against first)"."""
    if col == "relevant":
        return "being relevant"
    if col == "repeated":
        return "being shown twice (each copy)"
    if col == "position":
        return "each step further down the list"
    if col.startswith("position["):
        return {"position[middle]": "being shown in the middle (against first)",
                "position[last]": "being shown last (against first)"}[col]
    # Labels as the prompt shows them, after "written by": "a 'written by a woman' label".
    level = col[len("label["):-1]
    if level == NO_LABEL:
        return f"no label (against a 'written by {reference}' label)"
    if reference == NO_LABEL:
        return f"a 'written by {level}' label (against no label)"
    return f"a 'written by {level}' label (against 'written by {reference}')"


def _p_words(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _with_sentence(e: Effect, factors: tuple[str, ...], main: list[str], reference: str | None) -> Effect:
    numbers = f"{e.odds_ratio:.2f} [{e.ci_low:.2f}, {e.ci_high:.2f}] ({_p_words(e.p)})"
    if len(factors) == 1:
        others = [FACTOR_WORDS[f] for f in main if f != factors[0]]
        held = f", holding {_and(others)} fixed" if others else ""
        text = f"{describe_term(e.term, reference)} multiplies the odds of citing a document by {numbers}{held}"
    else:
        a, b = e.term.split(":", 1)
        text = (f"{describe_term(a, reference)} together with {describe_term(b, reference)} multiplies the odds of "
                f"citing a document by a further {numbers}, beyond their separate effects")
    return replace(e, sentence=text[0].upper() + text[1:])
