"""The public SQL console under attack: each hostile query is refused in one line, data unchanged."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from engine.errors import UserError
from engine.types import RunSpec
from store import RunStore, queries
from store.queries.console import _bracket_depth
from store.sandbox import check_statement, child_environment, path_masker


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "secret-folder" / "runs.duckdb"
    store = RunStore(path, timeout_s=10)
    store.start_run(RunSpec(
        run_id="run-a", experiment_id="exp-a", config_hash="h", model="tiny", model_revision=None,
        quantization="none", dtype="float32", device="cpu", dataset="d.jsonl", dataset_sha="sha",
        metadata_type=None, rag_mode="vanilla", seed=0, prompt_version="p1", git_sha=None,
        library_versions={}, config={}, n_items=1,
    ))
    return path


def snapshot(db: Path) -> list:
    """What a visitor must never change: the runs and the file's bytes."""
    return [queries.list_runs(db)[["run_id", "status"]].values.tolist(), db.read_bytes()]


def refused(db: Path, sql: str, match: str | None = None, **kwargs) -> str:
    """Run a hostile query; assert it is refused in one line and return the message."""
    with pytest.raises(UserError, match=match) as caught:
        queries.run_readonly_sql(db, sql, **kwargs)
    message = str(caught.value)
    assert message and "\n" not in message, message
    return message


# --- 1. crash and memory blow-up: the parent never parses ----------------------------------


def test_deep_nesting_is_refused_by_the_guard_before_any_process(db: Path):
    before = snapshot(db)
    deep = "SELECT " + "(SELECT " * 100_000 + "1" + ")" * 100_000  # the 1.6 MB crash
    started = time.monotonic()
    refused(db, deep, "too long")
    refused(db, "SELECT * FROM " + "(" * 3000 + "runs" + ")" * 3000, "nested too deeply")
    refused(db, "SELECT " + "[" * 65 + "1" + "]" * 65, "nested too deeply")
    assert time.monotonic() - started < 0.5  # no parse, no process
    assert snapshot(db) == before


def test_the_guard_is_linear_and_ignores_quotes_and_comments():
    assert _bracket_depth("SELECT ((1)), [[2]]") == 2
    assert _bracket_depth("SELECT '((((((' AS a, \"(((\" -- ((((\n /* (((( */ FROM t") == 0
    started = time.monotonic()
    assert _bracket_depth("(" * 50_000 + ")" * 50_000) == 50_000
    assert time.monotonic() - started < 0.5


def test_nesting_that_passes_the_guard_is_parsed_in_the_child(db: Path):
    depth = queries.SQL_MAX_DEPTH - 1
    sql = "SELECT * FROM " + "(SELECT " * (depth - 1) + "42 AS x" + ")" * (depth - 1)
    assert queries.run_readonly_sql(db, sql, timeout_s=5).frame.iloc[0, 0] == 42
    # A parse error is the child's one-line reply, not an exception in this process.
    assert "syntax" in refused(db, "SELECT * FROM (((runs)").lower()


# --- 2. one wall instead of two -------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "EXPLAIN ANALYZE DELETE FROM runs",
        "EXPLAIN ANALYZE SELECT 1",
        "EXPLAIN (ANALYZE) SELECT 1",
        "WITH x AS (DELETE FROM runs RETURNING *) SELECT * FROM x",
        "WITH x AS (INSERT INTO runs (run_id) VALUES ('y') RETURNING *) SELECT * FROM x",
        "WITH x AS (UPDATE runs SET status = 'x' RETURNING *) SELECT * FROM x",
        "SELECT * FROM (WITH x AS (DELETE FROM runs RETURNING *) SELECT * FROM x)",
    ],
)
def test_writes_hidden_in_explain_or_ctes_are_refused_by_the_filter(db: Path, sql: str):
    before = snapshot(db)
    message = refused(db, sql, "not allowed")
    assert "read-only" not in message  # the filter, not the connection, refused it
    with pytest.raises(UserError, match="not allowed"):
        check_statement(sql)  # the filter alone
    assert snapshot(db) == before


def test_the_filter_still_admits_plain_queries():
    for sql in ["EXPLAIN SELECT 1", "SELECT 'delete' AS word, \"update\" FROM t",
                "SELECT 1 -- DELETE FROM runs", "WITH t AS (SELECT 1) SELECT * FROM t"]:
        check_statement(sql)


# --- 3. the raw file, its WAL and its temp folder -------------------------------------------


@pytest.mark.parametrize(
    "template",
    [
        "SELECT * FROM read_blob('{db}')",
        "SELECT * FROM read_text('{db}')",
        "SELECT * FROM read_blob('{db}.wal')",
        "SELECT * FROM read_text('{db}.tmp/x')",
        "SELECT * FROM glob('{db}.tmp/*')",
        "SELECT * FROM '{db}'",
        "SELECT * FROM read_blob('{folder}/*')",
        "SELECT * FROM READ_BLOB ('{folder}/runs.duck' || 'db')",
        "SELECT * FROM sniff_csv('{db}')",
        "SELECT * FROM parquet_metadata('{db}')",
    ],
)
def test_the_database_files_are_not_readable(db: Path, template: str):
    db.with_name(db.name + ".wal").write_bytes(b"wal")  # make the WAL exist to be read
    before = snapshot(db)
    message = refused(db, template.format(db=db, folder=db.parent))
    assert str(db.parent) not in message
    assert snapshot(db) == before


def test_the_connection_itself_cannot_read_local_files(db: Path, monkeypatch: pytest.MonkeyPatch):
    """Second wall: with the filter out of the way, the local file system is still off."""
    import store.sandbox as sandbox

    monkeypatch.setattr(sandbox, "check_statement", lambda *args: None)
    reply = sandbox.run(sandbox.SandboxRequest(
        path=str(db), sql=f"SELECT octet_length(content) FROM read_blob('{db}')", max_rows=10,
        timeout_s=5, lock_timeout_s=5, memory_limit="64MB", threads=1,
        max_result_bytes=1_000_000, max_address_space=None))
    assert reply.error and "disabled" in reply.error and str(db.parent) not in reply.error


# --- 4. invalid text -------------------------------------------------------------------------


def test_a_lone_surrogate_is_a_one_line_error(db: Path):
    assert "valid text" in refused(db, "SELECT '\ud800'")


# --- 5. no secrets in the child ---------------------------------------------------------------


def test_the_child_environment_holds_no_secrets():
    env = child_environment(
        {"PATH": "/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "TMPDIR": "/t", "HF_TOKEN": "hf_x",
         "AWS_SECRET_ACCESS_KEY": "k", "PATTRIEVAL_DB": "/data/x.duckdb", "HOME": "/root"},
        "/repo")
    assert env == {"PATH": "/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "TMPDIR": "/t",
                   "PYTHONPATH": "/repo", "PYTHONNOUSERSITE": "1"}


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc (Linux)")
def test_the_real_child_does_not_inherit_hf_token(db: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token_value")
    monkeypatch.setenv("MY_APP_SECRET", "s3cr3t")
    errors: list[BaseException] = []

    def slow_query() -> None:
        try:
            queries.run_readonly_sql(
                db, "SELECT count(*) FROM range(100000) a, range(100000) b", timeout_s=1.0)
        except UserError:
            pass  # the time limit, expected
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    worker = threading.Thread(target=slow_query)
    worker.start()
    environ = None
    deadline = time.monotonic() + 5
    while environ is None and time.monotonic() < deadline:
        for pid in _children(os.getpid()):
            try:
                if b"store.sandbox" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
        time.sleep(0.01)
    worker.join()
    assert not errors
    assert environ is not None, "the sandbox child was not seen"
    names = {entry.split(b"=", 1)[0] for entry in environ.split(b"\0") if entry}
    assert b"PYTHONPATH" in names
    assert b"HF_TOKEN" not in names and b"MY_APP_SECRET" not in names
    assert b"hf_secret_token_value" not in environ and b"s3cr3t" not in environ


def _children(parent: int) -> list[int]:
    """Process ids whose parent is `parent` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                out.append(int(entry.name))
    return out


# --- 6. server paths never shown ------------------------------------------------------------


# Masking was bypassed by any string function of a path (reverse, replace,
# string_split, to_base64). The functions and views that hold server paths are refused by name,
# so that no query ever sees one: not masked, unreachable.
PATH_ATTACKS = [
    "SELECT * FROM duckdb_settings()",
    "SELECT * FROM duckdb_databases()",
    "SELECT current_setting('temp_directory') AS t",
    "SELECT reverse(path) FROM duckdb_databases() WHERE database_name = current_database()",
    "SELECT to_base64(encode(path)) FROM duckdb_databases()",
    "SELECT string_split(path, '/') FROM system.main.duckdb_databases",
    "SELECT replace(path, '/', '|') FROM pragma_database_list",
    'SELECT reverse(value) FROM "duckdb_settings"() WHERE name = \'temp_directory\'',
    "SELECT reverse(current_setting('temp_directory'))",
    "SELECT * FROM json_execute_serialized_sql(json_serialize_sql('SELECT path FROM duckdb_databases()'))",
    "SELECT CAST(path AS INTEGER) FROM duckdb_databases() WHERE database_name = current_database()",
    "SELECT * FROM duckdb_extensions()",
    "SELECT * FROM duckdb_temporary_files()",
    # pg_settings is duckdb_settings() under Postgres' name, and SHOW <setting> is
    # current_setting(); both gave the temp folder through reverse/replace/to_base64.
    "SELECT reverse(setting) FROM pg_settings WHERE name = 'temp_directory'",
    "SELECT replace(setting, '/', '|') FROM pg_catalog.pg_settings",
    "SELECT to_base64(encode(setting)) FROM system.pg_catalog.pg_settings",
    'SELECT string_split(setting, \'/\') FROM "PG_SETTINGS"',
    "DESCRIBE pg_settings",
    "SHOW temp_directory",
    'SHOW "TEMP_DIRECTORY"',
    "SELECT reverse(temp_directory) FROM (SHOW temp_directory)",
    "SHOW secret_directory",
    "SHOW extension_directory",
    "SHOW home_directory",
    "SHOW /* a comment */ profile_output",
    "SELECT * FROM pragma_database_list",
    "SELECT * FROM duckdb_memory()",
]


@pytest.mark.parametrize("sql", PATH_ATTACKS)
def test_functions_that_hold_server_paths_are_refused_not_masked(db: Path, sql: str):
    message = refused(db, sql, match="not allowed in the SQL console")
    assert str(db.parent) not in message and "secret-folder" not in message


def test_no_catalog_view_or_function_hands_out_a_server_path(db: Path):
    """The whole family: every system view (pg_catalog, information_schema, main) and every table
    function without arguments, reverse()d so that masking could not help, is either refused by
    the filter or, run on the store without masking, holds no server path."""
    import duckdb

    with duckdb.connect() as conn:
        views = conn.execute("SELECT schema_name || '.' || view_name FROM duckdb_views() WHERE internal").fetchall()
        functions = conn.execute("SELECT DISTINCT function_name || '()' FROM duckdb_functions() WHERE "
                                 "function_type = 'table' AND len(parameters) = 0").fetchall()
    sources = [v for (v,) in views] + [f for (f,) in functions] + ["(SHOW ALL)", "(SHOW DATABASES)"]
    assert "pg_catalog.pg_settings" in sources and "duckdb_databases()" in sources
    admitted = []
    for source in sources:
        sql = f"SELECT reverse(CAST(COLUMNS(*) AS VARCHAR)) FROM {source}"
        try:
            check_statement(sql, str(db))
            admitted.append(sql)
        except UserError:
            pass
    assert "SELECT reverse(CAST(COLUMNS(*) AS VARCHAR)) FROM information_schema.tables" in admitted
    leaks = []
    with duckdb.connect(str(db), read_only=True) as conn:  # one connection, as the sandbox opens it
        for sql in admitted:
            try:
                seen = repr(conn.execute(sql).fetchall())
            except duckdb.Error as err:
                seen = str(err)
            if "secret-folder"[::-1] in seen:
                leaks.append(sql)
    assert leaks == []


def test_show_a_table_still_works(db: Path):
    assert "run_id" in queries.run_readonly_sql(db, "SHOW runs").frame.iloc[:, 0].tolist()
    assert "runs" in queries.run_readonly_sql(db, "SHOW TABLES").frame.iloc[:, 0].tolist()


def test_catalog_functions_without_paths_still_work(db: Path):
    tables = queries.run_readonly_sql(db, "SELECT table_name FROM duckdb_tables() ORDER BY 1").frame
    assert "runs" in tables["table_name"].tolist()
    assert len(queries.run_readonly_sql(db, "SELECT * FROM pragma_table_info('runs')").frame) > 5


def test_error_messages_do_not_show_server_paths(db: Path):
    # A conversion error quoting the database's name: masked (a message cannot be taken apart by SQL).
    message = refused(db, "SELECT CAST(current_database() || '/x' AS INTEGER)")
    assert "secret-folder" not in message and str(db.parent) not in message


def test_the_masker_replaces_the_longest_path_first(tmp_path: Path):
    mask = path_masker(str(tmp_path / "runs.duckdb"))
    assert mask(f"{tmp_path}/runs.duckdb.wal and {tmp_path}/x") == "<database>.wal and <folder>/x"


def test_the_masker_knows_the_temp_upload_and_cache_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The store and the temp folder apart, as on a Space (/data and /tmp)."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "uploads"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hub"))
    mask = path_masker(str(tmp_path / "volume" / "runs.duckdb"))
    text = mask(f"{tmp_path}/scratch/x.csv {tmp_path}/uploads/u.jsonl {tmp_path}/hub/m {tmp_path}/volume/runs.duckdb")
    assert text == "<server path>/x.csv <server path>/u.jsonl <server path>/m <database>"
