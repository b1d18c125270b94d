"""The app's SQL tab: the store's tables and views with their columns, and a visitor's query run
in a sandboxed child process (store.sandbox)."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import UserError
from store.db import DbLike, as_database
from store.queries._read import fetch_frame
from store.sql_cells import shown_cell  # the console's cells as the app shows them

__all__ = ["SQL_MAX_CHARS", "SQL_MAX_DEPTH", "SqlResult", "run_readonly_sql", "shown_cell", "table_columns"]

if TYPE_CHECKING:
    import pandas as pd


# The parent's only checks on visitor SQL (parsing happens in the sandboxed child): a query
# longer than this, or nesting brackets deeper, is refused before a process is started.
SQL_MAX_CHARS = 100_000


SQL_MAX_DEPTH = 64


@dataclass(frozen=True)
class SqlResult:
    """A visitor's query result, cut at max_rows or max_result_bytes. `columns` and `rows` are the
    values as DuckDB returned them: the frame turns a NULL among numbers into NaN and an INTEGER
    column holding one into floats, so a page that shows cells exactly reads the rows."""

    frame: pd.DataFrame
    truncated: bool
    elapsed_s: float
    columns: tuple[str, ...] = ()
    rows: tuple[tuple[Any, ...], ...] = ()


def table_columns(db: DbLike) -> pd.DataFrame:
    """The tables and views a user can query, with their columns, for the app's SQL tab."""
    return fetch_frame(
        db,
        """
        SELECT c.table_name, CASE WHEN v.view_name IS NULL THEN 'table' ELSE 'view' END AS kind,
               c.column_name, c.data_type
        FROM duckdb_columns() c
        LEFT JOIN duckdb_views() v
          ON v.database_name = c.database_name AND v.schema_name = c.schema_name
         AND v.view_name = c.table_name
        WHERE c.database_name = current_database() AND c.schema_name = 'main'
          AND c.table_name <> 'schema_migrations'
        ORDER BY c.table_name, c.column_index
        """,
    )


def run_readonly_sql(
    db: DbLike,
    sql: str,
    max_rows: int = 1000,
    timeout_s: float = 10.0,
    *,
    memory_limit: str = "256MB",
    threads: int = 1,
    max_result_bytes: int = 16_000_000,
    max_address_space: int | None = 2 * 1024**3,
) -> SqlResult:
    """Run one read-only query from a visitor, sandboxed; bad or blocked SQL raises UserError.

    Only one SELECT-like statement passes (SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW,
    SUMMARIZE, EXPLAIN without ANALYZE), with nothing nested that writes, and no file
    reading. Here the text is only bounded (length, bracket depth, valid Unicode); parsing
    and checking happen in a child process (store.sandbox) that then runs it on a read-only
    connection with no file system or external access, bounded memory, threads and address
    space, a locked configuration and a scrubbed environment; the child is killed if it
    outlives its limits. Rows are cut at max_rows or max_result_bytes (`truncated` says so);
    the bytes are those the app's reply takes for the cells (store.sql_cells.cell_bytes), not
    characters: an emoji counts 12, as Gradio's /call route writes it.
    Server paths never appear in rows or messages.
    """
    from store.sandbox import SandboxReply, SandboxRequest, child_environment

    _guard_statement(sql)
    database = as_database(db)
    request = SandboxRequest(
        path=str(database.path),
        sql=sql,
        max_rows=max_rows,
        timeout_s=timeout_s,
        lock_timeout_s=min(database.timeout_s, timeout_s),
        memory_limit=memory_limit,
        threads=threads,
        max_result_bytes=max_result_bytes,
        max_address_space=max_address_space,
    )
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-m", "store.sandbox"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=child_environment(os.environ, _sandbox_python_path()),
    )
    # The child stops its query at timeout_s; this hard limit also covers its start, parsing,
    # waiting for the file lock, and work DuckDB cannot interrupt (building huge rows).
    hard_limit = request.lock_timeout_s + timeout_s + 5.0
    try:
        out, _ = child.communicate(json.dumps(dataclasses.asdict(request)).encode(), hard_limit)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise UserError(f"query stopped after {timeout_s:g} s (time limit)") from None
    elapsed = time.monotonic() - started
    try:
        reply = SandboxReply(**pickle.loads(out))
    except Exception:  # noqa: BLE001 - the child died (memory limit, signal) before replying
        raise UserError("query stopped: it needed more memory than allowed, or crashed") from None
    if reply.error:
        raise UserError(reply.error)
    import pandas as pd

    frame = pd.DataFrame.from_records(list(reply.rows), columns=list(reply.columns))
    return SqlResult(frame=frame, truncated=reply.truncated, elapsed_s=elapsed, columns=tuple(reply.columns),
                     rows=tuple(reply.rows))


def _sandbox_python_path() -> str:
    """PYTHONPATH for the child: this package's root, then the parent's own PYTHONPATH."""
    package_root = str(Path(__file__).resolve().parents[2])
    return os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)


def _guard_statement(sql: str) -> None:
    """Cheap checks before a process is started: non-empty, valid text, bounded size and depth.

    O(n) and parse-free on purpose: parsing visitor SQL can crash or exhaust memory, so it
    happens only in the sandboxed child. Brackets inside quotes and comments are not counted.
    """
    if not sql or not sql.strip():
        raise UserError("empty query")
    if len(sql) > SQL_MAX_CHARS:
        raise UserError(f"query too long: {len(sql):,} characters (at most {SQL_MAX_CHARS:,})")
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as err:
        raise UserError(f"query is not valid text: a lone surrogate at character {err.start}") from None
    depth = _bracket_depth(sql)
    if depth > SQL_MAX_DEPTH:
        raise UserError(f"query nested too deeply: {depth} brackets (at most {SQL_MAX_DEPTH})")


def _bracket_depth(sql: str) -> int:
    """The deepest nesting of (), [] and {} outside strings, quoted names and comments."""
    depth = deepest = 0
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"":
            end = sql.find(ch, i + 1)  # a doubled quote just closes and reopens: same effect
            i = n if end < 0 else end + 1
            continue
        if ch == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if ch == "/" and sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth = max(0, depth - 1)
        i += 1
    return deepest
