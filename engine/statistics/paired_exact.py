"""Exact statistics for paired 0/1 values: the equivalence test and the power of the
exact McNemar test, both from the discordant pairs. Pure: counts in, values out.

Two runs scored 0/1 on the same n items: b_only items are 1 in B only, a_only items 1 in A only.
The difference of the two shares is B - A = p_b_only - p_a_only, so it is bounded by what the
discordant pairs allow, whatever the concordant ones do:

  * Equivalence (exact TOST). The difference is at most U(b_only) - L(a_only), where U and L are
    one-sided Clopper-Pearson bounds at confidence 1 - alpha/2 each. Both hold together with
    probability at least 1 - alpha (Bonferroni), so "B - A < M" is rejected as H0 "B - A >= M"
    at level alpha, whatever the nuisance share of concordant pairs; the lower side likewise.
    Its p is the smallest alpha at which the bound clears the margin. No discordant pair in
    20 items still leaves B - A anywhere in (-16.8, +16.8) points: the Clopper-Pearson 97.5%
    bound of 0 of 20. It is conservative (Bonferroni, and Clopper-Pearson), never liberal:
    tests/engine/statistics/test_compare_exact.py sums its size exactly over every outcome.
  * Power of the exact McNemar test (a two-sided binomial test, p = 1/2, on the discordant pairs,
    as statsmodels' mcnemar(exact=True)) with n items, a discordant share p_d and a difference d:
    the number of discordant pairs is Binomial(n, p_d) and, given m of them, b_only is
    Binomial(m, 1/2 + d / (2 p_d)); the power sums the rejection probability over m. The
    smallest detectable difference at 80% power solves it for d at the observed p_d.

scipy is imported inside the functions (its import costs more than a small comparison).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

ALPHA = 0.05
POWER = 0.8
# The smallest p the equivalence test reports (a bound: the true p is at most this): the root is
# searched in log(alpha) down to here, where scipy's beta quantiles stay accurate.
_P_FLOOR = 1e-15


class Bounds(NamedTuple):
    """Exact bounds on B - A (shares, not points) at one level: low <= B - A <= high."""

    low: float
    high: float


class ExactEquivalence(NamedTuple):
    """Exact TOST of B - A within (-margin, +margin) from the discordant pairs (shares)."""

    p: float  # the larger of the two one-sided p values
    p_lower: float  # H0: B - A <= -margin
    p_upper: float  # H0: B - A >= +margin


class Detectable(NamedTuple):
    """The smallest |B - A| (share) the exact McNemar test detects with this power, or None
    with the reason ("" when defined)."""

    value: float | None
    undefined: str


def cp_upper(k: int, n: int, gamma: float) -> float:
    """One-sided Clopper-Pearson upper bound of a share from k of n, at confidence 1 - gamma
    (the upper end of statsmodels' proportion_confint(k, n, 2 * gamma, method='beta'))."""
    from scipy.stats import beta

    return 1.0 if k >= n else float(beta.ppf(1.0 - gamma, k + 1, n - k))


def cp_lower(k: int, n: int, gamma: float) -> float:
    """One-sided Clopper-Pearson lower bound at confidence 1 - gamma."""
    from scipy.stats import beta

    return 0.0 if k <= 0 else float(beta.ppf(gamma, k, n - k + 1))


def difference_bounds(b_only: int, a_only: int, n: int, alpha: float = ALPHA) -> Bounds:
    """Bounds on B - A that each hold with probability at least 1 - alpha: the upper one is
    U(b_only) - L(a_only), each Clopper-Pearson at 1 - alpha/2 (Bonferroni); the lower likewise."""
    _check_counts(b_only, a_only, n)
    g = alpha / 2
    return Bounds(cp_lower(b_only, n, g) - cp_upper(a_only, n, g), cp_upper(b_only, n, g) - cp_lower(a_only, n, g))


def exact_tost(b_only: int, a_only: int, n: int, margin: float) -> ExactEquivalence:
    """Exact TOST (module docstring) of B - A within (-margin, +margin), margin as a share:
    each one-sided p is the smallest alpha at which difference_bounds clears the margin."""
    if not margin > 0:
        raise ValueError(f"the equivalence margin must be positive, not {margin}")
    _check_counts(b_only, a_only, n)
    p_upper = _smallest_alpha(lambda a: margin - difference_bounds(b_only, a_only, n, a).high)
    p_lower = _smallest_alpha(lambda a: difference_bounds(b_only, a_only, n, a).low + margin)
    return ExactEquivalence(max(p_lower, p_upper), p_lower, p_upper)


def _smallest_alpha(clearance) -> float:
    """The smallest alpha in (0, 1] at which the test rejects, i.e. `clearance(alpha)` (how far
    the bound clears the margin) is > 0; 1 where it never does. The bounds are continuous and
    tighten as alpha grows, so the clearance increases with alpha and has one root in log(alpha)."""
    from scipy.optimize import brentq

    if clearance(1.0) <= 0:
        return 1.0
    if clearance(_P_FLOOR) > 0:
        return _P_FLOOR
    root = brentq(lambda t: clearance(math.exp(t)), math.log(_P_FLOOR), 0.0, xtol=1e-13, rtol=1e-13)
    return float(math.exp(root))


def _check_counts(b_only: int, a_only: int, n: int) -> None:
    if not (0 <= b_only and 0 <= a_only and b_only + a_only <= n):
        raise ValueError(f"discordant counts {b_only} and {a_only} do not fit {n} pairs")


def mcnemar_power(n: int, p_discordant: float, difference: float, alpha: float = ALPHA, *,
                  critical: np.ndarray | None = None, weights: np.ndarray | None = None) -> float:
    """Power of the two-sided exact McNemar test at level alpha with n pairs, a discordant share
    p_discordant and a difference B - A (|difference| <= p_discordant), summed exactly over the
    number of discordant pairs. `critical`: _critical(np.arange(n + 1), alpha) where the caller
    has it already (it depends on n and alpha only, and is most of the cost at large n), and
    `weights` _discordant_weights(n, p_discordant) (on n and the share only)."""
    from scipy.stats import binom

    if not 0 <= p_discordant <= 1 or abs(difference) > p_discordant + 1e-12:
        raise ValueError(f"a difference of {difference} needs at least that discordant share, not {p_discordant}")
    if p_discordant == 0:
        return 0.0
    weights = _discordant_weights(n, p_discordant) if weights is None else weights
    pi = min(1.0, max(0.0, 0.5 + difference / (2 * p_discordant)))
    m = np.flatnonzero(weights)
    c = _critical(m, alpha) if critical is None else critical[m]
    terms = np.zeros(n + 1)
    terms[m] = weights[m] * np.where(c >= 0, binom.cdf(c, m, pi) + binom.sf(m - c - 1, m, pi), 0.0)
    return float(np.sum(terms))


def _discordant_weights(n: int, p_discordant: float) -> np.ndarray:
    """P(m discordant pairs of n), m = 0..n. Beyond a few hundred SDs of n p it underflows to 0,
    and a term 0 x (a rejection probability in [0, 1]) is 0: the power is summed over the same n + 1
    terms as before, but the rejection probability is computed only where its weight is not 0 (at
    1M items ~4% of them)."""
    from scipy.stats import binom

    return binom.pmf(np.arange(n + 1), n, p_discordant)


def _critical(m: np.ndarray, alpha: float) -> np.ndarray:
    """Per number of discordant pairs m, the largest c with the binomial test rejecting at
    k <= c (and k >= m - c): 2 P(X <= c) < alpha for X ~ Binomial(m, 1/2); -1 where none.
    (With p = 1/2 scipy's two-sided binomtest p is exactly 2 P(X <= min(k, m - k)), capped at 1.)"""
    from scipy.stats import binom

    c = binom.ppf(alpha / 2, m, 0.5) - 1  # the first k with 2 P(X <= k) >= alpha, less one
    c = np.where(2 * binom.cdf(c + 1, m, 0.5) < alpha, c + 1, c)  # ppf's rounding, either way
    c = np.where((c >= 0) & (2 * binom.cdf(c, m, 0.5) >= alpha), c - 1, c)
    return np.where(m > 0, c, -1).astype(int)


def mcnemar_min_detectable(n: int, discordant: int, power: float = POWER, alpha: float = ALPHA) -> Detectable:
    """The smallest |B - A| (share) the exact McNemar test detects with `power` among n pairs at
    the observed discordant share discordant / n. Undefined with no discordant pair, and where
    even every discordant pair going one way (|B - A| = the discordant share) falls short."""
    from scipy.optimize import brentq

    if n < 2:
        return Detectable(None, "fewer than two items")
    if discordant == 0:
        return Detectable(None, "no discordant pair (every paired difference is 0)")
    p_d = discordant / n
    # One rejection region for the ~20 power evaluations below (80% of the time at 100k),
    # where the number of discordant pairs has a weight (elsewhere it is never read).
    weights = _discordant_weights(n, p_d)
    m = np.flatnonzero(weights)
    critical = np.full(n + 1, -1)
    critical[m] = _critical(m, alpha)

    def power_at(difference: float) -> float:
        return mcnemar_power(n, p_d, difference, alpha, critical=critical, weights=weights)

    if power_at(p_d) < power:
        return Detectable(None, f"{discordant} discordant of {n} pairs: below {power:.0%} power even if all went one way")
    # Power grows with |d| (the rejection region is symmetric, the binomial shifts outward); a grid
    # first, so that the root is the smallest even where discreteness makes it step.
    grid = np.linspace(0.0, p_d, 9)
    powers = [power_at(d) for d in grid]
    k = next(i for i, x in enumerate(powers) if x >= power)
    d = brentq(lambda x: power_at(x) - power, grid[k - 1], grid[k], xtol=1e-10)
    return Detectable(float(d), "")
