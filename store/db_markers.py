"""Writer priority: writer-intent markers beside a database file (used by store.db).

Visitors looping long queries would otherwise hold read locks back to back and starve a writer
(DuckDB has no lock queue). So a writer whose first open fails on the lock drops a marker file
beside the database (`<db>.writer-<pid>-<token>`) and removes it once it has the file or gives
up. Readers that opt in (`yield_to_writers=True`: the SQL sandbox) do not open the file while a
live marker exists, so a waiting writer gets the file as soon as the queries already running
end: within one visitor query's time limit. A marker whose process is gone, or older than
`_STALE_MARKER_S`, is ignored (a killed writer). The app's own short reads do not yield: they
hold the lock for milliseconds.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

from store.db_errors import DatabaseBusy

# Writer-intent markers (see the module docstring): `<db name>.writer-<pid>-<token>`.
_MARKER_INFIX = ".writer-"


_STALE_MARKER_S = 600.0


_MARKER_POLL_S = 0.02


def make_marker(path: Path) -> Path | None:
    """Announce a waiting writer beside the database; None if the folder is not writable."""
    marker = path.parent / f"{path.name}{_MARKER_INFIX}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        marker.touch(exist_ok=False)
    except OSError:
        return None  # best effort: the writer still retries, only without priority
    return marker


def remove_marker(marker: Path) -> None:
    """Withdraw a writer's marker (it may already be gone)."""
    try:
        marker.unlink()
    except OSError:
        pass


def writers_waiting(path: str | os.PathLike[str], *, now: float | None = None) -> int:
    """How many live writers announce that they are waiting for this database file."""
    path = Path(path)
    prefix = f"{path.name}{_MARKER_INFIX}"
    now = time.time() if now is None else now
    live = 0
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        pid_text = entry.name[len(prefix):].split("-", 1)[0]
        try:
            age = now - entry.stat().st_mtime
        except OSError:
            continue  # withdrawn meanwhile
        if age > _STALE_MARKER_S or not (pid_text.isdigit() and _pid_alive(int(pid_text))):
            continue
        live += 1
    return live


def _pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else (or a platform without signal 0)
    return True


def wait_for_writers(path: Path, deadline: float) -> None:
    """Wait while a writer announces it is waiting for the file; DatabaseBusy at the deadline."""
    while writers_waiting(path):
        if time.monotonic() >= deadline:
            raise DatabaseBusy(f"database {path} is busy with a run's writes; try again")
        time.sleep(_MARKER_POLL_S)
