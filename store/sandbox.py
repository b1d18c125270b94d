"""The child process that runs a visitor's SQL: `python -m store.sandbox` (request on stdin).

Why a process of its own: DuckDB's memory_limit covers its buffer pool but not every string
it builds (`SELECT repeat('x', 10000000) FROM range(1000)` allocates 10 GB), and converting
rows to Python objects can neither be bounded nor interrupted from a thread. Parsing is no
safer: 100,000 nested subqueries crash the parser, nested parentheses in FROM make it take
gigabytes. A child process gets a hard address-space limit (RLIMIT_AS) and is killed when it
runs past its time, so everything that touches visitor SQL happens here, never in the app.

The parent (store.queries.run_readonly_sql) only bounds the text's length and bracket depth.
Here, before the database is opened, `check_statement` admits one SELECT-like statement
with nothing that writes or reads files anywhere inside it (first wall). The connection is
the second wall: read-only, local file system disabled, no external access (files, network,
ATTACH, INSTALL/LOAD), bounded memory and threads, locked settings. Server paths are masked
in every value and message sent back, and the child's environment holds no secrets.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import duckdb

from engine.errors import UserError
from engine.limits import limit_address_space
from store.db import BASE_CONFIG, raw_connection
from store.sql_cells import cell_bytes

# Statement types a visitor may run: DESCRIBE, SHOW, SUMMARIZE, FROM-first and VALUES all
# parse as SELECT.
_ALLOWED_STATEMENTS = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}

# Keywords that never belong in a query, even nested: a data-modifying CTE
# (`WITH x AS (DELETE ...)`) parses as SELECT and `EXPLAIN ANALYZE DELETE` as EXPLAIN.
_FORBIDDEN_KEYWORDS = frozenset({
    "ALTER", "ANALYZE", "ATTACH", "CALL", "CHECKPOINT", "COPY", "CREATE", "DELETE", "DETACH",
    "DROP", "EXPORT", "IMPORT", "INSERT", "INSTALL", "LOAD", "MERGE", "PRAGMA", "RESET",
    "SET", "TRUNCATE", "UPDATE", "USE", "VACUUM",
})

# Functions that read files, list folders or show secrets. The connection cannot reach the
# local file system either, but DuckDB's own file checks allow the database's files.
_FILE_FUNCTION = re.compile(
    r"^(read_\w+|\w+_scan|glob|sniff_csv|parquet_\w+|iceberg_\w+|delta_\w+|query_table|query"
    r"|duckdb_secrets|which_secret)$"
)

# System functions and views (callable without parentheses: `FROM duckdb_databases`) that name
# server paths: the database's file, its folder and temp folder, extension and secret folders.
# Refused by name wherever they appear: masking their output is bypassed by any string function
# (reverse, replace, string_split, to_base64), so the sandbox must never produce it at all.
# json_execute_serialized_sql runs a statement built from a string: no check could see it.
_PATH_REVEALING = re.compile(
    r"^(duckdb_(?!(columns|constraints|dependencies|functions|indexes|keywords|schemas|sequences|tables"
    r"|types|views)$)\w+|pragma_(?!(table_info|version|collations)$)\w+|current_setting|getvariable"
    r"|json_execute_serialized_sql|\w*checkpoint|\w*logging|\w*profiling|\w*external_resource\w*"
    r"|pg_settings)$"  # pg_catalog.pg_settings is duckdb_settings() under Postgres' name
)

# Setting names that hold a path, for `SHOW <name>`: some (extension_directory) are not listed
# by duckdb_settings(), whose names are refused after SHOW too.
_PATH_SETTING = re.compile(r"^\w*(director(y|ies)|paths?|files?|output|repository)$")

# Environment variables the child needs: finding programs and Python, locale, temp files.
_CHILD_ENV_KEYS = ("PATH", "LANG", "LANGUAGE", "TMPDIR", "TEMP", "TMP", "SYSTEMROOT")
_CHILD_ENV_PREFIXES = ("LC_",)

@dataclass(frozen=True)
class SandboxRequest:
    """What the parent asks the child to run, and within which bounds."""

    path: str
    sql: str
    max_rows: int
    timeout_s: float
    lock_timeout_s: float
    memory_limit: str
    threads: int
    max_result_bytes: int
    max_address_space: int | None


@dataclass(frozen=True)
class SandboxReply:
    """Rows, or a one-line error, as sent back to the parent (pickled on stdout)."""

    columns: tuple[str, ...] = ()
    rows: tuple[tuple[Any, ...], ...] = ()
    truncated: bool = False
    error: str | None = None


def connection_config(request: SandboxRequest) -> dict[str, Any]:
    """DuckDB settings fixed at open time, before any visitor SQL runs."""
    return {
        **BASE_CONFIG,  # no extension is installed or loaded behind the query's back
        "enable_external_access": False,
        "allow_community_extensions": False,
        "memory_limit": request.memory_limit,
        "threads": request.threads,
        # Spilling would let a query write up to 90% of the disk next to the database.
        "max_temp_directory_size": "0B",
    }


def run(request: SandboxRequest) -> SandboxReply:
    """Check and run the request in this process and return rows or a one-line error."""
    mask = path_masker(request.path)
    try:
        check_statement(request.sql, request.path)
        with raw_connection(
            request.path,
            read_only=True,
            timeout_s=request.lock_timeout_s,
            config=connection_config(request),
            yield_to_writers=True,
        ) as conn:
            reply = _fetch(conn, request)
    except UserError as err:
        reply = SandboxReply(error=str(err))
    except MemoryError:
        reply = SandboxReply(error="query stopped: it needed more memory than allowed")
    except Exception as err:  # noqa: BLE001 - e.g. a value DuckDB cannot convert: one line
        reply = SandboxReply(error=f"query failed: {_one_line(err)}")
    return _masked(reply, mask)


def check_statement(sql: str, database_path: str = "") -> None:
    """Refuse anything but one SELECT-like statement that neither writes nor reads files."""
    parser = duckdb.connect()  # a throwaway in-memory database: parsing touches no file
    try:
        statements = parser.extract_statements(sql)
        settings = _setting_names(parser)
    except duckdb.Error as err:
        raise UserError(_one_line(err)) from err
    finally:
        parser.close()
    if len(statements) != 1:
        raise UserError(f"run one statement at a time (got {len(statements)})")
    if statements[0].type not in _ALLOWED_STATEMENTS:
        raise UserError(
            "only SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE and EXPLAIN "
            f"queries are allowed (got {statements[0].type.name})"
        )
    tokens = _tokens(sql)
    for i, (kind, text) in enumerate(tokens):
        word = text.upper()
        if kind == duckdb.token_type.keyword and word in _FORBIDDEN_KEYWORDS:
            raise UserError(f"{word} is not allowed in the SQL console (queries only)")
        following = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if (kind in (duckdb.token_type.identifier, duckdb.token_type.keyword)
                and following.startswith("(") and _FILE_FUNCTION.match(text.lower())):
            raise UserError(f"{text}() is not allowed in the SQL console (files and secrets)")
        if kind in (duckdb.token_type.identifier, duckdb.token_type.keyword) and _PATH_REVEALING.match(text.lower()):
            raise UserError(f"{text} is not allowed in the SQL console (server settings and paths)")
        if (word == "SHOW" and kind == duckdb.token_type.keyword and i + 1 < len(tokens)
                and (tokens[i + 1][1].lower() in settings or _PATH_SETTING.match(tokens[i + 1][1].lower()))):
            # `SHOW temp_directory` is current_setting('temp_directory') in another spelling.
            raise UserError(f"SHOW {tokens[i + 1][1]} is not allowed in the SQL console (server settings and paths)")
        if kind == duckdb.token_type.string_const and _names_server_file(text, database_path):
            raise UserError("the SQL console cannot read the database's files")


def _setting_names(conn: duckdb.DuckDBPyConnection) -> frozenset[str]:
    """Every setting's name and alias: `SHOW <setting>` prints its value (paths among them).
    Read once per process: the list is DuckDB's, the same for every connection."""
    global _SETTING_NAMES
    if _SETTING_NAMES is None:
        rows = conn.execute("SELECT name, aliases FROM duckdb_settings()").fetchall()
        _SETTING_NAMES = frozenset(n.lower() for name, aliases in rows for n in (name, *(aliases or ())))
    return _SETTING_NAMES


_SETTING_NAMES: frozenset[str] | None = None


def _tokens(sql: str) -> list[tuple[Any, str]]:
    """The statement's tokens as (type, text), comments left out."""
    spans = duckdb.tokenize(sql)
    out = []
    for n, (start, kind) in enumerate(spans):
        end = spans[n + 1][0] if n + 1 < len(spans) else len(sql)
        text = sql[start:end].strip()
        if kind == duckdb.token_type.comment:
            continue
        if kind in (duckdb.token_type.identifier, duckdb.token_type.keyword):
            match = re.match(r'"(?:[^"]|"")*"|[^\s(),;.\[\]]+', text)
            text = match.group(0).strip('"') if match else text
        out.append((kind, text))
    return out


def _names_server_file(literal: str, database_path: str) -> bool:
    """Whether a string literal names the database, its WAL or its temp folder."""
    if not database_path:
        return False
    name = os.path.basename(database_path)
    return bool(name) and name.lower() in literal.lower()


def path_masker(database_path: str) -> Callable[[str], str]:
    """A function replacing the server's paths (database, its folder, temp and upload folders,
    caches, home, ...) in text. Known paths only: values are the visitor's data, where any other
    absolute path is theirs (store.server_paths)."""
    from store.server_paths import path_replacer, server_folders

    db = os.path.abspath(database_path)
    folder = os.path.dirname(db)
    names = {f: "<server path>" for f in server_folders()}
    names.update({db: "<database>", os.path.realpath(db): "<database>", database_path: "<database>",
                  folder: "<folder>", os.path.realpath(folder): "<folder>"})
    return path_replacer(names)


def _masked(reply: SandboxReply, mask: Callable[[str], str]) -> SandboxReply:
    """The reply with server paths masked in column names, values and the error."""
    return SandboxReply(
        columns=tuple(mask(c) for c in reply.columns),
        rows=tuple(tuple(_mask_value(v, mask) for v in row) for row in reply.rows),
        truncated=reply.truncated,
        error=mask(reply.error) if reply.error else reply.error,
    )


def _mask_value(value: Any, mask: Callable[[str], str]) -> Any:
    """Mask strings inside a fetched value (lists, structs and maps included)."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_mask_value(v, mask) for v in value)
    if isinstance(value, dict):
        return {_mask_value(k, mask): _mask_value(v, mask) for k, v in value.items()}
    return value


def child_environment(environ: Mapping[str, str], python_path: str) -> dict[str, str]:
    """The child's environment: locale, PATH and temp folder only, no tokens or secrets."""
    env = {k: v for k, v in environ.items()
           if k in _CHILD_ENV_KEYS or k.startswith(_CHILD_ENV_PREFIXES)}
    env["PYTHONPATH"] = python_path
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _fetch(conn: duckdb.DuckDBPyConnection, request: SandboxRequest) -> SandboxReply:
    """Lock the settings, execute, and collect up to max_rows rows or max_result_bytes (counted
    as the reply's JSON carries the cells: store.sql_cells.cell_bytes)."""
    # The time limit counts from the open: the file is held at most that long, which is what
    # bounds a waiting writer's wait (store.db, writer priority).
    timer = threading.Timer(request.timeout_s, conn.interrupt)
    timer.start()
    # Writers first: a run waiting for the file stops this query within a moment, rather than
    # waiting out its time limit at every batch it commits (a visitor looping slow queries
    # made a run 4.8x slower that way).
    yielded = threading.Event()
    done = threading.Event()
    watcher = threading.Thread(target=_yield_to_writer, args=(request.path, conn, yielded, done), daemon=True)
    watcher.start()
    try:
        # Session settings must come before the lock; after it nothing can change. With the
        # local file system off, DuckDB still reads the database through its open handle,
        # but read_blob(<the database>) and friends fail. The progress bar is already off:
        # raw_connection turns it off where it can be changed (store.db, a Jupyter kernel).
        conn.execute("SET disabled_filesystems = 'LocalFileSystem'")
        conn.execute("SET lock_configuration = true")
        cursor = conn.execute(request.sql)
        columns = tuple(d[0] for d in cursor.description or ())
        rows: list[tuple[Any, ...]] = []
        size = sum(cell_bytes(c) for c in columns)
        truncated = False
        while True:
            chunk = cursor.fetchmany(64)
            if not chunk:
                break
            for row in chunk:
                # Bytes as the reply will carry the cells, not characters: an emoji is 1 and 4 to 12.
                size += sum(cell_bytes(v) for v in row)
                if len(rows) >= request.max_rows or size > request.max_result_bytes:
                    truncated = True
                    break
                rows.append(tuple(row))
            if truncated:
                break
        return SandboxReply(columns=columns, rows=tuple(rows), truncated=truncated)
    except duckdb.InterruptException:
        if yielded.is_set():
            return SandboxReply(error=WRITER_FIRST)
        return SandboxReply(error=f"query stopped after {request.timeout_s:g} s (time limit)")
    except duckdb.OutOfMemoryException:
        return SandboxReply(error="query stopped: it needed more memory than allowed")
    except duckdb.Error as err:
        return SandboxReply(error=_one_line(err))
    finally:
        done.set()
        timer.cancel()
        timer.join()
        watcher.join()


WRITER_FIRST = "query stopped: a run is writing to the store and goes first; run it again in a moment"
_WRITER_POLL_S = 0.1


def _yield_to_writer(path: str, conn: duckdb.DuckDBPyConnection, yielded: threading.Event,
                     done: threading.Event) -> None:
    """Interrupt the query as soon as a writer announces that it waits for the file."""
    from store.db_markers import writers_waiting

    while not done.wait(_WRITER_POLL_S):
        if writers_waiting(path):
            yielded.set()
            conn.interrupt()
            return


def _one_line(err: BaseException) -> str:
    """A DuckDB error as one line, without the hint paragraphs that follow it."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def main() -> int:
    """Read a JSON request on stdin, write a pickled SandboxReply (as a dict) on stdout."""
    request = SandboxRequest(**json.loads(sys.stdin.read()))
    limit_address_space(request.max_address_space)
    try:
        reply = run(request)
    except MemoryError:
        reply = SandboxReply(error="query stopped: it needed more memory than allowed")
    # A dict, not the dataclass: run as __main__, the class would not unpickle in the parent.
    try:
        payload = pickle.dumps(asdict(reply), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as err:  # noqa: BLE001 - a value type pickle cannot carry
        payload = pickle.dumps(asdict(SandboxReply(error=f"cannot return this result: {err}")))
    sys.stdout.buffer.write(payload)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
