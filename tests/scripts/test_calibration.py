"""scripts/calibration.py at a reduced size: the verdicts `bias` and `compare` print keep their
size (at most 5%, within sampling error) on simulated answers where the truth is known, and the
script's table cannot rot (the full table is in docs/figures.md)."""

from __future__ import annotations

import math

import pytest

from tests.support.helpers import load_script


@pytest.fixture(scope="module")
def calibration():
    return load_script("calibration")


def _ceiling(share: float, draws: int) -> float:
    """A share's nominal value plus three binomial SDs: a real excess fails, chance does not."""
    return share + 3 * math.sqrt(share * (1 - share) / draws)


def test_the_simulated_answers_have_the_shape_the_docs_state(calibration):
    import numpy as np

    runs = calibration.simulate(np.random.default_rng(0), 20_000, (0.0, 0.0))
    assert runs.precision.shape == (2, 20_000)
    same = np.mean(runs.precision[0] == runs.precision[1])
    assert 0.7 < same < 0.9  # 70% shared answers, and some independent ones agree by chance
    assert abs(1 - runs.cites[0].mean() - calibration.SILENT) < 0.01
    # Under the null the two runs are exchangeable: no mean difference.
    assert abs((runs.precision[0] - runs.precision[1]).mean()) < 0.01


def test_bias_verdicts_keep_their_size_at_30_items(calibration):
    draws = 150
    row = calibration.bias_calibration(30, draws, 0.0, seed=5)
    rows = 2 * draws  # precision and recall
    assert row.undefined == 0
    assert row.favours <= _ceiling(0.05, rows), row
    assert row.cas_signed <= _ceiling(0.05, rows), row
    # The interval is marked approximate below 300 items because it undercovers here.
    assert row.cab_cover < 0.95


def test_compare_verdicts_keep_their_size_and_equivalence_is_not_claimed_at_the_true_difference(calibration):
    draws = 60
    for row in calibration.compare_calibration(30, draws, 0.1, seed=7):
        assert row.different <= _ceiling(0.05, draws), row
        # TOST's null holds exactly at the margin: "equivalent" at most 5% of the time.
        assert row.equivalent_at_margin <= _ceiling(0.05, draws), row


def test_cas_is_not_claimed_above_its_rerun_floor_when_only_the_engine_is_noisy(calibration):
    draws = 60
    null = calibration.FloorScenario("no label effect")
    moved = calibration.FloorScenario("base keeps 30%", base_keep=0.3)
    for reruns in (1, 2):
        row = calibration.floor_calibration(100, draws, (null, moved), seed=9, reruns=reruns)
        assert row.undefined == 0
        assert row.above[0] <= _ceiling(0.05, 2 * draws), row
        # The test has power where the labels change more answers than a rerun does.
        assert row.above[1] >= 0.4, row


def test_the_floor_simulation_keeps_each_runs_answer_apart(calibration):
    import numpy as np

    runs = calibration.simulate(np.random.default_rng(1), 50_000, (0.0, 0.0, 0.0), (0.7, 0.7, 0.7))
    v, b, again = runs.precision
    # Apart: each run keeps the shared answer on its own draw, so base often differs where the rerun agrees.
    assert np.mean((v == again) & (v != b)) > 0.1  # 0.06 with one mask for all runs
    # Exchangeable: base and the rerun sit as far from vanilla on average.
    assert abs(np.abs(v - b).mean() - np.abs(v - again).mean()) < 0.01


def test_why_cited_where_most_answers_coincide_keeps_its_size_and_its_scenarios_their_shape(calibration):
    import numpy as np

    from engine.statistics.choice_simulation import ChoiceTruth, SimulationSettings, simulate_choices

    frame = simulate_choices(SimulationSettings(n_items=100), ChoiceTruth(label=0.0), np.random.default_rng(2)).frame
    for made, differing in ((calibration.coincide(frame, 0.9, np.random.default_rng(3)), None),
                            (calibration.differ_in(frame, 4, np.random.default_rng(3)), 4)):
        pair = made.pivot_table(index=["item", "position"], columns="condition", values="cited", aggfunc="first")
        differ = int((pair["base"] != pair["cf"]).groupby(level="item").any().sum())
        assert differ == differing if differing is not None else 3 <= differ <= 20
        # Each answer cites what a drawn answer could: one document or none.
        assert made.groupby("answer")["cited"].sum().max() == 1
    # Four items alone carry the label's score: the normal quantile rejected 10% of 200 draws here
    # (docs/method.md, the robust interval); Student's t on the clusters the variance rests on does not.
    draws = 30
    row = calibration.identical_calibration(80, draws, 1.0, seed=5, differ=4)
    assert row.differing == 4 and row.no_robust == 0
    assert row.robust <= _ceiling(0.05, draws), row
