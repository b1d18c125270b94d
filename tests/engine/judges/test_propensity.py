"""The citation propensity probe (engine/judges/propensity.py) and propensity CAB (`python -m engine
propensity`): the probe against a plain forward pass, "1" and "10" told apart in every tokenizer,
batch-size invariance, the command end to end on a tiny model (figures recomputed from the
stored rows, resume without duplicates), and bad inputs in one line."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from engine.judges.propensity import candidate_tokens, citation_sites, probe_citations, relevant_mass
from tests.support.helpers import cli, make_ranked_dataset, rows

ANSWER = "The tower [1][2] was built in 1889 [10], see also [3, 4] and.[12] or [5-6]."
PROMPT = "Document [1](The tower was built in 1889.) Question: when was the tower built?."


# ------------------------------------------------------------------ sites


@pytest.mark.parametrize("answer, expected", [
    ("", ()),
    ("No citation here.", ()),
    ("[1]", (0,)),
    ("Paris [1][2].", (6, 9)),
    ("Paris [1, 2] and [3-4].", (6, 17)),
    ("In [2019] a [x] and [1 ]", (3, 20)),  # "[2019]" is a mark to the parser; "[x]" is not
    ("a [[1]]", (3,)),
])
def test_citation_sites_are_the_brackets_that_open_marks(answer, expected):
    assert citation_sites(answer) == expected
    assert all(answer[s] == "[" for s in expected)


def test_relevant_mass_is_the_mean_over_sites():
    assert relevant_mass([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]], [True, False, True]) == pytest.approx((0.75 + 0.2) / 2)


# ------------------------------------------------------------------ tiny models of three tokenizers

TOKENIZERS = [(arch, merged) for arch in ("llama", "mistral", "qwen2") for merged in (False, True)]


@pytest.fixture(scope="module")
def loaded_models(tmp_path_factory):
    from engine.generation.models import load_model
    from engine.generation.tiny_model import write_tiny_model

    out = {}
    for arch, merged in TOKENIZERS:
        path = write_tiny_model(tmp_path_factory.mktemp(f"{arch}-{merged}"), arch=arch, merged_citation_tokens=merged)
        out[arch, merged] = load_model(str(path), quantize="none", device="cpu", dtype="float32")
    return out


def _plain_logprob(loaded, prompt: str, prefix: str, n: int, n_shown: int) -> float:
    """log P("[n]" | prompt, prefix) from one unbatched, unpadded forward pass of the full text."""
    import torch

    from engine.generation.models import chat_input_ids

    tokens = candidate_tokens(loaded.tokenizer, prefix, n_shown)
    tail = list(tokens.continuations[n - 1])
    ids = chat_input_ids(loaded, prompt) + list(tokens.shared) + tail
    with torch.no_grad():
        logits = loaded.model(torch.tensor([ids])).logits[0]
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    first = len(ids) - len(tail)
    return float(sum(logprobs[first + j - 1, t] for j, t in enumerate(tail)))


@pytest.mark.parametrize("arch, merged", TOKENIZERS)
@pytest.mark.parametrize("answer", [ANSWER, "[2] opens the answer, then [11]."], ids=["marks", "opening"])
def test_probe_equals_a_plain_forward_pass(loaded_models, arch, merged, answer):
    loaded = loaded_models[arch, merged]
    probes = probe_citations(loaded, PROMPT, answer, 12, batch_size=5)
    assert [p.offset for p in probes] == list(citation_sites(answer))
    assert [p.site_index for p in probes] == list(range(len(probes)))
    for probe in probes:
        assert len(probe.logprobs) == len(probe.probabilities) == 12
        assert sum(probe.probabilities) == pytest.approx(1.0, abs=1e-9)
        for n in (1, 2, 10, 12):
            plain = _plain_logprob(loaded, PROMPT, answer[: probe.offset], n, 12)
            assert probe.logprobs[n - 1] == pytest.approx(plain, abs=1e-4)
        expected = [math.exp(v) for v in probe.logprobs]
        assert probe.probabilities == pytest.approx([e / sum(expected) for e in expected], rel=1e-6)


@pytest.mark.parametrize("arch, merged", TOKENIZERS)
def test_one_and_ten_are_told_apart(loaded_models, arch, merged):
    loaded = loaded_models[arch, merged]
    tokenizer = loaded.tokenizer
    for offset in citation_sites(ANSWER):
        prefix = ANSWER[:offset]
        tokens = candidate_tokens(tokenizer, prefix, 12)
        assert len(set(tokens.continuations)) == 12
        shared_text = tokenizer.decode(list(tokens.shared))
        for n, continuation in enumerate(tokens.continuations, start=1):
            text = tokenizer.decode(list(continuation))
            # Each continuation holds its own full "[n]" and nothing after it...
            assert text.endswith(f"[{n}]"), (arch, merged, text)
            # ...and together with the shared context it is exactly the text scored.
            assert shared_text + text == prefix + f"[{n}]"
        if merged:  # "[1]" and "[10]" are single added tokens there
            assert tokenizer.convert_ids_to_tokens(list(tokens.continuations[9]))[-1] == "[10]"
    probe = probe_citations(loaded, PROMPT, ANSWER, 12, batch_size=8)[2]  # the site of "[10]"
    assert probe.probabilities[0] != probe.probabilities[9]
    assert probe.logprobs[0] != probe.logprobs[9]


@pytest.mark.parametrize("arch, merged", [("llama", False), ("qwen2", True)])
def test_batch_size_and_the_shared_prompt_do_not_change_the_numbers(loaded_models, arch, merged):
    loaded = loaded_models[arch, merged]
    reference = probe_citations(loaded, PROMPT, ANSWER, 12, batch_size=1, reuse_prompt=False)
    for batch_size, reuse in ((1, True), (3, True), (16, True), (200, True), (7, False)):
        probes = probe_citations(loaded, PROMPT, ANSWER, 12, batch_size=batch_size, reuse_prompt=reuse)
        assert [p.offset for p in probes] == [p.offset for p in reference]
        for a, b in zip(probes, reference, strict=True):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
            assert a.probabilities == pytest.approx(b.probabilities, abs=1e-5)


def test_a_cache_that_cannot_be_copied_per_row_reads_whole_rows(loaded_models, monkeypatch):
    from transformers.cache_utils import DynamicCache

    loaded = loaded_models["llama", False]
    reference = probe_citations(loaded, PROMPT, ANSWER, 5, batch_size=4)
    owner = next(c for c in DynamicCache.__mro__ if "batch_repeat_interleave" in vars(c))
    monkeypatch.delattr(owner, "batch_repeat_interleave")
    probes = probe_citations(loaded, PROMPT, ANSWER, 5, batch_size=4)
    for a, b in zip(probes, reference, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_an_answer_without_citations_has_no_sites(loaded_models):
    assert probe_citations(loaded_models["llama", False], PROMPT, "no marks here", 5, batch_size=4) == ()


# ------------------------------------------------------------------ end to end

COMMON = ("--device", "cpu", "--quantize", "none", "--dtype", "float32")


@pytest.fixture(scope="module")
def experiment(tmp_path_factory, tiny_llama_merged_dir):
    """A gender experiment of 6 items whose vanilla answers cite (near-uniform sampling makes the
    merged "[n]" tokens come up), its runs by mode."""
    folder = tmp_path_factory.mktemp("propensity")
    dataset = make_ranked_dataset(folder / "d.jsonl", 6)
    db = folder / "r.duckdb"
    assert cli("run", "--model", str(tiny_llama_merged_dir), "--dataset", str(dataset), "--db", str(db),
               "--metadata", "gender", "--max-new-tokens", "32", "--sample", "--temperature", "8", "--seed", "1",
               "--batch-size", "6", *COMMON[:4]) == 0
    (experiment_id,) = {r for (r,) in rows(db, "SELECT experiment_id FROM runs")}
    return db, experiment_id


@pytest.fixture
def store(experiment, tmp_path):
    db, experiment_id = experiment
    copy = tmp_path / "s.duckdb"
    shutil.copy(db, copy)
    return copy, experiment_id


def _direct(db, experiment_id) -> tuple[list[float], list[float]]:
    """Per item, from the stored rows alone: 100 x the mean over sites of the mass on relevant documents."""
    relevance = {}
    for item_id, shown, documents in rows(
            db, "SELECT g.item_id, g.shown_doc_ids, i.documents FROM generations g JOIN runs r USING (run_id) "
                "JOIN items i ON i.dataset_sha = r.dataset_sha AND i.item_id = g.item_id "
                "WHERE r.experiment_id = ? AND r.rag_mode = 'vanilla'", [experiment_id]):
        relevant = {d["id"] for d in documents if d["relevant"]}
        relevance[item_id] = [d in relevant for d in shown]
    masses: dict[tuple[str, str], list[float]] = {}
    for mode, item_id, position_probabilities in rows(
            db, "SELECT rag_mode, item_id, list(probability ORDER BY position) FROM citation_propensities "
                "WHERE experiment_id = ? GROUP BY rag_mode, item_id, site_index", [experiment_id]):
        mass = sum(p for p, rel in zip(position_probabilities, relevance[item_id], strict=True) if rel)
        masses.setdefault((mode, item_id), []).append(mass)
    items = sorted({i for (_, i) in masses})
    base = [100 * sum(masses["base", i]) / len(masses["base", i]) for i in items]
    cf = [100 * sum(masses["cf", i]) / len(masses["cf", i]) for i in items]
    return base, cf


def test_propensity_end_to_end_matches_the_stored_rows_and_resumes(store, capsys):
    from scipy import stats as scipy_stats

    from engine.judges.propensity import citation_sites
    from engine.statistics.stats import paired_test

    db, experiment_id = store
    assert cli("propensity", "--experiment", experiment_id, "--db", str(db), "--batch-size", "7", "--json",
               *COMMON) == 0
    report = json.loads(capsys.readouterr().out)
    stored = rows(db, "SELECT rag_mode, item_id, site_index, position, logprob, probability, probe_model "
                      "FROM citation_propensities ORDER BY ALL")
    answers = dict(rows(db, "SELECT g.item_id, g.answer FROM generations g JOIN runs r USING (run_id) "
                            "WHERE r.rag_mode = 'vanilla'"))
    citing = {i for i, a in answers.items() if citation_sites(a)}
    assert len(citing) >= 2, "the tiny model's sampled answers should cite"
    assert {r[1] for r in stored} == citing
    assert report["n_items"] == len(citing) and report["n_probed_now"] == len(citing)
    assert report["skipped"] == ({"the vanilla answer cites nothing": 6 - len(citing)} if len(citing) < 6 else {})
    # Every site of every probed answer, 4 candidates each, in both modes.
    assert len(stored) == 2 * 4 * sum(len(citation_sites(answers[i])) for i in citing)
    assert {r[6] for r in stored} == {rows(db, "SELECT any_value(model) FROM runs")[0][0]}

    base, cf = _direct(db, experiment_id)
    expected = paired_test(base, cf)
    cab = report["propensity_cab"]
    assert cab["n"] == len(citing)
    assert cab["value"] == pytest.approx(expected.mean, abs=1e-9)
    assert (cab["ci_low"], cab["ci_high"]) == pytest.approx((expected.ci_low, expected.ci_high), abs=1e-9)
    # The paired t-test is scipy's.
    scipy_t = scipy_stats.ttest_rel(base, cf)
    assert cab["t"] == pytest.approx(float(scipy_t.statistic), rel=1e-6)
    assert cab["p"] == pytest.approx(float(scipy_t.pvalue), rel=1e-6)
    assert report["mean_mass"]["base"] == pytest.approx(sum(base) / len(base) / 100)
    assert report["mean_mass"]["cf"] == pytest.approx(sum(cf) / len(cf) / 100)

    # The text report prints the same figure.
    assert cli("propensity", "--experiment", experiment_id, "--db", str(db), *COMMON) == 0
    text = capsys.readouterr().out
    assert f"propensity CAB: {expected.mean:+.2f}  95% CI [{expected.ci_low:+.2f}, {expected.ci_high:+.2f}]" in text
    assert f"items probed: {len(citing)} (0 in this run" in text

    # A re-run probes nothing and stores nothing twice; losing an item's rows (a kill before its
    # batch committed) probes that item alone again, to the same numbers.
    lost = sorted(citing)[0]
    with_created = rows(db, "SELECT item_id, created_utc FROM citation_propensities")
    from store.db import connect

    with connect(db) as conn:
        conn.execute("DELETE FROM citation_propensities WHERE item_id = ?", [lost])
    assert cli("propensity", "--experiment", experiment_id, "--db", str(db), "--batch-size", "3", "--json",
               *COMMON) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["n_probed_now"] == 1
    restored = rows(db, "SELECT rag_mode, item_id, site_index, position, logprob, probability, probe_model "
                        "FROM citation_propensities ORDER BY ALL")
    assert len(restored) == len(stored)
    for a, b in zip(restored, stored, strict=True):
        assert a[:4] == b[:4] and a[4] == pytest.approx(b[4], abs=1e-4) and a[5] == pytest.approx(b[5], abs=1e-5)
    kept = {(i, t) for i, t in with_created if i != lost}
    assert kept <= set(rows(db, "SELECT item_id, created_utc FROM citation_propensities"))
    assert again["propensity_cab"]["value"] == pytest.approx(cab["value"], abs=1e-3)


def test_limit_probes_the_first_answers_and_the_api_agrees(store) -> None:
    from engine import api

    db, experiment_id = store
    request = api.PropensityRequest(db=db, experiment=experiment_id, device="cpu", quantize="none", dtype="float32",
                                    limit=3, batch_size=4)
    stages: list[str] = []
    done: list[int] = []
    result = api.propensity(request, progress=done.append, stage=stages.append)
    first = [i for (i,) in rows(db, "SELECT g.item_id FROM generations g JOIN runs r USING (run_id) WHERE "
                                    "r.rag_mode = 'vanilla' ORDER BY g.created_utc, g.item_id LIMIT 3")]
    assert {p.item_id for p in result.items} | {i for i, _ in result.skipped} == set(first)
    assert sum(done) == result.n_probed_now == len(result.items)
    assert stages[-1] == "probing" if result.items else stages == []
    # The rest comes on top, the first three are not probed again.
    full = api.propensity(api.PropensityRequest(db=db, experiment=experiment_id, device="cpu", quantize="none",
                                                dtype="float32"))
    assert full.n_probed_now == len(full.items) - len(result.items)


def test_an_item_that_does_not_fit_the_context_is_skipped(store):
    from dataclasses import replace

    from engine.generation.models import load_model
    from engine.usecases.judges import propensity as usecase

    db, experiment_id = store
    request = usecase.PropensityRequest(db=db, experiment=experiment_id, device="cpu", quantize="none")
    result = usecase.propensity(request, load=lambda model: replace(
        load_model(model, quantize="none", device="cpu"), context_length=20))
    assert result.cab is None and result.n_probed_now == 0
    assert result.skipped_by_reason["the prompt and answer exceed the model's context"] >= 2
    assert rows(db, "SELECT count(*) FROM citation_propensities") == [(0,)]


def test_a_cancel_between_batches_keeps_what_was_stored(store, monkeypatch):
    from engine.errors import RunCancelled
    from engine.usecases.judges import propensity as usecase

    db, experiment_id = store
    request = usecase.PropensityRequest(db=db, experiment=experiment_id, device="cpu", quantize="none")
    with pytest.raises(RunCancelled):
        usecase.propensity(request, stop=lambda: True)  # before loading: nothing written
    assert rows(db, "SELECT count(*) FROM citation_propensities") == [(0,)]

    monkeypatch.setattr(usecase, "ITEMS_PER_COMMIT", 1)
    done: list[int] = []
    with pytest.raises(RunCancelled, match="stopped after 1 item"):
        usecase.propensity(request, progress=done.append, stop=lambda: bool(done))
    assert rows(db, "SELECT count(DISTINCT item_id), count(DISTINCT rag_mode) FROM citation_propensities") == [(1, 2)]
    result = usecase.propensity(request)
    assert result.n_probed_now == len(result.items) - 1


# ------------------------------------------------------------------ bad inputs


def _one_line_error(capsys, *args: str) -> str:
    assert cli("propensity", *args) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in captured.err
    return err


def test_bad_inputs_get_one_line(store, tmp_path, capsys):
    db, experiment_id = store
    assert "no experiment 'nope'" in _one_line_error(capsys, "--experiment", "nope", "--db", str(db))
    assert "no database" in _one_line_error(capsys, "--experiment", "x", "--db", str(tmp_path / "none.duckdb"))
    assert "--batch-size" in _one_line_error(capsys, "--experiment", experiment_id, "--db", str(db), "--batch-size", "0")
    assert "--limit" in _one_line_error(capsys, "--experiment", experiment_id, "--db", str(db), "--limit", "0")
    missing = tmp_path / "no-such-model"
    assert "unknown model" in _one_line_error(capsys, "--experiment", experiment_id, "--db", str(db),
                                               "--model", str(missing), *COMMON)

    from store.db import connect

    with connect(db) as conn:
        conn.execute("""UPDATE runs SET config_json = json_merge_patch(config_json, '{"served": {"base_url": "x"}}')
                        WHERE rag_mode = 'base'""")
    assert "served model" in _one_line_error(capsys, "--experiment", experiment_id, "--db", str(db))
    with connect(db) as conn:
        conn.execute("DELETE FROM generations WHERE run_id IN (SELECT run_id FROM runs WHERE rag_mode = 'cf')")
        conn.execute("DELETE FROM runs WHERE rag_mode = 'cf'")
    assert "has no cf run" in _one_line_error(capsys, "--experiment", experiment_id, "--db", str(db))
    assert rows(db, "SELECT count(*) FROM citation_propensities") == [(0,)]


def test_items_whose_modes_showed_other_documents_are_skipped(store):
    from engine import api
    from store.db import connect

    db, experiment_id = store
    with connect(db) as conn:
        conn.execute("UPDATE generations SET shown_doc_ids = list_reverse(shown_doc_ids) "
                     "WHERE run_id IN (SELECT run_id FROM runs WHERE rag_mode = 'cf')")
    result = api.propensity(api.PropensityRequest(db=db, experiment=experiment_id, device="cpu", quantize="none"))
    assert result.cab is None and not result.items and result.n_probed_now == 0
    assert set(result.skipped_by_reason) <= {"the modes showed different documents or orders",
                                             "the vanilla answer cites nothing"}
    assert result.skipped_by_reason["the modes showed different documents or orders"] >= 2


def test_a_merge_carries_the_propensities_of_an_experiment_it_copies_whole(store, tmp_path, capsys):
    db, experiment_id = store
    assert cli("propensity", "--experiment", experiment_id, "--db", str(db), *COMMON) == 0
    probed = rows(db, "SELECT * EXCLUDE (created_utc) FROM citation_propensities ORDER BY ALL")
    assert probed
    target = tmp_path / "target.duckdb"
    capsys.readouterr()
    assert cli("merge", "--from", str(db), "--db", str(target)) == 0
    assert f"{len(probed)} citation propensity rows" in capsys.readouterr().out
    assert rows(target, "SELECT * EXCLUDE (created_utc) FROM citation_propensities ORDER BY ALL") == probed
    # Merging again copies nothing twice.
    assert cli("merge", "--from", str(db), "--db", str(target)) == 0
    assert rows(target, "SELECT count(*) FROM citation_propensities") == [(len(probed),)]
