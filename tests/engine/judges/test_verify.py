"""AttrScore verification: the sentence/claim splitter, the judge-output parser, the class
probabilities, `python -m engine verify` end to end with the tiny model (resume included), the
verification_shares view against Python, and migration 010 on a store as 009 left it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from engine.judges.verify import (
    CLASSES,
    UNPARSED,
    claim_text,
    claims_of,
    class_probabilities,
    parse_class,
    split_sentences,
    token_class,
)
from engine.types import GenerationOutput, TokenLogprob, TopLogprob, Verification
from tests.support.engine_process import kill_once_stored, run_engine
from tests.support.helpers import cli, copy_store, rows

# ------------------------------------------------------------------ the judge's answer

JUDGE_CASES = [
    ("Attributable", "attributable"),
    ("Attributable.", "attributable"),
    ("attributable", "attributable"),
    ("ATTRIBUTABLE!", "attributable"),
    ("**Extrapolatory**", "extrapolatory"),
    ("The answer is: contradictory", "contradictory"),
    ("attributable/extrapolatory", "attributable"),
    ("Extrapolatory / Attributable", "extrapolatory"),
    ("Relationship: Contradictory\n\nThe reference says 1989, the claim says 1990.", "contradictory"),
    ('"Attributable"', "attributable"),
    ("- Extrapolatory: the reference does not mention the year.", "extrapolatory"),
    ("The claim is not attributable; it is contradictory.", "contradictory"),
    ("This isn't attributable to the reference. Extrapolatory.", "extrapolatory"),
    ("Not attributable.", UNPARSED),
    ("The reference supports the claim.", UNPARSED),  # right meaning, no class word: no guess
    ("Attribution: yes", UNPARSED),
    ("Attribut", UNPARSED),  # cut off by max-new-tokens
    ("", UNPARSED),
    ("   \n", UNPARSED),
    ("Contradictorily", UNPARSED),
    ("nonattributable", UNPARSED),
    ("1. Attributable 2. Contradictory", "attributable"),
    ("<answer>Extrapolatory</answer>", "extrapolatory"),
    ("Answer: [Contradictory]", "contradictory"),
    ("ExtrapolatoryAttributable", UNPARSED),  # glued words are not a verdict
]


@pytest.mark.parametrize("text, expected", JUDGE_CASES)
def test_parse_class(text, expected):
    assert parse_class(text) == expected


# ------------------------------------------------------------------ sentences and claims

SENTENCE_CASES = [
    ("Paris is the capital [1]. It has 2 million people [2][3].",
     ("Paris is the capital [1].", "It has 2 million people [2][3].")),
    ("It opened in 1990. [2] It closed in 2001. [1, 3]",
     ("It opened in 1990. [2]", "It closed in 2001. [1, 3]")),
    ("No citations here! Really? Yes.", ("No citations here!", "Really?", "Yes.")),
    ("  One sentence without a stop [4]  ", ("One sentence without a stop [4]",)),
    ("", ()),
]


@pytest.mark.parametrize("answer, expected", SENTENCE_CASES)
def test_split_sentences(answer, expected):
    assert split_sentences(answer) == expected


def test_claims_are_sentence_document_pairs_once_each_within_the_shown_documents():
    shown = ("d1", "d2", "d3")
    claims = claims_of("q", "A is B [1][2][1]. C is D [9]. E [2-3]. F.", shown)
    assert [(c.sentence_index, c.position, c.doc_id) for c in claims] == [
        (0, 1, "d1"), (0, 2, "d2"), (2, 2, "d2"), (2, 3, "d3")]
    assert claims[0].sentence == "A is B [1][2][1]."
    assert claim_text("who is A? ", claims[0].sentence) == "who is A? A is B."


# ------------------------------------------------------------------ probabilities


def output(text: str, steps: list[tuple[str, list[tuple[str, float]]]]) -> GenerationOutput:
    tokens, offsets, at = [], [], 0
    for i, (tok, top) in enumerate(steps):
        tokens.append(TokenLogprob(i, tok, dict(top).get(tok, -5.0), tuple(TopLogprob(j, t, lp) for j, (t, lp) in enumerate(top))))
        offsets.append((at, at + len(tok)))
        at += len(tok)
    assert "".join(t for t, _ in steps) == text
    return GenerationOutput(text=text, tokens=tuple(tokens), finish_reason="stop", n_prompt_tokens=1,
                            char_offsets=tuple(offsets))


def test_token_class():
    assert [token_class(t) for t in ("Att", " attributable", "**Ex", "▁contr", "A", "The", "**", " ", "Con")] == [
        "attributable", "attributable", "extrapolatory", "contradictory", "attributable", None, None, None, "contradictory"]


def test_class_probabilities_read_the_step_where_the_verdict_starts():
    lp = math.log
    out = output("**Extrapolatory**", [
        ("**", [("**", lp(0.9)), ("Att", lp(0.05))]),  # an earlier step: not where the word starts
        ("Extr", [("Extr", lp(0.5)), ("Ex", lp(0.1)), ("Att", lp(0.2)), (" Att", lp(0.05)), ("Cont", lp(0.1)), ("The", lp(0.05))]),
        ("apolatory", [("apolatory", lp(0.99))]),
        ("**", [("**", lp(0.9))]),
    ])
    p = class_probabilities(out)
    assert p == pytest.approx((0.25, 0.6, 0.1))
    assert class_probabilities(output("No idea", [("No", [("No", -0.1)]), (" idea", [(" idea", -0.1)])])) == (None, None, None)
    # No top-n recorded: no probabilities, never a guess from the chosen token alone.
    bare = GenerationOutput(text="Attributable", tokens=(TokenLogprob(0, "Attributable", -0.1),), finish_reason="stop",
                            n_prompt_tokens=1, char_offsets=((0, 12),))
    assert class_probabilities(bare) == (None, None, None)


# ------------------------------------------------------------------ end to end with the tiny model


@pytest.fixture(scope="module")
def answered(tmp_path_factory, tiny_llama_dir):
    """A complete gender experiment (vanilla, base, cf) of 4 items whose answers cite (3 pairs each:
    tests/nli_models.ANSWER); copied per test."""
    from tests.support.nli_models import answered_store

    return answered_store(tmp_path_factory.mktemp("verify"), tiny_llama_dir)


@pytest.fixture
def store(answered, tmp_path):
    db, experiment_id, runs = answered
    return copy_store(db, tmp_path / "s.duckdb"), experiment_id, runs


COMMON = ["--max-new-tokens", "5", "--batch-size", "4", "--device", "cpu", "--quantize", "none"]


def test_verify_judges_every_cited_pair_and_resumes(store, capsys):
    db, experiment_id, runs = store
    assert cli("verify", "--experiment", experiment_id, "--limit", "2", "--db", str(db), *COMMON) == 0
    first = {r[:4]: r[4] for r in rows(db, "SELECT run_id, item_id, sentence_index, position, created_utc FROM verifications")}
    assert len(first) == 3 * 2 * 3  # runs x answers x pairs
    assert capsys.readouterr().out.count("verified 6 citations") == 3
    assert cli("verify", "--experiment", experiment_id, "--db", str(db), *COMMON) == 0
    out = capsys.readouterr().out
    assert out.count("verified 6 citations") == 3 and "attributable" in out
    table = rows(db, "SELECT run_id, item_id, sentence_index, position, doc_id, judge_model, prompt, raw_output, class, "
                     "p_attributable, p_extrapolatory, p_contradictory, created_utc FROM verifications")
    assert len(table) == 36
    model = rows(db, "SELECT DISTINCT model FROM runs")[0][0]
    for run_id, item_id, sentence, position, doc_id, judge, prompt, raw, label, *ps, created in table:
        assert judge == model  # the model that answered, by default
        assert (sentence, position) in {(0, 1), (1, 2), (1, 3)}
        shown = rows(db, "SELECT shown_doc_ids FROM generations WHERE run_id = ? AND item_id = ?", [run_id, item_id])[0][0]
        assert doc_id == shown[position - 1]
        claim = "The number is " + item_id + "." if sentence == 0 else "It is also given in."
        assert f"\n\nClaim: what is the number for topic {item_id[1:]} {claim}\n\nReference: " in prompt
        assert prompt.startswith("As an Attribution Validator,") and "written by" not in prompt
        i, j = (int(x) for x in doc_id[1:].split("-d"))
        title = f"Topic {i}: " if j == 0 else ""  # the cited document, its title first, no label
        assert prompt.endswith(f"\n\nReference: {title}Passage {j} about topic {i}; the answer is {i * 7 + j}.\n")
        assert label == parse_class(raw)  # what the row says is what the parser reads
        if label == UNPARSED:
            assert ps == [None, None, None]
        else:
            assert all(p is not None and 0 <= p <= 1 for p in ps)
        if (run_id, item_id, sentence, position) in first:  # judged once, kept
            assert first[(run_id, item_id, sentence, position)] == created
    # Nothing left: the same command says so and writes nothing.
    assert cli("verify", "--experiment", experiment_id, "--db", str(db), *COMMON) == 0
    assert "no citations left to verify by" in capsys.readouterr().out
    assert rows(db, "SELECT count(*) FROM verifications")[0][0] == 36


def test_bad_input_is_one_line_and_writes_nothing(store, tmp_path, capsys):
    db, experiment_id, runs = store
    before = db.read_bytes()
    assert cli("verify", "--experiment", "nope", "--db", str(db)) == 2
    assert capsys.readouterr().err.startswith("error: no experiment 'nope' in ")
    assert cli("verify", "--run", "nope", "--db", str(db)) == 2
    assert capsys.readouterr().err.strip() == f"error: no run 'nope' in {db} (see `python -m engine list --runs`)"
    assert cli("verify", "--run", runs["base"], "--db", str(db), "--batch-size", "0") == 2
    assert capsys.readouterr().err.strip() == "error: --batch-size must be at least 1"
    assert cli("verify", "--run", runs["base"], "--db", str(db), "--model", str(tmp_path / "no-model")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown model") and "\n" not in err
    assert cli("verify", "--run", runs["base"], "--db", str(db), "--max-new-tokens", "1000000",
               "--device", "cpu", "--quantize", "none") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: run {runs['base']}, item '") and "verification prompt of" in err
    assert db.read_bytes() == before  # nothing was written by any refusal


# ------------------------------------------------------------------ the view against Python

LABELS = ("attributable", "extrapolatory", "contradictory", UNPARSED, "attributable", "attributable", "contradictory")


def test_view_matches_python_and_report_shows_the_shares(store, capsys):
    from store.verification_store import VerificationStore

    db, experiment_id, runs = store
    items = [i for (i,) in rows(db, "SELECT item_id FROM items ORDER BY item_id")]
    batch = []
    for n, run_id in enumerate(runs.values()):
        for k, item in enumerate(items):
            for s, position in ((0, 1), (1, 2), (1, 3)):
                label = LABELS[(n + k + position) % len(LABELS)]
                p = None if label == UNPARSED else 0.5
                batch.append(Verification(run_id, item, s, position, f"{item}-d{position}", "judge", "p", label, label, p, p, p))
    writer = VerificationStore(db)
    assert writer.write_batch(batch) == 36
    assert writer.write_batch(batch[:5]) == 0  # stored rows are kept, never doubled
    for mode, run_id in runs.items():
        mine = [v.label for v in batch if v.run_id == run_id]
        got = rows(db, "SELECT rag_mode, n_citations, n_attributable, n_extrapolatory, n_contradictory, n_unparsed, "
                       "attributable_share, extrapolatory_share, contradictory_share, unparsed_share "
                       "FROM verification_shares WHERE run_id = ? AND judge_model = 'judge'", [run_id])
        counts = [mine.count(c) for c in (*CLASSES, UNPARSED)]
        assert got == [(mode, 12, *counts, *(pytest.approx(c / 12) for c in counts))]

    # `report` gains the shares per run, after its tables, in every format.
    assert cli("report", "--experiment", experiment_id, "--db", str(db), "--format", "json") == 0
    report = json.loads(capsys.readouterr().out)
    got = {(r["rag_mode"], r["judge_model"]): r for r in report["verification"]}
    assert set(got) == {("vanilla", "judge"), ("base", "judge"), ("cf", "judge")}
    for mode, run_id in runs.items():
        mine = [v.label for v in batch if v.run_id == run_id]
        assert got[(mode, "judge")]["run_id"] == run_id and got[(mode, "judge")]["n_citations"] == 12
        assert [got[(mode, "judge")][f"{c}_share"] for c in (*CLASSES, UNPARSED)] == pytest.approx(
            [mine.count(c) / 12 for c in (*CLASSES, UNPARSED)])
    assert cli("report", "--experiment", experiment_id, "--db", str(db)) == 0
    text = capsys.readouterr().out
    assert "Attribution verification (AttrScore)" in text and "| Attributable |" in text
    assert cli("report", "--experiment", experiment_id, "--db", str(db), "--format", "csv") == 0
    assert "Judge,Citations,Attributable" in capsys.readouterr().out


def test_run_metrics_carries_the_shares_of_the_judge_that_judged_most(store):
    from store.verification_store import VerificationStore

    db, _, runs = store
    items = [i for (i,) in rows(db, "SELECT item_id FROM items ORDER BY item_id")]
    # "big" judges every pair of the base run, "a-small" (first by name) only item 0's: the row
    # shows "big"; "tie-*" judge cf equally, so the first by name is shown.
    def judged(run_id, judge, which):
        return [Verification(run_id, item, s, position, f"{item}-d{position}", judge, "p", label, label, None, None, None)
                for k, item in enumerate(which)
                for s, position in ((0, 1), (1, 2), (1, 3))
                for label in [LABELS[(k + position) % len(LABELS)]]]
    batch = (judged(runs["base"], "big", items) + judged(runs["base"], "a-small", items[:1])
             + judged(runs["cf"], "tie-b", items[:2]) + judged(runs["cf"], "tie-a", items[2:]))
    VerificationStore(db).write_batch(batch)
    got = {r[0]: r[1:] for r in rows(db, "SELECT run_id, verification_judge, n_verified, attributable_share, "
                                         "extrapolatory_share, contradictory_share, unparsed_share FROM run_metrics")}
    for run_id, judge in ((runs["base"], "big"), (runs["cf"], "tie-a")):
        mine = [v.label for v in batch if v.run_id == run_id and v.judge_model == judge]
        assert got[run_id] == (judge, len(mine), *(pytest.approx(mine.count(c) / len(mine)) for c in (*CLASSES, UNPARSED)))
        assert sum(got[run_id][2:]) == pytest.approx(1.0)
    assert got[runs["vanilla"]] == (None,) * 6  # nobody verified it
    # The columns before them are the 002 view's, unchanged.
    metrics = rows(db, "SELECT precision, recall, f1, n FROM run_metrics WHERE run_id = ?", [runs["base"]])
    assert metrics == rows(db, "SELECT avg(precision), avg(recall), avg(f1), count(*) FROM query_metrics WHERE run_id = ?",
                           [runs["base"]])


def test_011_upgrades_a_store_as_010_left_it(store):
    import duckdb

    from store.db import connect

    db, _, runs = store
    # The store as 010 left it: run_metrics as 002 defined it, 011 not recorded.
    sql = (Path(__file__).resolve().parents[2] / "support" / "old_migrations" / "002_metrics_views.sql").read_text(encoding="utf-8")
    start = sql.index("CREATE OR REPLACE VIEW run_metrics AS")
    view_002 = sql[start:sql.index(";", sql.index("FROM runs r LEFT JOIN w USING (run_id)", start))]
    with duckdb.connect(str(db)) as raw:
        raw.execute(view_002)
        raw.execute("DELETE FROM schema_migrations WHERE version >= 11")
        columns_002 = [d[0] for d in raw.execute("SELECT * FROM run_metrics LIMIT 0").description]
        before = raw.execute("SELECT * FROM run_metrics ORDER BY run_id").fetchall()
    assert "verification_judge" not in columns_002
    with connect(db) as conn:  # connecting applies 011
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] >= 11
        cursor = conn.execute("SELECT * FROM run_metrics ORDER BY run_id")
        columns = [d[0] for d in cursor.description]
        after = cursor.fetchall()
    assert columns == columns_002 + ["verification_judge", "n_verified", "attributable_share",
                                     "extrapolatory_share", "contradictory_share", "unparsed_share"]
    assert [r[:len(columns_002)] for r in after] == before and len(after) == len(runs)


def test_report_without_verifications_is_unchanged(store, capsys):
    from engine.commands.report import render

    db, experiment_id, _ = store
    for fmt in ("markdown", "csv", "json"):
        assert cli("report", "--experiment", experiment_id, "--db", str(db), "--format", fmt) == 0
        out = capsys.readouterr().out
        assert "verification" not in out.lower()
    # The renderer with no verification rows is the renderer as it was.
    assert render([], [], "json") == render([], [], "json", "all", [])


def test_010_upgrades_a_store_as_009_left_it(store):
    import duckdb

    from store.db import connect

    db, _, _ = store
    with duckdb.connect(str(db)) as raw:
        for sql in ("DROP VIEW verification_shares", "DROP TABLE verifications",
                    "DELETE FROM schema_migrations WHERE version >= 10"):
            raw.execute(sql)
        assert raw.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == 9
        generations = raw.execute("SELECT count(*) FROM generations").fetchone()[0]
    with connect(db) as conn:  # connecting applies 010
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] >= 10
        assert conn.execute("SELECT count(*) FROM verifications").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM generations").fetchone()[0] == generations == 12
        assert conn.execute("SELECT * FROM verification_shares").fetchall() == []


def test_kill_minus_9_then_resume_finishes_without_duplicates(store):
    db, _, runs = store
    run_id = runs["base"]
    n = 4 * 3  # answers x pairs
    cmd = ["verify", "--run", run_id, "--db", str(db), "--batch-size", "1", "--max-new-tokens", "48",
           "--quantize", "none", "--device", "cpu"]
    kill_once_stored(cmd, db, "SELECT count(*) FROM verifications", 2)
    key = "item_id || '/' || sentence_index || '/' || position"
    before = dict(rows(db, f"SELECT {key}, created_utc FROM verifications"))
    assert 2 <= len(before) < n

    done = run_engine(cmd)
    assert done.returncode == 0, done.stderr
    resumed = n - len(before)
    assert f"verified {resumed} citation{'s' if resumed != 1 else ''} with " in done.stdout
    assert rows(db, f"SELECT count(*), count(DISTINCT {key}) FROM verifications") == [(n, n)]
    after = dict(rows(db, f"SELECT {key}, created_utc FROM verifications"))
    assert all(after[k] == v for k, v in before.items())


def test_a_real_tokenizer_s_first_pieces_of_each_class_word_are_recognised(tiny_llama):
    from engine.generation.generate import decode_with_offsets

    tok = tiny_llama.tokenizer
    for name in CLASSES:
        for written in (name, name.capitalize(), name.upper(), f" {name.capitalize()}", f"**{name.capitalize()}**"):
            ids = tok.encode(written, add_special_tokens=False)
            pieces = tok.batch_decode([[i] for i in ids], skip_special_tokens=False)
            # The first piece holding a letter begins the class word, whatever the tokenizer split.
            first = next(p for p in pieces if any(ch.isalpha() for ch in p))
            assert token_class(first) == name, (written, pieces)

    # A verdict as a real tokenizer cuts it, read at the step where the class word starts.
    ids = tok.encode("The answer is: **Contradictory**", add_special_tokens=False)
    decoded = decode_with_offsets(tok, ids)
    pieces = tok.batch_decode([[i] for i in ids], skip_special_tokens=False)
    start = decoded.text.index("Contradictory")
    step = next(k for k, (lo, hi) in enumerate(decoded.offsets) if lo <= start < hi)
    tokens = tuple(
        TokenLogprob(i, p, math.log(0.7), (TopLogprob(i, p, math.log(0.7)), TopLogprob(0, " Ext", math.log(0.2)))
                     if k == step else (TopLogprob(i, p, math.log(0.9)), TopLogprob(0, "Att", math.log(0.05))))
        for k, (i, p) in enumerate(zip(ids, pieces, strict=True)))
    out = GenerationOutput(decoded.text, tokens, "stop", 1, tuple(decoded.offsets))
    assert class_probabilities(out) == pytest.approx((0.0, 0.2, 0.7))
