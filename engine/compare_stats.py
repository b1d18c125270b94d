"""Paired statistics for comparing two runs on the same items (issue 17). Pure: arrays in, values out.

Every comparison is paired by item: the difference is B - A per item, so its spread is the
spread of the per-item differences, not of two independent samples (the mistake of an unpaired
z-test on paired data). Per metric:
  * the mean difference with a percentile-bootstrap 95% interval (engine.stats: one seeded
    matrix of resampled items, vectorised);
  * a p value from the test that fits the metric: the exact McNemar test (a binomial test on
    the discordant pairs) for a 0/1 metric, the paired t-test for a continuous one, with a
    paired permutation test (sign flips of the differences) beside it;
  * Holm's correction over the metrics compared together;
  * with a margin M, TOST (two one-sided paired t-tests) and a verdict: "equivalent within M",
    "different" or "inconclusive";
  * the smallest difference these items could detect at 80% power, from the observed SD of the
    differences (the noncentral t, as statsmodels' TTestPower computes it).
scipy is imported inside the functions that need it: importing it costs more than a small
comparison does. tests/test_compare.py checks each statistic against scipy and statsmodels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from engine.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, bootstrap_mean_ci

ALPHA = 0.05
POWER = 0.8
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

MCNEMAR = "exact McNemar"
PAIRED_T = "paired t-test"


@dataclass(frozen=True)
class MetricSpec:
    """A metric that can be compared: its name, how it reads, whether it is 0/1, its scale."""

    name: str
    label: str
    binary: bool  # 0/1 per item: exact McNemar; otherwise the paired t-test
    scale: float  # shown (and the margin read) in these units: 100 for shares (points)


# The metrics of query_metrics and two derived from it, in the order tables show them.
METRICS: dict[str, MetricSpec] = {m.name: m for m in (
    MetricSpec("precision", "citation precision", False, 100.0),
    MetricSpec("recall", "citation recall", False, 100.0),
    MetricSpec("f1", "citation F1", False, 100.0),
    MetricSpec("exact_match", "exact match (paper)", True, 100.0),
    MetricSpec("squad_em", "exact match (SQuAD)", True, 100.0),
    MetricSpec("answer_recall", "answer recall", False, 100.0),
    MetricSpec("n_citations", "citations per answer", False, 1.0),
    MetricSpec("cites_nothing", "answers citing nothing", True, 100.0),
    MetricSpec("mean_probability", "mean citation probability", False, 100.0),
)}
DEFAULT_METRICS = tuple(METRICS)


@dataclass(frozen=True)
class TestResult:
    """A test's statistic and two-sided p value (NaN where undefined: fewer than two items)."""

    statistic: float
    p: float


@dataclass(frozen=True)
class Equivalence:
    """TOST of the paired difference against (-margin, +margin)."""

    margin: float
    p: float  # the larger of the two one-sided p values
    p_lower: float  # H0: difference <= -margin
    p_upper: float  # H0: difference >= +margin


@dataclass(frozen=True)
class MetricComparison:
    """One metric of B against A on the paired items; diff = mean_b - mean_a, in display units."""

    metric: str
    label: str
    n: int  # pairs where both runs have a value (exact match needs gold answers, etc.)
    mean_a: float
    mean_b: float
    diff: float
    ci_low: float  # bootstrap 95% interval of diff
    ci_high: float
    test: str  # which test gave p: MCNEMAR or PAIRED_T
    statistic: float  # McNemar: discordant pairs right in B only; t-test: t
    p: float
    p_holm: float  # p after Holm's correction over the metrics compared together
    p_permutation: float | None  # paired permutation test (continuous metrics)
    sd_diff: float
    min_detectable: float | None  # |diff| detectable at 80% power with n items (None: n < 2)
    equivalence: Equivalence | None
    verdict: str


@dataclass(frozen=True)
class EmFlips:
    """Exact match from A to B on items both score: right in A and wrong in B, and the reverse."""

    right_to_wrong: int
    wrong_to_right: int
    n: int


@dataclass(frozen=True)
class CitationFlips:
    """Documents shown in both runs of an item and cited by one only, split by relevance."""

    a_only_relevant: int
    a_only_nonrelevant: int
    b_only_relevant: int
    b_only_nonrelevant: int
    shown_both: int  # (item, document) pairs shown in both runs


def _clean(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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

    x, y = _clean(a, b)
    b_only = int(np.sum((y == 1) & (x == 0)))
    a_only = int(np.sum((x == 1) & (y == 0)))
    if a_only + b_only == 0:
        return TestResult(float(b_only), 1.0)  # no discordant pair: no evidence either way
    return TestResult(float(b_only), float(binomtest(b_only, a_only + b_only, 0.5).pvalue))


def paired_t(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> TestResult:
    """Paired two-sided t-test of B against A (scipy's ttest_rel), defined where scipy warns:
    all differences equal give t = 0, p = 1 when they are 0 and t = +-inf, p = 0 otherwise."""
    from scipy.stats import ttest_rel

    x, y = _clean(a, b)
    if x.size < 2:
        return TestResult(math.nan, math.nan)
    d = y - x
    if np.all(d == d[0]):
        if d[0] == 0:
            return TestResult(0.0, 1.0)
        return TestResult(math.copysign(math.inf, d[0]), 0.0)
    res = ttest_rel(y, x)
    return TestResult(float(res.statistic), float(res.pvalue))


def paired_permutation(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *,
                       n_resamples: int = PERMUTATIONS, seed: int = DEFAULT_SEED) -> TestResult:
    """Paired permutation test of the mean difference: scipy's permutation_test with
    permutation_type='samples' (each item's A and B swapped or not), exact for few items."""
    from scipy.stats import permutation_test

    x, y = _clean(a, b)
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


def _mean_difference(y: np.ndarray, x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(y - x, axis=axis)


def bootstrap_diff_ci(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *,
                      n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                      confidence: float = 0.95) -> tuple[float, float]:
    """Paired percentile-bootstrap interval of mean(B - A): items resampled with their pair."""
    x, y = _clean(a, b)
    if x.size == 0:
        return math.nan, math.nan
    low, high = bootstrap_mean_ci(y - x, n_resamples=n_resamples, seed=seed, confidence=confidence)
    return float(low), float(high)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p values (as statsmodels' multipletests(method='holm')); NaN
    entries stay NaN and do not count among the tests."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    known = np.flatnonzero(~np.isnan(p))
    m = known.size
    order = known[np.argsort(p[known], kind="stable")]
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


def tost_paired(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, margin: float) -> Equivalence:
    """TOST of mean(B - A) within (-margin, +margin): two one-sided one-sample t-tests of the
    differences (statsmodels' ttost_paired(b, a, -margin, margin)); p is the larger one."""
    from scipy.stats import ttest_1samp

    if not margin > 0:
        raise ValueError(f"the equivalence margin must be positive, not {margin}")
    x, y = _clean(a, b)
    if x.size < 2:
        return Equivalence(margin, math.nan, math.nan, math.nan)
    d = y - x
    if np.all(d == d[0]):
        # No spread: the difference is known exactly (scipy would divide by zero).
        p_lower = 0.0 if d[0] > -margin else 1.0
        p_upper = 0.0 if d[0] < margin else 1.0
    else:
        p_lower = float(ttest_1samp(d, -margin, alternative="greater").pvalue)
        p_upper = float(ttest_1samp(d, margin, alternative="less").pvalue)
    return Equivalence(margin, max(p_lower, p_upper), p_lower, p_upper)


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
    None below two pairs; 0 when the differences do not vary (any difference is then exact)."""
    from scipy.optimize import brentq

    if n < 2 or not math.isfinite(sd_diff):
        return None
    if sd_diff == 0:
        return 0.0
    high = 1.0
    while paired_power(high, n, alpha) < power:
        high *= 2
    effect = brentq(lambda e: paired_power(e, n, alpha) - power, 1e-12, high, xtol=1e-12)
    return float(effect * sd_diff)


def verdict(p_holm: float, n: int, equivalence: Equivalence | None, alpha: float = ALPHA) -> str:
    """One word or phrase per metric: with a margin, TOST first (equivalent / different /
    inconclusive); without, whether the Holm-corrected p shows a difference."""
    if n < 2:
        return TOO_FEW
    if equivalence is not None:
        if equivalence.p < alpha:
            return EQUIVALENT.format(margin=equivalence.margin)
        return DIFFERENT if p_holm < alpha else INCONCLUSIVE
    return DIFFERENT if p_holm < alpha else NO_DIFFERENCE


def compare_metric(spec: MetricSpec, a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *,
                   margin: float | None = None, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                   permutations: int = PERMUTATIONS) -> MetricComparison:
    """One metric of B against A; p_holm is p until with_holm corrects a set of them."""
    x, y = _clean(a, b)
    x, y = x * spec.scale, y * spec.scale
    n = int(x.size)
    d = y - x
    mean_a = float(x.mean()) if n else math.nan
    mean_b = float(y.mean()) if n else math.nan
    low, high = bootstrap_diff_ci(x, y, n_resamples=n_resamples, seed=seed)
    if spec.binary:
        test, perm = mcnemar_exact(x / spec.scale, y / spec.scale), None
    else:
        test = paired_t(x, y)
        perm = paired_permutation(x, y, n_resamples=permutations, seed=seed).p
    sd = float(d.std(ddof=1)) if n >= 2 else math.nan
    equivalence = tost_paired(x, y, margin) if margin is not None else None
    return MetricComparison(
        spec.name, spec.label, n, mean_a, mean_b, float(d.mean()) if n else math.nan, low, high,
        MCNEMAR if spec.binary else PAIRED_T, test.statistic, test.p, test.p, perm, sd,
        min_detectable_difference(sd, n), equivalence, verdict(test.p, n, equivalence),
    )


def with_holm(results: Iterable[MetricComparison]) -> tuple[MetricComparison, ...]:
    """The same comparisons with p_holm corrected over all of them, and verdicts to match."""
    from dataclasses import replace

    results = tuple(results)
    adjusted = holm([r.p for r in results])
    return tuple(replace(r, p_holm=q, verdict=verdict(q, r.n, r.equivalence)) for r, q in zip(results, adjusted))


def compare_metrics(a: dict[str, np.ndarray], b: dict[str, np.ndarray], metrics: Sequence[str] = DEFAULT_METRICS, *,
                    margin: float | None = None, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                    permutations: int = PERMUTATIONS) -> tuple[MetricComparison, ...]:
    """Every metric of B against A (per-item arrays aligned by item), Holm-corrected together.
    Metrics with no item known on both sides are left out."""
    out = []
    for name in metrics:
        spec = METRICS[name]
        x, _ = _clean(a[name], b[name])
        if x.size:
            out.append(compare_metric(spec, a[name], b[name], margin=margin, n_resamples=n_resamples, seed=seed,
                                      permutations=permutations))
    return with_holm(out)


def em_flips(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> EmFlips:
    """Exact-match flips from A to B over items both score."""
    x, y = _clean(a, b)
    return EmFlips(int(np.sum((x == 1) & (y == 0))), int(np.sum((x == 0) & (y == 1))), int(x.size))


def citation_flips(items: Iterable[tuple[Iterable[str], Iterable[str], Iterable[str], Iterable[str]]]) -> CitationFlips:
    """Per item (shown in both, cited in A, cited in B, relevant document ids): documents shown
    in both runs and cited by one only, split by whether they hold the answer."""
    counts = [0, 0, 0, 0]
    shown_total = 0
    for shown, cited_a, cited_b, relevant in items:
        shown, cited_a, cited_b, relevant = set(shown), set(cited_a), set(cited_b), set(relevant)
        shown_total += len(shown)
        for doc in (cited_a - cited_b) & shown:
            counts[0 if doc in relevant else 1] += 1
        for doc in (cited_b - cited_a) & shown:
            counts[2 if doc in relevant else 3] += 1
    return CitationFlips(*counts, shown_both=shown_total)
