"""scripts/leaderboard_tiers.py: simulated boards through the leaderboard's tiers, at a small size.
The simulation draws what it says (each model's per-item bias averages its true CAB), its counts
are the tiers' own, and its report names the test."""

from __future__ import annotations

import re

import numpy as np
import pytest

from engine.statistics.tiers import TIERS_TEST, tiers
from tests.support.helpers import load_script


def test_each_model_draws_its_true_cab_from_plus_minus_100_and_0():
    script = load_script("leaderboard_tiers")
    board = script.per_item(np.random.default_rng(3), [0.0, 10.0, -20.0], 200_000, 0.2)
    for model, true_cab in zip(("m0", "m1", "m2"), (0.0, 10.0, -20.0), strict=True):
        values = np.array(list(board[model].values()))
        assert set(np.unique(values)) <= {-100.0, 0.0, 100.0}
        # 200,000 items: the mean's standard error is about 0.2 points.
        assert values.mean() == pytest.approx(true_cab, abs=1.0)
        assert np.mean(values != 0) == pytest.approx(0.4, abs=0.01)  # flip both ways, 0.2 + 0.2


def test_the_counts_are_the_tiers_of_the_same_boards():
    script = load_script("leaderboard_tiers")
    settings = script.Settings(models=3, items=2000, boards=4, cab=5.0, gap=30.0, flip=0.4, seed=11)
    script.check(settings)  # true CABs 5, 35 and 65 points fit: 0.4 ± CAB/200 lie in [0, 1]
    outcome = script.simulate(settings)
    # Replay the same draws through engine.statistics.tiers directly.
    rng = np.random.default_rng(11)
    one_tier = shared = 0
    split = {30.0: [0, 0], 60.0: [0, 0]}
    for board in range(4):
        equal = script.per_item(rng, [5.0] * 3, 2000, 0.4)
        tier = tiers(equal, {m: float(np.mean(list(v.values()))) for m, v in equal.items()}, seed=11 + board).tier
        one_tier += len(set(tier.values())) == 1
        shared += sum(tier[a] == tier[b] for a, b in (("m0", "m1"), ("m0", "m2"), ("m1", "m2")))
        different = script.per_item(rng, [5.0, 35.0, 65.0], 2000, 0.4)
        tier = tiers(different, {m: float(np.mean(list(v.values()))) for m, v in different.items()}, seed=11 + board).tier
        for (a, b), diff in ((("m0", "m1"), 30.0), (("m1", "m2"), 30.0), (("m0", "m2"), 60.0)):
            split[diff][0] += tier[a] != tier[b]
            split[diff][1] += 1
    assert (outcome.equal_one_tier, outcome.equal_pairs_shared, outcome.equal_pairs) == (one_tier, shared, 12)
    assert outcome.split == {k: tuple(v) for k, v in split.items()}
    # 30 points apart on 2,000 items is some 10 standard errors: the tiers split every such pair.
    assert outcome.split[30.0] == (8, 8) and outcome.split[60.0] == (4, 4)


def test_the_report_names_the_test_and_every_count(capsys):
    script = load_script("leaderboard_tiers")
    assert script.main(["--models", "3", "--items", "2000", "--boards", "3", "--gap", "30", "--flip", "0.4",
                        "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert TIERS_TEST in out and "Holm" in out
    assert re.search(r"equal true CAB \(5 points each\): all 3 share one tier in \d of 3 boards \([\d.]+%\)", out)
    assert re.search(r"30 points \(about [\d.]+ standard errors\): 6 of 6 \(100.0%\)", out)
    assert re.search(r"60 points \(about [\d.]+ standard errors\): 3 of 3 \(100.0%\)", out)


@pytest.mark.parametrize(("args", "says"), [
    (["--models", "1"], "--models must be at least 2"),
    (["--cab", "50", "--flip", "0.1"], "does not fit --flip"),
    (["--gap", "0"], "--gap must be above 0"),
])
def test_bad_settings_are_one_line(args, says, capsys):
    assert load_script("leaderboard_tiers").main(args) == 2
    err = capsys.readouterr().err
    assert says in err and err.strip().count("\n") == 0
