"""The large-sample tests that `compare` and `bias` decide with above ASYMPTOTIC_ABOVE differing
pairs. Pure: arrays or counts in, values out.

Below that many differing pairs the verdicts come from the permutation and exact tests, which
hold their size at every n; their cost grows with n (9,999 sign patterns x a million items is
minutes of CPU), while above it the large-sample tests agree with them to far within what any
verdict depends on. scripts/calibration.py (section `asymptotic`) measures both sides of the
number by simulation: type-I error and interval coverage at 100 to 10,000 differing pairs
(docs/figures.md). So, above it:
  * a continuous metric: the paired t-test (scipy.stats.ttest_rel) and the t interval of the
    mean difference;
  * a 0/1 metric: McNemar's chi-square test with continuity correction (as statsmodels'
    mcnemar(exact=False, correction=True)) and the same t interval of the paired 0/1 differences
    (at a thousand discordant pairs it is the normal, Wald, interval of the difference of shares).
What counts is the number of pairs that differ, not n: a t-test over a million items of which
four differ is a test of four values (its size is 12.5% where four of 30 items move alike).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import numpy as np

# numpy and scipy are imported where used: the CLI's parser reads ASYMPTOTIC_ABOVE for its help.
# Above this many differing pairs (non-zero paired differences; discordant pairs of a 0/1 metric)
# the large-sample test decides; at or below it, the permutation or exact test. The bias view
# lists the non-zero differences up to this many (store/views.sql), so its rows give bias's p.
ASYMPTOTIC_ABOVE = 1000
CONFIDENCE = 0.95


class ChiSquare(NamedTuple):
    """McNemar's chi-square statistic (1 degree of freedom) and its p value."""

    statistic: float
    p: float


class Interval(NamedTuple):
    low: float
    high: float


def asymptotic(differing: int, exact: bool = False) -> bool:
    """Whether a test over this many differing pairs is the large-sample one (never with `exact`)."""
    return not exact and differing > ASYMPTOTIC_ABOVE


def differing_pairs(d: np.ndarray) -> int:
    """How many paired differences are not zero (for 0/1 values: the discordant pairs)."""
    import numpy as np

    return int(np.count_nonzero(d))


def mcnemar_chi2(b_only: int, a_only: int) -> ChiSquare:
    """McNemar's test with continuity correction from the discordant counts, as statsmodels'
    mcnemar([[., a_only], [b_only, .]], exact=False, correction=True): (|b - a| - 1)^2 / (b + a)
    on 1 degree of freedom. No discordant pair: no evidence either way, p = 1."""
    from scipy.stats import chi2

    m = b_only + a_only
    if m == 0:
        return ChiSquare(0.0, 1.0)
    stat = (abs(b_only - a_only) - 1.0) ** 2 / m
    return ChiSquare(float(stat), float(chi2.sf(stat, 1)))


def t_interval(d: np.ndarray, confidence: float = CONFIDENCE) -> Interval:
    """The t interval of mean(d), as scipy's ttest_rel(...).confidence_interval(confidence) of
    the pairs whose differences d are; NaN below two values."""
    import numpy as np
    from scipy.stats import t

    n = int(d.size)
    if n < 2:
        return Interval(math.nan, math.nan)
    mean = float(np.mean(d))
    half = float(t.ppf(0.5 + confidence / 2, n - 1)) * float(np.std(d, ddof=1)) / math.sqrt(n)
    return Interval(mean - half, mean + half)


def mcnemar_chi2_power(n: int, p_discordant: float, difference: float, alpha: float = 0.05) -> float:
    """Power of mcnemar_chi2 at level alpha with n pairs, a discordant share p_discordant and a
    difference of shares B - A, in the normal approximation its own p rests on: b - a has mean
    n d and variance n (p_d - d^2), and the test rejects where |b - a| - 1 > z sqrt(n p_d)."""
    from scipy.stats import norm

    if p_discordant <= 0:
        return 0.0
    edge = norm.isf(alpha / 2) * math.sqrt(n * p_discordant) + 1.0
    sd = math.sqrt(max(n * (p_discordant - difference**2), 1e-300))
    shift = n * difference
    return float(norm.sf((edge - shift) / sd) + norm.cdf((-edge - shift) / sd))


def mcnemar_chi2_min_detectable(n: int, discordant: int, power: float = 0.8,
                                alpha: float = 0.05) -> tuple[float | None, str]:
    """The smallest |B - A| (share) mcnemar_chi2 detects with `power` among n pairs at the observed
    discordant share, or None with the reason: where the exact McNemar test's sum over every
    number of discordant pairs took seconds per metric at a million items, this is a root of one
    formula. Power grows with |d| on [0, p_d]: one root."""
    from scipy.optimize import brentq

    if n < 2:
        return None, "fewer than two items"
    if discordant == 0:
        return None, "no discordant pair (every paired difference is 0)"
    p_d = discordant / n
    if mcnemar_chi2_power(n, p_d, p_d, alpha) < power:
        return None, f"{discordant} discordant of {n} pairs: below {power:.0%} power even if all went one way"
    d = brentq(lambda x: mcnemar_chi2_power(n, p_d, x, alpha) - power, 0.0, p_d, xtol=1e-12)
    return float(d), ""
