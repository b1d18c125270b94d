"""Who generates a run: the owning process's identity (host, pid, start time), and whether it lives.

The owner is recorded in `run_owners` while a run is generated; after kill -9 the owner is gone,
so the run is resumable again (store.run_store), and listings show it as interrupted
(store.queries).
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from store.db import utc_now

# An owner on another host cannot be asked whether it lives; one that has not committed a
# batch for this long is taken to be gone. Far above any one batch, even 4-bit on a CPU.
STALE_OWNER_AFTER = timedelta(minutes=30)


@dataclass(frozen=True)
class ProcessIdentity:
    """Who owns a running run: enough to tell, later, whether that process still lives."""

    host: str
    pid: int
    start: str | None  # boot id + start time (Linux); None where /proc is not available

    def describe(self) -> str:
        return f"process {self.pid} on {self.host}"


@functools.lru_cache(maxsize=1)
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, boot id + start time) of `pid` from /proc; None where there is no /proc entry."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    if len(fields) < 20:
        return None
    return fields[0], f"{_boot_id()}:{fields[19]}"


def process_start(pid: int) -> str | None:
    """Boot id + start time of `pid` in clock ticks, so a reused pid is not mistaken for it."""
    stat = _proc_stat(pid)
    return stat[1] if stat else None


def this_process() -> ProcessIdentity:
    """The identity recorded as owner of the runs this process generates."""
    return ProcessIdentity(socket.gethostname(), os.getpid(), process_start(os.getpid()))


def owner_alive(owner: ProcessIdentity, heartbeat_utc: datetime, now: datetime | None = None) -> bool:
    """Whether the process that claimed a run still lives (this process counts as alive)."""
    if owner.host != socket.gethostname():
        return (now or utc_now()) - heartbeat_utc < STALE_OWNER_AFTER
    if owner.pid == os.getpid():
        return True
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by another user
    stat = _proc_stat(owner.pid)
    if stat is None:
        return True  # no /proc to ask: the pid exists, trust it
    state, start = stat
    if state in ("Z", "X"):
        return False  # killed, not yet reaped by its parent
    # The same pid started at another time is another process: the owner is gone.
    return owner.start is None or start == owner.start
