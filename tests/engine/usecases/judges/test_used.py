"""Cited or used? (`python -m engine used`): the prompt split into its documents (one
line left out exactly, numbering kept), the stored log-probs against a direct transformers
forward pass, resume, --limit, the cost line, the view citation_use, the figures recomputed
from the stored rows, and refusals in one line."""

from __future__ import annotations

import json
import math

import pytest

from engine.prompting.ablation import split_documents
from engine.prompting.prompts import METADATA_TYPES, PromptConfig, build_prompt, shown_documents
from engine.types import Document, Item
from tests.support.helpers import cli, copy_store, make_ranked_dataset, rows

COMMON = ("--device", "cpu", "--quantize", "none", "--dtype", "float32")

ITEM = Item("q1", "which one", ("b",), tuple(
    Document(f"d{i}", text, i == 2) for i, text in enumerate(
        ["Alpha (a) [2] text.", "Beta\nwith a line break", "Gamma: Search Results:", "Delta )"])))


# ------------------------------------------------------------------ the split


@pytest.mark.parametrize("config", [
    PromptConfig(),
    PromptConfig(mode="base", metadata=METADATA_TYPES["gender"]),
    PromptConfig(mode="cf", metadata=METADATA_TYPES["gender"], few_shot=2, order="reversed"),
    PromptConfig(mode="base", metadata=METADATA_TYPES["hai"], repetition="distractor", label_scope="relevant"),
    PromptConfig(mode="base", metadata=METADATA_TYPES["race"], xai="direct", top_k=3),
], ids=["vanilla", "base", "cf-few-shot-reversed", "repeated-relevant-labels", "xai-top3"])
def test_leaving_a_document_out_removes_its_line_only_and_keeps_the_numbers(config):
    prompt = build_prompt(ITEM, config)
    docs = shown_documents(ITEM, config)
    layout = split_documents(prompt.text, [d.text for d in docs])
    assert layout is not None and layout.full == prompt.text
    for n, (doc, label) in enumerate(zip(docs, prompt.shown_labels, strict=True), start=1):
        # Each line is the builder's line for that document, label and all.
        assert layout.lines[n - 1] == f"Document [{n}]({doc.text})" + (f" (written by {label})" if label else "")
        without = layout.without([n])
        separator = "\n" if n < len(docs) else ""
        expected = (prompt.text.replace(layout.lines[n - 1] + "\n", "", 1) if separator
                    else prompt.text.replace("\n" + layout.lines[n - 1] + "\n\nQuestion: ", "\n\nQuestion: ", 1))
        assert without == expected
        assert f"Document [{n}](" not in without.split("Search Results:")[-1]
        for m, other in enumerate(docs, start=1):  # the others keep their numbers
            if m != n:
                assert f"Document [{m}]({other.text})" in without
    only = layout.only({2})
    assert only.split("Search Results:\n\n")[-1].startswith(layout.lines[1] + "\n\nQuestion: ")
    assert layout.only(set()).split("Search Results:\n\n")[-1].startswith("\n\nQuestion: ")


def test_a_prompt_that_does_not_hold_the_documents_is_not_split():
    prompt = build_prompt(ITEM, PromptConfig()).text
    texts = [d.text for d in ITEM.documents]
    assert split_documents(prompt, texts[:3]) is None  # one document fewer than shown
    assert split_documents(prompt, [texts[1], *texts[1:]]) is None  # another text
    assert split_documents(prompt.replace("Document [2]", "Doc [2]"), texts) is None
    assert split_documents(prompt.replace("(Beta", " (Beta"), texts) is None
    assert split_documents(prompt.replace("Delta )", "Delta ) extra"), texts) is None  # not a label
    assert split_documents(prompt, []) is None


# ------------------------------------------------------------------ end to end on a tiny model


@pytest.fixture(scope="module")
def experiment(tmp_path_factory, tiny_llama_merged_dir):
    """A gender experiment of 4 items (vanilla, base, cf) with stored prompts."""
    folder = tmp_path_factory.mktemp("used")
    dataset = make_ranked_dataset(folder / "d.jsonl", 4)
    db = folder / "r.duckdb"
    assert cli("run", "--model", str(tiny_llama_merged_dir), "--dataset", str(dataset), "--db", str(db),
               "--metadata", "gender", "--max-new-tokens", "4", "--seed", "1",
               "--batch-size", "4", *COMMON[:4]) == 0
    (experiment_id,) = {r for (r,) in rows(db, "SELECT experiment_id FROM runs")}
    # The answers held fixed need not be the model's own: each cites documents 1 and 3 (and the
    # citations table says so, as storing that answer would have written it).
    from store.db import connect

    with connect(db) as conn:
        conn.execute("UPDATE generations SET answer = 'The number is ' || item_id || ' [1][3].'")
        conn.execute("DELETE FROM citations")
        conn.execute("INSERT INTO citations SELECT g.run_id, g.item_id, k - 1, n, g.shown_doc_ids[n], "
                     "list_contains(list_transform(list_filter(i.documents, lambda d: d.relevant), lambda d: d.id), "
                     "g.shown_doc_ids[n]), NULL FROM generations g JOIN runs r USING (run_id) "
                     "JOIN items i ON i.dataset_sha = r.dataset_sha AND i.item_id = g.item_id, "
                     "(SELECT unnest([1, 2]) AS k, unnest([1, 3]) AS n)")
    return db, experiment_id, tiny_llama_merged_dir


@pytest.fixture
def store(experiment, tmp_path):
    db, experiment_id, model_dir = experiment
    return copy_store(db, tmp_path / "s.duckdb"), experiment_id, model_dir


def _direct_logp(loaded, prompt: str, answer: str) -> float:
    """log P(answer | prompt): one unbatched, unpadded forward pass, the sum of log_softmax at the
    answer's tokens."""
    import torch

    from engine.generation.models import chat_input_ids

    head = chat_input_ids(loaded, prompt)
    tail = list(loaded.tokenizer(answer, add_special_tokens=False, split_special_tokens=True)["input_ids"])
    with torch.no_grad():
        logits = loaded.model(torch.tensor([head + tail])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return float(sum(logprobs[len(head) + j - 1, t] for j, t in enumerate(tail)))


@pytest.mark.slow
def test_used_stores_what_a_direct_forward_pass_gives_and_resumes(store, capsys):
    from engine.generation.models import load_model

    db, experiment_id, model_dir = store
    assert cli("used", "--experiment", experiment_id, "--db", str(db), "--batch-size", "4", "--json", *COMMON) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    n_shown = 4
    # The cost line, before it starts: 3 runs x 4 answers.
    assert f"12 answers x (shown documents + 2) = {12 * (n_shown + 2)} forward passes with" in captured.err
    stored = rows(db, "SELECT run_id, item_id, position, logp_full, logp_without, logp_cited_only, necessity, "
                      "sufficiency, cited, model FROM document_use ORDER BY ALL")
    assert len(stored) == 12 * n_shown and report["n_measured_now"] == 12
    assert {r[9] for r in stored} == {rows(db, "SELECT any_value(model) FROM runs")[0][0]}

    answers = {(r, i): (a, p) for r, i, a, p in rows(db, "SELECT run_id, item_id, answer, prompt FROM generations")}
    cited = {(r, i, p) for r, i, p in rows(db, "SELECT run_id, item_id, position FROM citations WHERE doc_id IS NOT NULL")}
    assert len(cited) == 12 * 2
    loaded = load_model(str(model_dir), quantize="none", device="cpu", dtype="float32")
    checked = 0
    for run_id, item_id, position, full, without, cited_only, necessity, sufficiency, is_cited, _ in stored:
        assert is_cited == ((run_id, item_id, position) in cited)
        assert necessity == pytest.approx(full - without) and sufficiency == pytest.approx(cited_only - full)
        if position > 2 or checked >= 6:
            continue
        answer, prompt = answers[run_id, item_id]
        assert full == pytest.approx(_direct_logp(loaded, prompt, answer), abs=1e-4)
        # Without document `position`: its line gone, nothing else changed.
        line = next(x for x in prompt.split("\n") if x.startswith(f"Document [{position}]("))
        assert without == pytest.approx(_direct_logp(loaded, prompt.replace(line + "\n", "", 1), answer), abs=1e-4)
        checked += 1
    assert checked == 6

    # The figures are the stored rows'.
    for run in report["runs"]:
        rs = [r for r in stored if r[0] == run["run_id"]]
        c = [r for r in rs if r[8]]
        assert run["n_citations"] == len(c) and run["n_documents"] == len(rs) == 4 * n_shown
        used = [r for r in rs if r[6] > 0.5]
        assert run["share_used"] == (pytest.approx(sum(r[6] > 0.5 for r in c) / len(c)) if c else None)
        assert run["share_used_not_cited"] == (pytest.approx(sum(not r[8] for r in used) / len(used))
                                               if used else None)
        if c:
            assert run["share_post_rationalised"] == pytest.approx(1 - run["share_used"])
        assert list(run["share_used_at"]) == ["0.125", "0.5", "2"]
    assert report["cab"]["n_items"] == 4 and set(report["cab"]["on_used"]) == {"precision", "recall", "f1"}
    # The view says the same.
    view = rows(db, "SELECT run_id, item_id, position, used, cited, post_rationalised FROM citation_use ORDER BY ALL")
    assert view == [(r[0], r[1], r[2], r[6] > 0.5, r[8], r[8] and not r[6] > 0.5) for r in stored]

    # A re-run reads nothing; losing one answer's rows reads that answer alone again, to the same numbers.
    assert cli("used", "--experiment", experiment_id, "--db", str(db), "--json", *COMMON) == 0
    again = capsys.readouterr()
    assert json.loads(again.out)["n_measured_now"] == 0 and "0 answers x" in again.err
    lost = stored[0][:2]
    created = rows(db, "SELECT run_id, item_id, position, created_utc FROM document_use")
    from store.db import connect

    with connect(db) as conn:
        conn.execute("DELETE FROM document_use WHERE run_id = ? AND item_id = ?", list(lost))
    assert cli("used", "--experiment", experiment_id, "--db", str(db), "--batch-size", "1", "--json", *COMMON) == 0
    assert json.loads(capsys.readouterr().out)["n_measured_now"] == 1
    restored = rows(db, "SELECT run_id, item_id, position, logp_full, logp_without, logp_cited_only, necessity, "
                        "sufficiency, cited, model FROM document_use ORDER BY ALL")
    for a, b in zip(restored, stored, strict=True):
        assert a[:3] == b[:3] and a[8:] == b[8:] and a[3:8] == pytest.approx(b[3:8], abs=1e-4)
    assert {r for r in created if r[:2] != lost} <= set(rows(db, "SELECT run_id, item_id, position, created_utc "
                                                                 "FROM document_use"))


def test_limit_mode_and_the_api(store, capsys):
    from engine import api

    db, experiment_id, _ = store
    assert cli("used", "--experiment", experiment_id, "--mode", "base", "--mode", "cf", "--limit", "2",
               "--db", str(db), *COMMON) == 0
    out = capsys.readouterr()
    assert "4 answers x (shown documents + 2) = 24 forward passes" in out.err
    assert "CAB split" in out.out and "CAB on used" in out.out
    first = {(r, i) for r, i in rows(db, "SELECT run_id, item_id FROM (SELECT g.run_id, g.item_id, row_number() OVER "
                                         "(PARTITION BY g.run_id ORDER BY g.created_utc, g.item_id) AS k FROM "
                                         "generations g JOIN runs r USING (run_id) WHERE r.rag_mode <> 'vanilla') "
                                         "WHERE k <= 2")}
    assert set(rows(db, "SELECT DISTINCT run_id, item_id FROM document_use")) == first
    # The API: the vanilla run by id, a larger threshold; progress per answer, stages as propensity's.
    (vanilla,) = rows(db, "SELECT run_id FROM runs WHERE rag_mode = 'vanilla'")[0]
    done: list[int] = []
    stages: list[str] = []
    result = api.used(api.UsedRequest(db=db, runs=(vanilla,), device="cpu", quantize="none", dtype="float32",
                                      limit=1, threshold=2.0), progress=done.append, stage=stages.append)
    assert sum(done) == result.n_measured_now == 1 and stages[-1] == "reading"
    assert result.cab is None and "base and a cf run" in (result.cab_note or "")
    assert [t for t, _ in result.runs[0].used_share_at] == [0.5, 2.0, 8.0]


def _one_line_error(capsys, *args: str) -> str:
    assert cli("used", *args) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in captured.err
    return err


def test_bad_inputs_get_one_line(store, tmp_path, capsys):
    db, experiment_id, _ = store
    target = ("--experiment", experiment_id, "--db", str(db))
    assert "no experiment 'nope'" in _one_line_error(capsys, "--experiment", "nope", "--db", str(db))
    assert "--threshold" in _one_line_error(capsys, *target, "--threshold", "0")
    assert "--limit" in _one_line_error(capsys, *target, "--limit", "0")
    assert "--batch-size" in _one_line_error(capsys, *target, "--batch-size", "0")
    assert "--mode goes with --experiment" in _one_line_error(capsys, "--runs", "x", "--mode", "cf", "--db", str(db))
    assert "no run 'x'" in _one_line_error(capsys, "--runs", "x", "--db", str(db))

    from store.db import connect

    with connect(db) as conn:
        conn.execute("""UPDATE runs SET config_json = json_merge_patch(config_json, '{"served": {"base_url": "x"}}')
                        WHERE rag_mode = 'base'""")
    assert "served model" in _one_line_error(capsys, *target)
    with connect(db) as conn:
        conn.execute("UPDATE generations SET prompt = NULL")
    assert "no answer can be read: 12 with no stored prompt" in _one_line_error(capsys, *target, "--model", "x")
    with connect(db) as conn:
        conn.execute("DELETE FROM citations")
        conn.execute("DELETE FROM generations")
    assert "has no answers to read" in _one_line_error(capsys, *target)
    assert rows(db, "SELECT count(*) FROM document_use") == [(0,)]


def test_a_cancel_between_answers_keeps_what_was_stored(store):
    from engine.errors import RunCancelled
    from engine.usecases.judges import used as usecase

    db, experiment_id, _ = store
    request = usecase.UsedRequest(db=db, experiment=experiment_id, modes=("vanilla",), device="cpu", quantize="none")
    with pytest.raises(RunCancelled):
        usecase.used(request, stop=lambda: True)  # before loading: nothing written
    assert rows(db, "SELECT count(*) FROM document_use") == [(0,)]
    done: list[int] = []
    with pytest.raises(RunCancelled, match="stopped after 1 answer"):
        usecase.used(request, progress=done.append, stop=lambda: bool(done))
    assert rows(db, "SELECT count(DISTINCT item_id) FROM document_use") == [(1,)]
    assert usecase.used(request).n_measured_now == 3
    assert not math.isnan(usecase.used(request).runs[0].mean_sufficiency)


def test_mean_sufficiency_is_over_the_answers_that_cite():
    """An answer citing nothing has no cited documents to keep: its "only cited" prompt holds
    none, another quantity. The mean leaves it out; with no citing answer it is undefined."""
    from types import SimpleNamespace

    from engine.commands.used import format_text
    from engine.usecases.judges.used_figures import UsedResult, _run_use

    def row(item, position, sufficiency, cited):  # stored_document_use's columns
        return ("r", item, position, -1.0, -2.0, -1.5, 0.5, sufficiency, cited)

    rows = {"q1": [row("q1", 1, 4.0, True), row("q1", 2, 4.0, False)],
            "q2": [row("q2", 1, 5.0, False), row("q2", 2, 5.0, True)],
            "q3": [row("q3", 1, 30.0, False), row("q3", 2, 30.0, False)]}  # cites nothing
    run = SimpleNamespace(run_id="r", rag_mode="base")
    use = _run_use(run, rows, 0.1)
    assert (use.mean_sufficiency, use.n_citing, use.n_answers) == (4.5, 2, 3)
    silent = _run_use(run, {"q3": rows["q3"]}, 0.1)
    assert math.isnan(silent.mean_sufficiency) and silent.n_citing == 0
    text = format_text(UsedResult("m", 0.1, (use, silent), None, None, 0, ()))
    assert "mean sufficiency +4.500 nats over the 2 answers that cite" in text
    assert "mean sufficiency (undefined: no answer cites a shown document)" in text
