"""What goes wrong opening or reading a database file, as one-line UserErrors (store.db's messages).

A damaged file can open fine and fail only when a query reaches its missing blocks; a full disk
fails a write. Both are the user's file or machine, not a bug in this code, so they get one line
like other bad input.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from engine.errors import UserError

# A DuckDB file starts with an 8-byte checksum and then this magic.
_DUCKDB_MAGIC = b"DUCK"


_MAGIC_OFFSET = 8


_SQLITE_MAGIC = b"SQLite format 3\x00"


_TRUNCATED = "Could not read enough bytes"


class DatabaseBusy(UserError):
    """Another process kept the database file locked for longer than the timeout."""


def _require_regular(path: Path) -> None:
    """A FIFO, device or socket as the database would block DuckDB's open forever (or read
    /dev/zero without end): refuse anything that exists and is not a regular file."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing: created later; unreadable: DuckDB's own message
    if stat.S_ISDIR(mode):
        raise UserError(f"cannot open database {path}: it is a folder")
    if not stat.S_ISREG(mode):
        raise UserError(f"cannot open database {path}: not a regular file (a FIFO, device or socket)")


@contextmanager
def _read_errors(path: Path) -> Iterator[None]:
    """Turn DuckDB I/O errors while reading the file into one-line UserErrors."""
    try:
        yield
    except duckdb.IOException as err:
        raise read_error(path, err) from err


# How the operating system's ENOSPC reads in DuckDB's messages, whatever exception carries it.
_DISK_FULL = "No space left on device"


def disk_full(path: Path) -> UserError:
    """The one line for a write that found the disk full: nothing of that transaction is kept."""
    return UserError(f"database {path}: the disk is full (no space left on device); the last batch was not "
                     "stored; free some space and run the same command again to resume")


def read_error(path: Path, err: duckdb.IOException) -> UserError:
    """The one-line UserError for a DuckDB I/O error on `path` (also used by store.merge)."""
    # A damaged file can open fine and fail only when a query reaches its missing blocks;
    # a full disk fails a write. Both are the user's file or machine, not a bug in this code,
    # so they get one line like other bad input.
    message = str(err)
    if _TRUNCATED in message:
        return UserError(f"cannot read database {path}: the file is truncated or damaged")
    return UserError(f"database {path}: {_first_line(message)}")


def _damage(path: Path, message: str) -> str:
    """What is wrong with a file DuckDB could not open or read, in a few words."""
    try:
        with path.open("rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError:
        head = None
    if head is not None:
        if head.startswith(_SQLITE_MAGIC):
            return "not a DuckDB database file (it is a SQLite database)"
        if head[_MAGIC_OFFSET:_MAGIC_OFFSET + len(_DUCKDB_MAGIC)] != _DUCKDB_MAGIC:
            return "not a DuckDB database file"
    if _TRUNCATED in message:
        return "the file is truncated or damaged"
    return _first_line(message)


def _first_line(message: str) -> str:
    """The first line of a DuckDB error message."""
    return message.strip().splitlines()[0] if message.strip() else message
