"""Agreement between judges: engine.statistics.agreement against the libraries
run directly (statsmodels, krippendorff, sklearn), its degenerate inputs, and its intervals'
coverage by seeded simulation."""

from __future__ import annotations

import math

import krippendorff
import numpy as np
import pytest
import scipy.stats
from sklearn.metrics import accuracy_score, cohen_kappa_score, confusion_matrix, precision_score, recall_score
from statsmodels.stats.inter_rater import aggregate_raters, cohens_kappa, fleiss_kappa
from statsmodels.stats.proportion import proportion_confint

from engine.errors import UserError
from engine.statistics import agreement as ag

A, N = ag.ATTRIBUTABLE, ag.NOT_ATTRIBUTABLE
THREE = ("attributable", "partly", "not_attributable")

# (seed, n, categories, share of item-level agreement) for the random datasets.
DATASETS = [(0, 30, ag.BINARY, 0.7), (1, 200, ag.BINARY, 0.5), (2, 57, THREE, 0.6), (3, 500, THREE, 0.3),
            (4, 12, THREE, 0.8)]


def _two_judges(seed: int, n: int, cats, agree: float) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    a = rng.choice(cats, size=n, p=np.linspace(1, 2, len(cats)) / np.linspace(1, 2, len(cats)).sum())
    b = np.where(rng.random(n) < agree, a, rng.choice(cats, size=n))
    return [str(x) for x in a], [str(x) for x in b]


@pytest.mark.parametrize(("seed", "n", "cats", "agree"), DATASETS)
def test_cohen_equals_statsmodels_and_sklearn(seed, n, cats, agree):
    a, b = _two_judges(seed, n, cats, agree)
    got = ag.pair_agreement(a, b, categories=cats)
    table = confusion_matrix(a, b, labels=list(cats))
    assert got.confusion == tuple(map(tuple, table.tolist()))
    assert got.n == n and got.undefined is None and got.categories == tuple(cats)
    assert got.raw_agreement == pytest.approx(accuracy_score(a, b), abs=1e-12)
    assert got.kappa == pytest.approx(cohen_kappa_score(a, b, labels=list(cats)), abs=1e-12)
    res = cohens_kappa(table)
    assert got.kappa == pytest.approx(res.kappa, abs=1e-12)
    assert got.kappa_se == pytest.approx(res.std_kappa, abs=1e-12)
    # statsmodels' own 95% bounds, clipped to kappa's range.
    assert got.kappa_ci == pytest.approx((max(-1, res.kappa_low), min(1, res.kappa_upp)), abs=1e-12)


def test_cohen_at_another_confidence_and_default_categories():
    a, b = _two_judges(5, 80, ag.BINARY, 0.6)
    got = ag.pair_agreement(a, b, confidence=0.9)
    assert got.categories == (A, N)  # sorted labels: the binary pair in its usual order
    half = scipy.stats.norm.ppf(0.95) * cohens_kappa(confusion_matrix(a, b, labels=[A, N])).std_kappa
    assert got.kappa_ci == pytest.approx((got.kappa - half, got.kappa + half), abs=1e-12)


def test_items_one_judge_skipped_are_left_out():
    a, b = _two_judges(6, 60, THREE, 0.5)
    a_missing = [None if i % 7 == 0 else x for i, x in enumerate(a)]
    b_missing = [None if i % 5 == 0 else x for i, x in enumerate(b)]
    keep = [i for i in range(60) if i % 7 and i % 5]
    got = ag.pair_agreement(a_missing, b_missing, categories=THREE)
    assert got == ag.pair_agreement([a[i] for i in keep], [b[i] for i in keep], categories=THREE)
    assert got.n == len(keep)


def _panel(seed: int, items: int, judges: int, cats, missing: float) -> list[list[str | None]]:
    rng = np.random.default_rng(seed)
    truth = rng.choice(cats, size=items)
    noisy = np.where(rng.random((items, judges)) < 0.6, truth[:, None], rng.choice(cats, size=(items, judges)))
    gone = rng.random((items, judges)) < missing
    return [[None if gone[i, j] else str(noisy[i, j]) for j in range(judges)] for i in range(items)]


@pytest.mark.parametrize(("seed", "items", "judges", "cats", "missing"), [
    (0, 40, 3, ag.BINARY, 0.0), (1, 100, 4, THREE, 0.1), (2, 25, 5, THREE, 0.2), (3, 300, 2, ag.BINARY, 0.15)])
def test_panel_equals_statsmodels_and_krippendorff(seed, items, judges, cats, missing):
    ratings = _panel(seed, items, judges, cats, missing)
    got = ag.panel_agreement(ratings, categories=cats)
    code = {c: i for i, c in enumerate(cats)}
    data = np.array([[np.nan if x is None else code[x] for x in row] for row in ratings])
    complete = data[~np.isnan(data).any(axis=1)].astype(int)
    assert (got.n_items, got.n_judges, got.n_complete) == (items, judges, len(complete))
    assert got.undefined is None
    assert got.fleiss_kappa == pytest.approx(fleiss_kappa(aggregate_raters(complete, n_cat=len(cats))[0]), abs=1e-12)
    direct = krippendorff.alpha(reliability_data=data.T, level_of_measurement="nominal")
    assert got.krippendorff_alpha == pytest.approx(direct, abs=1e-12)


def test_two_judges_panel_fleiss_is_close_to_cohen():
    # With two judges and no missing values Fleiss' kappa is Scott's pi: equal to Cohen's kappa when
    # the two marginals are equal, close otherwise; a check that rows and columns are not swapped.
    a, b = _two_judges(7, 400, THREE, 0.6)
    panel = ag.panel_agreement(list(zip(a, b, strict=True)))
    assert panel.fleiss_kappa == pytest.approx(ag.pair_agreement(a, b).kappa, abs=0.02)


@pytest.mark.parametrize(("seed", "n"), [(0, 50), (1, 300), (2, 9)])
def test_against_human_equals_sklearn_and_wilson(seed, n):
    judge, human = _two_judges(seed, n, ag.BINARY, 0.7)
    got = ag.against_human(judge, human)
    assert got.n == n
    assert got.accuracy.value == pytest.approx(accuracy_score(human, judge))
    assert got.precision.value == pytest.approx(precision_score(human, judge, pos_label=A))
    assert got.recall.value == pytest.approx(recall_score(human, judge, pos_label=A))
    for p in (got.accuracy, got.precision, got.recall):
        assert p.k / p.n == pytest.approx(p.value)
        assert p.ci == pytest.approx(proportion_confint(p.k, p.n, method="wilson"), abs=1e-12)


def test_ppi_equals_the_direct_computation():
    rng = np.random.default_rng(8)
    y = rng.random(150) < 0.6
    f = np.where(rng.random(150) < 0.8, y, rng.random(150) < 0.5)
    f_un = rng.random(5000) < 0.65
    got = ag.ppi_rate(y.tolist(), f.tolist(), f_un.tolist())
    d = y.astype(float) - f.astype(float)
    est = f_un.mean() + d.mean()
    se = math.sqrt(f_un.astype(float).var(ddof=1) / 5000 + d.var(ddof=1) / 150)
    assert got.estimate == pytest.approx(est, abs=1e-12)
    assert got.ci == pytest.approx((est - 1.959963984540054 * se, est + 1.959963984540054 * se), abs=1e-9)
    assert (got.n_labelled, got.n_unlabelled) == (150, 5000)
    assert got.naive_judge_rate == pytest.approx(f_un.mean()) and got.human_rate == pytest.approx(y.mean())


# Degenerate inputs: a reason in words, never NaN, never a crash.
@pytest.mark.parametrize(("a", "b", "reason"), [
    ([], [], ag.NO_PAIR),
    ([A, None], [None, A], ag.NO_PAIR),
    ([A], [N], ag.ONE_PAIR),
    ([A, A, A], [A, A, A], ag.BOTH_ONE_CLASS),
])
def test_pair_undefined(a, b, reason):
    got = ag.pair_agreement(a, b)
    assert got.undefined == reason and got.kappa is None and got.kappa_ci is None


@pytest.mark.parametrize(("a", "b", "kappa", "reason"), [
    ([A, N, A, N], [A, N, A, N], 1.0, ag.PERFECT),
    ([A, A, A, A], [A, N, A, N], 0.0, ag.ONE_JUDGE_ONE_CLASS.format(judge="A", other="B")),
    ([A, N, N], [N, N, N], 0.0, ag.ONE_JUDGE_ONE_CLASS.format(judge="B", other="A")),
    ([A, A, A], [N, N, N], 0.0, ag.EACH_ONE_CLASS),
])
def test_pair_kappa_without_an_interval(a, b, kappa, reason):
    got = ag.pair_agreement(a, b)
    assert got.undefined is None and got.kappa == pytest.approx(kappa, abs=1e-12)
    assert got.kappa_ci is None and got.ci_undefined == reason


@pytest.mark.parametrize(("ratings", "fleiss_why", "alpha_why"), [
    ([], ag.FEW_JUDGES, ag.FEW_JUDGES),
    ([[A], [N]], ag.FEW_JUDGES, ag.FEW_JUDGES),
    ([[A, A, A], [A, A, A]], ag.PANEL_ONE_CLASS + " on the items every judge rated",
     ag.PANEL_ONE_CLASS + " on the items two judges or more rated"),
    ([[A, None], [None, N]], ag.NO_COMPLETE, ag.NO_PAIRABLE),
    ([[A, A, None], [N, None, N], [A, N, A]], ag.ONE_COMPLETE, None),  # one complete item: as Cohen's refuses one
    ([[A, A, None], [N, None, N], [A, N, A], [N, N, A]], None, None),
    ([[A, A, None], [N, None, N]], ag.NO_COMPLETE, None),
])
def test_panel_undefined(ratings, fleiss_why, alpha_why):
    got = ag.panel_agreement(ratings)
    assert (got.fleiss_undefined, got.alpha_undefined) == (fleiss_why, alpha_why)
    assert (got.fleiss_kappa is None) == (fleiss_why is not None)
    assert (got.krippendorff_alpha is None) == (alpha_why is not None)
    assert got.undefined == ("; ".join(dict.fromkeys(r for r in (fleiss_why, alpha_why) if r)) or None)
    for v in (got.fleiss_kappa, got.krippendorff_alpha):
        assert v is None or math.isfinite(v)


def test_panel_perfect_agreement_is_one():
    got = ag.panel_agreement([[A, A, A], [N, N, N], [A, A, None]])
    assert got.fleiss_kappa == pytest.approx(1.0) and got.krippendorff_alpha == pytest.approx(1.0)


def test_against_human_undefined():
    got = ag.against_human([N, N, None], [N, N, A])
    assert got.n == 2 and got.accuracy.value == 1.0
    assert got.precision.value is None and got.precision.undefined == f"the judge never said {A}"
    assert got.recall.value is None and got.recall.undefined == f"no human label says {A}"
    empty = ag.against_human([], [])
    assert empty.accuracy.undefined == ag.NO_PAIR and empty.accuracy.ci is None
    # Labels on other documents than the judge's: no pair, and each share says so, not that no
    # human label says attributable.
    apart = ag.against_human([A, A, None, None], [None, None, A, N])
    assert apart.n == 0 and {apart.accuracy.undefined, apart.precision.undefined, apart.recall.undefined} == {ag.NO_PAIR}


@pytest.mark.parametrize(("y", "f", "f_un", "reason"), [
    ([], [], [True, False], "fewer than two human-labelled items"),
    ([True], [True], [True, False], "fewer than two human-labelled items"),
    ([True, False], [True, True], [True], "fewer than two items judged without a human label"),
])
def test_ppi_undefined(y, f, f_un, reason):
    got = ag.ppi_rate(y, f, f_un)
    assert got.undefined == reason and got.estimate is None and got.ci is None


def test_ppi_with_no_spread_has_no_zero_width_interval():
    # Five labels that agree with a judge who calls every other item attributable: SE is 0, and
    # [1.000, 1.000] would be round-off read as certainty.
    got = ag.ppi_rate([True] * 5, [True] * 5, [True] * 40)
    assert got.estimate == 1.0 and got.se == 0.0 and got.ci is None
    assert got.note.startswith("no interval: ") and got.note.endswith("(no spread)")
    assert ag.ppi_rate([True] * 5, [True] * 4 + [False], [True] * 40).ci is not None  # one error: an interval


def test_a_ppi_estimate_outside_zero_one_says_it_is_not_a_rate():
    # The judge says yes everywhere else, and underrates the labelled sample: the correction
    # adds more than the judge leaves room for.
    got = ag.ppi_rate([True, True, True, False], [False, False, True, False], [True, True, True, False] * 5)
    assert got.estimate > 1.0 and got.ci[1] == 1.0
    assert got.note.startswith("not a rate: the correction leaves [0, 1]")
    assert ag.ppi_rate([True, False, True], [True, False, False], [True, False] * 5).note is None


@pytest.mark.parametrize("call", [
    lambda: ag.pair_agreement([A, N], [A]),
    lambda: ag.against_human([A], [A, N]),
    lambda: ag.ppi_rate([True, False], [True], [True, True]),
    lambda: ag.pair_agreement([A, "maybe"], [A, N], categories=ag.BINARY),
    lambda: ag.pair_agreement([A], [A], categories=(A, A)),
    lambda: ag.panel_agreement([[A, N], [A]]),
    lambda: ag.pair_agreement([A], [A], confidence=1.5),
])
def test_bad_input_is_refused_in_one_line(call):
    with pytest.raises(UserError) as e:
        call()
    assert "\n" not in str(e.value) and str(e.value)


def test_unequal_lengths_say_both_counts():
    with pytest.raises(UserError, match="judge A has 2 labels but judge B has 1"):
        ag.pair_agreement([A, N], [A])


def test_kappa_interval_covers_the_true_kappa():
    # Each judge reports a shared latent label L ~ Bernoulli(p) with probability r (r_a, r_b), else
    # an independent Bernoulli(p) draw. Both marginals are then Bernoulli(p), so chance agreement is
    # p_e = p^2 + (1 - p)^2. The judges agree for sure when both report L (probability r_a r_b);
    # otherwise at least one label is independent of the other, so they agree with probability p_e.
    # p_o = r_a r_b + (1 - r_a r_b) p_e, hence kappa = (p_o - p_e) / (1 - p_e) = r_a r_b exactly.
    p, r_a, r_b, n, reps = 0.7, 0.9, 0.8, 200, 400
    true_kappa = r_a * r_b
    rng = np.random.default_rng(32)
    latent = rng.random((reps, n)) < p
    a = np.where(rng.random((reps, n)) < r_a, latent, rng.random((reps, n)) < p)
    b = np.where(rng.random((reps, n)) < r_b, latent, rng.random((reps, n)) < p)
    label = np.array([N, A])
    covered, kappas = 0, []
    for i in range(reps):
        got = ag.pair_agreement(label[a[i].astype(int)].tolist(), label[b[i].astype(int)].tolist())
        assert got.kappa_ci is not None
        covered += got.kappa_ci[0] <= true_kappa <= got.kappa_ci[1]
        kappas.append(got.kappa)
    assert 0.93 <= covered / reps <= 0.97
    assert np.mean(kappas) == pytest.approx(true_kappa, abs=0.01)


def test_ppi_interval_covers_the_true_rate_where_the_judges_misses():
    # The judge calls 90% of attributable citations attributable and 40% of the others: with a true
    # rate of 0.6 its own rate is 0.9 * 0.6 + 0.4 * 0.4 = 0.70, biased by 0.10.
    rate, n, big_n, reps = 0.6, 200, 2000, 1000
    rng = np.random.default_rng(33)
    covered = naive_covered = 0
    for _ in range(reps):
        y = rng.random(n) < rate
        f = np.where(y, rng.random(n) < 0.9, rng.random(n) < 0.4)
        f_un = np.where(rng.random(big_n) < rate, rng.random(big_n) < 0.9, rng.random(big_n) < 0.4)
        got = ag.ppi_rate(y, f, f_un)
        assert got.ci is not None
        covered += got.ci[0] <= rate <= got.ci[1]
        naive = ag.proportion(int(f_un.sum()), big_n).ci
        assert naive is not None
        naive_covered += naive[0] <= rate <= naive[1]
    assert 0.93 <= covered / reps <= 0.97
    assert naive_covered == 0
