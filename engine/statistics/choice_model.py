"""Why was this document cited? A conditional logit over each answer's shown documents.

A citation is a choice among the documents an answer was shown. fit_choice_model fits
statsmodels' ConditionalLogit of `cited` on the documents' covariates, one stratum per answer,
so every factor the battery varies (relevance, position, label, repetition) gets its own odds
ratio with a 95% interval, holding the others fixed. The strata absorb everything an answer's
documents share (the item, the model, the prompt): only differences between the documents of
one answer inform the fit.

The input is the decisions frame (Contract 3; the store's citation_decisions view): one row per
shown document per answer with the columns answer, cited, relevant, position, n_shown,
position_group, label, repeated and condition (suppression_rates also reads item, when present,
to pair answers). Pure functions: no DuckDB, no Gradio; statsmodels is imported on first use.

Identification, said in words rather than left to a singular matrix:
- an answer that cites nothing, or cites every document it was shown, carries no information
  about which document was chosen: it is counted (n_answers against n_informative), left out of
  the identification checks, and left out of the fit by statsmodels (whose warning is caught);
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

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from engine.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

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


@dataclass(frozen=True)
class SuppressionRate:
    """One condition's share of answers that cite nothing, with its Wilson 95% interval."""

    condition: str
    answers: int
    silent: int
    rate: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class Suppression:
    """Suppression rates per condition and the tests across conditions (None where undefined)."""

    rates: tuple[SuppressionRate, ...]
    chi2: float | None  # scipy chi2_contingency on conditions x (silent, citing)
    chi2_df: int | None
    chi2_p: float | None
    mcnemar_pairs: int | None  # items with one answer in each of exactly two conditions
    mcnemar_b: int | None  # pairs silent in the first condition only
    mcnemar_c: int | None  # pairs silent in the second condition only
    mcnemar_p: float | None  # exact McNemar: binomial test of b against b + c at 1/2
    notes: tuple[str, ...] = ()  # why a test is missing


# ---------------------------------------------------------------- the design


def _check_frame(frame: pd.DataFrame, needed: Iterable[str]) -> None:
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


def _design(frame: pd.DataFrame, position: str, pairs: list[tuple[str, str]], label_reference: str | None,
            keep: np.ndarray | None = None) -> tuple[pd.DataFrame, dict[str, tuple[str, ...]], str | None]:
    """The covariate columns (of the rows `keep` marks; None: all), each column's factors, and the
    label reference used. The levels and their checks are the whole frame's."""
    import pandas as pd

    blocks: dict[str, pd.DataFrame] = {}
    # Columns of float32 (exact for 0/1 and positions): half the memory of a million answers' design.
    if position == "group":
        group = frame["position_group"]
        unknown = sorted({str(v) for v in pd.unique(group)} - {"first", "middle", "last"})
        if unknown:
            raise UserError(f"position_group must be first, middle or last, not {', '.join(unknown)}")
    levels = label_levels(frame)
    reference = label_reference if label_reference is not None else default_label_reference(levels)
    if reference not in levels:
        raise UserError(f"label reference {reference!r} is not a label in the data: choose from "
                        f"{', '.join(repr(v) for v in levels)}")
    if keep is not None:
        frame = frame.loc[keep]
    blocks["relevant"] = pd.DataFrame({"relevant": frame["relevant"].astype(bool).astype(np.float32)})
    if position == "group":
        group = frame["position_group"]
        blocks["position"] = pd.DataFrame({f"position[{g}]": (group == g).astype(np.float32)
                                           for g in ("middle", "last")})
    else:
        blocks["position"] = pd.DataFrame({"position": frame["position"].astype(np.float32)})
    labels = frame["label"]
    blocks["label"] = pd.DataFrame({f"label[{v}]": (labels.isna() if v == NO_LABEL else labels == v).astype(np.float32)
                                    for v in levels if v != reference}, index=frame.index)
    blocks["repeated"] = pd.DataFrame({"repeated": frame["repeated"].astype(bool).astype(np.float32)})
    columns: dict[str, pd.Series] = {}
    factors: dict[str, tuple[str, ...]] = {}
    for f in FACTORS:
        for c in blocks[f].columns:
            columns[c], factors[c] = blocks[f][c], (f,)
    for a, b in pairs:
        for ca in blocks[a].columns:
            for cb in blocks[b].columns:
                columns[f"{ca}:{cb}"], factors[f"{ca}:{cb}"] = blocks[a][ca] * blocks[b][cb], (a, b)
    design = pd.DataFrame(columns, index=frame.index)
    return design, factors, (reference if len(levels) > 1 else None)


def _identify(design: pd.DataFrame, answers: np.ndarray,
              factors: dict[str, tuple[str, ...]]) -> tuple[list[str], list[tuple[str, str]]]:
    """The columns the informative answers can estimate, and (term, reason) for the others.
    answers: integer codes. Worked on the distinct within-answer rows: the same columns are
    constant or collinear there as on every row, and a million answers make few distinct rows."""
    counts = np.maximum(np.bincount(answers), 1)
    cols = [design[c].to_numpy() for c in design.columns]
    means = [np.bincount(answers, weights=col) / counts for col in cols]
    step = 1 << 20  # rows centred at a time: a bounded piece of ten million rows
    values = _distinct(np.concatenate([_distinct(np.column_stack([c[i:i + step] - m[answers[i:i + step]]
                                                                  for c, m in zip(cols, means, strict=True)]))
                                       for i in range(0, len(answers), step)]))
    columns = list(design.columns)
    kept: list[str] = []
    dropped: list[tuple[str, str]] = []
    for j, col in enumerate(columns):
        x = values[:, j]
        scale = max(1.0, float(np.abs(design[col].to_numpy()).max()))
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
    with (default_label_reference when None).
    """
    if position not in POSITION_CODINGS:
        raise UserError(f"position must be one of {', '.join(POSITION_CODINGS)}, not {position!r}")
    pairs = _interaction_pairs(interactions)
    _check_frame(frame, COLUMNS)
    answers = codes(frame["answer"])
    cited = frame["cited"].to_numpy(bool)
    size = np.bincount(answers)
    chosen = np.bincount(answers, weights=cited).astype(int)
    informative = (chosen > 0) & (chosen < size)
    n_answers, n_informative = len(size), int(informative.sum())
    if n_informative == 0:
        raise UserError(f"no answer can inform the choice model: each of the {n_answers} answers cites nothing "
                        "or cites every document it was shown")
    keep = informative[answers]
    design, factors, reference = _design(frame, position, pairs, label_reference, keep)
    kept_answers = np.unique(answers[keep], return_inverse=True)[1].ravel()
    kept, dropped = _identify(design, kept_answers, factors)
    if reference is None:  # one label level: the design has no label column to drop, so say why here
        only = label_levels(frame)[0]
        dropped.insert(0, ("label", "no document carries a label" if only == NO_LABEL
                           else f"every document carries the same label ('{only}')"))
    if not kept:
        raise UserError("nothing left to estimate: " + "; ".join(f"{t}: {r}" for t, r in dropped))
    cluster = "item" if "item" in frame.columns else "answer"
    fit = _fit(cited[keep], design[kept].to_numpy(np.float32), kept_answers, codes(frame[cluster])[keep])
    del design
    separated = list(dict.fromkeys((kept[j], _separation_reason(kept, sep)) for sep in fit.separations
                                   for j in sep.columns))
    named = {t for t, _ in separated}
    for j, col in enumerate(kept):  # moved by a null direction after separation, not separating itself
        if not np.isfinite(fit.params[j]) and col not in named:
            separated.append((col, "not estimable once the separated choices are ruled out: it no longer varies "
                                   "among the documents an answer could still have cited"))
    main = [f for f in FACTORS if any(factors[c] == (f,) for c in kept)]
    effects = []
    for j, col in enumerate(kept):
        if np.isfinite(fit.params[j]):
            e = _effect(col, float(fit.params[j]), float(fit.bse[j]), float(fit.bse_cluster[j]))
            effects.append(_with_sentence(e, factors[col], main, reference))
    ks, ns = np.unique(chosen[informative], return_counts=True)
    return ChoiceModelFit(tuple(effects), n_answers, n_informative, int(keep.sum()), tuple(dropped), fit.converged,
                          fit.llf, position, reference if "label" in main else None, tuple(separated),
                          tuple((int(k), int(n)) for k, n in zip(ks, ns, strict=True)), cluster, fit.n_clusters)


def codes(column: pd.Series) -> np.ndarray:
    """Integer codes of a column's values, in order of first appearance (answers and clusters as
    numbers: a million answers' labels never become Python strings)."""
    import pandas as pd

    return np.asarray(pd.factorize(column, use_na_sentinel=False)[0], dtype=np.int64)


def _fit(y: np.ndarray, x: np.ndarray, groups: np.ndarray, clusters: np.ndarray):
    from engine.statistics.choice_fit import fit_conditional_logit

    try:
        return fit_conditional_logit(y, x, groups, clusters)
    except ValueError as err:  # a stratum too large to enumerate
        raise UserError(f"the choice model cannot be fitted: {err}") from None


_Z = 1.959963984540054  # the 97.5% normal quantile: Wald intervals at 95%


def _effect(term: str, coef: float, se: float, robust_se: float) -> Effect:
    """The odds ratio with its model-based and cluster-robust Wald intervals and two-sided p."""
    import math

    def p_of(s: float) -> float:
        return math.erfc(abs(coef / s) / math.sqrt(2)) if s > 0 and math.isfinite(s) else float("nan")

    def ci(s: float) -> tuple[float, float]:
        return (math.exp(coef - _Z * s), math.exp(coef + _Z * s)) if math.isfinite(s) else (math.nan, math.nan)

    low, high = ci(se)
    r_low, r_high = ci(robust_se)
    return Effect(term, math.exp(coef), low, high, p_of(se), coef, se, "", robust_se, r_low, r_high, p_of(robust_se))


def _separation_reason(kept: list[str], sep) -> str:
    """What separates, in words: the covariate (or combination) and where its odds ratio goes."""
    if len(sep.columns) == 1:
        col, sign = kept[sep.columns[0]], sep.signs[0]
        if col == "position":
            text = ("every informative answer cites documents " + ("further down" if sign > 0 else "higher up")
                    + " the list than each one it leaves uncited")
        else:
            side, other = ("with", "without") if sign > 0 else ("without", "with")
            text = (f"no informative answer cites a document {other} '{col}' while leaving one {side} it uncited")
        bound = "infinite" if sign > 0 else "0"
        return f"{text}: its odds ratio is {bound} (separation; it decides {sep.strata_determined:,} answers)"
    combo = " ".join(f"{'+' if w > 0 else '-'} {abs(w):.3g} x '{kept[j]}'"
                     for j, w in ((j, sep.direction[j]) for j in sep.columns))
    combo = combo[2:] if combo.startswith("+ ") else combo
    return (f"the combination {combo} separates cited from uncited documents (no informative answer cites a "
            f"document lower on it while leaving one higher uncited; it decides {sep.strata_determined:,} answers): "
            "each of its terms is unbounded")


# ---------------------------------------------------------------- in words


def _describe(col: str, reference: str | None) -> str:
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
        text = f"{_describe(e.term, reference)} multiplies the odds of citing a document by {numbers}{held}"
    else:
        a, b = e.term.split(":", 1)
        text = (f"{_describe(a, reference)} together with {_describe(b, reference)} multiplies the odds of "
                f"citing a document by a further {numbers}, beyond their separate effects")
    return replace(e, sentence=text[0].upper() + text[1:])


# ---------------------------------------------------------------- suppression


def suppression_rates(frame: pd.DataFrame) -> Suppression:
    """The share of answers citing nothing per `condition` (conditions in order of appearance).

    An answer is silent when none of its rows has cited=True. Across conditions: scipy's
    chi2_contingency on the conditions x (silent, citing) table (with its default Yates
    correction for a 2 x 2 table); for exactly two conditions whose answers pair up by `item`
    (one answer per item in each), also the exact McNemar test on the discordant pairs.
    """
    import pandas as pd
    from scipy.stats import binomtest, chi2_contingency
    from statsmodels.stats.proportion import proportion_confint

    _check_frame(frame, ("answer", "cited", "condition"))
    keys = ["condition", "answer"] + (["item"] if "item" in frame.columns else [])
    # One row per (condition, answer, item), in order of first appearance, worked out on integer
    # codes: grouping ten million rows by their text held gigabytes.
    combined = np.zeros(len(frame), dtype=np.int64)
    for key in keys:
        code = codes(frame[key])
        combined = combined * (int(code.max(initial=0)) + 1) + code
    owner = codes(pd.Series(combined))
    first = np.unique(owner, return_index=True)[1]
    per_answer = pd.DataFrame({key: frame[key].iloc[first].to_numpy() for key in keys})
    per_answer["condition"] = per_answer["condition"].astype(str)
    per_answer["silent"] = np.bincount(owner, weights=frame["cited"].to_numpy(bool)) == 0
    rates = []
    for condition, group in per_answer.groupby("condition", sort=False):
        n, s = len(group), int(group["silent"].sum())
        low, high = proportion_confint(s, n, alpha=0.05, method="wilson")
        rates.append(SuppressionRate(str(condition), n, s, s / n, float(low), float(high)))
    notes: list[str] = []
    chi2 = chi2_df = chi2_p = None
    table = np.array([[r.silent, r.answers - r.silent] for r in rates])
    if len(rates) < 2:
        notes.append("one condition only: nothing to compare its suppression rate with")
    elif table[:, 0].sum() == 0 or table[:, 1].sum() == 0:
        notes.append("no test across conditions: " + ("no answer is silent" if table[:, 0].sum() == 0
                                                       else "every answer is silent"))
    else:
        test = chi2_contingency(table)
        chi2, chi2_df, chi2_p = float(test.statistic), int(test.dof), float(test.pvalue)
    pairs = b = c = None
    mcnemar_p = None
    if len(rates) == 2:
        if "item" not in frame.columns:
            notes.append("no McNemar test: the frame has no item column to pair answers")
        elif per_answer.groupby(["condition", "item"]).size().max() > 1:
            notes.append("no McNemar test: some item has more than one answer in a condition")
        else:
            wide = per_answer.pivot(index="item", columns="condition", values="silent").dropna()
            first, second = (wide[r.condition].astype(bool) for r in rates)
            pairs, b, c = len(wide), int((first & ~second).sum()), int((~first & second).sum())
            mcnemar_p = float(binomtest(b, b + c, 0.5).pvalue) if b + c else 1.0
    return Suppression(tuple(rates), chi2, chi2_df, chi2_p, pairs, b, c, mcnemar_p, tuple(notes))
