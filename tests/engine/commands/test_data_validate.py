"""`python -m engine validate`: describes a dataset, lists what --skip-invalid skips, writes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine.__main__ import main

ROOT = Path(__file__).resolve().parents[3]


def row(item_id: str, flags: list[bool]) -> dict:
    return {
        "id": item_id,
        "question": f"question {item_id}?",
        "answers": ["x"],
        "documents": [{"text": f"document {n}", "relevant": f} for n, f in enumerate(flags, start=1)],
    }


ROWS = [row("q1", [True, False, False]), row("q2", [False, False]), row("q3", [True, True, False, True]), row("q4", [True])]


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_validate_prints_layout_count_and_per_item_spreads(tmp_path, capsys, monkeypatch):
    path = write(tmp_path / "d.jsonl", [r for r in ROWS if r["id"] != "q2"])
    monkeypatch.setenv("PATTRIEVAL_DB", str(tmp_path / "never.duckdb"))
    assert main(["validate", "--dataset", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"dataset   {path}"
    assert out[1] == "layout    native"
    assert out[2].startswith("items     3 valid (sha ")
    assert out[3] == "documents per item           min 1  median 3  max 4"
    assert out[4] == "relevant documents per item  min 1  median 1  max 3"
    assert len(out) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl"]  # no database, no cache


def test_validate_refuses_invalid_items_with_the_loaders_line(tmp_path, capsys):
    path = write(tmp_path / "d.jsonl", ROWS)
    assert main(["validate", "--dataset", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"error: {path}:line 2: item 'q2': no relevant document (1 of 4 items; run the other 3 with --skip-invalid)\n"


def test_validate_skip_invalid_lists_the_skipped_items(tmp_path, capsys):
    rows = ROWS + [row(f"n{i}", [False]) for i in range(25)]
    path = write(tmp_path / "d.jsonl", rows)
    assert main(["validate", "--dataset", str(path), "--skip-invalid"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("items     3 valid")
    assert out[5] == "skipped   26 invalid item(s):"
    assert out[6] == f"  {path}:line 2: item 'q2': no relevant document"
    assert out[7] == f"  {path}:line 5: item 'n0': no relevant document"
    assert out[-1] == "  ... and 6 more"
    assert len(out) == 6 + 20 + 1


def test_validate_top_k_counts_the_shown_documents(tmp_path, capsys):
    path = write(tmp_path / "d.jsonl", [r for r in ROWS if r["id"] != "q2"])
    assert main(["validate", "--dataset", str(path), "--top-k", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[3] == "documents per item           min 1  median 2  max 2"
    assert out[4] == "relevant documents per item  min 1  median 1  max 2"
    assert main(["validate", "--dataset", str(path), "--top-k", "0"]) == 2
    assert capsys.readouterr().err == "error: --top-k must be at least 1\n"


def test_validate_help_describes_every_option(capsys):
    from engine.__main__ import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["validate"]
    for action in sub._actions:
        assert action.help, action.dest


def test_validate_never_imports_torch(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    good = [r for r in ROWS if r["id"] != "q2"]
    jsonl = write(tmp_path / "d.jsonl", ROWS)
    pq.write_table(pa.Table.from_pylist(good), tmp_path / "d.parquet")
    code = f"""
import sys
from engine.__main__ import main
rcs = [main(["validate", "--dataset", {str(jsonl)!r}, "--skip-invalid"]),
       main(["validate", "--dataset", {str(tmp_path / "d.parquet")!r}])]
heavy = sorted(m for m in ("torch", "transformers", "gradio", "bitsandbytes", "duckdb") if m in sys.modules)
print("RESULT", rcs, heavy)
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "RESULT [0, 0] []" in done.stdout
