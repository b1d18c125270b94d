"""`python -m engine` in a child process, killed with SIGKILL once it has stored some rows: a
crash as a user would meet it (power cut, OOM killer, kill -9), for the resume tests of run,
study grids, explain and verify. Not a test module: the tests import it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import duckdb

from engine.errors import UserError
from store.db import connect

ROOT = Path(__file__).resolve().parents[2]


def engine_env() -> dict[str, str]:
    # Offline: the tiny models are local folders, and nothing may reach for the Hub.
    return dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))


def run_engine(args: Sequence[str], *, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the command to its end; stdout and stderr as text."""
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, env=engine_env(),
                          capture_output=True, text=True, timeout=timeout)


def kill_once_stored(args: Sequence[str], db: Path, count_sql: str, at_least: int, *,
                     before_kill: Callable[[subprocess.Popen], None] | None = None,
                     timeout: float = 120) -> int:
    """Start the command, wait until `count_sql` (one count) reads at least `at_least` in `db`,
    call `before_kill` with the live process, then SIGKILL it; the count it reached.

    Fails when the command ends first: the test must give it more work to be killed in.
    """
    proc = subprocess.Popen([sys.executable, "-m", "engine", *args], cwd=ROOT, env=engine_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline, stored = time.monotonic() + timeout, 0
        while time.monotonic() < deadline and proc.poll() is None and stored < at_least:
            time.sleep(0.3)
            if not db.exists():
                continue
            try:
                # The store's own connect: it waits for the writer's lock between two batch
                # commits, where a bare duckdb.connect fails whenever the writer holds it and can
                # miss the whole short command.
                with connect(db, read_only=True, timeout_s=5) as conn:
                    stored = conn.execute(count_sql).fetchone()[0]
            except (duckdb.Error, UserError):  # no schema yet, or still locked after 5 s
                continue
        assert proc.poll() is None, f"`{args[0]}` finished before it could be killed; give it more work"
        assert stored >= at_least, f"`{args[0]}` stored {stored} rows in {timeout:.0f} s, not {at_least}"
        if before_kill is not None:
            before_kill(proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    return stored
