"""The citation choice model against statsmodels run directly, a hand-checked case, its dropping
rules, and the suppression rates against statsmodels and scipy."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest, chi2_contingency
from statsmodels.discrete.conditional_models import ConditionalLogit
from statsmodels.stats.proportion import proportion_confint

from engine.choice_model import NO_LABEL, fit_choice_model, suppression_rates
from engine.choice_simulation import ChoiceTruth, SimulationSettings, simulate_choices
from engine.errors import UserError


def _direct(frame: pd.DataFrame, columns: dict[str, np.ndarray]):
    """statsmodels on the whole frame, as a user would call it (it drops the silent answers itself)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = np.column_stack(list(columns.values()))
        return ConditionalLogit(frame["cited"].to_numpy(dtype=float), x,
                                groups=frame["answer"].to_numpy()).fit(method="newton", maxiter=100, disp=False)


def _same(fit, result, names):
    assert [e.term for e in fit.effects] == names
    ci = np.asarray(result.conf_int(alpha=0.05))
    for j, e in enumerate(fit.effects):
        assert e.coef == pytest.approx(result.params[j], rel=1e-8)
        assert e.se == pytest.approx(result.bse[j], rel=1e-8)
        # log p: a p of 1e-28 moves by 100 times the relative change of its z statistic
        assert math.log(e.p) == pytest.approx(math.log(result.pvalues[j]), rel=1e-8)
        assert e.odds_ratio == pytest.approx(math.exp(result.params[j]), rel=1e-8)
        assert (e.ci_low, e.ci_high) == pytest.approx((math.exp(ci[j, 0]), math.exp(ci[j, 1])), rel=1e-8)
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
    for r, silent in zip(s.rates, (base, cf)):
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
    frame = pd.concat([_answers(n, list(g)) for n, g in zip(("vanilla", "base", "cf"), groups)])
    s = suppression_rates(frame)
    expected = chi2_contingency([[g.sum(), 50 - g.sum()] for g in groups])
    assert (s.chi2, s.chi2_df, s.chi2_p) == pytest.approx((expected.statistic, 2, expected.pvalue))
    assert s.mcnemar_p is None  # McNemar is for exactly two conditions
    none_silent = suppression_rates(_answers("base", [False] * 5))
    assert none_silent.rates[0].rate == 0.0 and none_silent.chi2 is None and none_silent.notes
    unpaired = suppression_rates(pd.concat([_answers("base", [True, False]), _answers("cf", [False, False])])
                                 .drop(columns=["item"]))
    assert unpaired.mcnemar_p is None and any("no item column" in n for n in unpaired.notes)


def test_no_warning_reaches_the_user_and_a_separated_fit_says_it_did_not_converge(simulated):
    f = simulated[(simulated["condition"] != "vanilla") & (simulated["item"].str[1:].astype(int) < 40)]
    # Every citing answer cites a relevant document: relevance separates cited from uncited ones.
    separated = f.assign(cited=f["cited"] & f["relevant"])
    silent = f.assign(cited=False).assign(answer=lambda d: "silent/" + d["answer"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit = fit_choice_model(pd.concat([separated, silent], ignore_index=True), label_reference="B")
    assert not fit.converged and fit.effect("relevant").odds_ratio > 1e3
