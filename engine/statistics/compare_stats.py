"""Paired statistics for comparing two runs on the same items. Pure: arrays in, values out.

Every comparison is paired by item: the difference is B - A per item, so its spread is the
spread of the per-item differences, not of two independent samples. Per metric (docs/method.md,
"Comparing two runs", states each rule and what it assumes):
  * the verdict's p: the exact McNemar test (a binomial test on the discordant pairs) for a 0/1
    metric; for a continuous one the paired permutation test (sign flips of the differences,
    exact under the null that A and B are exchangeable within items, at every n), with the
    paired t-test's p beside it. The t-test's size depends on how many items differ, not on n
    (12.5% with 4 of 30 items moved by the same amount), so it never gives the verdict;
  * Holm's correction over the metrics compared together, for "different" and, separately,
    for "equivalent";
  * the 95% interval of B - A: exact for a 0/1 metric (Clopper-Pearson bounds on the two
    discordant shares, engine.statistics.paired_exact), a percentile bootstrap otherwise (engine.statistics.stats;
    approximate at every n, and marked so below BOOTSTRAP_APPROXIMATE_BELOW items, where it covers less than 95%);
  * with a margin M for the metric, TOST: exact from the discordant pairs for a 0/1 metric,
    two one-sided paired t-tests otherwise; a verdict "equivalent within M", "different" or
    "inconclusive";
  * the smallest difference detectable at 80% power: by the exact McNemar test at the observed
    discordant share for a 0/1 metric, by the paired t-test at the observed SD otherwise.
Above ASYMPTOTIC_ABOVE differing pairs (engine.statistics.asymptotic) the verdict's p is the paired
t-test's or McNemar's chi-square, the interval a t interval: the permutation test and the
bootstrap cost minutes at a million items and agree with them there (`exact` keeps them).
Where every paired difference is equal there is no spread to test against: the t-test, the
interval, TOST and the detectable difference of a continuous metric are undefined, and say so.
scipy is imported inside the functions that need it: importing it costs more than a small
comparison does. tests/engine/usecases/compare/test_compare.py and tests/engine/statistics/test_compare_exact.py check each statistic
against scipy and statsmodels, and the verdicts' error rates by simulation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

from engine.statistics import asymptotic as asym
from engine.statistics.stats import (
    BOOTSTRAP_APPROXIMATE_BELOW,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    bootstrap_mean_ci,
    bootstrap_mean_cis,
    holm,
)
from engine.types import ANSWER_METRICS

ALPHA = 0.05
POWER = 0.8
T = TypeVar("T")
U = TypeVar("U")
# Paired permutation test: 2**n sign patterns are enumerated exactly up to this many, else this
# many random ones are drawn (the smallest p it can give is then 1 / (n + 1)).
PERMUTATIONS = 9999
# Values held in memory at once by the permutation test (resamples x items).
_PERMUTATION_CELLS = 2_000_000

EQUIVALENT = "equivalent within {margin:g}"
DIFFERENT = "different"
INCONCLUSIVE = "inconclusive"
NO_DIFFERENCE = "no significant difference"
TOO_FEW = "too few items"

NO_SPREAD = "every paired difference is equal"
FEW = "fewer than two items"

MCNEMAR = "exact McNemar"
MCNEMAR_CHI2 = "McNemar chi-square (continuity-corrected)"
PERMUTATION = "paired permutation"
PAIRED_T = "paired t-test"
TOST_T = "TOST (paired t)"
TOST_EXACT = "exact TOST (discordant pairs)"
CI_BOOTSTRAP = "percentile bootstrap"
CI_EXACT = "exact (Clopper-Pearson, discordant pairs)"
CI_T = "t interval"


@dataclass(frozen=True)
class MetricSpec:
    """A metric that can be compared: its name, how it reads, whether it is 0/1, its scale."""

    name: str
    label: str
    binary: bool  # 0/1 per item: exact McNemar and exact bounds; otherwise permutation and bootstrap
    scale: float  # shown (and the margin read) in these units: 100 for shares (points)


# The metrics of query_metrics and two derived from it, in the order tables show them: the
# compared ones of engine.types.ANSWER_METRICS, which spells each one's words, kind and scale.
METRICS: dict[str, MetricSpec] = {m.name: MetricSpec(m.name, m.words, m.binary, m.scale)
                                  for m in ANSWER_METRICS.values() if m.compared}
DEFAULT_METRICS = tuple(METRICS)


@dataclass(frozen=True)
class TestResult:
    """A test's statistic and two-sided p value (NaN where undefined: fewer than two items, or a
    t-test of differences that do not vary)."""

    statistic: float
    p: float


@dataclass(frozen=True)
class Equivalence:
    """TOST of the paired difference against (-margin, +margin), margin in the units shown."""

    margin: float
    method: str  # TOST_T (continuous metrics) or TOST_EXACT (0/1 metrics)
    p: float  # the larger of the two one-sided p values; NaN where undefined
    p_lower: float  # H0: difference <= -margin
    p_upper: float  # H0: difference >= +margin
    p_holm: float  # p after Holm's correction over the equivalence tests compared together
    undefined: str = ""  # why there is no test ("" when there is one)


@dataclass(frozen=True)
class MetricComparison:
    """One metric of B against A on the paired items; diff = mean_b - mean_a, in display units."""

    metric: str
    label: str
    n: int  # pairs where both runs have a value (exact match needs gold answers, etc.)
    mean_a: float
    mean_b: float
    diff: float
    ci_low: float  # 95% interval of diff (NaN where undefined: see ci_undefined)
    ci_high: float
    ci_method: str  # CI_BOOTSTRAP (continuous) or CI_EXACT (0/1); CI_T above ASYMPTOTIC_ABOVE differing pairs
    ci_approximate: bool  # a bootstrap interval on fewer than BOOTSTRAP_APPROXIMATE_BELOW items
    ci_undefined: str  # why there is no interval ("" when there is one)
    # the test whose p gives the verdict: MCNEMAR (0/1) or PERMUTATION (continuous); above
    # ASYMPTOTIC_ABOVE differing pairs MCNEMAR_CHI2 or PAIRED_T (unless asked for `exact`)
    test: str
    statistic: float  # exact McNemar: pairs 1 in B only; permutation: the mean difference; else chi-square or t
    p: float
    p_holm: float  # p after Holm's correction over the metrics compared together
    t: float | None  # the paired t-test beside the permutation test (continuous metrics; NaN: no spread)
    p_t: float | None
    sd_diff: float
    discordant: int | None  # 0/1 metrics: pairs that differ
    min_detectable: float | None  # |diff| detectable at 80% power (None: see min_detectable_undefined)
    min_detectable_undefined: str
    equivalence: Equivalence | None  # None where no margin applies to this metric
    verdict: str


def known_pairs(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs where both values are known (NaN or None on either side leaves the pair out)."""
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired values need the same length, not {x.size} and {y.size}")
    keep = ~(np.isnan(x) | np.isnan(y))
    return x[keep], y[keep]


def mcnemar_exact(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> TestResult:
    """Exact McNemar test of paired 0/1 values: a two-sided binomial test (p = 1/2) on the
    discordant pairs, as statsmodels' mcnemar(exact=True). Statistic: pairs 1 in B only."""
    from scipy.stats import binomtest

    x, y = known_pairs(a, b)
    b_only, a_only = _discordant(x, y)
    if a_only + b_only == 0:
        return TestResult(float(b_only), 1.0)  # no discordant pair: no evidence either way
    return TestResult(float(b_only), float(binomtest(b_only, a_only + b_only, 0.5).pvalue))


def paired_t(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> TestResult:
    """Paired two-sided t-test of B against A (scipy's ttest_rel); NaN below two pairs and where
    every difference is equal (no spread: t is 0/0 or +-inf, where scipy warns)."""
    from scipy.stats import ttest_rel

    x, y = known_pairs(a, b)
    d = y - x
    if x.size < 2 or np.all(d == d[0]):
        return TestResult(math.nan, math.nan)
    res = ttest_rel(y, x)
    return TestResult(float(res.statistic), float(res.pvalue))


def paired_permutation(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *,
                       n_resamples: int = PERMUTATIONS, seed: int = DEFAULT_SEED) -> TestResult:
    """Paired permutation test of the mean difference: scipy's permutation_test with
    permutation_type='samples' (each item's A and B swapped or not): exact (every pattern) up to
    13 items with the default 9,999 resamples, Monte Carlo above, valid either way (scipy counts
    the observed pattern). Null: A and B exchangeable within items. It gives the verdict of a
    continuous metric."""
    from scipy.stats import permutation_test

    x, y = known_pairs(a, b)
    if x.size < 2:
        return TestResult(math.nan, math.nan)  # scipy refuses one pair; two swaps say nothing
    d = y - x
    if np.all(d == 0):
        return TestResult(0.0, 1.0)  # every swap gives the same mean: p = 1 (scipy agrees)
    res = permutation_test(
        (y, x), _mean_difference, permutation_type="samples", vectorized=True,
        n_resamples=n_resamples, alternative="two-sided", rng=np.random.default_rng(seed),
        batch=max(1, _PERMUTATION_CELLS // x.size),
    )
    return TestResult(float(res.statistic), float(res.pvalue))


def paired_permutations(pairs: Sequence[tuple[np.ndarray, np.ndarray]], *, n_resamples: int = PERMUTATIONS,
                        seed: int = DEFAULT_SEED) -> list[TestResult]:
    """paired_permutation of each (a, b), with the same p values: the Monte Carlo tests of pairs
    with the same number of items share one draw of sign patterns (engine.statistics.sign_flips),
    which is what made a comparison of many metrics on 1M items take minutes."""
    from engine.statistics.sign_flips import sign_flip_pvalues

    out: list[TestResult | None] = [None] * len(pairs)
    by_n: dict[int, list[tuple[int, np.ndarray]]] = {}
    for k, (a, b) in enumerate(pairs):
        x, y = known_pairs(a, b)
        d = y - x
        if x.size < 2 or np.all(d == 0) or 2**x.size <= n_resamples:
            out[k] = paired_permutation(x, y, n_resamples=n_resamples, seed=seed)  # the exact or trivial p
        else:
            by_n.setdefault(int(x.size), []).append((k, d))
    for n, group in by_n.items():
        ps = sign_flip_pvalues([d for _, d in group], n_resamples=n_resamples, seed=seed,
                               batch=max(1, _PERMUTATION_CELLS // n))
        for (k, d), p in zip(group, ps, strict=True):
            out[k] = TestResult(float(np.mean(d)), p)
    return [r for r in out if r is not None]


def _mean_difference(y: np.ndarray, x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(y - x, axis=axis)


def bootstrap_diff_ci(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *,
                      n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                      confidence: float = 0.95) -> tuple[float, float]:
    """Paired percentile-bootstrap interval of mean(B - A): items resampled with their pair."""
    x, y = known_pairs(a, b)
    if x.size == 0:
        return math.nan, math.nan
    low, high = bootstrap_mean_ci(y - x, n_resamples=n_resamples, seed=seed, confidence=confidence)
    return float(low), float(high)


def bootstrap_diff_cis(pairs: Sequence[tuple[np.ndarray, np.ndarray]], *, n_resamples: int = DEFAULT_RESAMPLES,
                       seed: int = DEFAULT_SEED) -> list[tuple[float, float]]:
    """bootstrap_diff_ci of each (a, b), the same intervals: pairs with the same number of items
    share one draw of resamples (the draws were most of each interval's time)."""
    diffs = [y - x for x, y in (known_pairs(a, b) for a, b in pairs)]
    out = [(math.nan, math.nan)] * len(diffs)
    for n in {d.size for d in diffs} - {0}:
        ks = [k for k, d in enumerate(diffs) if d.size == n]
        for k, ci in zip(ks, bootstrap_mean_cis([diffs[k] for k in ks], n_resamples=n_resamples, seed=seed), strict=True):
            out[k] = ci
    return out


def tost_paired(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, margin: float) -> Equivalence:
    """TOST of mean(B - A) within (-margin, +margin): two one-sided one-sample t-tests of the
    differences (statsmodels' ttost_paired(b, a, -margin, margin)); p is the larger one.
    Undefined below two pairs and where every difference is equal: with no spread the t-test
    has nothing to measure the difference against, and no equivalence follows."""
    from scipy.stats import ttest_1samp

    _check_margin(margin)
    x, y = known_pairs(a, b)
    d = y - x
    why = FEW if x.size < 2 else NO_SPREAD if np.all(d == d[0]) else ""
    if why:
        return Equivalence(margin, TOST_T, math.nan, math.nan, math.nan, math.nan, why)
    p_lower = float(ttest_1samp(d, -margin, alternative="greater").pvalue)
    p_upper = float(ttest_1samp(d, margin, alternative="less").pvalue)
    p = max(p_lower, p_upper)
    return Equivalence(margin, TOST_T, p, p_lower, p_upper, p)


def tost_binary(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, margin: float) -> Equivalence:
    """Exact TOST of B - A for paired 0/1 values within (-margin, +margin), margin as a share
    (engine.statistics.paired_exact.exact_tost: Clopper-Pearson bounds on the two discordant shares)."""
    from engine.statistics.paired_exact import exact_tost

    _check_margin(margin)
    x, y = known_pairs(a, b)
    b_only, a_only = _discordant(x, y)
    if x.size == 0:
        return Equivalence(margin, TOST_EXACT, math.nan, math.nan, math.nan, math.nan, FEW)
    res = exact_tost(b_only, a_only, int(x.size), margin)
    return Equivalence(margin, TOST_EXACT, res.p, res.p_lower, res.p_upper, res.p)


def _check_margin(margin: float) -> None:
    if not (math.isfinite(margin) and margin > 0):
        raise ValueError(f"the equivalence margin must be a positive number, not {margin}")


def _discordant(x: np.ndarray, y: np.ndarray) -> tuple[int, int]:
    """(pairs 1 in B only, pairs 1 in A only) of paired 0/1 values."""
    return int(np.sum((y == 1) & (x == 0))), int(np.sum((x == 1) & (y == 0)))


def paired_power(effect: float, n: int, alpha: float = ALPHA) -> float:
    """Power of the two-sided paired t-test with n pairs for a standardised effect (mean / SD
    of the differences), from the noncentral t (as statsmodels' TTestPower().power)."""
    from scipy.stats import nct, t

    df = n - 1
    crit = t.isf(alpha / 2, df)
    nc = effect * math.sqrt(n)
    # The far tail (below -crit for a positive effect) can come back NaN from scipy's nct for
    # large noncentralities, where it is below 1e-15: it counts as 0.
    far = float(nct.cdf(-crit, df, nc))
    return float(nct.sf(crit, df, nc)) + (0.0 if math.isnan(far) else far)


def min_detectable_difference(sd_diff: float, n: int, *, power: float = POWER, alpha: float = ALPHA) -> float | None:
    """The smallest |mean difference| that n pairs detect with this power at this alpha, given
    the SD of the differences: the standardised effect solved from paired_power, times the SD.
    None below two pairs and where the differences do not vary (no spread: nothing to scale by)."""
    from scipy.optimize import brentq

    if n < 2 or not math.isfinite(sd_diff) or sd_diff == 0:
        return None
    high = 1.0
    while paired_power(high, n, alpha) < power:
        high *= 2
    effect = brentq(lambda e: paired_power(e, n, alpha) - power, 1e-12, high, xtol=1e-12)
    return float(effect * sd_diff)


def verdict(p_holm: float, n: int, equivalence: Equivalence | None, alpha: float = ALPHA) -> str:
    """One phrase per metric: with a margin, TOST first (equivalent / different / inconclusive,
    from the Holm-corrected p values); without one, whether the Holm-corrected p shows a
    difference. An undefined TOST is said, never read as equivalence or its absence."""
    if n < 2:
        return TOO_FEW
    differs = p_holm < alpha
    if equivalence is None:
        return DIFFERENT if differs else NO_DIFFERENCE
    if equivalence.undefined:
        return f"{DIFFERENT if differs else NO_DIFFERENCE}; equivalence undefined: {equivalence.undefined}"
    if equivalence.p_holm < alpha:
        return EQUIVALENT.format(margin=equivalence.margin)
    return DIFFERENT if differs else INCONCLUSIVE


def compare_metric(spec: MetricSpec, a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *,
                   margin: float | None = None, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                   permutations: int = PERMUTATIONS, permutation: TestResult | None = None,
                   interval: tuple[float, float] | None = None, exact: bool = False) -> MetricComparison:
    """One metric of B against A (margin in the units shown; None: no TOST); p_holm is p, and
    the equivalence's p_holm its p, until with_holm corrects a set of them. `permutation`: the
    paired permutation test of a continuous metric when paired_permutations has made it already,
    `interval` its bootstrap interval when bootstrap_diff_cis has. Above ASYMPTOTIC_ABOVE
    differing pairs the large-sample test and the t interval (engine.statistics.asymptotic),
    unless `exact`."""
    x, y = known_pairs(a, b)
    n = int(x.size)
    d = (y - x) * spec.scale
    no_spread = n >= 1 and bool(np.all(d == d[0]))
    sd = float(d.std(ddof=1)) if n >= 2 else math.nan
    # With no spread the t-test has nothing to scale by: the permutation p stays, at any size.
    large = asym.asymptotic(asym.differing_pairs(d), exact) and not no_spread
    ci_method = CI_T if large else CI_EXACT if spec.binary else CI_BOOTSTRAP
    t = t_p = discordant = None
    if spec.binary:
        from engine.statistics.paired_exact import difference_bounds, mcnemar_min_detectable

        b_only, a_only = _discordant(x, y)
        discordant = b_only + a_only
        if large:
            test, name = TestResult(*asym.mcnemar_chi2(b_only, a_only)), MCNEMAR_CHI2
            low, high = asym.t_interval(d)
        else:
            test, name = mcnemar_exact(x, y), MCNEMAR
            bounds = difference_bounds(b_only, a_only, n, ALPHA / 2) if n else None
            low, high = (bounds.low * spec.scale, bounds.high * spec.scale) if bounds else (math.nan, math.nan)
        ci_why, approximate = ("" if n else FEW), False
        value, mdd_why = asym.mcnemar_chi2_min_detectable(n, discordant) if large else mcnemar_min_detectable(n, discordant)
        detectable = None if value is None else value * spec.scale
        equivalence = _in_units(tost_binary(x, y, margin / spec.scale), margin) if margin is not None else None
    else:
        tt = paired_t(x * spec.scale, y * spec.scale)
        t, t_p = tt.statistic, tt.p
        if large:
            test, name = tt, PAIRED_T
        else:
            test = permutation or paired_permutation(x * spec.scale, y * spec.scale, n_resamples=permutations, seed=seed)
            name = PERMUTATION
        ci_why = FEW if n < 2 else NO_SPREAD if no_spread else ""
        low, high = ((math.nan, math.nan) if ci_why else asym.t_interval(d) if large else interval if interval is not None
                     else bootstrap_diff_ci(x * spec.scale, y * spec.scale, n_resamples=n_resamples, seed=seed))
        approximate = not ci_why and not large and n < BOOTSTRAP_APPROXIMATE_BELOW
        detectable = min_detectable_difference(sd, n)
        mdd_why = "" if detectable is not None else (FEW if n < 2 else NO_SPREAD)
        equivalence = tost_paired(x * spec.scale, y * spec.scale, margin) if margin is not None else None
    return MetricComparison(
        spec.name, spec.label, n, float(x.mean() * spec.scale) if n else math.nan,
        float(y.mean() * spec.scale) if n else math.nan, float(d.mean()) if n else math.nan, low, high,
        ci_method, approximate, ci_why, name, test.statistic, test.p, test.p, t, t_p,
        sd, discordant, detectable, mdd_why, equivalence, verdict(test.p, n, equivalence),
    )


def _in_units(eq: Equivalence, margin: float) -> Equivalence:
    return replace(eq, margin=margin)


def with_holm(results: Iterable[MetricComparison]) -> tuple[MetricComparison, ...]:
    """The same comparisons with p_holm corrected over all of them, the equivalence tests'
    p_holm over those that have one (a family of their own, as "different" is), and verdicts to match."""
    results = tuple(results)
    adjusted = holm([r.p for r in results])
    tost = holm([r.equivalence.p if r.equivalence else math.nan for r in results])
    out = []
    for r, q, e in zip(results, adjusted, tost, strict=True):
        eq = replace(r.equivalence, p_holm=e) if r.equivalence else None
        out.append(replace(r, p_holm=q, equivalence=eq, verdict=verdict(q, r.n, eq)))
    return tuple(out)


def compare_metrics(a: dict[str, np.ndarray], b: dict[str, np.ndarray], metrics: Sequence[str] = DEFAULT_METRICS, *,
                    margins: Mapping[str, float] | None = None, n_resamples: int = DEFAULT_RESAMPLES,
                    seed: int = DEFAULT_SEED, permutations: int = PERMUTATIONS,
                    exact: bool = False) -> tuple[MetricComparison, ...]:
    """Every metric of B against A (per-item arrays aligned by item), Holm-corrected together;
    `margins` maps a metric to its equivalence margin (units shown). Metrics with no item known
    on both sides are left out. `exact`: the permutation and exact tests at any size."""
    margins = margins or {}
    known = [name for name in metrics if known_pairs(a[name], b[name])[0].size]
    continuous = [name for name in known if not METRICS[name].binary and not large_sample(a[name], b[name], exact)]
    scaled = [(np.asarray(a[name], dtype=float) * METRICS[name].scale, np.asarray(b[name], dtype=float) * METRICS[name].scale)
              for name in continuous]
    tested, bounded = _side_by_side(lambda: paired_permutations(scaled, n_resamples=permutations, seed=seed),
                                    lambda: bootstrap_diff_cis(scaled, n_resamples=n_resamples, seed=seed))
    tests = dict(zip(continuous, tested, strict=True))
    intervals = dict(zip(continuous, bounded, strict=True))
    return with_holm(compare_metric(METRICS[name], a[name], b[name], margin=margins.get(name), n_resamples=n_resamples,
                                    seed=seed, permutations=permutations, permutation=tests.get(name),
                                    interval=intervals.get(name), exact=exact)
                     for name in known)


def large_sample(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, exact: bool = False) -> bool:
    """Whether compare_metric decides this pair of arrays with the large-sample test (more than
    ASYMPTOTIC_ABOVE differing pairs, some spread, not `exact`): then no permutation test or
    bootstrap need be made for it."""
    x, y = known_pairs(a, b)
    d = y - x
    return asym.asymptotic(asym.differing_pairs(d), exact) and not bool(np.all(d == d[0]))


def _side_by_side(first: Callable[[], T], second: Callable[[], U]) -> tuple[T, U]:
    """first() and second() at once where the process may use two cores. The permutation tests and
    the bootstrap draw their own seeded streams and share nothing, so their results are the same
    either way; both spend their time in numpy and BLAS, which release the GIL, so at 1M items
    compare's wall time is the longer of the two instead of their sum."""
    from engine.statistics.stats import usable_cores

    if usable_cores() < 2:
        return first(), second()
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="compare-permutations") as pool:
        pending = pool.submit(first)
        other = second()
        return pending.result(), other
