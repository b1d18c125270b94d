"""`import-labels`: a person's labels of cited documents stored as a judge; every bad row
refused in one line naming the file and line with nothing written; the same file again adds
nothing; the labels travel with `merge`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import cli, copy_store, rows
from tests.support.judged_store import build, cited, dump

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    path = tmp_path_factory.mktemp("judged") / "judged.duckdb"
    return path, build(path)


@pytest.fixture
def store(built, tmp_path):
    path, info = built
    return copy_store(path, tmp_path / "s.duckdb"), info


def write_csv(path: Path, lines: list[str], header: str = "item_id,run,position,label") -> Path:
    path.write_text("\n".join([header, *lines]) + "\n", encoding="utf-8")
    return path


def good_lines(info: dict, n: int = 6) -> list[str]:
    """Labels of the first n items' first cited document, alternating."""
    return [f"{item},{info['run']},1,{'attributable' if i % 2 else 'not_attributable'}"
            for i, item in enumerate(info["items"][:n])]


def engine(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_labels_are_stored_with_their_judge_and_a_second_import_adds_nothing(store, tmp_path):
    db, info = store
    labels = write_csv(tmp_path / "ann.csv", good_lines(info))
    done = engine("import-labels", str(labels), "--judge", "ann", "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "imported 6 labels by judge 'ann'" in done.stdout
    stored = rows(db, "SELECT item_id, position, doc_id, label, source FROM judge_labels ORDER BY item_id")
    first = info["items"][0]
    assert stored[0] == (first, 1, f"{first}-d1", "not_attributable", "ann.csv:line 2")
    assert len(stored) == 6
    (kind, provenance), = rows(db, "SELECT kind, provenance FROM judges WHERE judge = 'ann'")
    import hashlib

    assert kind == "human"
    assert json.loads(provenance)["sha256"] == hashlib.sha256(labels.read_bytes()).hexdigest()
    assert json.loads(provenance)["file"] == "ann.csv"
    # the judgements view reads them as the human judge's verdicts
    assert rows(db, "SELECT count(*) FROM judgements WHERE judge = 'ann' AND kind = 'human'") == [(6,)]

    before = dump(db)
    again = engine("import-labels", str(labels), "--judge", "ann", "--db", str(db))
    assert again.returncode == 0 and "already imported" in again.stdout and "nothing added" in again.stdout
    assert dump(db) == before


def test_jsonl_by_experiment_name_and_mode_with_loose_label_words(store, tmp_path):
    db, info = store
    items = info["items"]
    path = tmp_path / "bob.jsonl"
    words = [True, "yes", 1, "0", "No", "FALSE"]
    path.write_text("\n".join(json.dumps({"item_id": items[i], "experiment": "pilot", "mode": "vanilla",
                                          "position": cited(i)[2], "label": w}) for i, w in enumerate(words)) + "\n")
    assert cli("import-labels", str(path), "--judge", "bob", "--db", str(db)) == 0
    got = rows(db, "SELECT label FROM judge_labels WHERE judge = 'bob' ORDER BY item_id")
    assert [g[0] for g in got] == ["attributable"] * 3 + ["not_attributable"] * 3


BAD = {  # name -> (the bad line, what the message says)
    "unknown item": ("nq-999,{run},1,attributable", "unknown item 'nq-999'"),
    "unknown run": ("{item},nope,1,attributable", "unknown run 'nope'"),
    "position beyond shown": ("{item},{run},11,attributable", "position 11 is beyond the 10 documents shown"),
    "position not cited": ("{item},{run},9,attributable", "does not cite [9] (it cites [1], [2], [3])"),
    "position not a number": ("{item},{run},first,attributable", "position must be a document number"),
    "bad label": ("{item},{run},2,maybe", "label must be attributable or not_attributable"),
    "duplicate": ("{first},{run},1,attributable", "is labelled at line 2 already"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_bad_row_is_refused_in_one_line_and_nothing_is_written(store, tmp_path, capsys, case):
    db, info = store
    line, says = BAD[case]
    lines = good_lines(info) + [line.format(item=info["items"][0], first=info["items"][0], run=info["run"])]
    labels = write_csv(tmp_path / "bad.csv", lines)
    before = dump(db)
    assert cli("import-labels", str(labels), "--judge", "ann", "--db", str(db)) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"error: {labels}:line 8: ") and says in err, err
    assert dump(db) == before


@pytest.mark.parametrize(("header", "line", "says"), [
    ("item_id,experiment,mode,position,label", "{item},nope,vanilla,1,yes", "unknown experiment 'nope'"),
    ("item_id,experiment,mode,position,label", "{item},exp,cf,1,yes", "experiment 'exp' has no cf run"),
    ("item_id,experiment,mode,position,label", "{item},exp,half,1,yes", "unknown mode 'half'"),
    ("item_id,experiment,position,label", "{item},exp,1,yes", "line 1: no column 'run', nor 'experiment' and 'mode'"),
])
def test_experiment_and_mode_are_checked(store, tmp_path, capsys, header, line, says):
    db, info = store
    labels = write_csv(tmp_path / "bad.csv", [line.format(item=info["items"][0])], header=header)
    before = dump(db)
    assert cli("import-labels", str(labels), "--judge", "ann", "--db", str(db)) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and says in err, err
    assert dump(db) == before


def test_a_model_judge_s_name_and_a_changed_label_are_refused(store, tmp_path, capsys):
    db, info = store
    labels = write_csv(tmp_path / "ann.csv", good_lines(info))
    assert cli("import-labels", str(labels), "--judge", "judge/llm", "--db", str(db)) == 2
    assert "is an llm judge" in capsys.readouterr().err
    assert cli("import-labels", str(labels), "--judge", "ann", "--db", str(db)) == 0
    flipped = write_csv(tmp_path / "ann2.csv", [good_lines(info)[0].replace("not_attributable", "attributable")])
    before = dump(db)
    assert cli("import-labels", str(flipped), "--judge", "ann", "--db", str(db)) == 2
    assert "labelled item" in capsys.readouterr().err
    assert dump(db) == before


def test_a_bad_file_through_the_real_process_is_one_line_without_traceback(store, tmp_path):
    db, info = store
    labels = write_csv(tmp_path / "bad.csv", good_lines(info) + [f"{info['items'][0]},{info['run']},1,perhaps"])
    before = dump(db)
    done = engine("import-labels", str(labels), "--judge", "ann", "--db", str(db))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "bad.csv:line 8: label must be" in done.stderr
    assert dump(db) == before


def test_merge_carries_judges_and_their_labels(store, tmp_path):
    from store.merge import merge_stores

    db, info = store
    assert cli("import-labels", str(write_csv(tmp_path / "ann.csv", good_lines(info))), "--judge", "ann",
               "--db", str(db)) == 0
    target = tmp_path / "target.duckdb"
    result = merge_stores(target, db)
    assert result.merged == (info["run"],)
    for sql in ("SELECT * EXCLUDE (created_utc) FROM judges ORDER BY ALL",
                "SELECT * EXCLUDE (created_utc) FROM judge_labels ORDER BY ALL",
                "SELECT * FROM judge_agreement ORDER BY ALL"):
        assert rows(target, sql) == rows(db, sql)
    assert result.n_judge_labels == 6
    before = dump(target)
    assert merge_stores(target, db).n_judge_labels == 0  # once only
    assert dump(target) == before


@pytest.mark.parametrize(("cell", "says"), [
    ("²", "not '²'"),  # a digit to str.isdigit, not to int()
    ("9" * 5000, "… (4,800 more characters)'"),  # past Python's 4,300-digit limit on int()
    ("١", "not '١'"),  # an Arabic-Indic one
])
def test_a_position_that_is_no_document_number_is_one_line(store, tmp_path, capsys, cell, says):
    db, info = store
    labels = write_csv(tmp_path / "bad.csv", good_lines(info) + [f"{info['items'][0]},{info['run']},{cell},yes"])
    before = dump(db)
    assert cli("import-labels", str(labels), "--judge", "ann", "--db", str(db)) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"error: {labels}:line 8: position must be a document number")
    assert says in err and len(err) < 600, err
    assert dump(db) == before


def test_a_huge_json_position_is_quoted_bounded(store, tmp_path, capsys):
    db, info = store
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps({"item_id": info["items"][0], "run": info["run"], "position": int("9" * 4000),
                                "label": "yes"}) + "\n")
    assert cli("import-labels", str(path), "--judge", "ann", "--db", str(db)) == 2
    err = capsys.readouterr().err.strip()
    assert "is beyond the 10 documents shown" in err and "(3,800 more characters)" in err and len(err) < 600, err


def test_a_huge_cell_with_escape_codes_is_quoted_bounded_and_escaped(store, tmp_path):
    """A 40 MB item id was a 40 MB terminal line, and its escape codes ran in the terminal."""
    db, info = store
    path = tmp_path / "hostile.jsonl"
    path.write_text(json.dumps({"item_id": "\x1b]0;owned\x07\x1b[2J" + "y" * 2_000_000, "run": info["run"],
                                "position": 1, "label": "yes"}) + "\n")
    done = engine("import-labels", str(path), "--judge", "ann", "--db", str(db))
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert "\x1b" not in done.stderr and "unknown item '\\x1b]0;owned\\x07\\x1b[2J" in done.stderr
    assert "(1,999,8" in done.stderr and len(done.stderr) < 600, done.stderr[:600]


def test_the_cli_prints_any_refusal_bounded_and_escaped(store, capsys):
    """The CLI's last wall (engine.errors.message_line): a message that quotes a value as given is
    bounded and escaped where it is printed."""
    db, _ = store
    assert cli("agreement", "--experiment", "\x1b]0;owned\x07" + "z" * 1_000_000, "--db", str(db)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "\\x1b]0;owned\\x07" in err
    assert "characters left out" in err and len(err) < 2_100, len(err)
