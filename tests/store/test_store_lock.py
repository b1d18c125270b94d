"""The store's lock across processes (store.db_lock): held around every open, shared by readers."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from store import DatabaseBusy, RunStore, connect
from store.db_lock import lock_path

REPO = Path(__file__).resolve().parents[2]

HOLD = """
import sys, time
from pathlib import Path
from store.db_lock import store_lock
with store_lock(Path(sys.argv[1]), shared=sys.argv[2] == "shared", deadline=time.monotonic() + 10):
    print("held", flush=True)
    time.sleep(float(sys.argv[3]))
"""


def _hold(db: Path, mode: str, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(db), mode, str(seconds)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_every_open_takes_the_lock_file_beside_the_store(tmp_path: Path):
    db = tmp_path / "runs.duckdb"
    RunStore(db).put_items("sha", [])
    assert lock_path(db) == tmp_path / "runs.duckdb.lock" and lock_path(db).is_file()


def test_a_writer_waits_for_a_process_that_holds_the_lock_and_then_writes(tmp_path: Path):
    db = tmp_path / "runs.duckdb"
    RunStore(db).put_items("sha", [])
    holder = _hold(db, "shared", 1.0)  # a reader elsewhere, between DuckDB's open and close
    started = time.monotonic()
    with connect(db, timeout_s=20) as conn:
        conn.execute("CREATE TABLE t AS SELECT 1 AS x")
    assert time.monotonic() - started >= 0.5  # it waited for the reader
    holder.wait(timeout=10)


def test_readers_share_the_lock(tmp_path: Path):
    db = tmp_path / "runs.duckdb"
    RunStore(db).put_items("sha", [])
    holder = _hold(db, "shared", 3.0)
    started = time.monotonic()
    with connect(db, read_only=True, timeout_s=20) as conn:
        assert conn.execute("SELECT count(*) FROM items").fetchone() == (0,)
    assert time.monotonic() - started < 2.5  # it did not wait for the other reader
    holder.wait(timeout=10)


def test_a_reader_gives_up_on_a_writer_that_keeps_the_store_in_one_line(tmp_path: Path):
    db = tmp_path / "runs.duckdb"
    RunStore(db).put_items("sha", [])
    holder = _hold(db, "exclusive", 5.0)
    with pytest.raises(DatabaseBusy, match=r"^database .*runs\.duckdb is busy: another process is writing it; gave up waiting$"):
        with connect(db, read_only=True, timeout_s=0.5):
            pass
    holder.kill()
    holder.wait(timeout=10)
