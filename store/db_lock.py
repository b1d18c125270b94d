"""One lock across processes around every use of a store: shared for readers, exclusive for writers.

Why DuckDB's own lock is not enough: DuckDB 2 reads the head of the file (to learn what kind of
file it is) before it takes its lock, and then serves its first reads of the database header
from those bytes. A process whose open is retried while another one writes can read the header
just before the writer's checkpoint ends, get the lock just after, and go on from the old header:
it does not see the other's last commit, and its own checkpoint then writes over it. Two
processes writing one store in turn lost committed batches that way, and one loop left a table
pointing at a block of zeros ("computed checksum 5381 does not match stored checksum 0"), after
which no run could finish. A process that holds this lock from before DuckDB opens the file
until after DuckDB has closed it (and checkpointed) never reads the file while another process
writes it.

The lock is an advisory `flock` on a file of its own beside the database (`<name>.lock`, kept:
removing a lock file others may hold is a race), never on the database file: closing any
descriptor of a file drops every POSIX lock the process holds on it, DuckDB's included. Programs
that do not take it (the duckdb CLI, a notebook's own connection) are still kept apart by
DuckDB's lock, which store.db waits for as before, but not from that race.
"""

from __future__ import annotations

import fcntl
import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from store.db_errors import DatabaseBusy
from store.db_markers import make_marker, remove_marker, wait_for_writers, writers_waiting

_FIRST_BACKOFF_S = 0.002
_MAX_BACKOFF_S = 0.1


def lock_path(path: Path) -> Path:
    """The lock file of the database at `path`."""
    return path.with_name(path.name + ".lock")


@contextmanager
def store_lock(path: Path, *, shared: bool, deadline: float, yield_to_writers: bool = False) -> Iterator[None]:
    """Hold the store's lock (shared or exclusive) until the block ends; DatabaseBusy at `deadline`.

    A writer kept waiting leaves a writer-intent marker meanwhile (store.db_markers), and a reader
    with `yield_to_writers` (the SQL sandbox) lets any such writer go first. A reader where the
    lock file cannot be made (a read-only folder: nobody writes there through this code) goes on
    without it.
    """
    fd = _open_lock_file(path, shared=shared)
    if fd is None:
        yield
        return
    try:
        if shared:
            _acquire_shared(fd, path, deadline=deadline, yield_to_writers=yield_to_writers)
        else:
            _acquire_exclusive(fd, path, deadline=deadline)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _open_lock_file(path: Path, *, shared: bool) -> int | None:
    target = lock_path(path)
    try:
        return os.open(target, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError:
        if not shared:
            raise
    try:
        return os.open(target, os.O_RDONLY | os.O_CLOEXEC)  # flock needs no write permission
    except OSError:
        return None


def _acquire_exclusive(fd: int, path: Path, *, deadline: float) -> None:
    marker: list[Path | None] = []

    def announce() -> None:
        if not marker:  # one marker per wait, made at the first conflict
            marker.append(make_marker(path))

    try:
        _acquire(fd, path, fcntl.LOCK_EX, deadline=deadline, on_conflict=announce)
    finally:
        for made in marker:
            if made is not None:
                remove_marker(made)


def _acquire_shared(fd: int, path: Path, *, deadline: float, yield_to_writers: bool) -> None:
    while True:
        if yield_to_writers:
            wait_for_writers(path, deadline)
        _acquire(fd, path, fcntl.LOCK_SH, deadline=deadline)
        if not (yield_to_writers and writers_waiting(path)):
            return
        # A writer began waiting while this reader took the lock: let it go first.
        fcntl.flock(fd, fcntl.LOCK_UN)


def _acquire(fd: int, path: Path, mode: int, *, deadline: float, on_conflict: Callable[[], None] | None = None) -> None:
    """Take the lock without blocking, retried with jittered backoff until `deadline`: a blocking
    flock could not be given up at the deadline."""
    backoff = _FIRST_BACKOFF_S
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if on_conflict is not None:
                on_conflict()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                what = "writing" if mode == fcntl.LOCK_SH else "using"
                raise DatabaseBusy(f"database {path} is busy: another process is {what} it; gave up waiting") from None
            time.sleep(min(remaining, random.uniform(0, backoff)))
            backoff = min(backoff * 2, _MAX_BACKOFF_S)
