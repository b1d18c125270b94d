"""Suppression: the share of answers that cite no shown document, per condition, and the tests
across conditions.

suppression_rates reads the decisions frame (one row per shown document per answer, with
`answer`, `cited`, `condition` and, to pair answers, `item`); suppression_of_answers reads one
entry per answer, which is what engine.usecases.bias.why_cited keeps while it reads ten million answers
a chunk of runs at a time. Both give the same Suppression. Pure functions; scipy and
statsmodels are imported on use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


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


def suppression_rates(frame: pd.DataFrame) -> Suppression:
    """The share of answers citing nothing per `condition` (conditions in order of appearance),
    from the decisions frame; see suppression_of_answers."""
    import pandas as pd

    from engine.statistics.choice_model import check_frame, codes

    check_frame(frame, ("answer", "cited", "condition"))
    keys = ["condition", "answer"] + (["item"] if "item" in frame.columns else [])
    # One entry per (condition, answer, item), in order of first appearance, worked out on integer
    # codes: grouping ten million rows by their text held gigabytes.
    combined = np.zeros(len(frame), dtype=np.int64)
    for key in keys:
        code = codes(frame[key])
        combined = combined * (int(code.max(initial=0)) + 1) + code
    owner = codes(pd.Series(combined))
    first = np.unique(owner, return_index=True)[1]
    condition, names = pd.factorize(frame["condition"].iloc[first].astype(str).to_numpy(object))
    silent = np.bincount(owner, weights=frame["cited"].to_numpy(bool)) == 0
    item = codes(frame["item"])[first] if "item" in frame.columns else None
    return suppression_of_answers([str(v) for v in names], condition, silent, item)


def suppression_of_answers(conditions: list[str], condition: np.ndarray, silent: np.ndarray,
                           item: np.ndarray | None) -> Suppression:
    """The share of answers citing nothing per condition, one entry per answer: `condition` a code
    into `conditions`, `silent` whether it cites nothing, `item` its item's code (None: answers
    cannot be paired). Conditions in order of their first answer.

    Across conditions: scipy's chi2_contingency on the conditions x (silent, citing) table (with
    its default Yates correction for a 2 x 2 table); for exactly two conditions whose answers pair
    up by item (one answer per item in each), also the exact McNemar test on the discordant pairs.
    """
    from scipy.stats import binomtest, chi2_contingency
    from statsmodels.stats.proportion import proportion_confint

    condition = np.asarray(condition, dtype=np.int64)
    silent = np.asarray(silent, dtype=bool)
    present, first = np.unique(condition, return_index=True)
    shown = present[np.argsort(first)]  # in order of first appearance
    answers = np.bincount(condition, minlength=len(conditions))
    silents = np.bincount(condition, weights=silent, minlength=len(conditions)).astype(np.int64)
    rates = []
    for code in shown:
        n, s = int(answers[code]), int(silents[code])
        low, high = proportion_confint(s, n, alpha=0.05, method="wilson")
        rates.append(SuppressionRate(conditions[code], n, s, s / n, float(low), float(high)))
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
        if item is None:
            notes.append("no McNemar test: the frame has no item column to pair answers")
        else:
            item = np.asarray(item, dtype=np.int64)
            side = (condition == shown[1]).astype(np.int64)  # 0: the first condition, 1: the second
            width = int(item.max(initial=0)) + 1
            per = np.bincount(side * width + item, minlength=2 * width).reshape(2, width)
            if per.max() > 1:
                notes.append("no McNemar test: some item has more than one answer in a condition")
            else:
                quiet = np.bincount(side * width + item, weights=silent, minlength=2 * width).reshape(2, width) > 0
                both = (per[0] == 1) & (per[1] == 1)
                first_only, second_only = quiet[0] & ~quiet[1] & both, ~quiet[0] & quiet[1] & both
                pairs, b, c = int(both.sum()), int(first_only.sum()), int(second_only.sum())
                mcnemar_p = float(binomtest(b, b + c, 0.5).pvalue) if b + c else 1.0
    return Suppression(tuple(rates), chi2, chi2_df, chi2_p, pairs, b, c, mcnemar_p, tuple(notes))
