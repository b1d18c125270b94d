"""`python -m engine verify --show-label`: the judge sees each document's label as the run's prompt
showed it, and its own CAB (base - cf share judged attributable on the same pairs) is printed with
an exact McNemar test (issue 32 §3). The rigged judge is a tiny BERT NLI model whose weights make
it find a document attributable exactly when "woman" is among its words (tests/nli_models.py)."""

from __future__ import annotations

import json

import pytest

from engine.usecases.judge_label_bias import judge_cab
from tests.helpers import cli, copy_store, rows
from tests.nli_models import answered_store, write_rigged_nli_model


@pytest.fixture(scope="module")
def answered(tmp_path_factory, tiny_llama_dir):
    return answered_store(tmp_path_factory.mktemp("judge-bias"), tiny_llama_dir)


@pytest.fixture
def store(answered, tmp_path):
    db, experiment_id, runs = answered
    return copy_store(db, tmp_path / "s.duckdb"), experiment_id, runs


def test_a_judge_rigged_for_one_label_shows_its_cab(store, tmp_path, capsys):
    db, experiment_id, runs = store
    rigged = write_rigged_nli_model(tmp_path / "rigged", "woman")
    shown, hidden = f"nli:{rigged}+label", f"nli:{rigged}"
    assert cli("verify", "--experiment", experiment_id, "--judge", f"nli:{rigged}", "--show-label", "--db", str(db)) == 0
    out = capsys.readouterr().out
    # Vanilla shows no label: only base and cf are judged, each premise led by its label line.
    assert rows(db, "SELECT DISTINCT run_id FROM verifications ORDER BY 1") == sorted([(runs["base"],), (runs["cf"],)])
    table = rows(db, "SELECT run_id, item_id, position, doc_id, prompt, class FROM verifications WHERE judge_model = ?",
                 [shown])
    assert len(table) == 24
    labels = {"base": {}, "cf": {}}
    for run_id, item_id, position, _doc_id, prompt, label in table:
        mode = "base" if run_id == runs["base"] else "cf"
        stored = rows(db, "SELECT shown_labels[?] FROM generations WHERE run_id = ? AND item_id = ?",
                      [position, run_id, item_id])[0][0]
        premise = json.loads(prompt)["premise"]
        assert premise.startswith(f"(written by {stored}) ")
        assert label == ("attributable" if stored == "a woman" else "extrapolatory")  # the rig works
        labels[mode][(item_id, position)] = stored
    # The same documents, the opposite labels: the judge's CAB is the woman-labelled share in base
    # minus that in cf; every pair is discordant (3 attributable in base only, 9 in cf only).
    base_share = sum(v == "a woman" for v in labels["base"].values()) / 12
    cf_share = sum(v == "a woman" for v in labels["cf"].values()) / 12
    assert (base_share, cf_share) == (0.25, 0.75)  # 3 of 12 cited documents are relevant
    cab = judge_cab(db, experiment_id, shown)
    assert (cab.n_pairs, cab.base_share, cab.cf_share) == (12, base_share, cf_share)
    from scipy.stats import binomtest

    assert cab.cab == pytest.approx(-0.5) and cab.p == pytest.approx(binomtest(3, 12, 0.5).pvalue)
    assert (cab.label_a, cab.label_b) == ("a woman", "a man")
    assert (f"judge CAB of {shown}: -50.0% (attributable 25% in base, 75% in cf; 12 paired citations, "
            f"exact McNemar p = 0.146") in out
    # With the label hidden the same judge sees no "woman": no CAB at all.
    assert cli("verify", "--experiment", experiment_id, "--judge", f"nli:{rigged}", "--db", str(db)) == 0
    plain = judge_cab(db, experiment_id, hidden)
    assert (plain.n_pairs, plain.cab, plain.p) == (12, 0.0, 1.0)


def test_unparsed_verdicts_are_left_out_and_a_judge_that_parsed_nothing_has_no_cab(store, tmp_path, capsys):
    from store.db import connect

    db, experiment_id, runs = store
    rigged = write_rigged_nli_model(tmp_path / "rigged", "woman")
    shown = f"nli:{rigged}+label"
    assert cli("verify", "--experiment", experiment_id, "--judge", f"nli:{rigged}", "--show-label", "--db", str(db)) == 0
    capsys.readouterr()
    # Four base verdicts unreadable: those pairs leave, they do not count as "not attributable".
    with connect(db) as conn:
        conn.execute("UPDATE verifications SET class = 'unparsed' WHERE run_id = ? AND judge_model = ? AND item_id IN "
                     "(SELECT DISTINCT item_id FROM verifications ORDER BY 1 LIMIT 1)", [runs["base"], shown])
        left = conn.execute("SELECT count(*) FROM verifications WHERE class = 'unparsed'").fetchone()[0]
    cab = judge_cab(db, experiment_id, shown)
    assert left > 0 and (cab.n_pairs, cab.n_unparsed) == (12 - left, left) and cab.undefined is None
    # Nothing readable: undefined, never "+0.0%, p = 1".
    with connect(db) as conn:
        conn.execute("UPDATE verifications SET class = 'unparsed' WHERE judge_model = ?", [shown])
    cab = judge_cab(db, experiment_id, shown)
    assert cab.n_pairs == 0 and cab.undefined.startswith("the judge's output was unparsed in base or cf in all 12")
    from types import SimpleNamespace

    from engine.commands.verify import _print_judge_cabs

    # What `verify` prints after its judging (the fields it reads of each finished plan).
    _print_judge_cabs([SimpleNamespace(db=db, experiment_id=experiment_id, label=shown)])
    out = capsys.readouterr().out
    assert f"judge CAB of {shown}: undefined: the judge's output was unparsed" in out and "+0.0%" not in out


def test_the_llm_judge_sees_the_label_line_the_generator_saw(store, tiny_llama_dir, capsys):
    db, experiment_id, runs = store
    assert cli("verify", "--run", runs["cf"], "--show-label", "--limit", "1", "--max-new-tokens", "3",
               "--device", "cpu", "--quantize", "none", "--db", str(db)) == 0
    capsys.readouterr()
    table = rows(db, "SELECT item_id, position, judge_model, prompt FROM verifications")
    assert len(table) == 3
    for item_id, position, judge, prompt in table:
        stored = rows(db, "SELECT shown_labels[?] FROM generations WHERE run_id = ? AND item_id = ?",
                      [position, runs["cf"], item_id])[0][0]
        assert judge.endswith("+label") and prompt.endswith(f" (written by {stored})\n")
    assert rows(db, "SELECT kind, mapping FROM judges WHERE judge = ?", [table[0][2]]) == [("llm", "attrscore")]
    # A vanilla run shows no label to repeat: refused in one line, nothing written.
    before = db.read_bytes()
    assert cli("verify", "--run", runs["vanilla"], "--show-label", "--db", str(db)) == 2
    assert capsys.readouterr().err.strip() == (f"error: run {runs['vanilla']} showed no labels: --show-label judges "
                                               "base and cf runs")
    assert db.read_bytes() == before
