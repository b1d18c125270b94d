"""A full disk during a run ends in one line (exit 2) and leaves the run statuses
alike: a traceback and one run 'failed' beside two still 'running' before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from engine.__main__ import main

ROOT = Path(__file__).resolve().parents[3]
FULL = "the disk is full (no space left on device)"


def _dataset(path: Path, n: int, words: int = 60) -> Path:
    items = [{"id": f"q{i}", "question": f"question {i} " + "word " * 20, "answers": ["a"],
              "documents": [{"text": "text " * words + str(j), "relevant": j == 0} for j in range(5)]}
             for i in range(n)]
    path.write_text("".join(json.dumps(x) + "\n" for x in items))
    return path


def _statuses(db: Path) -> tuple[list[tuple[str, str]], int]:
    conn = duckdb.connect(str(db), read_only=True)
    try:
        runs = conn.execute("SELECT rag_mode, status FROM runs ORDER BY rag_mode").fetchall()
        owners = conn.execute("SELECT count(*) FROM run_owners").fetchone()[0]
    finally:
        conn.close()
    return runs, owners


def test_a_write_that_finds_the_disk_full_is_one_line_and_fails_every_open_run(tmp_path, monkeypatch, capsys):
    from store.run_store import RunStore

    real_write, real_finish = RunStore.write_batch, RunStore.finish_run
    calls = []
    finished = []

    def write_batch(self, run_id, generations):
        calls.append(run_id)
        if len(calls) == 2:  # the second batch meets a full disk in its transaction, as DuckDB reports it
            with self.database.connect() as conn:
                conn.execute("SELECT 1")
                raise duckdb.TransactionException(f'TransactionContext Error: Failed to commit: Could not write file '
                                                  f'"{self.database.path}.wal": No space left on device')
        return real_write(self, run_id, generations)

    def finish_run(self, run_id, status):
        # As on the tmpfs: the first small status update still fits, the next ones do not.
        finished.append(run_id)
        if len(finished) > 1:
            raise duckdb.IOException('Could not write file: No space left on device')
        return real_finish(self, run_id, status)

    monkeypatch.setattr(RunStore, "finish_run", finish_run)
    monkeypatch.setattr(RunStore, "write_batch", write_batch)
    db = tmp_path / "r.duckdb"
    code = main(["run", "--model", "smoke", "--dataset", str(_dataset(tmp_path / "d.jsonl", 6)), "--db", str(db),
                 "--batch-size", "2", "--max-new-tokens", "4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1] == (f"error: database {db}: {FULL}; the last batch was not stored; free some space and run "
                       "the same command again to resume")
    runs, owners = _statuses(db)
    assert runs == [("base", "failed"), ("cf", "failed"), ("vanilla", "failed")] and owners == 0


def _can_mount_tmpfs(folder: Path) -> bool:
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True)
    return done.returncode == 0


@pytest.mark.slow  # `python -m engine run` in a child process until the tmpfs is full
def test_a_real_full_disk_on_a_small_tmpfs(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    if not _can_mount_tmpfs(disk):
        pytest.skip("mounting a tmpfs needs root")
    try:
        db = disk / "r.duckdb"
        data = _dataset(tmp_path / "d.jsonl", 400)
        env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
        done = subprocess.run([sys.executable, "-m", "engine", "run", "--model", "smoke", "--dataset", str(data),
                               "--db", str(db), "--batch-size", "16", "--max-new-tokens", "8"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 2, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
        assert done.stderr.strip().splitlines()[-1].startswith(f"error: database {db}: {FULL}")
        runs, _ = _statuses(db)
        # The unfinished runs alike: all failed, or (when even that one transaction found no
        # space) all still claimed by the process that ended, which the next command resumes.
        unfinished = {status for _, status in runs if status != "complete"}
        assert unfinished in ({"failed"}, {"running"}), runs
    finally:
        subprocess.run(["umount", str(disk)], check=False)
