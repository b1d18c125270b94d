"""`python -m engine verify --show-label`: the judge sees each document's label as the run's prompt
showed it, and its own CAB is printed with an exact McNemar test: each base sentence judged with
the label as base and as cf showed it beside its document, so that only the label differs, and
beside it the control, the same sentences judged with the label hidden both times. The rigged
judges are tiny BERT NLI models whose weights make them find a document attributable exactly
when one word is among their input's words (tests/support/nli_models.py)."""

from __future__ import annotations

import json

import pytest

from engine.usecases.judges.judge_label_bias import judge_cab
from tests.support.helpers import cli, copy_store, rows
from tests.support.nli_models import answered_store, write_rigged_nli_model


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
    assert (f"judge CAB of {shown}: -50.0% (attributable 25% with the base label, 75% with the cf label, on the "
            f"same base sentences; 12 paired citations, exact McNemar p = 0.146") in out
    # Each base pair judged four times: the base label, the cf label (the other one), none twice.
    verdicts = rows(db, "SELECT label_from, label_shown, label, prompt, class FROM judge_label_verdicts "
                    "WHERE run_id = ? AND judge_model = ? ORDER BY item_id, sentence_index, position, label_from, "
                    "label_shown", [runs["base"], shown])
    assert len(verdicts) == 48
    for base_hidden, base_label, cf_hidden, cf_label in zip(*[iter(verdicts)] * 4, strict=True):
        assert {base_label[2], cf_label[2]} == {"a woman", "a man"} and base_hidden[2] is cf_hidden[2] is None
        assert base_hidden[3] == cf_hidden[3] == base_label[3].replace(f"(written by {base_label[2]}) ", "")
        assert base_hidden[4] == cf_hidden[4] == "extrapolatory"
    # The control: the same sentences with the label hidden both times read no difference.
    assert (cab.hidden.n_pairs, cab.hidden.cab, cab.hidden.p) == (12, 0.0, 1.0)
    assert ("control, the same sentences with the label hidden both times: +0.0% (attributable 0% and 0%; "
            "12 paired citations, exact McNemar p = 1)") in out
    # The judge named without "+label" is the same judge's measure.
    assert judge_cab(db, experiment_id, hidden) == cab
    # Again: nothing left to judge, nothing added.
    assert cli("verify", "--experiment", experiment_id, "--judge", f"nli:{rigged}", "--show-label", "--db", str(db)) == 0
    assert rows(db, "SELECT count(*) FROM judge_label_verdicts") == [(48,)]


def test_a_judge_moved_by_the_wording_alone_shows_no_label_bias(store, tmp_path, capsys):
    """The cf answers are worded otherwise ("known" in the sentence citing [1]) and the judge finds
    attributable exactly the sentences that hold "known", whatever the label: judging each run's
    own sentence would read a label bias of -33%; the same base sentence under both labels reads none."""
    from store.db import connect

    db, experiment_id, runs = store
    with connect(db) as conn:
        conn.execute("UPDATE generations SET answer = replace(answer, 'The number is', 'The number is known') "
                     "WHERE run_id = ?", [runs["cf"]])
    rigged = write_rigged_nli_model(tmp_path / "wording", "known")
    assert cli("verify", "--experiment", experiment_id, "--judge", f"nli:{rigged}", "--show-label", "--db", str(db)) == 0
    out = capsys.readouterr().out
    shown = f"nli:{rigged}+label"
    # Each run's own sentences, as stored in verifications: cf's [1] pairs read "known".
    own = dict(rows(db, "SELECT run_id, avg((class = 'attributable')::INT) FROM verifications WHERE judge_model = ? "
                    "GROUP BY run_id", [shown]))
    assert own[runs["base"]] == 0 and own[runs["cf"]] == pytest.approx(4 / 12)
    cab = judge_cab(db, experiment_id, shown)
    assert (cab.n_pairs, cab.cab, cab.p) == (12, 0.0, 1.0)
    assert (cab.hidden.n_pairs, cab.hidden.cab) == (12, 0.0)
    assert f"judge CAB of {shown}: +0.0%" in out
    # `merge` carries the verdicts with their runs, and the judge that gave them.
    target = tmp_path / "merged.duckdb"
    assert cli("merge", "--from", str(db), "--db", str(target)) == 0
    assert judge_cab(target, experiment_id, shown) == cab
    assert rows(target, "SELECT count(*) FROM judges WHERE judge = ?", [shown]) == [(1,)]


def test_unparsed_verdicts_are_left_out_and_a_judge_that_parsed_nothing_has_no_cab(store, tmp_path, capsys):
    from store.db import connect

    db, experiment_id, runs = store
    rigged = write_rigged_nli_model(tmp_path / "rigged", "woman")
    shown = f"nli:{rigged}+label"
    assert cli("verify", "--experiment", experiment_id, "--judge", f"nli:{rigged}", "--show-label", "--db", str(db)) == 0
    capsys.readouterr()
    # One item's verdicts with the base label unreadable: those pairs leave, they do not count as
    # "not attributable"; the control keeps its pairs.
    with connect(db) as conn:
        conn.execute("UPDATE judge_label_verdicts SET class = 'unparsed' WHERE judge_model = ? AND label_from = 'base' "
                     "AND label_shown AND item_id IN (SELECT min(item_id) FROM judge_label_verdicts)", [shown])
        left = conn.execute("SELECT count(*) FROM judge_label_verdicts WHERE class = 'unparsed'").fetchone()[0]
    cab = judge_cab(db, experiment_id, shown)
    assert left > 0 and (cab.n_pairs, cab.n_unparsed) == (12 - left, left) and cab.undefined is None
    assert cab.hidden.n_pairs == 12
    # Nothing readable: undefined, never "+0.0%, p = 1".
    with connect(db) as conn:
        conn.execute("UPDATE judge_label_verdicts SET class = 'unparsed' WHERE judge_model = ?", [shown])
    cab = judge_cab(db, experiment_id, shown)
    assert cab.n_pairs == 0 and cab.undefined.startswith("the judge's output was unparsed in one of the two verdicts "
                                                         "of all 12")
    assert cab.hidden.undefined.startswith("the judge's output was unparsed")
    from types import SimpleNamespace

    from engine.commands.verify import _print_judge_cabs

    # What `verify` prints after its judging (the fields it reads of each finished plan).
    _print_judge_cabs([SimpleNamespace(db=db, experiment_id=experiment_id, label=shown)])
    out = capsys.readouterr().out
    assert f"judge CAB of {shown}: undefined: the judge's output was unparsed" in out and "+0.0%" not in out
    assert "control, the same sentences with the label hidden both times: undefined: the judge's output" in out


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


def test_the_api_has_the_llm_judge_judge_each_base_sentence_under_both_labels_and_none(store):
    from engine import api

    db, experiment_id, runs = store
    request = api.VerifyRequest(db=db, experiment=experiment_id, limit=1, max_new_tokens=3, device="cpu",
                                quantize="none", show_label=True)
    api.verify_judges(request)
    table = rows(db, "SELECT judge_model, cf_run, sentence_index, position, label_from, label, prompt "
                 "FROM judge_label_verdicts ORDER BY ALL")
    assert len(table) == 12  # the first base answer's 3 pairs, 4 times each
    judge = table[0][0]
    assert judge.endswith("+label") and {r[1] for r in table} == {runs["cf"]}
    prompts: dict[tuple, dict] = {}
    for _, _, sentence, position, label_from, label, prompt in table:
        prompts.setdefault((sentence, position), {})[(label_from, label is not None)] = (label, prompt)
    assert len(prompts) == 3
    for both in prompts.values():
        (base_label, base_prompt), (cf_label, cf_prompt) = both[("base", True)], both[("cf", True)]
        assert {base_label, cf_label} == {"a woman", "a man"}
        assert base_prompt.endswith(f" (written by {base_label})\n") and cf_prompt.endswith(f" (written by {cf_label})\n")
        # The same sentence and document: the prompts differ only in the label line.
        assert base_prompt.replace(base_label, cf_label) == cf_prompt
        assert both[("base", False)][1] == both[("cf", False)][1] == base_prompt.replace(f" (written by {base_label})", "")
    cab = api.judge_cab(db, experiment_id, judge)
    assert cab.n_pairs + cab.n_unparsed == 3 and cab.hidden.n_pairs + cab.hidden.n_unparsed == 3
