"""The simulator draws what it claims, and the choice model recovers its truth: estimates near the
true effects at a large n, and 95% intervals that cover them about 95% of the time. Also the power
script at a tiny size, so that it cannot rot."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.statistics.choice_model import fit_choice_model
from engine.statistics.choice_simulation import ChoiceTruth, SimulationSettings, choice_coverage, simulate_choices
from tests.support.helpers import load_script

ROOT = Path(__file__).resolve().parents[3]


def test_the_frame_follows_the_decisions_contract_and_the_papers_labels():
    settings = SimulationSettings(n_items=60, modes=("vanilla", "base", "cf"), repeat_share=0.5)
    sim = simulate_choices(settings, ChoiceTruth(), np.random.default_rng(1))
    f = sim.frame
    assert list(f.columns) == ["answer", "item", "cited", "relevant", "position", "n_shown", "position_group",
                               "label", "repeated", "condition"]
    for answer, g in f.groupby("answer"):
        mode = answer.split("/")[0]
        assert sorted(g["position"]) == list(range(1, len(g) + 1)) and (g["n_shown"] == len(g)).all()
        groups = np.where(g["position"] == 1, "first", np.where(g["position"] == len(g), "last", "middle"))
        assert list(g["position_group"]) == list(groups)
        assert g["cited"].sum() <= 1 and 1 <= g["relevant"].sum() <= 2 and (g["condition"] == mode).all()
        expected = {"vanilla": [None] * len(g), "base": list(np.where(g["relevant"], "A", "B")),
                    "cf": list(np.where(g["relevant"], "B", "A"))}[mode]
        assert list(g["label"]) == expected
        copies = g[g["repeated"]]
        assert len(copies) in (0, 2) and not copies["relevant"].any() and copies["label"].nunique() <= 1
    # The modes differ only in labels: same documents in the same order.
    by_mode = {m: g.sort_values(["item", "position"]) for m, g in f.groupby("condition")}
    for m in ("base", "cf"):
        for col in ("item", "relevant", "position", "repeated"):
            assert list(by_mode[m][col]) == list(by_mode["vanilla"][col])
    assert 0 < f.groupby("answer")["repeated"].any().mean() < 1
    again = simulate_choices(settings, ChoiceTruth(), np.random.default_rng(1))
    pd.testing.assert_frame_equal(again.frame, f)
    pd.testing.assert_frame_equal(again.relevant_mass, sim.relevant_mass)


def test_the_relevant_mass_is_the_true_logit_probability_on_relevant_documents():
    truth = ChoiceTruth(relevant=1.0, label=0.5, middle=0.0, last=0.0)
    sim = simulate_choices(SimulationSettings(n_items=30, n_shown=4), truth, np.random.default_rng(2))
    n_rel = sim.frame[sim.frame["condition"] == "base"].groupby("item")["relevant"].sum()
    for row in sim.relevant_mass.itertuples():
        r = n_rel[row.item]
        # base: relevant documents carry A (utility 1 + 0.5); cf: the others carry A (utility 0.5)
        on, off = (1.5, 0.0) if row.mode == "base" else (1.0, 0.5)
        assert row.mass == pytest.approx(r * math.exp(on) / (r * math.exp(on) + (4 - r) * math.exp(off)), rel=1e-12)
    silent = 1 - sim.frame.groupby("answer")["cited"].any().mean()
    assert 0.05 < silent < 0.35  # the outside option makes a realistic suppression rate


def test_the_choice_model_recovers_the_true_effects_at_a_large_n():
    truth = ChoiceTruth(repeated=math.log(1.5))
    settings = SimulationSettings(n_items=1500, repeat_share=0.5)
    fit = fit_choice_model(simulate_choices(settings, truth, np.random.default_rng(11)).frame, label_reference="B")
    expected = {"relevant": truth.relevant, "position[middle]": truth.middle, "position[last]": truth.last,
                "label[A]": truth.label, "repeated": truth.repeated}
    assert [e.term for e in fit.effects] == list(expected) and fit.converged and not fit.dropped
    for e in fit.effects:
        assert e.se < 0.1
        assert abs(e.coef - expected[e.term]) < 3.5 * e.se, e


@pytest.mark.slow  # 200 fits: about 25 s of CPU
def test_the_95_percent_intervals_cover_the_truth_about_95_percent_of_the_time():
    # 200 draws: the binomial SD of a 95% coverage is 0.0154, so [0.90, 0.985] is about -3.2 SD to
    # +2.3 SD; a Wald interval that is too narrow (or too wide) by a third falls outside it.
    truth = ChoiceTruth()
    settings = SimulationSettings(n_items=80)
    expected = {"relevant": truth.relevant, "position[middle]": truth.middle, "position[last]": truth.last,
                "label[A]": truth.label}
    rng = np.random.default_rng(19)
    covered = {t: 0 for t in expected}
    draws = 200
    for _ in range(draws):
        fit = fit_choice_model(simulate_choices(settings, truth, rng).frame, label_reference="B")
        for e in fit.effects:
            covered[e.term] += e.ci_low <= math.exp(expected[e.term]) <= e.ci_high
    for term, hits in covered.items():
        assert 0.90 <= hits / draws <= 0.985, (term, hits / draws)


def test_the_power_script_runs_at_a_tiny_size(capsys):
    module = load_script("power_table")
    assert module.main(["--items", "40", "--odds-ratios", "1.5", "--draws", "2", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "| items | true label OR | binary CAB | choice model | propensity CAB |" in out
    assert "| 40 | 1.5 |" in out and "share of 2 draws" in out and "seed 3" in out


def test_answers_citing_their_top_documents_or_each_on_its_own():
    top = SimulationSettings(n_items=200, cites="top", n_cited=(0.0, 0.5, 0.5), modes=("vanilla",))
    f = simulate_choices(top, ChoiceTruth(relevant=0.0, middle=0.0, last=0.0), np.random.default_rng(4)).frame
    counts = f.groupby("answer")["cited"].sum()
    assert set(counts) <= {0, 2, 3} and (counts == 2).mean() == pytest.approx((counts == 3).mean(), abs=0.15)
    # The top document by utility is always among the cited ones: with a huge relevance effect
    # every citing answer cites its relevant document.
    strong = simulate_choices(SimulationSettings(n_items=100, relevant_counts=(1,), cites="top", n_cited=(0.3, 0.7)),
                              ChoiceTruth(relevant=20.0), np.random.default_rng(5)).frame
    citing = strong[strong.groupby("answer")["cited"].transform("any")]
    assert citing[citing["relevant"]]["cited"].all()
    independent = simulate_choices(SimulationSettings(n_items=300, cites="independent", modes=("vanilla",)),
                                   ChoiceTruth(relevant=0.0, middle=0.0, last=0.0, nothing=0.0),
                                   np.random.default_rng(6)).frame
    assert independent["cited"].mean() == pytest.approx(0.5, abs=0.03)  # each document on its own at 1/2
    with pytest.raises(ValueError, match="cites must be"):
        SimulationSettings(cites="all")
    with pytest.raises(ValueError, match="n_cited"):
        SimulationSettings(n_cited=(0.5, 0.6))


@pytest.mark.slow  # 80 fits: about 6 s of CPU
def test_several_citations_per_answer_bias_and_coverage_measured():
    # Measured (scripts/choice_coverage.py, docs/method.md): where each document is cited on its
    # own the k-of-n conditional logit is exact; where the model picks its top two it is not, and
    # the relevance odds ratio is inflated, its interval covering the truth far less than 95%.
    truth = ChoiceTruth(label=math.log(1.5), nothing=1.5)
    exact = {c.term: c for c in choice_coverage(SimulationSettings(n_items=100, cites="independent"), truth, 40, 3)}
    assert abs(math.log(exact["relevant"].median_odds_ratio / 4.0)) < 0.1 and exact["relevant"].coverage >= 0.85
    top = {c.term: c for c in choice_coverage(SimulationSettings(n_items=100, cites="top", n_cited=(0.18, 0.82)),
                                              ChoiceTruth(label=math.log(1.5)), 40, 3)}
    assert top["relevant"].median_odds_ratio > 4.5 and top["relevant"].coverage < 0.85
    assert top["label[A]"].median_odds_ratio > 1.5


@pytest.mark.slow  # 40 fits: about 3 s of CPU
def test_documents_of_unequal_quality_attenuate_relevance_and_the_robust_interval_is_reported():
    truth = ChoiceTruth(label=math.log(1.5), quality_sd=1.0, relevance_sd=0.5, label_sd=0.5)
    rows = {c.term: c for c in choice_coverage(SimulationSettings(n_items=100), truth, 40, 7)}
    assert rows["relevant"].median_odds_ratio < 3.6  # attenuated from 4 (docs/method.md)
    assert all(0 <= c.robust_coverage <= 1 and c.missing == 0 for c in rows.values())
