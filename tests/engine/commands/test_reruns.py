"""`run --reruns K`: K more runs of each mode under the same configuration, stored as reruns of the
experiment, and `bias` printing each measure beside its rerun floor, equal to an independent
computation from the stored answers."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from engine.errors import FieldError
from engine.presentation.display import rerun_floor_lines
from engine.prompting.prompts import METADATA_TYPES, PromptConfig
from engine.running.run_request import RunRequest
from engine.usecases.bias.report import bias_report
from engine.usecases.runs.run import ExperimentRequest, RayOptions, run_experiment
from tests.support.helpers import make_dataset, rows


def write_citing_model(path: Path) -> Path:
    """A tiny Llama that, sampled, cites [1], [2] or [3] at random and stops at random: its answers
    cite, and they differ from run to run by the sampling seed alone (no label effect at all).

    Residual dimension 0 is 10 for every token and no layer writes it, the final norm keeps only
    that dimension, and the output layer reads only it: every logit is a fixed multiple of the same
    positive number, high for the three citation tokens and the end of turn, 0 for the rest."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.generation.tiny_model import write_tiny_model

    write_tiny_model(path, "llama", merged_citation_tokens=True)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    cites = tokenizer.convert_tokens_to_ids(["[1]", "[2]", "[3]"])
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 10.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        model.model.norm.weight.zero_()
        model.model.norm.weight[0] = 1.0
        model.lm_head.weight.zero_()
        model.lm_head.weight[cites, 0] = 3.0
        model.lm_head.weight[tokenizer.convert_tokens_to_ids("<|eot_id|>"), 0] = 2.8
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def citing(tmp_path_factory):
    from engine.generation.models import load_model

    folder = write_citing_model(tmp_path_factory.mktemp("citing"))
    return folder, load_model(str(folder), quantize="none", device="cpu")


def request(folder: Path, **changes) -> RunRequest:
    base = RunRequest(model=str(folder), modes=("vanilla", "base", "cf"),
                      prompt=PromptConfig(metadata=METADATA_TYPES["gender"]), quantize="none", device="cpu",
                      max_new_tokens=4, batch_size=8, sample=True, reruns=2)
    return dataclasses.replace(base, **changes)


def precision(db: Path, run_id: str) -> np.ndarray:
    """Per item (in id order) citation precision of one run, read from the stored answers."""
    return np.array([p for (p,) in rows(db, "SELECT precision FROM query_metrics WHERE run_id = ? ORDER BY item_id",
                                        [run_id])])


@pytest.fixture(scope="module")
def store(citing, tmp_path_factory):
    folder, loaded = citing
    tmp = tmp_path_factory.mktemp("reruns")
    dataset, db = make_dataset(tmp / "d.jsonl", 8), tmp / "runs.duckdb"
    seen = []
    outcome = run_experiment(ExperimentRequest(request(folder), dataset, db), load=lambda r: loaded,
                             progress=seen.append)
    return db, dataset, outcome, seen


def test_reruns_are_stored_marked_and_costed_before_the_work(store):
    db, _, outcome, seen = store
    assert len(outcome.reruns) == 2 and all(len(r.runs) == 3 for r in outcome.reruns)
    marks = rows(db, "SELECT json_extract_string(config_json, '$.rerun.of'), json_extract_string(config_json, "
                     "'$.rerun.k'), json_extract_string(config_json, '$.rerun.sampling_seed'), count(*) FROM runs "
                     "WHERE json_extract_string(config_json, '$.rerun.of') IS NOT NULL GROUP BY ALL ORDER BY 2")
    assert [(of, k, n) for of, k, _, n in marks] == [(outcome.experiment_id, "1", 3), (outcome.experiment_id, "2", 3)]
    assert len({seed for _, _, seed, _ in marks}) == 2  # each rerun samples with its own seed
    planned = [e for e in seen if e.stage == "planned"]
    assert planned[0].message == "reruns: 2 x 24 answers (vanilla+base+cf) = 48 more answers, 48 of them to generate now"
    assert planned[0].total == 72
    # No listing counts a rerun as an experiment of its own.
    from store.queries import experiment_choices, experiment_listing, experiment_page

    assert [e.experiment_id for e in experiment_listing(db)] == [outcome.experiment_id]
    assert [e.experiment_id for e in experiment_choices(db)] == [outcome.experiment_id]
    assert experiment_page(db, 0, 10).total == 1


def test_the_floor_equals_an_independent_computation_from_the_stored_answers(store):
    from engine.statistics.rerun_floor import floor_test

    db, _, outcome, _ = store
    report = bias_report(db, outcome.experiment_id).report
    runs = {r.mode: r.run_id for r in outcome.runs}
    again = {mode: [next(r.run_id for r in rerun.runs if r.mode == mode) for rerun in outcome.reruns]
             for mode in ("vanilla", "base")}
    v, b = precision(db, runs["vanilla"]), precision(db, runs["base"])
    v_again = [precision(db, run) for run in again["vanilla"]]
    b_again = [precision(db, run) for run in again["base"]]
    floors = {(f["measure"], f["metric"]): f for f in report["rerun_floors"]}
    cas = floors[("CAS", "precision")]
    assert cas["value"] == pytest.approx(100 * np.mean([np.abs(v - x) for x in v_again]))
    assert cas["n_reruns"] == 2 and cas["mode"] == "vanilla"
    cab = floors[("CAB", "precision")]
    assert cab["value"] == pytest.approx(100 * np.mean(b - np.mean(b_again, axis=0)))
    assert cab["p"] is None and cab["verdict"] is None

    # The CAS test on the same stored values (floor_test is scipy's, tests/engine/statistics/test_rerun_floor.py).
    test = floor_test(100 * v, 100 * b, [100 * x for x in v_again])
    assert cas["p"] == test.p and cas["n_differ"] == test.n_differ
    # The model ignores its prompt: whatever CAS reads, it is not above its floor.
    assert cas["verdict"].startswith("not above its floor (one-sided permutation p >= 0.05)")
    lines = report["rerun_lines"]
    assert lines[0].startswith("CAS precision ") and "; rerun floor " in lines[0]


def test_bias_prints_the_floors_and_a_store_without_reruns_says_how_to_get_one(store, citing, tmp_path, capsys):
    from engine.__main__ import main as cli

    db, dataset, outcome, _ = store
    assert cli(["bias", "--experiment", outcome.experiment_id, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"rerun floor (2 reruns of this experiment: {', '.join(r.experiment_id for r in outcome.reruns)}" in out
    assert "  CAS recall " in out and "  CAB f1 " in out

    folder, loaded = citing
    lone = tmp_path / "lone.duckdb"
    first = run_experiment(ExperimentRequest(request(folder, reruns=0), dataset, lone), load=lambda r: loaded)
    assert cli(["bias", "--experiment", first.experiment_id, "--db", str(lone)]) == 0
    assert "no rerun floor: `run --reruns 1` measures it" in capsys.readouterr().out


def test_the_same_command_again_resumes_every_rerun_and_adds_nothing(store, citing):
    db, dataset, outcome, _ = store
    folder, loaded = citing
    before = rows(db, "SELECT count(*) FROM generations")
    again = run_experiment(ExperimentRequest(request(folder), dataset, db), load=lambda r: loaded)
    assert again.experiment_id == outcome.experiment_id
    assert [r.experiment_id for r in again.reruns] == [r.experiment_id for r in outcome.reruns]
    assert all(run.status == "already complete" for r in (again, *again.reruns) for run in r.runs)
    assert rows(db, "SELECT count(*) FROM generations") == before


def test_merge_carries_reruns_with_their_marks(store, tmp_path):
    from engine.usecases.storage.merge import merge

    db, _, outcome, _ = store
    target = tmp_path / "target.duckdb"
    merge(target, db)
    report = bias_report(target, outcome.experiment_id).report
    assert report["rerun_experiments"] == [r.experiment_id for r in outcome.reruns]
    assert report["rerun_lines"] == bias_report(db, outcome.experiment_id).report["rerun_lines"]


@pytest.mark.parametrize(("changes", "words"), [
    ({"reruns": 11}, "reruns must be between 0 and 10, not 11"),
    ({"reruns": -1}, "reruns must be between 0 and 10, not -1"),
])
def test_out_of_range_reruns_are_refused_before_anything_is_written(citing, tmp_path, changes, words):
    folder, loaded = citing
    db = tmp_path / "runs.duckdb"
    with pytest.raises(FieldError) as caught:
        run_experiment(ExperimentRequest(request(folder, **changes), make_dataset(tmp_path / "d.jsonl", 2), db),
                       load=lambda r: loaded)
    assert caught.value.worded(lambda field: field) == words
    assert not db.exists()


def test_reruns_on_ray_are_refused_in_one_line(citing, tmp_path):
    folder, loaded = citing
    with pytest.raises(FieldError, match="not on Ray"):
        run_experiment(ExperimentRequest(request(folder), make_dataset(tmp_path / "d.jsonl", 2), tmp_path / "r.duckdb",
                                         ray=RayOptions()), load=lambda r: loaded)


def test_a_rerun_cuts_its_batches_another_way():
    from engine.generation.batching import cut_batches

    prompts = [[1] * n for n in (5, 9, 7, 9, 3, 8, 2, 6)]
    first = cut_batches(prompts, 3, False)
    rerun = cut_batches(prompts, 3, False, rerun=1)
    assert sorted(itertools.chain(*rerun)) == list(range(8))
    assert [sorted(b) for b in rerun] != [sorted(b) for b in first]
    assert len(rerun[0]) == 1  # the cuts moved by an offset
    assert cut_batches(prompts, 3, False, rerun=1) == rerun  # seeded


def test_the_api_gives_the_floors_beside_cas_and_cab(store):
    from engine import api

    db, _, outcome, _ = store
    report = api.bias_report(db, outcome.experiment_id)
    floors = report.floors
    assert list(floors["measure"]) == list(report.results["measure"])
    assert "rerun floor (2 reruns" in repr(report)
    # The Bias page holds the floors as values; a notebook's page gives them as `bias` prints them.
    (experiment,) = api.bias_page(db, [outcome.experiment_id]).experiments
    assert (experiment.rerun_experiments, experiment.rerun_lines) == (tuple(report.report["rerun_experiments"]),
                                                                      tuple(report.report["rerun_lines"]))
    assert list(experiment.floor_lines) == rerun_floor_lines(report.report) and len(experiment.floor_lines) == 7
    assert experiment.floor_lines[0].startswith("rerun floor (2 reruns of this experiment: ")
    bias = api.evaluate(db, experiment=outcome.experiment_id).bias
    assert list(bias["rerun_floor"]) == pytest.approx(list(floors["value"]), nan_ok=True)
    cas = bias[(bias.measure == "CAS") & (bias.metric == "precision")].iloc[0]
    assert cas["rerun_floor_verdict"] == floors.iloc[0]["verdict"]


def test_the_apps_bias_tab_shows_the_floors_under_each_experiment(store):
    from demo.handlers.bias import bias_page

    db, _, outcome, _ = store
    summary = bias_page(db, outcome.experiment_id).summary
    assert "  - rerun floor (2 reruns of this experiment" in summary
    assert "    - CAS precision " in summary  # each measure under the floor's heading


def test_a_rerun_is_still_evaluated_on_its_own_when_asked_by_id(store):
    """Listings and the report leave reruns out; asked for by id, a rerun's runs are all there."""
    from engine import api

    db, _, outcome, _ = store
    rerun = outcome.reruns[0]
    evaluation = api.evaluate(db, experiment=rerun.experiment_id)
    assert sorted(evaluation.runs["run_id"]) == sorted(r.run_id for r in rerun.runs)
    assert len(evaluation.items) == 3 * 8


def test_the_report_counts_no_rerun_as_a_run_of_its_own(store, capsys):
    from engine.__main__ import main as cli

    db, _, outcome, _ = store
    assert cli(["report", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    table1 = out.split("Table 1")[1].split("Table 2")[0]
    assert len([line for line in table1.splitlines() if line.startswith("| ") and "---" not in line]) == 1 + 3


def cited_sets(db: Path) -> dict[tuple[str, str], frozenset[str]]:
    """(run, item) -> the shown documents its answer cites, for every stored answer."""
    sets: dict[tuple[str, str], set[str]] = {key: set() for key in rows(db, "SELECT run_id, item_id FROM generations")}
    for run, item, doc in rows(db, "SELECT run_id, item_id, doc_id FROM citations WHERE doc_id IS NOT NULL"):
        sets[(run, item)].add(doc)
    return {key: frozenset(docs) for key, docs in sets.items()}


def steadied(store, tmp_path: Path) -> tuple[Path, dict[str, str], dict[str, list[str]]]:
    """A copy of the store in which the reruns of q0-q3 cite what the runs cited (the sampled
    model changes nearly every item on some rerun), with each mode's run and its reruns."""
    import shutil

    from store.db import connect

    source, _, outcome, _ = store
    runs = {r.mode: r.run_id for r in outcome.runs}
    again = {mode: [next(r.run_id for r in rerun.runs if r.mode == mode) for rerun in outcome.reruns] for mode in runs}
    db = tmp_path / "steadied.duckdb"
    shutil.copy(source, db)
    with connect(db) as conn:
        for mode, reruns in again.items():
            for rerun in reruns:
                conn.execute("DELETE FROM citations WHERE run_id = ? AND item_id IN ('q0', 'q1', 'q2', 'q3')", [rerun])
                conn.execute("INSERT INTO citations SELECT * REPLACE (? AS run_id) FROM citations "
                             "WHERE run_id = ? AND item_id IN ('q0', 'q1', 'q2', 'q3')", [rerun, runs[mode]])
    return db, runs, again


def test_compare_marks_the_items_whose_citations_change_on_a_rerun_too(store, citing, tmp_path, capsys):
    from engine.__main__ import main as cli
    from engine.usecases.compare.compare import CompareRequest, compare
    from engine.usecases.runs.rerun_marks import MARK

    _, dataset, outcome, _ = store
    db, runs, again = steadied(store, tmp_path)
    sets = cited_sets(db)
    expected = {item for (run, item) in sets if run == runs["base"]
                and any(sets[(runs[mode], item)] != sets[(x, item)] for mode in ("base", "cf") for x in again[mode])}
    assert expected and not expected & {"q0", "q1", "q2", "q3"}

    r = compare(CompareRequest(f"{outcome.experiment_id}:base", f"{outcome.experiment_id}:cf"), db).runs[0]
    marked = dict(zip(r.items["item_id"], r.items["changes_on_rerun"], strict=True))
    assert {item for item, flag in marked.items() if flag} == expected
    assert (r.reruns.reruns_a, r.reruns.reruns_b, r.reruns.n_changed) == (2, 2, len(expected))
    assert r.reruns.line() == (f"{MARK}: {len(expected)} of 8 paired items (reruns: A 2, B 2); their flips between "
                               "A and B may be engine noise alone")

    assert cli(["compare", f"{outcome.experiment_id}:base", f"{outcome.experiment_id}:cf", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert r.reruns.line() in text
    item_lines = text.split("items that differ most")[1].splitlines()[2:]
    assert {line.split()[0] for line in item_lines if line.rstrip().endswith(MARK)} == expected

    # A store without reruns: no mark at all, and the line says how to get one.
    folder, loaded = citing
    lone = tmp_path / "lone.duckdb"
    first = run_experiment(ExperimentRequest(request(folder, reruns=0), dataset, lone), load=lambda r: loaded)
    plain = compare(CompareRequest(f"{first.experiment_id}:base", f"{first.experiment_id}:cf"), lone).runs[0]
    assert plain.items["changes_on_rerun"].isna().all()
    assert plain.reruns.line() == f"{MARK}: unknown, no rerun to tell engine noise from a real change: " \
                                  "`run --reruns 1` measures it"


def test_the_query_tab_marks_each_answer_that_changes_on_a_rerun_too(store, tmp_path):
    from demo.handlers.query import open_view
    from engine.usecases.runs.items import item_detail
    from engine.usecases.runs.rerun_marks import MARK

    outcome = store[2]
    db, runs, again = steadied(store, tmp_path)
    sets = cited_sets(db)
    seen = set()
    for item in sorted({item for _, item in sets}):
        lookup = item_detail(db, outcome.experiment_id, item)
        for mark in lookup.reruns:
            changed = any(sets[(runs[mark.mode], item)] != sets[(x, item)] for x in again[mark.mode])
            assert (mark.mode, mark.reruns, mark.changed) == (mark.mode, 2, changed)
            seen.add(changed)
        assert lookup.no_rerun_note() == ""
    assert seen == {True, False}
    # The page shows each mode's mark in its heading.
    for item in sorted({i for _, i in sets}):
        page = open_view(db, outcome.experiment_id, item).page
        for mark in item_detail(db, outcome.experiment_id, item).reruns:
            assert (f"{mark.mode} <small>run {runs[mark.mode]} (complete)</small> <small class="
                    f"\"{'flip' if mark.changed else 'note'}\">{MARK if mark.changed else 'same citations on 2 reruns'}"
                    ) in page


def test_the_query_tab_says_when_no_rerun_can_tell_a_flip_from_noise(citing, tmp_path):
    from demo.handlers.query import open_view
    from engine.usecases.runs.rerun_marks import NO_RERUN
    from store.db import connect

    folder, loaded = citing
    db = tmp_path / "lone.duckdb"
    first = run_experiment(ExperimentRequest(request(folder, reruns=0), make_dataset(tmp_path / "d.jsonl", 8), db),
                           load=lambda r: loaded)
    # The modes share their sampling draws and the model ignores its prompt: every mode cites
    # alike, until cf's answers to q0-q3 lose their citations.
    with connect(db) as conn:
        conn.execute("DELETE FROM citations WHERE run_id = ? AND item_id IN ('q0', 'q1', 'q2', 'q3')",
                     [next(r.run_id for r in first.runs if r.mode == "cf")])
    sets = cited_sets(db)
    runs = [r.run_id for r in first.runs]
    differ = {item for _, item in sets if len({sets[(run, item)] for run in runs}) > 1}
    assert differ and len(differ) < 8
    for item in sorted({item for _, item in sets}):
        page = open_view(db, first.experiment_id, item).page
        assert (f"citations differ between modes; {NO_RERUN}" in page) == (item in differ)
        assert "rerun too" not in page


def test_the_reports_table_2_gives_each_cab_its_rerun_floor(store, capsys):
    from engine.__main__ import main as cli

    db, _, outcome, _ = store
    floors = {f["metric"]: f["value"] for f in bias_report(db, outcome.experiment_id).report["rerun_floors"]
              if f["measure"] == "CAB"}
    assert cli(["report", "--db", str(db), "--table", "2", "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["table2"]
    assert (row["precision_floor"], row["recall_floor"], row["floor_note"]) == \
        (pytest.approx(floors["precision"]), pytest.approx(floors["recall"]), None)
    assert cli(["report", "--db", str(db), "--table", "2"]) == 0
    out = capsys.readouterr().out
    head, _, cells = [line for line in out.splitlines() if line.startswith("|")][:3]
    assert head.endswith("| CAB Δ Precision | CAB Δ Recall | Rerun floor Precision | Rerun floor Recall |")
    assert cells.endswith(f"| {floors['precision']:+.1f} | {floors['recall']:+.1f} |")
    assert "- Rerun floor: CAB between base and its reruns" in out


def test_the_rerun_floor_view_is_the_engines_arithmetic(store, tmp_path):
    import shutil

    from store.db import connect

    db, _, outcome, _ = store
    floors = bias_report(db, outcome.experiment_id).report["rerun_floors"]
    view = {(m, x): (mode, k, v, n, why) for m, x, mode, k, v, n, why in rows(
        db, "SELECT measure, metric, mode, n_reruns, value, n, undefined_reason FROM rerun_floor WHERE experiment_id = ?",
        [outcome.experiment_id])}
    assert len(view) == len(floors) == 6
    for f in floors:
        mode, k, value, n, why = view[(f["measure"], f["metric"])]
        assert (mode, k, n, why) == (f["mode"], 2, 8, None)
        assert value == pytest.approx(f["value"], abs=1e-9)
    assert rows(db, "SELECT count(*) FROM rerun_floor WHERE experiment_id <> ?", [outcome.experiment_id]) == [(0,)]

    # A rerun that holds fewer items: the engine refuses to pair them, the view says why.
    short = tmp_path / "short.duckdb"
    shutil.copy(db, short)
    rerun_cf = next(r.run_id for r in outcome.reruns[0].runs if r.mode == "cf")
    with connect(short) as conn:
        conn.execute("DELETE FROM citations WHERE run_id = ? AND item_id = 'q0'", [rerun_cf])
        conn.execute("DELETE FROM generations WHERE run_id = ? AND item_id = 'q0'", [rerun_cf])
    assert bias_report(short, outcome.experiment_id).report["rerun_note"].startswith("rerun floor undefined: ")
    reasons = {why for (why,) in rows(short, "SELECT undefined_reason FROM rerun_floor")}
    assert reasons == {f"the runs and reruns of experiment {outcome.experiment_id} hold different items"}
