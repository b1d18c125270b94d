"""`export --format eee`: the Every Eval Ever schema's aggregate and instance-level records, checked
with what the `every-eval-ever` package ships (its validator, its JSON schemas through jsonschema, and its
pydantic reader types), and read back with every number kept.

The package needs Python >= 3.12 and huggingface-hub < 2, so it cannot be installed beside our
pins: its wheel is fetched from the package index (`pip download`, no dependencies) once per
session and read from there, never copied into the repository.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from engine.__main__ import main
from engine.errors import UserError
from tests.support.bias_store import add_experiment, add_run, biased

EEE_VERSION = "0.3.0"
CAB = "citation attribution bias (Abolghasemi et al.)"
N = 30


@pytest.fixture(scope="session")
def eee(tmp_path_factory):
    """The every-eval-ever wheel, unpacked: (its schemas folder, its reader types)."""
    folder = tmp_path_factory.mktemp("every-eval-ever")
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                           "--python-version", "3.12", f"every-eval-ever=={EEE_VERSION}", "-d", str(folder)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"pip download every-eval-ever failed (the package index is needed): {done.stderr}"
    (wheel,) = folder.glob("every_eval_ever-*.whl")
    unpacked = folder / "unpacked"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(unpacked)
    sys.path.insert(0, str(unpacked))
    try:
        from every_eval_ever import eval_types, instance_level_types
    finally:
        sys.path.remove(str(unpacked))
    return unpacked / "every_eval_ever" / "schemas", eval_types, instance_level_types


def _validate(eee, folder: Path) -> list[dict]:
    """The package's own validator (`eee-validate`, strict JSON, its schemas, the datastore's path
    rules and the aggregate checked against its samples file) on every file under `folder`."""
    unpacked = eee[0].parents[1]
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    done = subprocess.run([sys.executable, "-m", "every_eval_ever.validator.validate", "--format", "json", *files],
                          cwd=folder, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(unpacked)})
    assert done.stdout.strip(), done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("eee") / "eee.duckdb"
    base, cf = biased(N, 6)
    add_experiment(path, "exp-b", "org/model-b", base, cf, vanilla=[(2,), (1, 2)] * (N // 2))
    add_run(path, "exp-b-r1-base", "exp-b-r1", "base", "org/model-b", [(1,)] + [(2,)] * (N - 1), rerun_of="exp-b")
    add_experiment(path, "exp-silent", "org/silent", [()] * N, [()] * N)  # never cites: CAB undefined
    return path


def _export(db: Path, out: Path, *experiments: str, force: bool = False) -> None:
    args = ["export", "--db", str(db), "--format", "eee", "--out", str(out)]
    for e in experiments:
        args += ["--experiment", e]
    assert main(args + (["--force"] if force else [])) == 0


def _files(out: Path) -> dict[str, tuple[Path, Path]]:
    found = {}
    for aggregate in out.rglob("*.json"):
        record = json.loads(aggregate.read_text())
        found[record["source_metadata"]["additional_details"]["experiment_id"]] = (
            aggregate, aggregate.with_name(aggregate.stem + "_samples.jsonl"))
    return found


def test_the_records_pass_the_packages_schemas_and_reader(db, tmp_path, eee):
    import jsonschema

    schemas, eval_types, instance_types = eee
    _export(db, tmp_path, "exp-b", "exp-silent")
    files = _files(tmp_path)
    assert set(files) == {"exp-b", "exp-silent"}
    aggregate_schema = json.loads((schemas / "eval.schema.json").read_text())
    instance_schema = json.loads((schemas / "instance_level_eval.schema.json").read_text())
    for aggregate, samples in files.values():
        record = json.loads(aggregate.read_text())
        jsonschema.Draft7Validator(aggregate_schema).validate(record)
        eval_types.EvaluationLog.model_validate(record)
        # The datastore's layout: the aggregate's samples path is this file's, under data/.
        assert str(samples).endswith(record["detailed_evaluation_results"]["file_path"])
        lines = samples.read_text().splitlines()
        assert record["detailed_evaluation_results"]["total_rows"] == len(lines) > 0
        for line in lines:
            jsonschema.Draft7Validator(instance_schema).validate(json.loads(line))
            instance_types.InstanceLevelEvaluationLog.model_validate_json(line)


def test_the_packages_validator_finds_no_error_nor_warning_and_sees_a_broken_file(db, tmp_path, eee):
    _export(db, tmp_path, "exp-b", "exp-silent")
    reports = _validate(eee, tmp_path)
    assert len(reports) == 4 and {r["file_type"] for r in reports} == {"aggregate", "instance"}
    assert all(r["valid"] and not r["errors"] and not r["warnings"] for r in reports), reports
    # The validator can fail: a sample without its required answer_attribution is caught.
    samples = next(tmp_path.rglob("*_samples.jsonl"))
    lines = samples.read_text().splitlines()
    broken = json.loads(lines[0])
    del broken["answer_attribution"]
    samples.write_text("\n".join([json.dumps(broken), *lines[1:]]) + "\n")
    assert not all(r["valid"] for r in _validate(eee, tmp_path))


def test_a_round_trip_keeps_every_number(db, tmp_path, eee):
    from engine import api
    from store.queries import export_results_frame

    _, eval_types, instance_types = eee
    _export(db, tmp_path, "exp-b")
    aggregate, samples = _files(tmp_path)["exp-b"]
    log = eval_types.EvaluationLog.model_validate_json(aggregate.read_text())
    report = api.bias_report(db, "exp-b").report
    results = {r.evaluation_result_id: r for r in log.evaluation_results}
    floors = {(f["measure"], f["metric"]): f for f in report["rerun_floors"]}
    for row in report["results"]:
        key = {"CAB": "citation_attribution_bias", "CAS": "citation_attribution_sensitivity"}[row["measure"]]
        got = results[f"{key}.{row['metric']}"]
        assert got.score_details.score == row["value"]
        interval = got.score_details.uncertainty.confidence_interval
        details = got.score_details.details
        if row["ci_low"] is None:  # no spread: no interval, and the note says why
            assert interval is None and row["interval_note"].startswith("none")
            assert details["interval_note"] == row["interval_note"]
        else:
            assert (interval.lower, interval.upper, interval.confidence_level) == (row["ci_low"], row["ci_high"], 0.95)
        assert float(details["p"]) == row["p"] and details["test"] == row["test"]
        assert details["verdict"] == (row["direction"] or "") and int(details["n_items"]) == row["n"] == N
        if row["measure"] == "CAB":
            assert got.evaluation_name == f"{CAB}, citation {row['metric']}"
            assert "COMPL-AI" in details["note"]
            floor = floors[("CAB", row["metric"])]
            assert float(details["rerun_floor"]) == floor["value"]
            assert float(details["rerun_floor_ci_low"]) == floor["ci_low"]
    assert results["citation_attribution_bias.precision"].score_details.score == 100 * 6 / N
    # The modes' means are the stored per-item values' means; the labels and modes are in the metadata.
    frame = export_results_frame(db, ["exp-b"])
    frame = frame[frame["run_id"].isin(report["runs"].values())]
    for mode in ("vanilla", "base", "cf"):
        for metric in ("precision", "recall", "f1", "exact_match"):
            values = frame[frame["mode"] == mode][metric].tolist()
            assert results[f"{mode}.{metric}"].score_details.score == math.fsum(values) / len(values)
    meta = log.source_metadata.additional_details
    assert (meta["label_a"], meta["label_b"], json.loads(meta["modes"])) == ("Woman", "Man", ["vanilla", "base", "cf"])
    # Every answer, with its cited documents as answer_attribution and every per-item number.
    records = [instance_types.InstanceLevelEvaluationLog.model_validate_json(line)
               for line in samples.read_text().splitlines()]
    assert len(records) == len(frame) == 3 * N
    by_key = {(r.metadata["run_id"], r.sample_id): r for r in records}
    for row in frame.to_dict("records"):
        r = by_key[(row["run_id"], row["item_id"])]
        assert [int(a.extracted_value) for a in r.answer_attribution] == list(row["cited"])
        assert json.loads(r.metadata["gold"]) == list(row["gold"])
        assert r.output.raw == [row["answer"]] and r.input.reference == list(row["gold_answers"])
        assert r.evaluation.score == row["precision"] and r.evaluation.is_correct == (row["exact_match"] == 1.0)
        for column in ("precision", "recall", "f1", "exact_match", "squad_em", "token_f1", "answer_recall",
                       "n_citations", "out_of_range_citations", "p_relevant", "p_nonrelevant"):
            kept, stored = r.metadata[column], row[column]
            assert (kept == "" and (stored is None or stored != stored)) or float(kept) == float(stored), column
        if row["mode"] == "base":
            labels = ["Woman" if p in row["gold"] else "Man" for p in row["cited"]]
            assert json.loads(r.metadata["cited_labels"]) == labels and r.metadata["label_relevant"] == "Woman"
        if row["mode"] == "cf":
            assert r.metadata["label_relevant"] == "Man"


def test_an_undefined_measure_is_said_not_written_as_a_number(db, tmp_path, eee):
    _, eval_types, _ = eee
    _export(db, tmp_path, "exp-silent")
    aggregate, _ = _files(tmp_path)["exp-silent"]
    log = eval_types.EvaluationLog.model_validate_json(aggregate.read_text())
    assert not [r for r in log.evaluation_results if r.evaluation_result_id.startswith("citation_attribution")]
    said = log.source_metadata.additional_details[f"{CAB}, citation precision"]
    assert said.startswith("undefined: no answer in runs exp-silent-base/exp-silent-cf cites a shown document")


def test_refusals_are_one_line_and_write_nothing(db, tmp_path, capsys):
    _export(db, tmp_path / "out", "exp-b")
    before = {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    args = ["export", "--db", str(db), "--format", "eee", "--out", str(tmp_path / "out"), "--experiment"]
    assert main([*args, "exp-b"]) == 2
    assert "exists; give another --out or add --force" in capsys.readouterr().err
    assert main([*args, "no-such"]) == 2
    assert "no experiment 'no-such'" in capsys.readouterr().err
    # Two experiments, the second unknown: nothing of the first is written either.
    assert main(["export", "--db", str(db), "--format", "eee", "--out", str(tmp_path / "fresh"),
                 "--experiment", "exp-silent", "--experiment", "no-such"]) == 2
    assert not (tmp_path / "fresh").exists() or not any((tmp_path / "fresh").rglob("*.json*"))
    capsys.readouterr()
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    assert main(["export", "--db", str(db), "--format", "eee", "--out", str(a_file), "--experiment", "exp-b"]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()} == before
    _export(db, tmp_path / "out", "exp-b", force=True)  # --force replaces them, and leaves no temporary file
    assert not [p for p in (tmp_path / "out").rglob("*.tmp")]


def test_the_api_writes_the_same_records(db, tmp_path):
    from engine import api

    written = api.export(api.ExportRequest(db, ("exp-b",), tmp_path, "eee"))
    (files,) = written.files
    assert files.n_samples == 3 * N and files.aggregate.exists() and files.samples.exists()
    with pytest.raises(UserError, match="give --format csv or parquet"):
        api.export(api.ExportRequest(db, ("exp-b",), tmp_path / "x", None))


def test_the_apps_zip_holds_the_clis_records(db, tmp_path):
    """The Runs tab's `eee` export: the same files as `export --format eee`, in one zip."""
    from demo.handlers.runs import export_file

    _export(db, tmp_path / "cli", "exp-b", "exp-silent")
    zipped = export_file(db, ["exp-b"], "exp-silent", "eee")
    assert zipped.name == "pattrieval-eee.zip" and not zipped.with_suffix("").exists()  # the folder is gone
    with zipfile.ZipFile(zipped) as archive:
        archive.extractall(tmp_path / "app")
    cli, app = _files(tmp_path / "cli"), _files(tmp_path / "app")
    assert sorted(cli) == sorted(app) == ["exp-b", "exp-silent"]
    for experiment, (aggregate, samples) in cli.items():
        (app_aggregate, app_samples), stamp = app[experiment], json.loads(aggregate.read_text())["retrieved_timestamp"]
        assert aggregate.relative_to(tmp_path / "cli") == app_aggregate.relative_to(tmp_path / "app")
        app_stamp = json.loads(app_aggregate.read_text())["retrieved_timestamp"]
        # the same records but for the second each export was written at, which it stamps (in
        # the samples too, so the aggregate's checksum of them differs by that alone)
        assert samples.read_text().replace(stamp, "-") == app_samples.read_text().replace(app_stamp, "-")
        assert _unstamped(aggregate, stamp) == _unstamped(app_aggregate, app_stamp)


def _unstamped(aggregate: Path, stamp: str) -> Any:
    def drop(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: drop(v) for k, v in value.items() if k != "checksum"}
        return [drop(v) for v in value] if isinstance(value, list) else value

    return drop(json.loads(aggregate.read_text().replace(stamp, "-")))
