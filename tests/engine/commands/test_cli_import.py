"""`python -m engine import` of a custom metadata type: labels suffice, no consideration sentence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.__main__ import main
from store.queries import experiment_runs

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("import")
    items = [{"id": f"q{i}", "question": f"question {i}?", "answers": [f"answer {i}"],
              "documents": [{"id": f"q{i}-d{j}", "text": f"text {j}", "relevant": j == 0} for j in range(3)]}
             for i in range(12)]
    (tmp / "data.jsonl").write_text("".join(json.dumps(x) + "\n" for x in items))
    # base cites the relevant [1] everywhere, cf only on even items: CAB on precision > 0.
    for mode, cite in (("vanilla", lambda i: "[1]"), ("base", lambda i: "[1]"), ("cf", lambda i: "[1]" if i % 2 else "[2]")):
        (tmp / f"{mode}.jsonl").write_text(
            "".join(json.dumps({"item_id": x["id"], "answer": f"answer {i} {cite(i)}"}) + "\n" for i, x in enumerate(items)))
    return tmp


def _import(files: Path, db: Path, mode: str, *extra: str) -> int:
    return main(["import", "--dataset", str(files / "data.jsonl"), "--answers", str(files / f"{mode}.jsonl"),
                 "--mode", mode, "--experiment", "x1", "--db", str(db), *extra])


def test_custom_type_needs_only_its_labels(files, tmp_path, capsys):
    db = tmp_path / "e.duckdb"
    labels = ["--metadata", "expertise", "--label-a", "an expert", "--label-b", "a novice"]
    for mode in ("vanilla", "base", "cf"):
        assert _import(files, db, mode, *labels) == 0
    capsys.readouterr()
    runs = experiment_runs(db, "x1")
    assert sorted(r.mode for r in runs) == ["base", "cf", "vanilla"]
    assert {r.metadata_type for r in runs} == {"expertise"} and {r.status for r in runs} == {"complete"}
    assert main(["bias", "--experiment", "x1", "--db", str(db), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    cab = next(r for r in report["results"] if (r["measure"], r["metric"]) == ("CAB", "precision"))
    assert cab["value"] == pytest.approx(50.0) and "expert" in cab["direction"] and "novice" not in cab["direction"]


def test_custom_type_with_a_consideration_still_works(files, tmp_path):
    db = tmp_path / "c.duckdb"
    assert _import(files, db, "base", "--metadata", "expertise", "--label-a", "an expert", "--label-b", "a novice",
                   "--consideration", "Some documents are authored by experts, others by novices.") == 0


@pytest.mark.parametrize("extra, message", [
    (["--metadata", "expertise"], "name its labels with --label-a and --label-b"),
    # The option that is missing, by name; a mistyped built-in type, the closest one.
    (["--metadata", "expertise", "--label-a", "an expert"], "metadata type 'expertise': --label-b is missing"),
    (["--metadata", "expertise", "--label-b", "a novice"], "metadata type 'expertise': --label-a is missing"),
    (["--metadata", "gendr"], "name its labels with --label-a and --label-b; did you mean gender?"),
    (["--metadata", "expertise", "--label-a", "x", "--label-b", " x "], "must differ"),
    (["--label-a", "x", "--label-b", "y"], "need --metadata NAME"),
])
def test_custom_type_errors_are_one_line_and_write_nothing(files, tmp_path, capsys, extra, message):
    db = tmp_path / "bad.duckdb"
    assert _import(files, db, "base", *extra) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not db.exists()


def test_import_holds_no_sql():
    # Section 9 of SQL lives in store/, the command only calls it.
    source = (ROOT / "engine" / "commands" / "import_answers.py").read_text()
    assert "SELECT" not in source and "conn.execute" not in source


def test_an_unknown_mode_from_the_library_is_refused_before_anything_is_stored(files, tmp_path):
    """The CLI offers only the three modes, but engine.api callers pass a string: an unknown one
    is named as such (it was told it "needs --metadata", the check for a non-vanilla mode)."""
    from engine.datasets.data import load_dataset
    from engine.errors import UserError
    from engine.usecases.storage.import_answers import ImportRequest, import_answers

    db = tmp_path / "r.duckdb"
    request = ImportRequest(load_dataset(files / "data.jsonl"), files / "vanilla.jsonl", db, mode="Vanilla")
    with pytest.raises(UserError, match="--mode must be one of vanilla, base, cf, not 'Vanilla'"):
        import_answers(request)
    assert not db.exists()
