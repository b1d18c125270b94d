"""`python -m engine verify --judge nli:MODEL`: an NLI model judges the same (sentence, cited document)
pairs as the LLM judge, into the same table. Tiny random-weight models of the real
architectures (tests/support/nli_models.py) load through from_pretrained like a Hub model."""

from __future__ import annotations

import json

import pytest

from engine.errors import UserError
from engine.judges.nli import nli_mapping
from tests.support.helpers import cli, copy_store, rows
from tests.support.nli_models import NLI_LABELS, answered_store, write_nli_model


@pytest.fixture(scope="module")
def answered(tmp_path_factory, tiny_llama_dir):
    return answered_store(tmp_path_factory.mktemp("verify-nli"), tiny_llama_dir)


@pytest.fixture
def store(answered, tmp_path):
    db, experiment_id, runs = answered
    return copy_store(db, tmp_path / "s.duckdb"), experiment_id, runs


def direct_probabilities(folder, premise: str, hypothesis: str, max_length: int = 64) -> list[float]:
    """transformers run directly on one pair: the softmax over the model's labels."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    inputs = tok(premise, hypothesis, truncation="only_first", max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        return torch.softmax(model(**inputs).logits, dim=-1)[0].tolist()


def test_label_mapping_reads_the_config_and_refuses_unnamed_labels():
    assert nli_mapping(NLI_LABELS, "m") == (("entailment", "attributable"), ("neutral", "extrapolatory"),
                                            ("contradiction", "contradictory"))
    assert nli_mapping({0: "ENTAILMENT", 1: "NOT_ENTAILMENT"}, "m") == (("ENTAILMENT", "attributable"),
                                                                        ("NOT_ENTAILMENT", "extrapolatory"))
    assert nli_mapping({0: "CONTRADICTION", 1: "Neutral", 2: "Entailment"}, "m")[2] == ("Entailment", "attributable")
    with pytest.raises(UserError, match=r"^model m's labels \(LABEL_0, LABEL_1, LABEL_2\) name no entailment class$"):
        nli_mapping({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}, "m")


@pytest.mark.parametrize("arch", ["bert", "roberta", "deberta-v2"])
def test_nli_judge_stores_what_transformers_computes_and_resumes(store, tmp_path, arch, capsys):
    db, experiment_id, runs = store
    model = write_nli_model(tmp_path / arch, arch)
    judge = f"nli:{model}"
    assert cli("verify", "--experiment", experiment_id, "--judge", judge, "--batch-size", "5", "--db", str(db)) == 0
    out = capsys.readouterr().out
    assert out.count(f"verified 12 citations with {judge}") == 3
    assert f"{judge}: 0 of 36 pairs had their document cut" in out
    table = rows(db, "SELECT run_id, item_id, sentence_index, position, doc_id, prompt, raw_output, class, "
                     "p_attributable, p_extrapolatory, p_contradictory FROM verifications WHERE judge_model = ?", [judge])
    assert len(table) == 36
    classes = {"entailment": "attributable", "neutral": "extrapolatory", "contradiction": "contradictory"}
    for _run_id, item_id, sentence, _position, doc_id, prompt, raw, label, *ps in table:
        pair = json.loads(prompt)
        i, j = (int(x) for x in doc_id[1:].split("-d"))
        title = f"Topic {i}: " if j == 0 else ""  # the cited document as shown, no label
        assert pair["premise"] == f"{title}Passage {j} about topic {i}; the answer is {i * 7 + j}."
        claim = f"The number is {item_id}." if sentence == 0 else "It is also given in."
        assert pair["hypothesis"] == f"what is the number for topic {item_id[1:]} {claim}"
        expected = direct_probabilities(model, pair["premise"], pair["hypothesis"])
        stored = json.loads(raw)
        assert list(stored) == ["entailment", "neutral", "contradiction"]
        assert list(stored.values()) == pytest.approx(expected, abs=1e-5)
        assert ps == pytest.approx(expected, abs=1e-5)  # one label per class: the sums are the labels'
        assert label == classes[max(stored, key=stored.get)]
    assert len({r[7] for r in table}) >= 2  # the random weights do not give every pair one verdict
    (name, kind, model_id, mapping, provenance), = rows(db, "SELECT judge, kind, model_id, mapping, provenance FROM judges")
    assert (name, kind, model_id) == (judge, "nli", str(model))
    assert json.loads(mapping) == {"entailment": "attributable", "neutral": "extrapolatory",
                                   "contradiction": "contradictory"}
    import transformers

    assert json.loads(provenance)["transformers"] == transformers.__version__
    # Again: nothing left, nothing written, the judges row kept.
    assert cli("verify", "--experiment", experiment_id, "--judge", judge, "--db", str(db)) == 0
    assert capsys.readouterr().out.count(f"no citations left to verify by {judge}") == 3
    assert rows(db, "SELECT count(*) FROM verifications")[0][0] == 36


def test_a_binary_nli_judge_never_says_contradictory_and_its_api_is_the_same(store, tmp_path):
    from engine import api

    db, experiment_id, runs = store
    model = write_nli_model(tmp_path / "rte", "bert", {0: "ENTAILMENT", 1: "NOT_ENTAILMENT"}, seed=3)
    result = api.verify(api.VerifyRequest(db, runs=(runs["base"],), judges=(f"nli:{model}",), limit=2))
    assert (result.label, result.n_done, result.n_truncated) == (f"nli:{model}", 6, 0)
    table = rows(db, "SELECT class, p_attributable, p_extrapolatory, p_contradictory, raw_output FROM verifications")
    assert len(table) == 6
    for label, att, ext, con, raw in table:
        probs = json.loads(raw)
        assert con == 0 and att == pytest.approx(probs["ENTAILMENT"]) and ext == pytest.approx(probs["NOT_ENTAILMENT"])
        assert label == ("attributable" if att > ext else "extrapolatory")
    # The rest of the run: only what is missing.
    again = api.verify_judges(api.VerifyRequest(db, runs=(runs["base"],), judges=(f"nli:{model}",)))
    assert [r.n_done for r in again] == [6]


def test_a_long_document_is_cut_and_counted(store, tmp_path, capsys):
    db, experiment_id, runs = store
    model = write_nli_model(tmp_path / "short", "deberta-v2", max_length=28)
    judge = f"nli:{model}"
    assert cli("verify", "--run", runs["cf"], "--judge", judge, "--db", str(db)) == 0
    table = rows(db, "SELECT prompt, raw_output FROM verifications")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    pairs = [json.loads(p) for p, _ in table]
    n_long = sum(len(tok(p["premise"], p["hypothesis"])["input_ids"]) > 28 for p in pairs)
    assert 0 < n_long < len(pairs)
    assert f"{judge}: {n_long} of 12 pairs had their document cut" in capsys.readouterr().out
    for pair, (_, raw) in zip(pairs, table, strict=True):
        expected = direct_probabilities(model, pair["premise"], pair["hypothesis"], max_length=28)
        assert list(json.loads(raw).values()) == pytest.approx(expected, abs=1e-5)


def test_a_judge_that_cannot_load_writes_nothing(store, tmp_path, capsys):
    db, experiment_id, runs = store
    unnamed = write_nli_model(tmp_path / "unnamed", "bert", {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})
    before = db.read_bytes()
    assert cli("verify", "--experiment", experiment_id, "--judge", f"nli:{unnamed}", "--db", str(db)) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: model {unnamed}'s labels (LABEL_0, LABEL_1, LABEL_2) name no entailment class"
    assert cli("verify", "--experiment", experiment_id, "--judge", f"nli:{tmp_path / 'none'}", "--db", str(db)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: unknown model '{tmp_path / 'none'}': not a local folder") and "\n" not in err
    assert cli("verify", "--experiment", experiment_id, "--judge", "nli:", "--db", str(db)) == 2
    assert "--judge needs a model" in capsys.readouterr().err
    # A judge that loads, then one that cannot (misspelt): refused before the first one writes.
    good = write_nli_model(tmp_path / "good", "bert")
    for second in (f"nli:{tmp_path / 'nlii'}", f"llm:{tmp_path / 'misspelt'}"):
        assert cli("verify", "--experiment", experiment_id, "--judge", f"nli:{good}", "--judge", second,
                   "--device", "cpu", "--db", str(db)) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: unknown model ") and ("misspelt" in err or "nlii" in err), err
        assert "\n" not in err
    assert db.read_bytes() == before


def test_the_llm_judge_and_an_nli_judge_judge_the_same_pairs(store, tmp_path, tiny_llama_dir, capsys):
    db, experiment_id, runs = store
    model = write_nli_model(tmp_path / "bert", "bert")
    assert cli("verify", "--run", runs["base"], "--model", str(tiny_llama_dir), "--judge", f"nli:{model}",
               "--limit", "2", "--max-new-tokens", "3", "--device", "cpu", "--quantize", "none", "--db", str(db)) == 0
    out = capsys.readouterr().out
    assert f"verified 6 citations with {tiny_llama_dir}" in out and f"verified 6 citations with nli:{model}" in out
    judged: dict[str, set] = {}
    for judge, *key in rows(db, "SELECT judge_model, item_id, sentence_index, position FROM verifications"):
        judged.setdefault(judge, set()).add(tuple(key))
    assert len(judged) == 2 and judged[str(tiny_llama_dir)] == judged[f"nli:{model}"]
    assert sorted(rows(db, "SELECT judge, kind, mapping FROM judges")) == sorted(
        [(str(tiny_llama_dir), "llm", "attrscore"), (f"nli:{model}", "nli", json.dumps(
            {"entailment": "attributable", "neutral": "extrapolatory", "contradiction": "contradictory"}))])


def test_a_stop_between_batches_keeps_what_was_judged_and_says_how_much(store, tmp_path):
    from engine import api
    from engine.errors import RunCancelled

    db, experiment_id, runs = store
    model = write_nli_model(tmp_path / "stop", "bert", NLI_LABELS)
    judged: list[int] = []
    request = api.VerifyRequest(db, runs=(runs["base"],), judges=(f"nli:{model}",), limit=2, batch_size=2)
    with pytest.raises(RunCancelled, match="^stopped after 2 verifications$"):
        api.verify_judges(request, progress=judged.append, stop=lambda: bool(judged))
    assert judged == [2] and rows(db, "SELECT count(*) FROM verifications")[0][0] == 2
