"""`python -m engine list`: experiments and runs newest first, empty and missing databases, no torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.__main__ import main
from engine.types import Document, Generation, Item, RunSpec
from store import RunStore, connect

ROOT = Path(__file__).resolve().parents[3]


def _items(n: int) -> list[Item]:
    return [
        Item(f"q{i}", f"question {i}?", (f"answer {i}",),
             (Document(f"q{i}-d1", "a", True), Document(f"q{i}-d2", "b", False)))
        for i in range(n)
    ]


def _spec(run_id: str, experiment: str, mode: str, *, model: str = "org/model-a", sha: str = "a" * 64,
          metadata: str | None = "gender", n_items: int = 4) -> RunSpec:
    return RunSpec(
        run_id=run_id, experiment_id=experiment, config_hash=f"hash-{run_id}", model=model,
        model_revision=None, quantization="none", dtype="float32", device="cpu",
        dataset="/some/where/data.jsonl", dataset_sha=sha, metadata_type=metadata, rag_mode=mode,
        seed=0, prompt_version="p1", git_sha=None, library_versions={}, config={}, n_items=n_items,
    )


def _answers(ids) -> list[Generation]:
    return [Generation(item_id=i, prompt="p", answer="x [1]", shown_doc_ids=(f"{i}-d1", f"{i}-d2"),
                       finish_reason="stop", n_prompt_tokens=3, tokens=(), citations=()) for i in ids]


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    """Two experiments: 'old' (three complete runs) and 'new' (vanilla done, base half-way)."""
    path = tmp_path_factory.mktemp("list") / "runs.duckdb"
    store = RunStore(path)
    store.put_items("a" * 64, _items(4))
    store.put_items("b" * 64, _items(4))
    # Started out of display order: the listing must still say vanilla,base,cf.
    for run_id, mode in (("r-cf", "cf"), ("r-van", "vanilla"), ("r-base", "base")):
        store.start_run(_spec(run_id, "old", mode))
        store.write_batch(run_id, _answers(["q0", "q1", "q2", "q3"]))
        store.finish_run(run_id, "complete")
    store.start_run(_spec("n-van", "new", "vanilla", model="org/model-b", sha="b" * 64, metadata=None))
    store.write_batch("n-van", _answers(["q0", "q1", "q2", "q3"]))
    store.finish_run("n-van", "complete")
    store.start_run(_spec("n-base", "new", "base", model="org/model-b", sha="b" * 64))
    store.write_batch("n-base", _answers(["q0", "q1"]))
    return path


def test_experiments_newest_first_with_modes_status_and_progress(db, capsys):
    assert main(["list", "--db", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["experiment", "name", "model", "dataset", "metadata", "modes", "status", "items",
                                "created", "(UTC)"]
    new, old = lines[1].split(), lines[2].split()
    assert len(lines) == 3
    # Datasets are named as in every other table: file name and content hash, not the path typed.
    assert new[:9] == ["new", "-", "org/model-b", "data.jsonl", "(bbbbbbbb)", "gender", "vanilla,base", "running", "6/8"]
    assert old[:9] == ["old", "-", "org/model-a", "data.jsonl", "(aaaaaaaa)", "gender", "vanilla,base,cf", "complete",
                       "12/12"]
    assert len(new[9]) == 10 and len(new[10]) == 5  # YYYY-MM-DD HH:MM


def test_runs_one_row_each_newest_first(db, capsys):
    assert main(["list", "--runs", "--db", str(db)]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [r[:3] for r in rows] == [["n-base", "new", "base"], ["n-van", "new", "vanilla"], ["r-base", "old", "base"],
                                     ["r-van", "old", "vanilla"], ["r-cf", "old", "cf"]]
    assert rows[0][6:9] == ["gender", "running", "2/4"]
    assert rows[1][6:9] == ["-", "complete", "4/4"]  # a vanilla run without a metadata type


def test_json(db, capsys):
    assert main(["list", "--json", "--db", str(db)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [e["experiment_id"] for e in data] == ["new", "old"]
    assert data[1]["modes"] == ["vanilla", "base", "cf"] and (data[1]["n_done"], data[1]["n_total"]) == (12, 12)
    assert data[0]["dataset_sha"] == "b" * 64 and data[0]["created_utc"].endswith("Z")
    assert main(["list", "--runs", "--json", "--db", str(db)]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert runs[0]["run_id"] == "n-base" and runs[0]["finished_utc"] is None and runs[1]["finished_utc"].endswith("Z")


def test_empty_database_says_how_to_start(tmp_path, capsys):
    path = tmp_path / "empty.duckdb"
    with connect(path):
        pass
    for extra in ([], ["--runs"]):
        assert main(["list", "--db", str(path), *extra]) == 0
        out = capsys.readouterr().out
        assert out.count("\n") == 1 and "python -m engine quickstart" in out
    assert main(["list", "--json", "--db", str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_missing_database_is_exit_2_and_not_created(tmp_path, capsys):
    path = tmp_path / "nope.duckdb"
    assert main(["list", "--db", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: no database at {path}") and "quickstart" in err
    assert not path.exists()


def test_default_database_comes_from_the_environment(db, monkeypatch, capsys):
    monkeypatch.setenv("PATTRIEVAL_DB", str(db))
    assert main(["list"]) == 0
    assert "org/model-b" in capsys.readouterr().out


def test_list_never_imports_torch(db):
    code = f"""
import sys
from engine.__main__ import main
rcs = [main(["list", "--db", {str(db)!r}]), main(["list", "--runs", "--json", "--db", {str(db)!r}])]
heavy = sorted(m for m in ("torch", "transformers", "gradio", "bitsandbytes") if m in sys.modules)
print("RESULT", rcs, heavy)
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "RESULT [0, 0] []" in done.stdout


def test_a_run_whose_process_is_gone_lists_as_interrupted(db, tmp_path, capsys):
    copy = tmp_path / "copy.duckdb"
    copy.write_bytes(db.read_bytes())
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(child.stdout)  # exited and reaped: the run's owner is gone, as after kill -9
    with connect(copy) as conn:
        assert conn.execute("SELECT count(*) FROM run_owners WHERE run_id = 'n-base'").fetchone() == (1,)
        conn.execute("UPDATE run_owners SET pid = ?, process_start = NULL WHERE run_id = 'n-base'", [dead_pid])
    assert main(["list", "--db", str(copy)]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[7] == "interrupted"
    assert main(["list", "--runs", "--db", str(copy)]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[7] == "interrupted"
    # The live owner (this process, in the fixture) still reads as running.
    assert main(["list", "--db", str(db)]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[7] == "running"
