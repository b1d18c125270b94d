"""The child process that runs a visitor's SQL: `python -m store.sandbox` (request on stdin).

Why a process of its own: DuckDB's memory_limit covers its buffer pool but not every string
it builds (`SELECT repeat('x', 10000000) FROM range(1000)` allocates 10 GB), and converting
rows to Python objects can neither be bounded nor interrupted from a thread. A child process
gets a hard address-space limit (RLIMIT_AS) and can be killed when it runs past its time.
The parent (store.queries.run_readonly_sql) has already checked that the SQL is a single
SELECT-like statement; the child's connection is the second wall: read-only, no external
access (files, network, ATTACH, INSTALL/LOAD), bounded memory and threads, locked settings.
"""

from __future__ import annotations

import json
import pickle
import sys
import threading
from dataclasses import asdict, dataclass
from typing import Any

import duckdb

from engine.errors import UserError
from store.db import BASE_CONFIG, raw_connection


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
    """Run the request in this process and return rows or a one-line error."""
    try:
        with raw_connection(
            request.path,
            read_only=True,
            timeout_s=request.lock_timeout_s,
            config=connection_config(request),
        ) as conn:
            # Session settings must come before the lock; after it nothing can change.
            conn.execute("SET enable_progress_bar = false")
            conn.execute("SET lock_configuration = true")
            return _fetch(conn, request)
    except UserError as err:
        return SandboxReply(error=str(err))
    except MemoryError:
        return SandboxReply(error="query stopped: it needed more memory than allowed")


def _fetch(conn: duckdb.DuckDBPyConnection, request: SandboxRequest) -> SandboxReply:
    """Execute and collect up to max_rows rows or max_result_bytes, whichever comes first."""
    timer = threading.Timer(request.timeout_s, conn.interrupt)
    timer.start()
    try:
        cursor = conn.execute(request.sql)
        columns = tuple(d[0] for d in cursor.description or ())
        rows: list[tuple[Any, ...]] = []
        size = 0
        truncated = False
        while True:
            chunk = cursor.fetchmany(64)
            if not chunk:
                break
            for row in chunk:
                size += _approx_size(row)
                if len(rows) >= request.max_rows or size > request.max_result_bytes:
                    truncated = True
                    break
                rows.append(tuple(row))
            if truncated:
                break
        return SandboxReply(columns=columns, rows=tuple(rows), truncated=truncated)
    except duckdb.InterruptException:
        return SandboxReply(error=f"query stopped after {request.timeout_s:g} s (time limit)")
    except duckdb.OutOfMemoryException:
        return SandboxReply(error="query stopped: it needed more memory than allowed")
    except duckdb.Error as err:
        return SandboxReply(error=_one_line(err))
    finally:
        timer.cancel()
        timer.join()


def _approx_size(value: Any) -> int:
    """Rough bytes a fetched value takes, to bound what travels back to the app."""
    if isinstance(value, (str, bytes, bytearray)):
        return len(value) + 16
    if isinstance(value, (list, tuple, set)):
        return 16 + sum(_approx_size(v) for v in value)
    if isinstance(value, dict):
        return 16 + sum(_approx_size(k) + _approx_size(v) for k, v in value.items())
    return 16


def _one_line(err: BaseException) -> str:
    """A DuckDB error as one line, without the hint paragraphs that follow it."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _limit_address_space(limit: int | None) -> None:
    """Cap this process's memory so a runaway query fails here, not in the app."""
    if not limit:
        return
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass  # not on this platform (Windows, some macOS): the time limit still holds


def main() -> int:
    """Read a JSON request on stdin, write a pickled SandboxReply (as a dict) on stdout."""
    request = SandboxRequest(**json.loads(sys.stdin.read()))
    _limit_address_space(request.max_address_space)
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
