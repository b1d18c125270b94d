"""Databases a stranger might give as --db: truncated, SQLite, or from a newer version of this code.

Each must end in one line (a UserError; exit 2 from the CLI), never a traceback, and leave the
file as it was.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from engine.__main__ import main
from engine.errors import UserError
from store import connect
from store.db import check_database, raw_connection
from store.migrations import SchemaTooNew, apply_migrations, available_migrations

ROOT = Path(__file__).resolve().parents[2]
KNOWN = max(m.version for m in available_migrations())


@pytest.fixture(scope="module")
def real_db(tmp_path_factory) -> Path:
    """A database with a complete imported experiment 'e1' (vanilla, base, cf) of 60 items."""
    tmp = tmp_path_factory.mktemp("hostile")
    items = [{"id": f"q{i}", "question": f"question {i}?", "answers": [f"answer {i}"],
              "documents": [{"id": f"q{i}-d{j}", "text": f"text {j} " * 20, "relevant": j == i % 3} for j in range(3)]}
             for i in range(60)]
    (tmp / "data.jsonl").write_text("".join(json.dumps(x) + "\n" for x in items))
    (tmp / "answers.jsonl").write_text("".join(json.dumps({"item_id": x["id"], "answer": "a [1][3]"}) + "\n" for x in items))
    db = tmp / "real.duckdb"
    for mode in ("vanilla", "base", "cf"):
        assert main(["import", "--dataset", str(tmp / "data.jsonl"), "--answers", str(tmp / "answers.jsonl"),
                     "--mode", mode, "--metadata", "gender", "--experiment", "e1", "--db", str(db)]) == 0
    return db


def _read_everything(path: Path) -> None:
    with connect(path, read_only=True) as conn:
        for view in ("runs", "items", "generations", "citations", "query_metrics", "run_metrics", "bias"):
            conn.execute(f"SELECT * FROM {view}").fetchall()


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    rc = main(argv)
    return rc, capsys.readouterr().err


def _truncated(real_db: Path, tmp_path: Path, n: int) -> Path:
    path = tmp_path / f"cut{n}.duckdb"
    path.write_bytes(real_db.read_bytes()[:n])
    return path


@pytest.mark.parametrize("fraction", [0.0001, 0.01, 0.1, 0.3, 0.5, 0.7])
def test_a_truncated_file_is_one_line_through_connect(real_db, tmp_path, fraction):
    size = real_db.stat().st_size
    path = _truncated(real_db, tmp_path, int(size * fraction))
    before = path.read_bytes()
    for check in (lambda: check_database(path), lambda: _read_everything(path)):
        try:
            check()
        except UserError as err:
            message = str(err)
            assert "\n" not in message and str(path) in message
            assert "truncated or damaged" in message or "not a DuckDB database file" in message, message
    assert path.read_bytes() == before
    if fraction <= 0.1:  # the header and catalog are gone: refused at open, whatever DuckDB's layout
        with pytest.raises(UserError, match="truncated or damaged"):
            _read_everything(path)


def test_truncation_that_only_queries_reach_is_one_line(real_db, tmp_path):
    # Somewhere between an intact catalog and the end of the data, opening works and only a
    # query meets the missing blocks; that error must be the same one line.
    size = real_db.stat().st_size
    found = None
    for n in range(size // 2, size, 4096):
        path = _truncated(real_db, tmp_path, n)
        try:
            check_database(path)
        except UserError:
            continue
        try:
            _read_everything(path)
        except UserError as err:
            found = str(err)
            break
    if found is None:
        pytest.skip("no truncation point here opens but fails to read")
    assert found.startswith("cannot read database") and "truncated or damaged" in found


@pytest.mark.parametrize("command", [["list"], ["list", "--runs"], ["report"], ["bias", "--experiment", "e1"]])
def test_a_truncated_file_is_one_line_through_the_cli(real_db, tmp_path, capsys, command):
    path = _truncated(real_db, tmp_path, 100)
    rc, err = _cli([*command, "--db", str(path)], capsys)
    assert rc == 2 and err.count("\n") == 1
    assert err == f"error: cannot open database {path}: the file is truncated or damaged\n"


def test_a_truncated_file_in_a_fresh_process_has_no_traceback(real_db, tmp_path):
    path = _truncated(real_db, tmp_path, real_db.stat().st_size // 3)
    done = subprocess.run([sys.executable, "-m", "engine", "report", "--db", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1


def _sqlite(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE runs(run_id TEXT)")
    conn.commit()
    conn.close()
    return path


def test_a_sqlite_file_is_refused_without_loading_an_extension(tmp_path, capsys):
    path = _sqlite(tmp_path / "results.db")
    before = path.read_bytes()
    for read_only in (True, False):
        with pytest.raises(UserError) as caught:
            with connect(path, read_only=read_only):
                pass
        assert str(caught.value) == f"cannot open database {path}: not a DuckDB database file (it is a SQLite database)"
    for command in (["list"], ["report"], ["bias", "--experiment", "x"]):
        rc, err = _cli([*command, "--db", str(path)], capsys)
        assert rc == 2 and err == f"error: cannot open database {path}: not a DuckDB database file (it is a SQLite database)\n"
    assert path.read_bytes() == before


def test_every_connection_turns_extension_autoloading_off(tmp_path):
    db = tmp_path / "e.duckdb"
    settings = ("SELECT current_setting('autoinstall_known_extensions'), "
                "current_setting('autoload_known_extensions')")
    with connect(db) as conn:
        assert conn.execute(settings).fetchone() == (False, False)
    with connect(db, read_only=True) as conn:
        assert conn.execute(settings).fetchone() == (False, False)
    with raw_connection(db, read_only=True, config={"threads": 1}) as conn:
        assert conn.execute(settings).fetchone() == (False, False)
    from store.queries import run_readonly_sql
    from store.sandbox import SandboxRequest, connection_config

    # The sandbox refuses current_setting() (settings hold server paths), so its
    # settings are checked where they are made: the config its connection opens with.
    sandbox = connection_config(SandboxRequest(path=str(db), sql="", max_rows=1, timeout_s=1, lock_timeout_s=1,
                                               memory_limit="64MB", threads=1, max_result_bytes=1,
                                               max_address_space=None))
    assert (sandbox["autoinstall_known_extensions"], sandbox["autoload_known_extensions"]) == (False, False)
    with pytest.raises(UserError, match="current_setting is not allowed"):
        run_readonly_sql(db, "SELECT current_setting('autoinstall_known_extensions') AS i")
    # What the setting buys: a query that needs an extension not loaded fails at once instead
    # of downloading it.
    with connect(db, read_only=True) as conn:
        with pytest.raises(duckdb.Error, match="(?i)extension"):
            conn.execute("SELECT * FROM sqlite_scan('x.db', 't')").fetchall()


def _newer(path: Path, version: int = KNOWN + 2) -> Path:
    with connect(path) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (?, 'from_the_future', now()::TIMESTAMP)", [version])
    return path


def test_a_newer_schema_is_refused_at_connect_naming_both_versions(tmp_path, capsys):
    path = _newer(tmp_path / "future.duckdb")
    before = path.read_bytes()
    expected = f"database {path} has schema version {KNOWN + 2}; this code knows up to {KNOWN}: upgrade pattrieval"
    for read_only in (True, False):
        with pytest.raises(SchemaTooNew) as caught:
            with connect(path, read_only=read_only):
                pass
        assert str(caught.value) == expected
    with pytest.raises(SchemaTooNew, match="schema version"):
        check_database(path)
    for command in (["list"], ["report"], ["bias", "--experiment", "x"]):
        rc, err = _cli([*command, "--db", str(path)], capsys)
        assert (rc, err) == (2, f"error: {expected}\n")
    assert path.read_bytes() == before


def test_apply_migrations_refuses_a_newer_schema_too(tmp_path):
    # A database with versions {1, 2, future}: applying "pending" 003.. under it would mix schemas.
    path = _newer(tmp_path / "future.duckdb")
    conn = duckdb.connect(str(path))
    try:
        with pytest.raises(SchemaTooNew, match="the database has schema version"):
            apply_migrations(conn, available_migrations()[:1])
    finally:
        conn.close()


def test_check_database_passes_a_new_path_and_a_current_file_and_writes_nothing(tmp_path):
    check_database(tmp_path / "not-yet.duckdb")
    assert not (tmp_path / "not-yet.duckdb").exists()
    path = tmp_path / "ok.duckdb"
    with connect(path):
        pass
    before = path.read_bytes()
    check_database(path)
    assert path.read_bytes() == before
    with pytest.raises(UserError, match="folder"):
        check_database(tmp_path)
