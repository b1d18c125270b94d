"""Hostile dataset files: each ends with one line and exit 2 through the CLI, writing nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.__main__ import main
from engine.commands._field_words import cli_message
from engine.datasets.data import MAX_DOCUMENT_CHARS, MAX_QUESTION_CHARS, load_dataset
from engine.errors import UserError

ROOT = Path(__file__).resolve().parents[3]
GOOD = {"id": "q1", "question": "who?", "answers": ["x"], "documents": [{"text": "x is here", "relevant": True}]}
GOOD_LINE = json.dumps(GOOD).encode() + b"\n"


def _deep(n: int) -> bytes:
    return b'{"id": "q2", "question": "who?", "extra": ' + b"[" * n + b"]" * n + b"}"


# name -> (file name, bytes, the error after "error: {path}")
JSONL_CASES = {
    "non-utf8": ("d.jsonl", GOOD_LINE + b'{"id": "q\xff2"}\n', ":line 2: not UTF-8 text (byte 0xff at byte 10 of the line)"),
    "deep": ("d.jsonl", GOOD_LINE + _deep(100_000) + b"\n", ":line 2: invalid JSON (nested too deeply)"),
    "huge-int": ("d.jsonl", b'{"id": ' + b"9" * 5000 + b"}\n", ":line 1: invalid JSON (Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits)"),
    "surrogate": (
        "d.jsonl",
        json.dumps(dict(GOOD, question="who \\ud800?")).replace("\\\\ud800", "\\ud800").encode() + b"\n",
        ":line 1: item 'q1': 'question' holds a lone surrogate \\ud800 at character 5, which is not text",
    ),
    "surrogate-id": (
        "d.jsonl",
        b'{"id": "q\\udc00", "question": "who?", "answers": ["x"], "documents": [{"text": "x", "relevant": true}]}\n',
        ":line 1: 'id' holds a lone surrogate \\udc00 at character 2, which is not text",
    ),
    "id-object": (
        "d.jsonl",
        json.dumps(dict(GOOD, id={"nested": "q1"})).encode() + b"\n",
        ":line 1: 'id' must be a string or an integer, got object",
    ),
    "huge-question": (
        "d.jsonl",
        json.dumps(dict(GOOD, question="q" * 10_000_000)).encode() + b"\n",
        ":line 1: item 'q1': 'question' is 10,000,000 characters long (at most 10,000)",
    ),
    "huge-document": (
        "d.jsonl",
        json.dumps(dict(GOOD, documents=[{"text": "x" * (MAX_DOCUMENT_CHARS + 1), "relevant": True}])).encode() + b"\n",
        f":line 1: item 'q1': document 1 'text' is {MAX_DOCUMENT_CHARS + 1:,} characters long (at most {MAX_DOCUMENT_CHARS:,})",
    ),
    "json-non-utf8": ("d.json", b'[\n  {"id": "q1",\n   "question": "caf\xe9"}\n]', ":line 3: not UTF-8 text (byte 0xe9 at byte 20 of the line)"),
    "json-deep": ("d.json", b"[" * 100_000 + b"]" * 100_000, ": invalid JSON (nested too deeply)"),
    "json-surrogate": (
        "d.json",
        b'[{"id": "q1", "question": "who?", "answers": ["x"], "documents": [{"text": "x \\ud800", "relevant": true}]}]',
        ":item 1, id 'q1': document 1 'text' holds a lone surrogate \\ud800 at character 3, which is not text",
    ),
    "json-id-list": ("d.json", json.dumps([dict(GOOD, id=["q1"])]).encode(), ":item 1: 'id' must be a string or an integer, got array"),
    "json-scalar": ("d.json", b"42", ": expected a list of items, got number"),
    "parquet-garbage": ("d.parquet", b"PAR1 this is not parquet", None),
}


def run_cli(capsys, argv: list[str]) -> tuple[int, str]:
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.err


@pytest.mark.parametrize("name", JSONL_CASES)
def test_hostile_file_one_line_exit_2_nothing_written(tmp_path, capsys, monkeypatch, name):
    file_name, data, expected = JSONL_CASES[name]
    folder = tmp_path / "in"
    folder.mkdir()
    path = folder / file_name
    path.write_bytes(data)
    db = tmp_path / "out.duckdb"
    monkeypatch.setenv("PATTRIEVAL_DB", str(db))
    for argv in (["validate", "--dataset", str(path)], ["validate", "--dataset", str(path), "--skip-invalid"]):
        rc, err = run_cli(capsys, argv)
        assert rc == 2
        assert err.count("\n") == 1 and err.startswith("error: ") and str(path) in err, err
        if expected and "--skip-invalid" not in argv:
            assert err == f"error: {path}{expected}\n"
    # `run` checks the dataset before it opens the store or loads a model.
    rc, err = run_cli(capsys, ["run", "--dataset", str(path), "--model", "smoke", "--db", str(db)])
    assert rc == 2 and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(["in", file_name])


def test_skip_invalid_skips_hostile_items_but_not_broken_files(tmp_path):
    path = tmp_path / "d.jsonl"
    bad = [dict(GOOD, id={"a": 1}), dict(GOOD, id="q2", question="q" * (MAX_QUESTION_CHARS + 1))]
    path.write_text("".join(json.dumps(r) + "\n" for r in [GOOD, *bad]).replace("QQ", ""))
    ds = load_dataset(path, skip_invalid=True)
    assert [i.id for i in ds.items] == ["q1"]
    assert [(s.where, s.item_id) for s in ds.skipped] == [("line 2", None), ("line 3", "q2")]
    path.write_bytes(path.read_bytes() + b"\xff\n")
    with pytest.raises(UserError, match=r":line 4: not UTF-8 text \(byte 0xff at byte 1 of the line\)$"):
        load_dataset(path, skip_invalid=True)


def test_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD_LINE)
    assert [i.id for i in load_dataset(path).items] == ["q1"]
    path = tmp_path / "d.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([GOOD]).encode())
    assert [i.id for i in load_dataset(path).items] == ["q1"]


def test_unreadable_file_is_one_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.mkdir()  # a folder named like a file: not a save_to_disk folder either
    with pytest.raises(UserError, match="a folder must be saved with datasets' save_to_disk$"):
        load_dataset(path)
    from engine.datasets.data_files import read_jsonl

    with pytest.raises(UserError, match=r"d.jsonl: cannot read \(Is a directory\)$"):
        list(read_jsonl(path))


def test_parquet_hostile_items(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([GOOD, dict(GOOD, id="q2", question="q" * 10_000_000)]), path)
    with pytest.raises(UserError) as err:
        load_dataset(path)
    assert cli_message(err.value) == (
        f"{path}:item 2, id 'q2': 'question' is 10,000,000 characters long (at most 10,000) (1 of 2 items; "
        "run the other one with --skip-invalid)"
    )
    assert [i.id for i in load_dataset(path, skip_invalid=True).items] == ["q1"]
    pq.write_table(pa.Table.from_pylist([dict(GOOD, id={"nested": "q1"})]), path)
    with pytest.raises(UserError) as err:
        load_dataset(path)
    assert str(err.value) == f"{path}:item 1: 'id' must be a string or an integer, got object"


def test_parquet_binary_question_is_a_type_error(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": ["q1"], "question": pa.array([b"caf\xe9"], pa.binary()), "answers": [["x"]],
                      "documents": [[{"text": "x", "relevant": True}]]})
    pq.write_table(table, tmp_path / "d.parquet")
    with pytest.raises(UserError, match=r"item 1, id 'q1': 'question' must be a string, got bytes$"):
        load_dataset(tmp_path / "d.parquet")


def test_save_to_disk_hostile_items_and_damaged_folder(tmp_path):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "hf"
    datasets.Dataset.from_list([GOOD, dict(GOOD, id="q2", question="q" * (MAX_QUESTION_CHARS + 1))]).save_to_disk(str(folder))
    with pytest.raises(UserError) as err:
        load_dataset(folder)
    assert cli_message(err.value) == (
        f"{folder}:item 2, id 'q2': 'question' is 10,001 characters long (at most 10,000) (1 of 2 items; "
        "run the other one with --skip-invalid)"
    )
    for arrow in folder.glob("*.arrow"):
        arrow.write_bytes(b"not arrow at all")
    with pytest.raises(UserError) as err:
        load_dataset(folder)
    assert str(err.value).startswith(f"{folder}: cannot read the datasets folder (") and "\n" not in str(err.value)


def test_process_prints_no_traceback(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(_deep(100_000) + b"\n")
    done = subprocess.run([sys.executable, "-m", "engine", "validate", "--dataset", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == f"error: {path}:line 1: invalid JSON (nested too deeply)\n"
