"""How long the test suite takes from a fresh clone: the fast loop (`-m "not slow"`) and the whole
suite, each in a child process, with the load average beside each time (the machines are shared:
a time means little without it) and the slowest tests (`--durations`).

    python scripts/suite_time.py                 # a clone of HEAD; the fast loop, then the whole suite
    python scripts/suite_time.py --fast          # the fast loop only
    python scripts/suite_time.py --whole         # the whole suite only
    python scripts/suite_time.py --here          # the working tree as it is, uncommitted edits included
    python scripts/suite_time.py -- -n 4         # extra pytest arguments after --

The clone is `git clone` of HEAD into a temporary folder (removed afterwards; `--keep` keeps
it), run with this interpreter, so with this virtual environment: the packages are the ones
installed here, the code and tests are the commit's. PYTHONPATH points at the clone, so the
child processes the tests start (`python -m engine`, the app) run the clone's code too, not
this checkout's (the editable install would point there).

Prints, per set: one line (tests passed, failed, errors, wall seconds, load before and after),
the failures, then the `--durations` slowest tests (50 unless `--durations N`). Exits non-zero
when a set fails. docs/testing.md keeps the figures it printed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETS = {"fast loop": ["-m", "not slow"], "whole suite": []}
SUMMARY = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected)")
# pytest's durations lines: "12.34s call     tests/store/test_x.py::test_y"
DURATION = re.compile(r"^\d+\.\d+s (call|setup|teardown) ")


def clone_head(into: Path) -> Path:
    """A clone of this repository's HEAD commit (what CI would test), in `into`/repo."""
    target = into / "repo"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(target)], check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    subprocess.run(["git", "checkout", "--quiet", "--detach", head.stdout.strip()], cwd=target, check=True)
    return target


def run_set(where: Path, name: str, marks: list[str], extra: list[str], durations: int) -> tuple[int, str]:
    """Run one set in `where`; its exit status and the lines to print."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--durations={durations}",
               *marks, *extra]
    env = dict(os.environ, PYTHONPATH=str(where))
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    done = subprocess.run(command, cwd=where, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    lines = done.stdout.strip().splitlines()
    tail = lines[-1] if lines else done.stderr.strip()[-300:]
    counts = {kind.rstrip("s"): int(n) for n, kind in SUMMARY.findall(tail)}
    head = (f"{name:12s} {counts.get('passed', 0):5d} passed {counts.get('failed', 0):3d} failed "
            f"{counts.get('error', 0):3d} errors  {wall:7.1f} s ({wall / 60:.1f} min)  "
            f"load {load_before:.1f} -> {os.getloadavg()[0]:.1f}  {os.cpu_count()} CPUs")
    failed = [f"  {ln}" for ln in lines if ln.startswith(("FAILED ", "ERROR "))]
    if done.returncode != 0 and not failed:
        failed = [f"  {tail}"]
    slowest = [f"    {ln}" for ln in lines if DURATION.match(ln)]
    return done.returncode, "\n".join([head, *failed, f"  slowest {len(slowest)}:", *slowest])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--fast", action="store_true", help="time the fast loop only")
    which.add_argument("--whole", action="store_true", help="time the whole suite only")
    parser.add_argument("--here", action="store_true", help="run in this working tree, not a clone of HEAD")
    parser.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    parser.add_argument("--durations", type=int, default=50, help="how many of the slowest tests to list")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    scratch = None if args.here else Path(tempfile.mkdtemp(prefix="suite-time-"))
    try:
        where = ROOT if scratch is None else clone_head(scratch)
        print(f"running in {where} with {sys.executable}", flush=True)
        worst = 0
        for name, marks in SETS.items():
            if (args.fast and name != "fast loop") or (args.whole and name != "whole suite"):
                continue
            code, text = run_set(where, name, marks, args.pytest_args, args.durations)
            print(text, flush=True)
            worst = worst or code
        return worst
    finally:
        if scratch is not None and not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
