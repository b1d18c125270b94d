"""Short-lived DuckDB connections that let a CLI run and the app share one database file.

Why this design: DuckDB locks the file per process. While one process has it open read-write,
no other process can open it at all, not even read-only; several processes may hold it
read-only at once. So nobody keeps the file open. Every access opens a connection, runs one
transaction and closes it (a batch commit or a page of queries takes milliseconds). When the
open would find another process using the store, it waits, retrying with jittered exponential
backoff until `timeout_s` (default 60 s) has passed; then `DatabaseBusy` (a UserError) is raised.
A CLI run and the app therefore interleave batch by batch, and readers never see half a batch
because each batch is one transaction. Every open and close happens inside the store's own lock
across processes (store.db_lock: shared for readers, exclusive for writers), taken before DuckDB
reads the file: DuckDB's lock alone let two writing processes corrupt a store.

Inside one process, connections to the same file are serialized by a per-file lock: DuckDB
caches one database instance per file and process, and refuses a second connection with a
different configuration (read-only vs read-write) while the first is open. Threads of the
app thus take turns, which costs little as every use is short.

Limits: whoever holds a connection blocks every other process for that long, so never keep
one open across slow work (a GPU batch, a user's think time). A visitor's query in the app's
SQL tab runs in a child process (store.sandbox) that holds a read-only lock for at most its
time limit (10 s by default; killed at lock wait + limit + 5 s), well under the 60 s writers
wait. Any other program that keeps the file open (the duckdb CLI, a notebook) makes writers
fail with `DatabaseBusy` after the timeout. File locks need a local file system; network
shares may not honour them.

Writer priority: a writer kept waiting leaves a marker beside the file, and readers that opt in
(the SQL sandbox) let it go first (store.db_markers, store.db_lock). Error messages: store.db_errors.

A writer with several writes in a row and nothing slow between them (an import, a merge and the
values it keeps, a test building a store) may hold one connection for all of them: inside
`session(path)`, every `connect` of this thread to that file runs its transaction on one
read-write connection opened (and migration-checked) once, under the store's exclusive lock, which
other processes wait for as for any write. Each `connect` is still its own transaction. Opening a
DuckDB database costs 15-40 ms on an idle 2-core machine (and several times that under load); a
transaction on an open connection, a few. A run holds no session across its batches: the GPU
work between them would keep the app waiting.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, Union

import duckdb

from engine.errors import UserError
from store.db_errors import (  # DatabaseBusy, disk_full and read_error are part of store.db's surface
    _DISK_FULL,
    DatabaseBusy,
    _damage,
    _read_errors,
    _require_regular,
    disk_full,
    read_error,
)
from store.db_lock import store_lock
from store.db_markers import make_marker, remove_marker
from store.migrations import apply_migrations, pending_migrations, refuse_newer_schema

__all__ = ["BASE_CONFIG", "DEFAULT_TIMEOUT_S", "Database", "DbLike", "HasDatabase", "as_database", "check_database", "connect",
           "file_lock", "open_with_retry", "raw_connection", "session", "utc_now"]

DEFAULT_TIMEOUT_S = 60.0

# DuckDB 2 reports a lock held by another process as an IOException with this text.
_LOCK_CONFLICT = "Could not set lock on file"
_HOLDER_PID = re.compile(r"\(PID (\d+)\)")

# Every connection gets these. Given a file of another format (a SQLite database, say),
# DuckDB would otherwise download and load the extension that reads it: network access and
# foreign code at open time, and a file this tool would then misuse as its store.
BASE_CONFIG: dict[str, Any] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}


_FIRST_BACKOFF_S = 0.005
_MAX_BACKOFF_S = 0.25


_file_locks: dict[str, threading.RLock] = {}
_file_locks_guard = threading.Lock()
# This thread's sessions: the real path of a store -> its held read-write connection.
_sessions = threading.local()


@dataclass(frozen=True)
class Database:
    """A database file and how long to wait for it when another process holds it."""

    path: Path
    timeout_s: float = DEFAULT_TIMEOUT_S

    def connect(self, *, read_only: bool = False):
        """Open a short transaction on this database (see `connect`)."""
        return connect(self.path, read_only=read_only, timeout_s=self.timeout_s)

    def session(self):
        """Hold one connection for this thread's transactions on this database (see `session`)."""
        return session(self.path, timeout_s=self.timeout_s)


class HasDatabase(Protocol):
    """Anything that carries a Database, such as a RunStore."""

    database: Database


DbLike = Union[Database, HasDatabase, str, "os.PathLike[str]"]


def as_database(db: DbLike) -> Database:
    """Accept a Database, a path, or anything with a `.database` (such as a RunStore)."""
    if isinstance(db, Database):
        return db
    inner = getattr(db, "database", None)
    if isinstance(inner, Database):
        return inner
    if isinstance(db, (str, os.PathLike)):
        return Database(Path(db))
    raise TypeError(f"expected a database path or Database, got {type(db).__name__}")


def utc_now() -> datetime:
    """Now in UTC as a naive datetime: TIMESTAMP columns hold UTC throughout the store."""
    return datetime.now(UTC).replace(tzinfo=None)


@contextmanager
def connect(
    path: str | os.PathLike[str],
    *,
    read_only: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Yield a connection inside one transaction: committed on exit, rolled back on error.

    The schema is created or migrated first when needed, even for a read-only request on a
    path that does not exist yet, so readers always see the current tables.
    """
    path = Path(path)
    deadline = time.monotonic() + timeout_s
    with _opened(path, read_only=read_only, deadline=deadline) as conn:
        conn.execute("BEGIN TRANSACTION")
        try:
            yield conn
        except BaseException as err:
            try:
                conn.execute("ROLLBACK")
            except duckdb.Error:
                pass  # closing discards the transaction anyway; keep the first error
            if isinstance(err, duckdb.Error) and _DISK_FULL in str(err):
                raise disk_full(path) from err
            if isinstance(err, duckdb.IOException):
                raise read_error(path, err) from err
            raise
        try:
            conn.execute("COMMIT")
        except duckdb.Error as err:
            # A commit writes the WAL: a full disk fails here, as a TransactionException.
            if _DISK_FULL in str(err):
                raise disk_full(path) from err
            raise


@contextmanager
def raw_connection(
    path: str | os.PathLike[str],
    *,
    read_only: bool,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    config: dict[str, Any] | None = None,
    yield_to_writers: bool = False,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Yield a migrated connection in autocommit mode with extra config (for the SQL sandbox)."""
    path = Path(path)
    deadline = time.monotonic() + timeout_s
    with _opened(path, read_only=read_only, deadline=deadline, config=config,
                 yield_to_writers=yield_to_writers) as conn:
        yield conn


@contextmanager
def _opened(
    path: Path,
    *,
    read_only: bool,
    deadline: float,
    config: dict[str, Any] | None = None,
    yield_to_writers: bool = False,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection on an up-to-date schema, opened and closed inside this process's file lock and
    the store's lock across processes (store.db_lock), closed at the end; in a `session`, its
    connection, left open."""
    held = _held_connection(path)
    if held is not None:
        if config is not None:
            raise RuntimeError(f"a session holds {path}: a connection with its own configuration cannot open it")
        yield held
        return
    if not path.exists():
        _create_parent(path)
    with file_lock(path, deadline):
        for _ in range(2):
            with _held(path, shared=read_only, deadline=deadline, yield_to_writers=yield_to_writers):
                # Writers first is the store lock's to keep now (it lets waiting writers go first):
                # waiting for them again while holding it would keep them waiting on this reader.
                conn = _open_migrated(path, read_only=read_only, deadline=deadline, config=config)
                if conn is not None:
                    try:
                        yield conn
                    finally:
                        conn.close()
                    return
            # A reader found no file or an older schema: create or migrate it as a writer, then read.
            with _held(path, shared=False, deadline=deadline):
                _migrate(path, deadline)
        raise DatabaseBusy(f"database {path} changed its schema while this process opened it; try again")


@contextmanager
def _held(path: Path, *, shared: bool, deadline: float, yield_to_writers: bool = False) -> Iterator[None]:
    """store.db_lock's lock, with a folder where no lock file can be made as one line."""
    try:
        lock = store_lock(path, shared=shared, deadline=deadline, yield_to_writers=yield_to_writers)
        lock.__enter__()
    except OSError as err:
        raise UserError(f"cannot open database {path}: cannot make its lock file: {err.strerror}") from err
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


def open_with_retry(
    path: Path,
    *,
    read_only: bool,
    deadline: float,
    config: dict[str, Any] | None = None,
) -> duckdb.DuckDBPyConnection:
    """duckdb.connect, retried with jittered backoff while another process holds the file (one
    that does not take the store lock: the duckdb CLI, a notebook's own connection).

    A writer that has to wait leaves a writer-intent marker meanwhile (see the module docstring).
    """
    _require_regular(path)
    markers: list[Path | None] = []

    def announce() -> None:
        if not markers:  # one marker per wait, made at the first conflict
            markers.append(make_marker(path))

    try:
        return _open_with_retry(
            path, read_only=read_only, deadline=deadline, config=config,
            on_conflict=None if read_only else announce,
        )
    finally:
        for marker in markers:
            if marker is not None:
                remove_marker(marker)


def _open_with_retry(
    path: Path,
    *,
    read_only: bool,
    deadline: float,
    config: dict[str, Any] | None,
    on_conflict: Callable[[], None] | None,
) -> duckdb.DuckDBPyConnection:
    """The retry loop of open_with_retry; `on_conflict` runs when the lock is found taken."""
    backoff = _FIRST_BACKOFF_S
    while True:
        try:
            conn = duckdb.connect(str(path), read_only=read_only, config={**BASE_CONFIG, **(config or {})})
        except duckdb.IOException as err:
            message = str(err)
            if _LOCK_CONFLICT not in message:
                raise UserError(f"cannot open database {path}: {_damage(path, message)}") from err
            if on_conflict is not None:
                on_conflict()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                holder = _HOLDER_PID.search(message)
                who = f"process {holder.group(1)}" if holder else "another process"
                raise DatabaseBusy(
                    f"database {path} is locked by {who}; gave up waiting"
                ) from err
            # Full jitter keeps two waiting processes from retrying in lockstep.
            time.sleep(min(remaining, random.uniform(0, backoff)))
            backoff = min(backoff * 2, _MAX_BACKOFF_S)
            continue
        except duckdb.Error as err:
            if isinstance(err, duckdb.ConnectionException):
                raise  # a same-process configuration clash is a bug, not a user error
            if "in-memory database" in str(err):  # a data file opened read-only, see below
                raise UserError(f"cannot open database {path}: not a DuckDB database file") from err
            raise UserError(f"cannot open database {path}: {_damage(path, str(err))}") from err
        try:
            backing = conn.execute(
                "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
            ).fetchone()
            if not backing or not backing[0]:
                # DuckDB 2 opens data files (.csv, .jsonl, .parquet ...) as an in-memory
                # database with a view on the file; writes there would vanish on close.
                raise UserError(f"cannot open database {path}: not a DuckDB database file")
            _quiet_progress_bar(conn)
        except BaseException:
            conn.close()
            raise
        return conn


@contextmanager
def session(path: str | os.PathLike[str], *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator[None]:
    """Hold one read-write connection to `path` for this thread until the block ends: every
    `connect` to it in between (reads included) runs its own transaction on that connection, with
    no open, migration check or close of its own. The store's exclusive lock is held throughout,
    so keep the block free of slow work. Nested sessions of one file share the outer one."""
    path = Path(path)
    if _held_connection(path) is not None:
        yield
        return
    deadline = time.monotonic() + timeout_s
    with _opened(path, read_only=False, deadline=deadline) as conn:
        held = _session_table()
        key = os.path.realpath(path)
        held[key] = conn
        try:
            yield
        finally:
            del held[key]


def _session_table() -> dict[str, duckdb.DuckDBPyConnection]:
    table = getattr(_sessions, "held", None)
    if table is None:
        table = _sessions.held = {}
    return table


def _held_connection(path: Path) -> duckdb.DuckDBPyConnection | None:
    """This thread's session connection to `path`, if it holds one."""
    table = getattr(_sessions, "held", None)
    return table.get(os.path.realpath(path)) if table else None


def _quiet_progress_bar(conn: duckdb.DuckDBPyConnection) -> None:
    """Turn DuckDB's progress bar off where it is on: it would interleave with the CLI's tqdm output.

    Inside a Jupyter kernel without ipywidgets DuckDB starts with the bar off and refuses any
    change to the setting ("required package 'ipywidgets' is missing"), even to off; so read it
    first. With ipywidgets it starts on (a notebook widget) and accepts the change.
    """
    (enabled,) = conn.execute("SELECT current_setting('enable_progress_bar')").fetchone() or (False,)
    if enabled:
        conn.execute("SET enable_progress_bar = false")


def _open_migrated(
    path: Path,
    *,
    read_only: bool,
    deadline: float,
    config: dict[str, Any] | None = None,
) -> duckdb.DuckDBPyConnection | None:
    """A connection on an up-to-date schema, creating the file or migrating it if needed; None when
    a reader finds no file or an older schema (the caller migrates under the writers' lock)."""
    if not path.exists():
        if read_only:
            return None
        _migrate(path, deadline)
    conn = open_with_retry(path, read_only=read_only, deadline=deadline, config=config)
    try:
        with _read_errors(path):
            refuse_newer_schema(conn, f"database {path}")
            if not pending_migrations(conn):
                return conn
            if not read_only:
                apply_migrations(conn)
                return conn
    except BaseException:
        conn.close()
        raise
    conn.close()
    return None


def _migrate(path: Path, deadline: float) -> None:
    """Apply pending migrations through a read-write connection of their own."""
    conn = open_with_retry(path, read_only=False, deadline=deadline)
    try:
        # Re-checks under the write lock: another process may have migrated meanwhile.
        with _read_errors(path):
            apply_migrations(conn)
    finally:
        conn.close()


def _create_parent(path: Path) -> None:
    """Create the database's folder so `--db results/runs.duckdb` works on a fresh checkout."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create database folder {path.parent}: {err.strerror}") from err


@contextmanager
def file_lock(path: Path, deadline: float) -> Iterator[None]:
    """Serialize this process's connections to one file (re-entrant for the same thread).

    store.merge holds it on the source file too, while the target's transaction attaches it.
    """
    key = os.path.realpath(path)
    with _file_locks_guard:
        lock = _file_locks.setdefault(key, threading.RLock())
    if not lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
        raise DatabaseBusy(f"database {path} is in use by another thread of this process")
    try:
        yield
    finally:
        lock.release()


def check_database(path: str | os.PathLike[str], *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Raise a one-line UserError now if an existing `path` cannot serve as this code's database.

    For commands that do slow work before their first write (loading a model): a foreign,
    damaged or newer-schema file is refused up front. Nothing is written, not even a
    migration, and a path that does not exist yet passes (it will be created).
    """
    path = Path(path)
    if not path.exists() or _held_connection(path) is not None:
        return  # a session's connection has passed these checks
    if path.is_dir():
        raise UserError(f"cannot open database {path}: it is a folder")
    _require_regular(path)
    deadline = time.monotonic() + timeout_s
    with file_lock(path, deadline), _held(path, shared=True, deadline=deadline):
        conn = open_with_retry(path, read_only=True, deadline=deadline)
        try:
            with _read_errors(path):
                refuse_newer_schema(conn, f"database {path}")
        finally:
            conn.close()


