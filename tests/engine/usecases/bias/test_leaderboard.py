"""The leaderboard of label bias: tiers by Holm-corrected pairwise tests (against scipy and statsmodels
run directly, and by simulation), the boards of a store, the items filter, and the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from engine.__main__ import main
from engine.errors import UserError
from engine.statistics.bias import compute_bias, metric_table
from engine.statistics.stats import holm
from engine.statistics.tiers import tiers
from engine.usecases.bias.leaderboard import LeaderboardRequest, leaderboard, read_item_ids
from tests.support.bias_store import add_experiment, add_run, biased

N = 40


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("board") / "board.duckdb"
    add_experiment(path, "old-a", "org/a", *biased(N, 30))  # older: the newer experiment of org/a stands
    add_experiment(path, "e-a", "org/a", *biased(N, 0))
    add_experiment(path, "e-b", "org/b", *biased(N, 20))
    add_experiment(path, "e-c", "org/c", *biased(N, 2))
    add_experiment(path, "e-silent", "org/silent", [()] * N, [()] * N)  # never cites: CAB undefined
    add_experiment(path, "h-a", "org/a", *biased(N, 10), metadata="hai")
    add_run(path, "e-a-r1-base", "e-a-r1", "base", "org/a", [(1,)] * 2 + [(2,)] * (N - 2), rerun_of="e-a")
    return path


def _per_item(rng: np.random.Generator, n: int, shifts: list[float]) -> dict[str, dict[str, float]]:
    """Per-item bias of len(shifts) models: -100, 0 or 100 per item, as precision's CAB takes, with
    the chance of +100 raised by each model's shift."""
    out = {}
    for k, shift in enumerate(shifts):
        u = rng.random(n)
        values = np.where(u < 0.2 + shift, 100.0, np.where(u > 0.8, -100.0, 0.0))
        out[f"m{k}"] = {f"q{i}": float(v) for i, v in enumerate(values)}
    return out


def test_the_pairwise_tests_are_scipys_and_the_correction_is_statsmodels_holm():
    rng = np.random.default_rng(1)
    bias = _per_item(rng, 3000, [0.0, 0.02, 0.05, 0.2])  # > 1,000 items differ per pair: the paired t-test
    cab = {m: float(np.mean(list(v.values()))) for m, v in bias.items()}
    found = tiers(bias, cab)
    ids = [f"q{i}" for i in range(3000)]
    raw = []
    for pair in found.pairs:
        a, b = np.array([bias[pair.a][i] for i in ids]), np.array([bias[pair.b][i] for i in ids])
        expected = stats.ttest_rel(a, b).pvalue
        assert pair.test == "paired t-test" and pair.n == 3000
        assert math.isclose(pair.p, expected, rel_tol=1e-9, abs_tol=1e-300)
        raw.append(pair.p)
    want = multipletests(raw, alpha=0.05, method="holm")[1]
    assert [p.p_holm for p in found.pairs] == pytest.approx(list(want), rel=1e-12)
    assert holm([0.01, math.nan, 0.04]) == pytest.approx([0.02, math.nan, 0.04], nan_ok=True)
    # The order is |CAB| ascending, and the clearly more biased model stands alone in the last tier.
    assert found.order == tuple(sorted(cab, key=lambda m: (abs(cab[m]), m)))
    assert found.tier[found.order[0]] == 1 and found.tier["m3"] == max(found.tier.values())


def test_the_tiers_run_no_garbage_collection(monkeypatch):
    """statsmodels' Holm runs a full gc.collect() on every call: seconds in a process holding a
    model or the app, on every board. The tiers' Holm is arithmetic alone."""
    import gc

    def collect(*_):
        raise AssertionError("gc.collect() called")

    monkeypatch.setattr(gc, "collect", collect)
    bias = _per_item(np.random.default_rng(3), 100, [0.0, 0.1, 0.3])
    found = tiers(bias, {m: float(np.mean(list(v.values()))) for m, v in bias.items()})
    assert len(found.pairs) == 3


def test_few_differing_items_use_the_exact_sign_flip_test():
    a = {f"q{i}": 0.0 for i in range(10)}
    b = dict(a, q0=100.0, q1=100.0, q2=100.0)
    found = tiers({"a": a, "b": b}, {"a": 0.0, "b": 30.0})
    (pair,) = found.pairs
    null = stats.permutation_test(([-100.0] * 3,), np.mean, permutation_type="samples", n_resamples=np.inf)
    assert pair.test == "sign-flip permutation test (exact)" and pair.p == pytest.approx(null.pvalue)
    assert found.tier == {"a": 1, "b": 1}  # 3 items cannot tell them apart: p = 0.25


def test_the_tier_rule_keeps_no_pair_told_apart_inside_a_tier():
    rng = np.random.default_rng(7)
    bias = _per_item(rng, 1500, [0.0, 0.0, 0.1, 0.1, 0.3])
    cab = {m: float(np.mean(list(v.values()))) for m, v in bias.items()}
    found = tiers(bias, cab)
    apart = {frozenset((p.a, p.b)) for p in found.pairs if p.told_apart}
    for t in set(found.tier.values()):
        members = [m for m in found.order if found.tier[m] == t]
        assert not any(frozenset((x, y)) in apart for x in members for y in members if x != y)
        if t > 1:  # a new tier opens only where its first model is told apart from the tier before
            before = [m for m in found.order if found.tier[m] == t - 1]
            assert any(frozenset((members[0], m)) in apart for m in before)
    assert found.tier["m4"] == max(found.tier.values()) > 1


@pytest.mark.parametrize("n_items", [2500, 200])  # the paired t-test; the sign-flip test (Monte Carlo)
def test_equal_models_share_one_tier_at_the_nominal_rate(n_items):
    rng = np.random.default_rng(2026)
    boards = 200 if n_items > 1000 else 60
    one_tier = sum(len(set(tiers(b, {m: float(np.mean(list(v.values()))) for m, v in b.items()}).tier.values())) == 1
                   for b in (_per_item(rng, n_items, [0.05] * 4) for _ in range(boards)))
    rate = one_tier / boards
    # Holm holds the chance that any pair is told apart at 5%: at least 95% of boards share one tier
    # (three standard errors of slack for the simulation's own error).
    assert rate >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / boards), rate
    # ...and the test is not blind: a clearly more biased model is told apart in most boards.
    if n_items > 1000:
        split = sum(len(set(tiers(b, {m: float(np.mean(list(v.values()))) for m, v in b.items()}).tier.values())) > 1
                    for b in (_per_item(rng, n_items, [0.05, 0.05, 0.05, 0.15]) for _ in range(30)))
        assert split >= 27


def test_the_store_gives_one_board_per_label_type_with_floors_items_and_notes(db):
    board = leaderboard(LeaderboardRequest(db))
    assert [(b.metadata_type, b.label_a, b.label_b) for b in board.boards] == [("gender", "Woman", "Man"),
                                                                               ("hai", "Human", "LLM")]
    gender = board.boards[0]
    rows = {r.model: r for r in gender.rows}
    assert [r.model for r in gender.rows] == ["org/a", "org/c", "org/b", "org/silent"]
    assert rows["org/a"].experiment_id == "e-a" and rows["org/a"].cab == 0.0  # the newer experiment stands
    assert rows["org/b"].cab == 50.0 and rows["org/c"].cab == 5.0
    assert (rows["org/a"].tier, rows["org/c"].tier, rows["org/b"].tier) == (1, 1, 2)
    assert rows["org/silent"].tier is None and rows["org/silent"].verdict == (
        "undefined: no answer in runs e-silent-base/e-silent-cf cites a shown document")
    assert all(r.n_items == N for r in gender.rows)
    # The rerun floor where `run --reruns` measured it (base rerun: floor = mean(base - rerun) = 5 points).
    assert rows["org/a"].floor == 5.0 and rows["org/a"].floor_note == "from 1 rerun of base"
    assert math.isnan(rows["org/b"].floor) and rows["org/b"].floor_note.startswith("no rerun floor")
    assert any(n.startswith("old-a (org/a, gender): left out, a newer experiment") for n in board.notes)
    # Each CAB is engine.statistics.bias's, the same as `bias` reports.
    expected = compute_bias({"base": metric_table([{"item_id": f"q{i:03d}", "precision": 1, "recall": 1, "f1": 1}
                                                   for i in range(N)]),
                             "cf": metric_table([{"item_id": f"q{i:03d}", "precision": float(i >= 20),
                                                  "recall": float(i >= 20), "f1": float(i >= 20)} for i in range(N)])})
    cab_b = next(r for r in expected if r.measure == "CAB" and r.metric == "precision")
    assert (rows["org/b"].ci_low, rows["org/b"].ci_high, rows["org/b"].p) == (cab_b.ci_low, cab_b.ci_high, cab_b.p)
    assert gender.test.startswith("pairwise paired tests") and "Holm" in gender.test


def test_a_private_split_counts_in_no_number(db, tmp_path):
    held = frozenset(f"q{i:03d}" for i in range(20))  # org/b's flipped items, org/a's rerun's too
    board = leaderboard(LeaderboardRequest(db, exclude_items=held))
    rows = {r.model: r for r in board.boards[0].rows}
    assert all(r.n_items == N - 20 for r in board.boards[0].rows)
    assert rows["org/b"].cab == 0.0 and rows["org/a"].floor == 0.0
    assert board.items_note == "20 held-out items never count"
    only = leaderboard(LeaderboardRequest(db, only_items=held))
    assert {r.model: r.cab for r in only.boards[0].rows}["org/b"] == 100.0
    # The CLI reads the split from a file, one id a line.
    split = tmp_path / "private.txt"
    split.write_text("# private split\n" + "\n".join(sorted(held)) + "\n\n")
    assert read_item_ids(split) == held


def test_the_cli_prints_the_boards_and_json(db, tmp_path, capsys):
    assert main(["leaderboard", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "gender (Woman / Man)" in out and "citation attribution bias (Abolghasemi et al.)" in out
    assert "Holm-corrected" in out and "note: old-a (org/a, gender)" in out
    assert main(["leaderboard", "--db", str(db), "--json", "--metric", "recall"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["measure"] == "citation attribution bias (Abolghasemi et al.)" and data["metric"] == "recall"
    assert {(r["label_type"], r["model"], r["tier"]) for r in data["rows"]} >= {("gender", "org/b", 2)}
    # The pairwise tests behind the tiers, each with its raw and Holm-adjusted p.
    pairs = {(p["a"], p["b"]): p for p in data["pairs"] if p["label_type"] == "gender"}
    assert len(pairs) == 3 and pairs[("org/a", "org/b")]["told_apart"] and pairs[("org/a", "org/b")]["p_holm"] < 0.05
    assert not pairs[("org/a", "org/c")]["told_apart"] and pairs[("org/a", "org/c")]["test"].startswith("sign-flip")


def test_bad_input_is_one_line(db, tmp_path, capsys):
    assert main(["leaderboard", "--db", str(db), "--exclude-items", str(tmp_path / "missing.txt")]) == 2
    assert capsys.readouterr().err.strip() == f"error: no item list at {tmp_path / 'missing.txt'}"
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    with pytest.raises(UserError, match="lists no item ids"):
        read_item_ids(empty)
    with pytest.raises(UserError, match="unknown metric 'em'"):
        leaderboard(LeaderboardRequest(db, metric="em"))
    assert main(["leaderboard", "--db", str(db), "--resamples", "5"]) == 2
    assert capsys.readouterr().err.strip() == "error: --resamples must be between 100 and 100,000, not 5"
    assert main(["leaderboard", "--db", str(db), "--items", str(tmp_path)]) == 2
    assert "is a folder; give a file of item ids" in capsys.readouterr().err
    assert main(["leaderboard", "--db", str(tmp_path / "none.duckdb")]) == 2
    assert "no database at" in capsys.readouterr().err
