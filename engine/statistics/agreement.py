"""Agreement between judges of citations: pure functions, labels in, values out.

  * two judges: the confusion table, raw agreement and Cohen's kappa with its asymptotic 95%
    interval (statsmodels' cohens_kappa, Fleiss, Cohen & Everitt 1969's variance);
  * a panel: Fleiss' kappa on the items every judge rated (statsmodels) and Krippendorff's alpha,
    nominal, on every item with missing values allowed (the `krippendorff` package);
  * a judge against human labels: accuracy, precision and recall of the positive class, each a
    share with its Wilson interval (statsmodels' proportion_confint);
  * the attribution rate corrected by a small human-labelled sample: prediction-powered inference
    (ppi_rate).
A statistic that the data cannot define (one class only, fewer than two judges, no item judged by
both) is None with the reason in a sentence, never NaN. None in a judge's labels means "not
judged": the item is left out of whatever needs that judge. statsmodels and krippendorff are
imported on first use: importing them costs more than a small table does.
tests/engine/statistics/test_agreement_stats.py checks each number against the library run directly, and the
intervals' coverage by simulation. docs/method.md, "Agreement between judges", says what each means.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.errors import UserError

ATTRIBUTABLE = "attributable"
NOT_ATTRIBUTABLE = "not_attributable"
BINARY = (ATTRIBUTABLE, NOT_ATTRIBUTABLE)

NO_PAIR = "no item judged by both"
ONE_PAIR = "only one item judged by both"
BOTH_ONE_CLASS = "both judges gave one class only"
EACH_ONE_CLASS = "each judge gave one class only: kappa is 0 whatever the data"
ONE_JUDGE_ONE_CLASS = "judge {judge} gave one class only: kappa is 0 whatever judge {other} says"
PERFECT = "perfect agreement: the asymptotic standard error is 0, so there is no interval"
FEW_JUDGES = "fewer than two judges"
NO_COMPLETE = "no item judged by every judge (Fleiss' kappa)"
ONE_COMPLETE = "only one item judged by every judge (Fleiss' kappa), as Cohen's refuses one item judged by both"
NO_PAIRABLE = "no item judged by two judges or more (Krippendorff's alpha)"
PANEL_ONE_CLASS = "every judge gave one class only"
NO_ITEMS = "no items"


@dataclass(frozen=True)
class PairAgreement:
    """Two judges on the items both judged. `confusion[i][j]` counts items judge A called
    categories[i] and judge B categories[j]. `undefined` says why kappa is None; `ci_undefined`
    why its interval is None while kappa is not (a standard error of 0)."""

    n: int
    categories: tuple[str, ...]
    confusion: tuple[tuple[int, ...], ...]
    raw_agreement: float | None
    kappa: float | None
    kappa_ci: tuple[float, float] | None
    undefined: str | None
    kappa_se: float | None = None
    ci_undefined: str | None = None


@dataclass(frozen=True)
class PanelAgreement:
    """A panel of judges. Fleiss' kappa uses the `n_complete` items every judge rated; Krippendorff's
    alpha every item at least two judges rated. `undefined` joins the reasons either is None."""

    n_items: int
    n_judges: int
    fleiss_kappa: float | None
    n_complete: int
    krippendorff_alpha: float | None
    undefined: str | None
    categories: tuple[str, ...] = ()
    fleiss_undefined: str | None = None
    alpha_undefined: str | None = None


@dataclass(frozen=True)
class Proportion:
    """k of n, with its Wilson interval; undefined (value and ci None) when n is 0."""

    k: int
    n: int
    value: float | None
    ci: tuple[float, float] | None
    undefined: str | None


@dataclass(frozen=True)
class AgainstHuman:
    """A judge against human labels on the n items both labelled; precision and recall are of
    the positive class ("attributable")."""

    n: int
    accuracy: Proportion
    precision: Proportion
    recall: Proportion


@dataclass(frozen=True)
class CorrectedRate:
    """The attribution rate by prediction-powered inference (ppi_rate). `naive_judge_rate` is the
    judge's own rate on the unlabelled set, `human_rate` the labelled sample's rate on its own."""

    estimate: float | None
    ci: tuple[float, float] | None
    n_labelled: int
    n_unlabelled: int
    naive_judge_rate: float | None
    human_rate: float | None
    undefined: str | None
    se: float | None = None
    # Why the estimate has no interval (no spread: every verdict and every error alike, so the
    # standard error is 0 and an interval would be zero-width), or that it is not a rate (outside
    # [0, 1]: the correction of a small, odd labelled sample); None otherwise.
    note: str | None = None


def _z(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise UserError(f"confidence must be between 0 and 1, not {confidence}")
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2))


def _categories(labels: Sequence[str | None], categories: Sequence[str] | None) -> tuple[str, ...]:
    """The categories given (checked), or the labels seen, sorted (so the binary pair reads
    attributable, not_attributable)."""
    seen = {x for x in labels if x is not None}
    if categories is None:
        return tuple(sorted(seen))
    cats = tuple(categories)
    if len(set(cats)) != len(cats):
        raise UserError(f"categories are repeated: {', '.join(cats)}")
    unknown = sorted(seen - set(cats))
    if unknown:
        raise UserError(f"label {unknown[0]!r} is not one of the categories ({', '.join(cats)})")
    return cats


def _same_length(a: Sequence, b: Sequence, what_a: str, what_b: str) -> None:
    if len(a) != len(b):
        raise UserError(f"{what_a} has {len(a)} labels but {what_b} has {len(b)}: they must be of the same items")


def pair_agreement(a: Sequence[str | None], b: Sequence[str | None], *, categories: Sequence[str] | None = None,
                   confidence: float = 0.95) -> PairAgreement:
    """Judges A and B on the same items (a[i], b[i] of item i; None where one did not judge it).

    Cohen's kappa = (p_o - p_e) / (1 - p_e), p_o the raw agreement (trace / n), p_e the agreement
    expected from the two judges' marginals; its interval kappa +- z * SE with statsmodels'
    asymptotic SE (not the SE under kappa = 0), clipped to kappa's range [-1, 1]."""
    _same_length(a, b, "judge A", "judge B")
    z = _z(confidence)
    cats = _categories([*a, *b], categories)
    index = {c: i for i, c in enumerate(cats)}
    table = np.zeros((len(cats), len(cats)), dtype=np.int64)
    for x, y in zip(a, b, strict=True):
        if x is not None and y is not None:
            table[index[x], index[y]] += 1
    n = int(table.sum())
    confusion = tuple(tuple(int(v) for v in row) for row in table)
    raw = float(np.trace(table) / n) if n else None

    def result(kappa=None, ci=None, undefined=None, se=None, ci_undefined=None) -> PairAgreement:
        return PairAgreement(n, cats, confusion, raw, kappa, ci, undefined, se, ci_undefined)

    if n == 0:
        return result(undefined=NO_PAIR)
    if n == 1:
        return result(undefined=ONE_PAIR)
    rows, cols = table.sum(axis=1) > 0, table.sum(axis=0) > 0
    if rows.sum() == 1 and cols.sum() == 1 and (rows == cols).all():
        return result(undefined=BOTH_ONE_CLASS)  # p_e = 1: kappa is 0 / 0

    from statsmodels.stats.inter_rater import cohens_kappa

    with np.errstate(invalid="ignore", divide="ignore"):  # its z-test divides by 0 where a judge is constant
        res = cohens_kappa(table)
    kappa, se = float(res.kappa), float(res.std_kappa)
    if rows.sum() == 1 and cols.sum() == 1:
        reason = EACH_ONE_CLASS
    elif rows.sum() == 1 or cols.sum() == 1:
        reason = ONE_JUDGE_ONE_CLASS.format(judge="A", other="B") if rows.sum() == 1 else \
            ONE_JUDGE_ONE_CLASS.format(judge="B", other="A")
    elif raw == 1.0:
        reason = PERFECT
    elif not (math.isfinite(se) and se > 0):
        reason = "the asymptotic standard error is not positive"
    else:
        return result(kappa, (max(-1.0, kappa - z * se), min(1.0, kappa + z * se)), se=se)
    return result(kappa, None, se=se if math.isfinite(se) else None, ci_undefined=reason)


def panel_agreement(ratings: Sequence[Sequence[str | None]], *,
                    categories: Sequence[str] | None = None) -> PanelAgreement:
    """ratings[i][j] = judge j's label of item i, None where judge j did not judge it."""
    widths = {len(row) for row in ratings}
    if len(widths) > 1:
        raise UserError(f"every item needs one label (or None) per judge; rows have {sorted(widths)} labels")
    n_items, n_judges = len(ratings), (widths.pop() if widths else 0)
    cats = _categories([x for row in ratings for x in row], categories)

    def result(fleiss=None, n_complete=0, alpha=None, fleiss_why=None, alpha_why=None) -> PanelAgreement:
        why = [r for r in dict.fromkeys((fleiss_why, alpha_why)) if r]
        return PanelAgreement(n_items, n_judges, fleiss, n_complete, alpha, "; ".join(why) or None, cats,
                              fleiss_why, alpha_why)

    if n_judges < 2:
        return result(fleiss_why=FEW_JUDGES, alpha_why=FEW_JUDGES)
    index = {c: i for i, c in enumerate(cats)}
    codes = np.array([[np.nan if x is None else index[x] for x in row] for row in ratings], dtype=float)
    complete = codes[~np.isnan(codes).any(axis=1)].astype(np.int64)
    fleiss, fleiss_why = _fleiss(complete, len(cats))
    alpha, alpha_why = _alpha(codes, len(cats))
    return result(fleiss, len(complete), alpha, fleiss_why, alpha_why)


def _fleiss(complete: np.ndarray, n_cat: int) -> tuple[float | None, str | None]:
    if len(complete) == 0:
        return None, NO_COMPLETE
    if len(complete) == 1:  # one item's agreement says nothing of a judge's: as Cohen's rule
        return None, ONE_COMPLETE
    if len(np.unique(complete)) == 1:
        return None, PANEL_ONE_CLASS + " on the items every judge rated"  # p_e = 1
    from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

    counts, _ = aggregate_raters(complete, n_cat=n_cat)
    kappa = float(fleiss_kappa(counts, method="fleiss"))
    return (kappa, None) if math.isfinite(kappa) else (None, "Fleiss' kappa is not finite on these items")


def _alpha(codes: np.ndarray, n_cat: int) -> tuple[float | None, str | None]:
    pairable = codes[(~np.isnan(codes)).sum(axis=1) >= 2]
    if len(pairable) == 0:
        return None, NO_PAIRABLE
    if len(np.unique(pairable[~np.isnan(pairable)])) == 1:
        return None, PANEL_ONE_CLASS + " on the items two judges or more rated"  # no expected disagreement
    import krippendorff

    # The package wants judges as rows and items as columns, NaN for missing.
    alpha = float(krippendorff.alpha(reliability_data=codes.T, level_of_measurement="nominal",
                                      value_domain=list(range(n_cat))))
    return (alpha, None) if math.isfinite(alpha) else (None, "Krippendorff's alpha is not finite on these items")


def proportion(k: int, n: int, *, confidence: float = 0.95, undefined: str = NO_ITEMS) -> Proportion:
    """k of n with its Wilson interval (statsmodels' proportion_confint, method "wilson")."""
    if n == 0:
        return Proportion(k, n, None, None, undefined)
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(k, n, alpha=1 - confidence, method="wilson")
    return Proportion(k, n, k / n, (float(low), float(high)), None)


def against_human(judge: Sequence[str | None], human: Sequence[str | None], *, positive: str = ATTRIBUTABLE,
                  confidence: float = 0.95) -> AgainstHuman:
    """A judge's labels against human labels of the same items (None where either is missing).
    Accuracy: exact matches. Precision: of the items the judge called `positive`, the share humans
    did. Recall: of the items humans called `positive`, the share the judge did."""
    _same_length(judge, human, "the judge", "the human labels")
    pairs = [(j, h) for j, h in zip(judge, human, strict=True) if j is not None and h is not None]
    said = [h for j, h in pairs if j == positive]
    truly = [j for j, h in pairs if h == positive]
    # With no item judged by both, that is why each share is undefined, not what either side said.
    return AgainstHuman(
        len(pairs),
        proportion(sum(j == h for j, h in pairs), len(pairs), confidence=confidence, undefined=NO_PAIR),
        proportion(sum(h == positive for h in said), len(said), confidence=confidence,
                   undefined=f"the judge never said {positive}" if pairs else NO_PAIR),
        proportion(sum(j == positive for j in truly), len(truly), confidence=confidence,
                   undefined=f"no human label says {positive}" if pairs else NO_PAIR),
    )


def ppi_rate(human_labelled: Sequence[bool], judge_on_labelled: Sequence[bool], judge_on_unlabelled: Sequence[bool],
             *, confidence: float = 0.95) -> CorrectedRate:
    """The attribution rate from n human labels Y_i with the judge's verdicts f_i on the same items,
    and the judge's verdicts f~_j on N other items: prediction-powered mean estimation
    (Angelopoulos, Bates, Fannjiang, Jordan & Zrnic 2023, "Prediction-powered inference",
    Science 382:669, the mean-estimation example):

        theta_PP = mean_j f~_j + mean_i (Y_i - f_i)          (the judge's rate, minus its bias
                                                              as measured on the labelled sample)
        SE^2     = var(f~) / N + var(Y - f) / n              (sample variances, ddof = 1)
        interval = theta_PP +- z_(1 - alpha/2) * SE

    Valid (asymptotically) whatever the judge's bias; narrower than the human sample's own
    interval when the judge is accurate (var(Y - f) small). The labelled items must be a random
    sample of the same population as the unlabelled. The interval is clipped to [0, 1] (which
    changes no coverage); the estimate is not (it can leave [0, 1] on a small, odd sample: `note`
    says it is then no rate). With no spread (SE = 0) there is no interval, and `note` says why."""
    _same_length(human_labelled, judge_on_labelled, "the human labels", "the judge on the labelled items")
    z = _z(confidence)
    y = np.asarray(human_labelled, dtype=float)
    f = np.asarray(judge_on_labelled, dtype=float)
    f_un = np.asarray(judge_on_unlabelled, dtype=float)
    n, big_n = len(y), len(f_un)
    naive = float(f_un.mean()) if big_n else None
    human = float(y.mean()) if n else None
    if n < 2 or big_n < 2:
        why = "fewer than two human-labelled items" if n < 2 else "fewer than two items judged without a human label"
        return CorrectedRate(None, None, n, big_n, naive, human, why)
    estimate = float(f_un.mean() + (y - f).mean())
    se = math.sqrt(float(f_un.var(ddof=1)) / big_n + float((y - f).var(ddof=1)) / n)
    if se == 0.0:
        return CorrectedRate(estimate, None, n, big_n, naive, human, None, se,
                             "no interval: the judge's verdicts on the other items and its errors on the labelled "
                             "ones do not vary (no spread)")
    ci = (max(0.0, estimate - z * se), min(1.0, estimate + z * se))
    note = None if 0.0 <= estimate <= 1.0 else \
        f"not a rate: the correction leaves [0, 1] ({estimate:.3f}), as it can on a small labelled sample"
    return CorrectedRate(estimate, ci, n, big_n, naive, human, None, se, note)
