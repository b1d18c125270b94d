"""store.db.session: one connection for a burst of writes, each still its own transaction, the
store's lock held throughout (another process waits), and every kind of access inside it served by
that connection (reads, a second session, check_database, a merge) rather than a second open that
would wait for its own lock."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from store import RunStore, queries
from store.db import DatabaseBusy, check_database, connect, session
from store.merge import merge_stores
from tests.store.test_store_concurrency import SHA, generation, items, spec


def build(db: Path, run_id: str, n: int = 4) -> None:
    store = RunStore(db)
    with store.database.session():
        write_one_run(store, run_id, n)


def write_one_run(store: RunStore, run_id: str, n: int) -> None:
    store.put_items(SHA, items(n))
    store.start_run(spec(run_id, n))
    store.write_batch(run_id, [generation(f"q{i}") for i in range(n)])
    store.finish_run(run_id, "complete")


def test_a_session_opens_the_file_once_for_many_transactions(tmp_path: Path, monkeypatch):
    db = tmp_path / "s.duckdb"
    RunStore(db).put_items(SHA, items(8))
    opened: list[str] = []
    real = duckdb.connect

    def counting(database=":memory:", *args, **kwargs):  # the real connect, counted
        opened.append(str(database))
        return real(database, *args, **kwargs)

    monkeypatch.setattr(duckdb, "connect", counting)
    store = RunStore(db)
    with store.database.session():
        store.start_run(spec("r", 8))
        for start in (0, 4):
            store.write_batch("r", [generation(f"q{i}") for i in range(start, start + 4)])
        assert store.done_item_ids("r") == {f"q{i}" for i in range(8)}  # a read sees the writes
        store.finish_run("r", "complete")
    assert opened.count(str(db)) == 1
    monkeypatch.undo()
    assert queries.get_run(db, "r").status == "complete"
    assert queries.get_run(db, "r").n_done == 8


def test_each_connect_in_a_session_is_its_own_transaction(tmp_path: Path):
    db = tmp_path / "s.duckdb"
    with session(db):
        with connect(db) as conn:
            conn.execute("CREATE TABLE kept (x INTEGER)")
            conn.execute("INSERT INTO kept VALUES (1)")
        with pytest.raises(RuntimeError, match="half"):
            with connect(db) as conn:
                conn.execute("INSERT INTO kept VALUES (2)")
                raise RuntimeError("half-way")
        with connect(db, read_only=True) as conn:
            assert conn.execute("SELECT list(x) FROM kept").fetchone()[0] == [1]
    with connect(db, read_only=True) as conn:  # committed and closed: a fresh open reads it
        assert conn.execute("SELECT list(x) FROM kept").fetchone()[0] == [1]


def test_nested_sessions_checks_and_merges_use_the_held_connection(tmp_path: Path):
    target, first, second = tmp_path / "t.duckdb", tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    build(first, "run-a")
    build(second, "run-b")
    with session(target, timeout_s=5):
        with session(target, timeout_s=5):
            check_database(target, timeout_s=5)  # would wait for its own lock if it opened again
        assert merge_stores(target, first).merged == ("run-a",)
        assert merge_stores(target, second).merged == ("run-b",)  # the first source was detached
    assert set(queries.list_runs(target)["run_id"]) == {"run-a", "run-b"}


def test_another_process_waits_for_the_session_and_reads_after_it(tmp_path: Path):
    db = tmp_path / "s.duckdb"
    RunStore(db).put_items(SHA, items(4))
    code = ("import sys, time; from store import queries; t = time.monotonic(); "
            f"n = len(queries.list_runs({str(db)!r})); print(n, round(time.monotonic() - t, 2))")
    with session(db):
        RunStore(db).start_run(spec("r", 4))
        reader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                  cwd=Path(__file__).resolve().parents[2])
        time.sleep(1.5)
        assert reader.poll() is None, "a reader opened the store while a session held it"
    out, _ = reader.communicate(timeout=60)
    assert reader.returncode == 0
    assert out.split()[0] == "1"  # the run the session wrote


def test_another_thread_waits_for_the_session(tmp_path: Path):
    db = tmp_path / "s.duckdb"
    RunStore(db).put_items(SHA, items(4))
    seen: list[object] = []

    def read() -> None:
        try:
            seen.append(len(queries.list_runs(RunStore(db, timeout_s=0.5))))
        except DatabaseBusy as err:
            seen.append(err)

    with session(db):
        RunStore(db).start_run(spec("r", 4))
        thread = threading.Thread(target=read)
        thread.start()
        thread.join(10)
    assert isinstance(seen[0], DatabaseBusy), seen  # the file lock of this process, held by the session
    read()
    assert seen[1] == 1
