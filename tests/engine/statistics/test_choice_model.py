"""The citation choice model against statsmodels run directly, a hand-checked case, its dropping
rules, and the suppression rates against statsmodels and scipy."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest, chi2_contingency
from scipy.stats import t as t_dist
from statsmodels.discrete.conditional_models import ConditionalLogit
from statsmodels.stats.proportion import proportion_confint

from engine.errors import UserError
from engine.statistics.choice_model import NO_LABEL, fit_choice_model
from engine.statistics.choice_simulation import ChoiceTruth, SimulationSettings, simulate_choices
from engine.statistics.suppression import suppression_rates


def _direct(frame: pd.DataFrame, columns: dict[str, np.ndarray]):
    """statsmodels on the whole frame, as a user would call it (it drops the silent answers itself)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = np.column_stack(list(columns.values()))
        return ConditionalLogit(frame["cited"].to_numpy(dtype=float), x,
                                groups=frame["answer"].to_numpy()).fit(method="newton", maxiter=100, disp=False)


def _same(fit, result, names):
    # Our Hessian is exact and statsmodels' is numerical (approx_fprime of its score): standard
    # errors, p values and interval ends agree to about 1e-7, estimates to 1e-8.
    assert [e.term for e in fit.effects] == names
    ci = np.asarray(result.conf_int(alpha=0.05))
    for j, e in enumerate(fit.effects):
        assert e.coef == pytest.approx(result.params[j], rel=1e-8, abs=1e-10)
        assert e.se == pytest.approx(result.bse[j], rel=1e-6)
        # log p: a p of 1e-28 moves by 100 times the relative change of its z statistic
        assert math.log(e.p) == pytest.approx(math.log(result.pvalues[j]), rel=1e-6)
        assert e.odds_ratio == pytest.approx(math.exp(result.params[j]), rel=1e-8)
        assert (e.ci_low, e.ci_high) == pytest.approx((math.exp(ci[j, 0]), math.exp(ci[j, 1])), rel=1e-6)
    assert fit.log_likelihood == pytest.approx(result.llf, rel=1e-10)


@pytest.fixture(scope="module")
def simulated() -> pd.DataFrame:
    settings = SimulationSettings(n_items=150, modes=("vanilla", "base", "cf"), repeat_share=0.5)
    return simulate_choices(settings, ChoiceTruth(repeated=0.3), np.random.default_rng(7)).frame


def test_estimates_equal_statsmodels_conditional_logit_run_directly(simulated):
    f = simulated
    fit = fit_choice_model(f, label_reference="B")
    result = _direct(f, {
        "relevant": f["relevant"].to_numpy(float),
        "position[middle]": (f["position_group"] == "middle").to_numpy(float),
        "position[last]": (f["position_group"] == "last").to_numpy(float),
        "label[A]": (f["label"] == "A").to_numpy(float),
        "repeated": f["repeated"].to_numpy(float),
    })
    _same(fit, result, ["relevant", "position[middle]", "position[last]", "label[A]", "repeated"])
    assert fit.converged and fit.position == "group" and fit.label_reference == "B"
    # Vanilla answers carry no label: that level never varies within an answer.
    assert [t for t, _ in fit.dropped] == [f"label[{NO_LABEL}]"]
    per_answer = f.groupby("answer")["cited"].agg(["sum", "size"])
    informative = (per_answer["sum"] > 0) & (per_answer["sum"] < per_answer["size"])
    assert (fit.n_answers, fit.n_informative) == (len(per_answer), int(informative.sum()))
    assert fit.n_documents == int(per_answer.loc[informative, "size"].sum())


def test_position_as_a_number_and_an_interaction_equal_statsmodels(simulated):
    f = simulated[simulated["condition"] != "vanilla"]
    fit = fit_choice_model(f, position="number", interactions=["label:position", "relevant:label"],
                           label_reference="B")
    rel, lab_a, pos = f["relevant"].to_numpy(float), (f["label"] == "A").to_numpy(float), f["position"].to_numpy(float)
    result = _direct(f, {"relevant": rel, "position": pos, "label[A]": lab_a,
                         "repeated": f["repeated"].to_numpy(float), "position:label[A]": pos * lab_a})
    _same(fit, result, ["relevant", "position", "label[A]", "repeated", "position:label[A]"])
    assert "beyond their separate effects" in fit.effect("position:label[A]").sentence
    # In base and cf answers the label x relevance interaction is half relevance plus half label.
    assert "'relevant', 'label[A]'" in dict(fit.dropped)["relevant:label[A]"]


def _pairs_frame(b: int, c: int, concordant: int) -> pd.DataFrame:
    """Two documents per answer, one cited. Discordant answers (one relevant document): b cite the
    relevant one, c the other; concordant ones show two non-relevant documents. Each kind is split
    evenly between the cited document shown first and shown last, so position carries no signal."""
    rows = []

    def answer(name: str, relevant: tuple[bool, bool], cited_at: int) -> None:
        for pos in (1, 2):
            rows.append({"answer": name, "item": name, "cited": pos == cited_at, "relevant": relevant[pos - 1],
                         "position": pos, "n_shown": 2, "position_group": "first" if pos == 1 else "last",
                         "label": None, "repeated": False, "condition": "vanilla"})

    for i in range(b):  # the relevant document cited, half of them shown first
        answer(f"b{i}", (True, False) if i % 2 else (False, True), 1 if i % 2 else 2)
    for i in range(c):  # the non-relevant one cited
        answer(f"c{i}", (True, False) if i % 2 else (False, True), 2 if i % 2 else 1)
    for i in range(concordant):
        answer(f"n{i}", (False, False), 1 + i % 2)
    return pd.DataFrame(rows)


def test_a_hand_checked_case_two_documents_per_answer_gives_the_discordant_ratio():
    b, c = 12, 8
    frame = _pairs_frame(b, c, concordant=6)
    # Answers that carry no information: one cites nothing, one cites both of its documents.
    silent = _pairs_frame(2, 0, 0).assign(answer=lambda d: "s" + d["answer"], cited=False)
    both = _pairs_frame(2, 0, 0).assign(answer=lambda d: "a" + d["answer"], cited=True)
    fit = fit_choice_model(pd.concat([frame, silent, both], ignore_index=True))
    rel = fit.effect("relevant")
    # The conditional MLE of a matched-pairs odds ratio is b / c, with SE(log OR) = sqrt(1/b + 1/c).
    assert rel.odds_ratio == pytest.approx(b / c, rel=1e-9)
    assert rel.se == pytest.approx(math.sqrt(1 / b + 1 / c), rel=1e-6)
    z = 1.959963984540054
    assert rel.ci_low == pytest.approx(b / c * math.exp(-z * rel.se), rel=1e-9)
    assert fit.effect("position[last]").coef == pytest.approx(0.0, abs=1e-9)
    assert (fit.n_answers, fit.n_informative, fit.n_documents) == (b + c + 6 + 4, b + c + 6, 2 * (b + c + 6))
    dropped = dict(fit.dropped)
    assert dropped["label"] == "no document carries a label"
    assert "takes one value within every answer" in dropped["position[middle]"]
    assert "takes one value within every answer" in dropped["repeated"]
    assert rel.sentence.startswith("Being relevant multiplies the odds of citing a document by 1.50 [")
    assert rel.sentence.endswith("holding position fixed")


def test_label_collinear_with_relevance_in_base_answers_alone_is_dropped_with_the_way_out(simulated):
    base = simulated[simulated["condition"] == "base"]
    fit = fit_choice_model(base)
    reason = dict(fit.dropped)["label[B]"]
    assert "'relevant'" in reason and "adding the cf mode" in reason and "one-sided label scope" in reason
    assert [e.term for e in fit.effects] == ["relevant", "position[middle]", "position[last]", "repeated"]


def test_a_label_constant_within_every_answer_is_dropped(simulated):
    f = simulated[simulated["condition"] == "base"].copy()
    f["label"] = np.where(f["item"].str[1:].astype(int) % 2 == 0, "a woman", "a man")  # one label per answer
    fit = fit_choice_model(f, label_reference="a man")
    assert "one and the same label" in dict(fit.dropped)["label[a woman]"]
    assert fit.label_reference is None and "label" not in fit.effects[0].sentence


def test_the_label_sentence_names_the_reference_and_what_is_held_fixed(simulated):
    f = simulated[simulated["condition"] != "vanilla"].copy()
    f["label"] = f["label"].map({"A": "a woman", "B": "a man"})
    f["repeated"] = False
    e = fit_choice_model(f, label_reference="a man").effect("label[a woman]")
    p = "p < 0.001" if e.p < 0.001 else f"p = {e.p:.3f}"
    assert e.sentence == (f"A 'written by a woman' label (against 'written by a man') multiplies the odds of citing a document by "
                          f"{e.odds_ratio:.2f} [{e.ci_low:.2f}, {e.ci_high:.2f}] ({p}), "
                          "holding relevance and position fixed")
    # Without a reference the alphabetically first label is it.
    assert fit_choice_model(f).label_reference == "a man"


def test_no_informative_answer_and_nothing_left_are_user_errors(simulated):
    f = simulated[simulated["condition"] == "base"]
    with pytest.raises(UserError, match="no answer can inform the choice model") as info:
        fit_choice_model(f.assign(cited=False))
    assert "\n" not in str(info.value)
    constant = f.assign(relevant=False, position_group="first", position=1, label=None, repeated=False)
    with pytest.raises(UserError, match="nothing left to estimate") as info:
        fit_choice_model(constant)
    assert "\n" not in str(info.value)


def test_unknown_interactions_codings_references_and_columns_are_one_line_user_errors(simulated):
    with pytest.raises(UserError) as info:
        fit_choice_model(simulated, interactions=["label:colour"])
    message = str(info.value)
    assert "'label:colour'" in message and "relevant:label" in message and "label:repeated" in message
    assert "\n" not in message
    for bad in ("label:label", "relevant", "relevant:position:label"):
        with pytest.raises(UserError, match="unknown interaction"):
            fit_choice_model(simulated, interactions=[bad])
    with pytest.raises(UserError, match="position must be one of group, number"):
        fit_choice_model(simulated, position="rank")
    with pytest.raises(UserError, match="label reference 'C' is not a label"):
        fit_choice_model(simulated, label_reference="C")
    with pytest.raises(UserError, match="lacks the column"):
        fit_choice_model(simulated.drop(columns=["repeated"]))


def _answers(condition: str, silent: list[bool]) -> pd.DataFrame:
    rows = []
    for i, quiet in enumerate(silent):
        for pos in (1, 2):
            rows.append({"answer": f"{condition}/q{i}", "item": f"q{i}", "condition": condition,
                         "cited": (not quiet) and pos == 1})
    return pd.DataFrame(rows)


def test_suppression_rates_equal_statsmodels_and_scipy():
    rng = np.random.default_rng(3)
    base, cf = rng.random(80) < 0.15, rng.random(80) < 0.30
    frame = pd.concat([_answers("base", list(base)), _answers("cf", list(cf))], ignore_index=True)
    s = suppression_rates(frame)
    assert [r.condition for r in s.rates] == ["base", "cf"]
    for r, silent in zip(s.rates, (base, cf), strict=True):
        low, high = proportion_confint(int(silent.sum()), 80, alpha=0.05, method="wilson")
        assert (r.answers, r.silent, r.rate) == (80, int(silent.sum()), silent.mean())
        assert (r.ci_low, r.ci_high) == pytest.approx((low, high), rel=1e-12)
    table = [[base.sum(), 80 - base.sum()], [cf.sum(), 80 - cf.sum()]]
    expected = chi2_contingency(table)
    assert (s.chi2, s.chi2_df, s.chi2_p) == pytest.approx((expected.statistic, expected.dof, expected.pvalue))
    b, c = int((base & ~cf).sum()), int((~base & cf).sum())
    assert (s.mcnemar_pairs, s.mcnemar_b, s.mcnemar_c) == (80, b, c)
    assert s.mcnemar_p == pytest.approx(binomtest(b, b + c, 0.5).pvalue, rel=1e-12)


def test_suppression_across_three_conditions_and_the_tests_it_cannot_run():
    rng = np.random.default_rng(4)
    groups = [rng.random(50) < p for p in (0.1, 0.2, 0.4)]
    frame = pd.concat([_answers(n, list(g)) for n, g in zip(("vanilla", "base", "cf"), groups, strict=True)])
    s = suppression_rates(frame)
    expected = chi2_contingency([[g.sum(), 50 - g.sum()] for g in groups])
    assert (s.chi2, s.chi2_df, s.chi2_p) == pytest.approx((expected.statistic, 2, expected.pvalue))
    assert s.mcnemar_p is None  # McNemar is for exactly two conditions
    none_silent = suppression_rates(_answers("base", [False] * 5))
    assert none_silent.rates[0].rate == 0.0 and none_silent.chi2 is None and none_silent.notes
    unpaired = suppression_rates(pd.concat([_answers("base", [True, False]), _answers("cf", [False, False])])
                                 .drop(columns=["item"]))
    assert unpaired.mcnemar_p is None and any("no item column" in n for n in unpaired.notes)


def _columns(f: pd.DataFrame) -> dict[str, np.ndarray]:
    return {"relevant": f["relevant"].to_numpy(float), "position[middle]": (f["position_group"] == "middle").to_numpy(float),
            "position[last]": (f["position_group"] == "last").to_numpy(float), "label[A]": (f["label"] == "A").to_numpy(float)}


def _ten_shown(seed: int = 0) -> pd.DataFrame:
    """30 items x base/cf, 10 documents each, every answer citing one: statsmodels' Newton from
    zero (no step control) ends in NaN on this well-posed study; its BFGS fits it."""
    settings = SimulationSettings(n_items=30, n_shown=10, relevant_counts=(1,))
    truth = ChoiceTruth(relevant=math.log(4), label=math.log(2), nothing=-20)
    return simulate_choices(settings, truth, np.random.default_rng(seed)).frame


def test_a_study_that_newton_without_step_control_cannot_fit_is_fitted():
    f = _ten_shown()
    columns = _columns(f)
    assert np.isnan(_direct(f, columns).params).all()  # statsmodels' Newton from zero: what the old fit gave
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ConditionalLogit(f["cited"].to_numpy(float), np.column_stack(list(columns.values())),
                                 groups=f["answer"].to_numpy())
        bfgs = model.fit(method="bfgs", maxiter=2000, gtol=1e-10, disp=False)
        # BFGS stops on a flat ridge 1e-3 short; statsmodels' Newton from its estimate polishes it.
        polished = model.fit(method="newton", start_params=bfgs.params, maxiter=100, disp=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no warning reaches the user
        fit = fit_choice_model(f, label_reference="B")
    assert fit.converged and not fit.separated and [e.term for e in fit.effects] == list(columns)
    assert np.isfinite(bfgs.params).all() and fit.log_likelihood >= bfgs.llf - 1e-12
    _same(fit, polished, list(columns))


def test_a_level_that_separates_is_named_and_the_rest_is_the_limit_fit():
    f = _ten_shown(1)
    # Leave out the answers that cite a document shown last: no answer cites one when it could
    # cite another, so position[last]'s odds ratio is 0 (the likelihood rises as it falls).
    last = f[f["cited"] & (f["position_group"] == "last")]["answer"]
    f = f[~f["answer"].isin(set(last))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit = fit_choice_model(f, label_reference="B")
    reasons = dict(fit.separated)
    assert list(reasons) == ["position[last]"]
    assert "position[last]" in reasons["position[last]"] and "odds ratio is 0" in reasons["position[last]"]
    assert f"decides {f['answer'].nunique():,} answers" in reasons["position[last]"]
    # The limit of the maximum likelihood fit: the other effects among the documents an answer
    # could still cite, i.e. statsmodels on the frame without the documents shown last.
    rest = f[f["position_group"] != "last"]
    columns = _columns(rest)
    del columns["position[last]"]
    result = _direct(rest, columns)
    _same(fit, result, ["relevant", "position[middle]", "label[A]"])
    assert fit.converged


def test_relevance_that_separates_is_named_and_position_and_label_are_fitted_among_relevant_documents(simulated):
    f = simulated[(simulated["condition"] != "vanilla") & (simulated["item"].str[1:].astype(int) < 80)]
    # Every citing answer cites a relevant document: relevance separates cited from uncited ones.
    separated = f.assign(cited=f["cited"] & f["relevant"])
    silent = f.assign(cited=False).assign(answer=lambda d: "silent/" + d["answer"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit = fit_choice_model(pd.concat([separated, silent], ignore_index=True), label_reference="B")
    reasons = dict(fit.separated)
    assert list(reasons) == ["relevant", "label[A]", "repeated"]
    assert "cites no document without it while leaving one with it uncited: its odds ratio is infinite" in reasons["relevant"]
    # Among relevant documents alone the label is constant (A in base, B in cf), and only
    # non-relevant documents are repeated: neither can be told once relevance decides.
    assert "not estimable once the separated choices are ruled out" in reasons["label[A]"]
    assert "not estimable once" in reasons["repeated"]
    # Position is fitted where two relevant documents compete: statsmodels on the relevant rows.
    rest = separated[separated["relevant"]]
    columns = _columns(rest)
    result = _direct(rest, {k: columns[k] for k in ("position[middle]", "position[last]")})
    _same(fit, result, ["position[middle]", "position[last]"])


def test_a_combination_that_separates_is_named_with_its_terms(simulated):
    f = simulated[simulated["condition"].isin(["base", "cf"])]
    # In base answers every citation is of a relevant document (label A and relevant together);
    # cf answers are as drawn: only relevance + label separates, neither alone.
    base = f[f["condition"] == "base"]
    cites_relevant = base.groupby("answer").apply(lambda g: bool((g["cited"] & g["relevant"]).any()) or not g["cited"].any())
    keep = set(cites_relevant[cites_relevant].index) | set(f.loc[f["condition"] == "cf", "answer"])
    fit = fit_choice_model(f[f["answer"].isin(keep)], label_reference="B")
    reasons = dict(fit.separated)
    assert set(reasons) == {"relevant", "label[A]"}
    assert "the combination" in reasons["relevant"] and "'relevant'" in reasons["relevant"] and "'label[A]'" in reasons["relevant"]
    assert {e.term for e in fit.effects} == {"position[middle]", "position[last]", "repeated"}


def test_answers_citing_several_documents_are_k_of_n_strata_as_statsmodels_fits_them():
    settings = SimulationSettings(n_items=80, cites="top", n_cited=(0.4, 0.4, 0.2))
    f = simulate_choices(settings, ChoiceTruth(), np.random.default_rng(5)).frame
    fit = fit_choice_model(f, label_reference="B")
    _same(fit, _direct(f, _columns(f)), list(_columns(f)))
    k = f[f["answer"].isin(f.groupby("answer")["cited"].sum().loc[lambda s: (s > 0) & (s < 5)].index)]
    counts = k.groupby("answer")["cited"].sum().value_counts().sort_index()
    assert fit.cited_counts == tuple((int(a), int(b)) for a, b in counts.items())
    assert fit.n_multi == int(counts[counts.index >= 2].sum()) > 0


def test_the_cluster_robust_interval_is_the_sandwich_of_statsmodels_scores_by_item(simulated):
    f = simulated[simulated["condition"] != "vanilla"]
    fit = fit_choice_model(f, label_reference="B")
    per_answer = f.groupby("answer")["cited"].agg(["sum", "size"])
    informative = per_answer[(per_answer["sum"] > 0) & (per_answer["sum"] < per_answer["size"])].index
    assert (fit.cluster, fit.n_clusters) == ("item", f.loc[f["answer"].isin(informative), "item"].nunique())
    columns = _columns(f) | {"repeated": f["repeated"].to_numpy(float)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # statsmodels drops the uninformative answers, and says so
        model = ConditionalLogit(f["cited"].to_numpy(float), np.column_stack(list(columns.values())),
                                 groups=f["answer"].to_numpy())
    b = np.array([e.coef for e in fit.effects])
    bread = np.linalg.inv(-model.hessian(b))
    item_of = dict(zip(f["answer"], f["item"], strict=True))
    per_item: dict[str, np.ndarray] = {}
    # statsmodels keeps the informative answers in their order of first appearance
    names = [a for a in dict.fromkeys(f["answer"]) if a in set(informative)]
    assert len(names) == model._n_groups
    for g, name in enumerate(names):
        per_item[item_of[name]] = per_item.get(item_of[name], 0) + model.score_grp(g, b)
    scores = np.array(list(per_item.values()))
    g = len(per_item)
    sandwich = bread @ (scores.T @ scores * g / (g - 1)) @ bread
    for j, e in enumerate(fit.effects):
        assert e.robust_se == pytest.approx(math.sqrt(sandwich[j, j]), rel=1e-5)
        q = t_dist.ppf(0.975, e.robust_df)  # Student's t on the clusters the variance rests on
        assert e.robust_ci_low == pytest.approx(math.exp(e.coef - q * e.robust_se), rel=1e-12)
    # Without an item column each answer is its own cluster.
    assert fit_choice_model(f.drop(columns=["item"]), label_reference="B").cluster == "answer"


def test_the_robust_interval_reads_t_with_the_clusters_its_variance_rests_on():
    # Most items' base and cf answers coincide: such an item adds nothing to the label's score, so
    # the label's robust variance rests on the few items that differ, and the normal quantile
    # would be too narrow there. The degrees of freedom: (sum a_g^2)^2 / sum a_g^4 - 1 over the
    # items' influences a_g (statsmodels' per-answer scores summed by item, through its Hessian).
    from scipy.stats import t

    rng = np.random.default_rng(4)
    f = simulate_choices(SimulationSettings(n_items=120), ChoiceTruth(label=0.0), rng).frame
    base, cf = (f.index[f["condition"] == m].to_numpy() for m in ("base", "cf"))
    same = np.repeat(rng.random(120) < 0.8, 5)  # five rows per item, items in the same order in both modes
    cited = f["cited"].to_numpy().copy()
    cited[cf[same]] = cited[base[same]]
    f = f.assign(cited=cited)
    fit = fit_choice_model(f, label_reference="B")
    columns = _columns(f)  # nothing is repeated here
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ConditionalLogit(f["cited"].to_numpy(float), np.column_stack(list(columns.values())),
                                 groups=f["answer"].to_numpy())
    assert [e.term for e in fit.effects] == list(columns)
    b = np.array([e.coef for e in fit.effects])
    bread = np.linalg.inv(-model.hessian(b))
    per_answer = f.groupby("answer", sort=False)["cited"].agg(["sum", "size"])
    names = [a for a in per_answer.index if 0 < per_answer.loc[a, "sum"] < per_answer.loc[a, "size"]]
    item_of = dict(zip(f["answer"], f["item"], strict=True))
    per_item: dict[str, np.ndarray] = {}
    for g, name in enumerate(names):
        per_item[item_of[name]] = per_item.get(item_of[name], 0) + model.score_grp(g, b)
    influence = (np.array(list(per_item.values())) @ bread) ** 2
    label = fit.effect("label[A]")
    j = [e.term for e in fit.effects].index("label[A]")
    clusters = influence[:, j].sum() ** 2 / (influence[:, j] ** 2).sum()  # influence holds a_g^2
    assert label.robust_df == pytest.approx(max(clusters - 1, 1.0), rel=1e-4)
    assert label.robust_df < 0.25 * fit.n_clusters  # the few items that differ, not all of them
    q = t.ppf(0.975, label.robust_df)
    assert label.robust_ci_low == pytest.approx(math.exp(label.coef - q * label.robust_se), rel=1e-9)
    assert label.robust_p == pytest.approx(2 * t.sf(abs(label.coef / label.robust_se), label.robust_df), rel=1e-9)
    # Relevance's score does not cancel in a coinciding item: nearly every item carries it.
    assert fit.effect("relevant").robust_df > 0.5 * fit.n_clusters
    # why-cited says, below its table, how few items the interval rests on.
    from engine.usecases.bias.why_cited import few_clusters_notes

    (note,) = few_clusters_notes(fit)
    assert note.startswith(f"robust interval of label[A]: rests on about {label.robust_df + 1:,.0f} of the "
                           f"{fit.n_clusters:,} items (Student's t with {label.robust_df:,.1f} df)")


def test_a_separation_states_the_level_and_the_answers_it_holds_in():
    # A separation holds in the answers whose documents differ in the term, not in every answer,
    # and one found after another holds among the documents still possible: both are said.
    f = simulate_choices(SimulationSettings(n_items=200, repeat_share=0.5), ChoiceTruth(), np.random.default_rng(3)).frame
    f = f[~f["answer"].isin(set(f.loc[f["cited"] & f["repeated"], "answer"]))]
    fit = fit_choice_model(f, label_reference="B")
    informative = f.groupby("answer").filter(lambda g: 0 < g["cited"].sum() < len(g))
    varies = informative.groupby("answer")["repeated"].nunique().gt(1).sum()
    assert 0 < varies < fit.n_informative
    assert dict(fit.separated)["repeated"].startswith(
        f"'repeated', being shown twice (each copy): in each of {varies:,} of the {fit.n_informative:,} informative answers "
        "(those whose documents differ in it), the answer cites no document with it while leaving one without it "
        "uncited: its odds ratio is 0")
    # Relevance separates first; among the relevant documents left, no answer cites the one shown last.
    s = f.assign(cited=f["cited"] & f["relevant"])
    s = s[~s["answer"].isin(set(s.loc[s["cited"] & (s["position_group"] == "last"), "answer"]))]
    reasons = dict(fit_choice_model(s, label_reference="B").separated)
    assert "once the separation above" not in reasons["relevant"]
    assert "(those whose documents differ in it among the ones it could still cite once the separation above is " \
           "ruled out)" in reasons["position[last]"]
    assert reasons["position[last]"].startswith("'position[last]', being shown last (against first): in each of ")


def test_a_separation_deciding_one_answer_says_one_answer():
    from types import SimpleNamespace

    from engine.statistics.choice_model import separation_reason

    one = SimpleNamespace(columns=[0], signs=[1], strata_determined=1)
    many = SimpleNamespace(columns=[0], signs=[1], strata_determined=1200)
    assert separation_reason(["position"], one, 1).endswith("(separation; it decides 1 answer)")
    assert separation_reason(["position"], many, 1500).endswith("(separation; it decides 1,200 answers)")


def test_base_and_cf_answers_that_coincide_give_no_robust_interval_from_round_off():
    """Each item's base and cf answers cite the same document while the labels swap: the label's
    odds ratio is 1 and every item's score on it cancels, so the sandwich is 0 up to round-off.
    A robust interval [1.00, 1.00] with a p from round-off would read as certainty."""
    from engine.statistics.choice_model import NO_ROBUST_SPREAD

    rng = np.random.default_rng(5)
    rows = []
    for item in range(40):
        relevant_at = int(rng.integers(1, 4))
        cited_at = relevant_at if rng.random() < 0.7 else int(rng.choice([p for p in (1, 2, 3) if p != relevant_at]))
        for mode, on_relevant, on_other in (("base", "a woman", "a man"), ("cf", "a man", "a woman")):
            for pos in (1, 2, 3):
                rows.append({"answer": f"{mode}{item}", "item": f"q{item}", "cited": pos == cited_at,
                             "relevant": pos == relevant_at, "position": pos, "n_shown": 3,
                             "position_group": ("first", "middle", "last")[pos - 1],
                             "label": on_relevant if pos == relevant_at else on_other, "repeated": False})
    fit = fit_choice_model(pd.DataFrame(rows))
    (label,) = [e for e in fit.effects if e.term.startswith("label")]
    assert label.odds_ratio == pytest.approx(1.0, abs=1e-6)
    assert label.robust_undefined == NO_ROBUST_SPREAD
    assert math.isnan(label.robust_ci_low) and math.isnan(label.robust_p)
    assert not math.isnan(label.p)  # the model-based interval stands: the answers still inform it
    relevant = next(e for e in fit.effects if e.term.startswith("relevant"))
    assert relevant.robust_undefined == "" and not math.isnan(relevant.robust_p)
