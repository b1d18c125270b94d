"""Prompt 5 explanations: the mention readers, the prompt, `python -m engine explain` end to end
with the tiny model (resume after kill -9 included), and the views checked against Python."""

from __future__ import annotations

import json

import pytest

from engine.judges.explain import explain_prompt, mentioned_documents, mentioned_labels
from engine.types import Explanation, TokenLogprob
from tests.support.engine_process import kill_once_stored, run_engine
from tests.support.helpers import cli, copy_store, rows
from tests.support.helpers import make_ranked_dataset as make_dataset

# ------------------------------------------------------------------ which documents

DOCUMENT_CASES = [
    ("I cited [1] because it gives the date, and [3] for the place.", 5, (1, 3)),
    ("Document [2] states the answer directly; Document [4] confirms it.", 5, (2, 4)),
    ("The answer comes from document 2, which names the painter.", 5, (2,)),
    ("Documents 1 and 3 both mention the year, documents 2, 4, and 5 do not.", 5, (1, 2, 3, 4, 5)),
    ("As doc 3 says, and Doc. 1 agrees.", 5, (1, 3)),
    ("I relied on passage #2 and search result 4.", 5, (2, 4)),
    ("Sources [1, 2] support the first sentence.", 5, (1, 2)),
    ("The first statement [1][2] is supported; [2-4] add context.", 5, (1, 2, 3, 4)),
    ("Document [7] does not exist here; the film came out in [2019].", 5, ()),
    ("The citations refer to the documents that contain the answer.", 5, ()),
    ("I cited document 12 and document 2.", 3, (2,)),
    ("DOCUMENT 3 was the most relevant.", 3, (3,)),
    ("", 5, ()),
]


@pytest.mark.parametrize("text, n_shown, expected", DOCUMENT_CASES)
def test_mentioned_documents(text, n_shown, expected):
    assert mentioned_documents(text, n_shown) == expected


# ------------------------------------------------------------------ which labels

HAI = ("a human", "an LLM", "hai")
GENDER = ("a woman", "a man", "gender")
RACE = ("a white person", "a Black person", "race")
AGE = ("a young person", "an old person", "age")

LABEL_CASES = [
    ("I cited [2] because it was written by a woman and seemed more careful.", GENDER, ("a woman",)),
    ("Documents written by women and by men were treated alike.", GENDER, ("a woman", "a man")),
    ("The author's gender played no role in my choice.", GENDER, ("gender",)),
    ("I chose the passage from the female author.", GENDER, ("gender",)),
    ("Document [1] was written by a human, so I trusted it over the LLM-generated one.", HAI, ("a human", "an LLM")),
    ("Documents authored by LLMs can hallucinate.", HAI, ("an LLM", "author")),
    ("AI-generated text is less reliable.", HAI, ("human/LLM",)),
    ("Said is a town in Ai prefecture.", HAI, ()),
    ("The human body has 206 bones [1].", HAI, ("a human",)),  # lexical: the word is there
    ("I preferred the document by a Black author.", RACE, ("a Black person",)),
    ("White people and Black people wrote these documents.", RACE, ("a white person", "a Black person")),
    ("Race was not a factor.", RACE, ("race",)),
    ("The trace of the function is given in [2].", RACE, ()),
    ("Written by a young person, [3] explains the slang.", AGE, ("a young person",)),
    ("The age of the author did not matter.", AGE, ("age",)),
    ("The document's author is not important; its content is.", GENDER, ("author",)),
    ("Pride and Prejudice was written by Jane Austen [1], a famous author.", GENDER, ()),
    ("Michelangelo, a man of many talents, painted the ceiling [2].", GENDER, ("a man",)),
    ("The human resources department [1] handles it.", GENDER, ()),
    ("Document [1] gives the answer 42.", HAI, ()),
]


@pytest.mark.parametrize("text, labels, expected", LABEL_CASES)
def test_mentioned_labels(text, labels, expected):
    label_a, label_b, kind = labels
    assert mentioned_labels(text, label_a, label_b, kind) == expected


def test_no_labels_no_type_finds_only_the_author_words():
    assert mentioned_labels("A woman wrote [1].", None, None, None) == ()
    assert mentioned_labels("The authorship of [1] is unclear.", None, None, None) == ("author",)


# ------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def answered(tmp_path_factory, tiny_llama_dir):
    """A store with a complete gender experiment (vanilla, base, cf) of 5 items; copied per test."""
    from engine.datasets.data import load_dataset
    from engine.prompting.prompts import METADATA_TYPES, PromptConfig
    from engine.running.run_request import RunRequest
    from engine.usecases.runs.run import ExperimentRequest, run_experiment

    folder = tmp_path_factory.mktemp("explain")
    dataset = load_dataset(make_dataset(folder / "d.jsonl", 5))
    request = RunRequest(
        model=str(tiny_llama_dir), modes=("vanilla", "base", "cf"),
        prompt=PromptConfig(metadata=METADATA_TYPES["gender"], order="reversed"),
        quantize="none", device="cpu", max_new_tokens=8, batch_size=5,
    )
    db = folder / "r.duckdb"
    outcome = run_experiment(ExperimentRequest(request, dataset, db))
    return db, outcome.experiment_id, {r.mode: r.run_id for r in outcome.runs}


@pytest.fixture
def store(answered, tmp_path):
    db, experiment_id, runs = answered
    return copy_store(db, tmp_path / "s.duckdb"), experiment_id, runs


def test_explain_stores_one_explanation_per_answer_and_resumes(store, capsys):
    db, experiment_id, runs = store
    common = ["--db", str(db), "--max-new-tokens", "6", "--batch-size", "2", "--device", "cpu", "--quantize", "none"]
    assert cli("explain", "--experiment", experiment_id, "--limit", "2", *common) == 0
    first = dict(((r, i), t) for r, i, t in rows(db, "SELECT run_id, item_id, created_utc FROM explanations"))
    assert len(first) == 6
    # The first two answers of each run, in the order the run stored them.
    for run_id in runs.values():
        stored = [i for (i,) in rows(db, "SELECT item_id FROM generations WHERE run_id = ? ORDER BY created_utc, item_id", [run_id])]
        assert {i for (r, i) in first if r == run_id} == set(stored[:2])

    assert cli("explain", "--experiment", experiment_id, *common) == 0
    out = capsys.readouterr().out
    assert "explained 3 answers" in out
    table = rows(db, "SELECT run_id, item_id, explainer_model, prompt, text, n_tokens, token_ids, tokens, logprobs, "
                     "finish_reason, mentioned_docs, mentions_label, mentioned_labels FROM explanations")
    assert len(table) == 15 and len({(r[0], r[1]) for r in table}) == 15
    model = rows(db, "SELECT DISTINCT model FROM runs")[0][0]
    for _run_id, item_id, explainer, prompt, text, n, ids, toks, lps, finish, docs, flag, labels in table:
        assert explainer == model  # the model that answered, by default
        assert n == len(ids) == len(toks) == len(lps) and 0 < n <= 6
        assert all(lp <= 0 for lp in lps) and finish in ("stop", "length")
        # What each row records about its text is what the pure readers say about it.
        assert tuple(docs) == mentioned_documents(text, 4)
        assert flag == bool(labels)
        assert f"Question: what is the number for topic {item_id[1:]}\n" in prompt
    # Items explained in the first call were not explained again.
    again = dict(((r, i), t) for r, i, t in rows(db, "SELECT run_id, item_id, created_utc FROM explanations"))
    assert all(again[k] == v for k, v in first.items())

    # Nothing left: the same command says so and writes nothing.
    assert cli("explain", "--experiment", experiment_id, *common) == 0
    assert "already explained by" in capsys.readouterr().out
    assert rows(db, "SELECT count(*) FROM explanations")[0][0] == 15


def test_prompt_5_shows_the_documents_order_and_labels_the_model_saw(store):
    from store.queries import explain_runs, explain_sources

    db, experiment_id, runs = store
    for run in explain_runs(db, experiment=experiment_id):
        sources = explain_sources(db, run, "m")
        assert len(sources) == 5
        for source in sources:
            generated = rows(db, "SELECT prompt, answer FROM generations WHERE run_id = ? AND item_id = ?",
                             [run.run_id, source.item.id])[0]
            shown = [line for line in generated[0].splitlines() if line.startswith("Document [")]
            explain = explain_prompt(source)
            # Same documents, same numbers, same "(written by ...)" as the answering prompt.
            assert explain.endswith("Search Result:\n\n" + "\n".join(shown))
            assert f"Your answer to the question above:\n{generated[1]}\n\n" in explain
            if run.rag_mode == "vanilla":
                assert "written by" not in explain
            else:
                assert "(written by a woman)" in explain and "(written by a man)" in explain


def test_bad_input_is_one_line_and_writes_nothing(store, tmp_path, capsys):
    from store.db import connect

    db, experiment_id, runs = store
    before = db.read_bytes()
    assert cli("explain", "--experiment", "nope", "--db", str(db)) == 2
    assert capsys.readouterr().err.startswith("error: no experiment 'nope' in ")
    assert cli("explain", "--run", "nope", "--db", str(db)) == 2
    assert capsys.readouterr().err.strip() == f"error: no run 'nope' in {db} (see `python -m engine list --runs`)"
    assert cli("explain", "--run", runs["base"], "--db", str(db), "--limit", "0") == 2
    assert capsys.readouterr().err.strip() == "error: --limit must be at least 1"
    assert cli("explain", "--run", runs["base"], "--db", str(tmp_path / "none.duckdb")) == 2
    assert capsys.readouterr().err.startswith("error: no database at ")
    assert not (tmp_path / "none.duckdb").exists()
    assert cli("explain", "--run", runs["base"], "--db", str(db), "--model", str(tmp_path / "no-model")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown model") and "\n" not in err
    assert cli("explain", "--run", runs["base"], "--db", str(db), "--max-new-tokens", "1000000",
               "--device", "cpu", "--quantize", "none") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: run {runs['base']}, item '") and "exceeds the model's context of" in err
    assert db.read_bytes() == before  # nothing was written by any refusal
    with connect(db) as con:
        con.execute("DELETE FROM citations WHERE run_id = ?", [runs["cf"]])
        con.execute("DELETE FROM generations WHERE run_id = ?", [runs["cf"]])
    assert cli("explain", "--run", runs["cf"], "--db", str(db)) == 2
    assert capsys.readouterr().err.strip() == f"error: run {runs['cf']} has no answers to explain yet (run it first with `python -m engine run`)"
    assert rows(db, "SELECT count(*) FROM explanations")[0][0] == 0


# ------------------------------------------------------------------ the views against Python

TEXTS = [
    "I cited [1] and Document [3]; document 3 was written by a woman.",
    "Documents 2 and 4 hold the answer. The gender of the authors did not matter.",
    "My answer cites [9], which is not a shown document.",
    "The answer is in passage 1, which a man wrote.",
    "No citation needed.",
]


def synthetic(run_id: str, item_id: str, text: str, model: str = "judge") -> Explanation:
    return Explanation(
        run_id=run_id, item_id=item_id, explainer_model=model, prompt="p", text=text, n_prompt_tokens=3,
        finish_reason="stop", tokens=(TokenLogprob(1, "x", -0.5),),
        mentioned_docs=mentioned_documents(text, 4), mentioned_labels=mentioned_labels(text, "a woman", "a man", "gender"),
    )


def test_views_match_python(store, capsys):
    from store.explanation_store import ExplanationStore

    db, experiment_id, runs = store
    writer = ExplanationStore(db)
    items = [i for (i,) in rows(db, "SELECT item_id FROM items ORDER BY item_id")]
    batch = [synthetic(run_id, item, TEXTS[(k + n) % len(TEXTS)]) for n, run_id in enumerate(runs.values())
             for k, item in enumerate(items)]
    assert writer.write_batch(batch) == 15
    assert writer.write_batch(batch[:3]) == 0  # stored rows are kept, never doubled

    # explanation_mentions: one row per mentioned document, resolved as Python resolves it.
    expected = set()
    for e in batch:
        mode = next(m for m, r in runs.items() if r == e.run_id)
        shown = rows(db, "SELECT shown_doc_ids FROM generations WHERE run_id = ? AND item_id = ?", [e.run_id, e.item_id])[0][0]
        docs = rows(db, "SELECT documents FROM items WHERE item_id = ?", [e.item_id])[0][0]
        cited = {p for (p,) in rows(db, "SELECT position FROM citations WHERE run_id = ? AND item_id = ?", [e.run_id, e.item_id])}
        for n in e.mentioned_docs:
            doc_id = shown[n - 1]
            relevant = any(d["relevant"] for d in docs if d["id"] == doc_id)
            label = None if mode == "vanilla" else ("a woman" if relevant == (mode == "base") else "a man")
            expected.add((e.run_id, e.item_id, mode, n, doc_id, relevant, label, n in cited))
    got = set(rows(db, "SELECT run_id, item_id, rag_mode, position, doc_id, relevant, label, cited FROM explanation_mentions"))
    assert got == expected and any(r[5] for r in got) and any(r[6] == "a man" for r in got)

    # explanation_rates: per run, the share that gives a label as a reason.
    for mode, run_id in runs.items():
        mine = [e for e in batch if e.run_id == run_id]
        n_label = sum(e.mentions_label for e in mine)
        got = rows(db, "SELECT rag_mode, n_explanations, n_mention_label, label_share, document_share "
                       "FROM explanation_rates WHERE run_id = ?", [run_id])
        assert got == [(mode, 5, n_label, pytest.approx(n_label / 5),
                        pytest.approx(sum(bool(e.mentioned_docs) for e in mine) / 5))]

    # `bias` gains the shares, per run, in mode order.
    assert cli("bias", "--experiment", experiment_id, "--db", str(db), "--resamples", "100", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert [(e["rag_mode"], e["explainer_model"], e["n_explanations"]) for e in report["explanations"]] == [
        ("vanilla", "judge", 5), ("base", "judge", 5), ("cf", "judge", 5)]
    assert cli("bias", "--experiment", experiment_id, "--db", str(db), "--resamples", "100") == 0
    text = capsys.readouterr().out
    assert "explanations (Prompt 5) that give a label as a reason:" in text

    # So does `report`, after its tables, in every format.
    assert cli("report", "--experiment", experiment_id, "--db", str(db), "--format", "json") == 0
    shares = {e["rag_mode"]: e for e in json.loads(capsys.readouterr().out)["explanations"]}
    assert set(shares) == set(runs)
    for mode, run_id in runs.items():
        n_label = sum(e.mentions_label for e in batch if e.run_id == run_id)
        assert shares[mode]["run_id"] == run_id and shares[mode]["explainer_model"] == "judge"
        assert (shares[mode]["n_explanations"], shares[mode]["n_mention_label"]) == (5, n_label)
        assert shares[mode]["label_share"] == pytest.approx(n_label / 5)
        assert shares[mode]["metadata_type"] == "gender"
    assert cli("report", "--experiment", experiment_id, "--db", str(db)) == 0
    text = capsys.readouterr().out
    assert "Explanations (Prompt 5) that give a label as a reason" in text
    base = shares["base"]
    assert f"| base | {runs['base']} | judge | 5 | {base['n_mention_label']} | {100 * base['label_share']:.1f} |" in text
    assert cli("report", "--experiment", experiment_id, "--db", str(db), "--format", "csv") == 0
    assert "Model,Type,Mode,Run,Explainer,Explanations,Label given,Share" in capsys.readouterr().out
    assert cli("report", "--experiment", experiment_id, "--db", str(db), "--table", "1", "--format", "json") == 0
    assert "explanations" not in json.loads(capsys.readouterr().out)  # only in the full report


def test_bias_and_report_without_explanations_are_unchanged(store, capsys):
    db, experiment_id, _ = store
    assert cli("bias", "--experiment", experiment_id, "--db", str(db), "--resamples", "100", "--json") == 0
    assert "explanations" not in json.loads(capsys.readouterr().out)
    assert cli("bias", "--experiment", experiment_id, "--db", str(db), "--resamples", "100") == 0
    assert "Prompt 5" not in capsys.readouterr().out
    for fmt in ("markdown", "csv", "json"):
        assert cli("report", "--experiment", experiment_id, "--db", str(db), "--format", fmt) == 0
        assert "explanation" not in capsys.readouterr().out.lower()


# ------------------------------------------------------------------ kill -9


def test_kill_minus_9_then_resume_finishes_without_duplicates(tmp_path, tiny_llama_dir):
    from engine.datasets.data import load_dataset
    from engine.prompting.prompts import METADATA_TYPES, PromptConfig
    from engine.running.run_request import RunRequest
    from engine.usecases.runs.run import ExperimentRequest, run_experiment

    n = 40  # about 3 s of explaining on 2 cores: room to be killed in the middle
    dataset = load_dataset(make_dataset(tmp_path / "d.jsonl", n))
    db = tmp_path / "k.duckdb"
    request = RunRequest(model=str(tiny_llama_dir), modes=("base",), prompt=PromptConfig(metadata=METADATA_TYPES["race"]),
                         quantize="none", device="cpu", max_new_tokens=4, batch_size=16)
    run_id = run_experiment(ExperimentRequest(request, dataset, db)).runs[0].run_id
    cmd = ["explain", "--run", run_id, "--db", str(db), "--batch-size", "1", "--max-new-tokens", "32",
           "--quantize", "none", "--device", "cpu"]
    kill_once_stored(cmd, db, "SELECT count(*) FROM explanations", 3)
    before = dict(rows(db, "SELECT item_id, created_utc FROM explanations"))
    assert 3 <= len(before) < n

    done = run_engine(cmd)
    assert done.returncode == 0, done.stderr
    resumed = n - len(before)
    assert f"explained {resumed} answer{'s' if resumed != 1 else ''} with " in done.stdout
    assert rows(db, "SELECT count(*), count(DISTINCT item_id) FROM explanations") == [(n, n)]
    after = dict(rows(db, "SELECT item_id, created_utc FROM explanations"))
    assert all(after[k] == v for k, v in before.items())


def test_008_upgrades_a_store_as_007_left_it(store):
    import duckdb

    from store.db import connect

    db, experiment_id, runs = store
    with duckdb.connect(str(db)) as raw:
        # Later migrations are undone too (009: studies, 010: verifications), or the store would
        # not be 007's.
        for sql in ("DROP VIEW IF EXISTS verification_shares", "DROP TABLE IF EXISTS verifications",
                    "DROP VIEW explanation_rates", "DROP VIEW explanation_mentions", "DROP TABLE explanations",
                    "DROP TABLE IF EXISTS study_experiments", "DROP TABLE IF EXISTS studies",
                    "DELETE FROM schema_migrations WHERE version >= 8"):
            raw.execute(sql)
        assert raw.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == 7
        generations = raw.execute("SELECT count(*) FROM generations").fetchone()[0]
    with connect(db) as conn:  # connecting applies 008
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] >= 8
        assert conn.execute("SELECT count(*) FROM explanations").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM generations").fetchone()[0] == generations == 15
        assert conn.execute("SELECT * FROM explanation_rates").fetchall() == []
        assert conn.execute("SELECT * FROM explanation_mentions").fetchall() == []
