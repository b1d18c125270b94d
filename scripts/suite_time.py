"""How long the test suite takes: the fast loop (`-m "not slow"`) and the whole suite, each in a
child process, with the load average beside each time (the machines are shared: a time means
little without it).

    python scripts/suite_time.py            # both, the fast loop first
    python scripts/suite_time.py --fast     # the fast loop only
    python scripts/suite_time.py -- -x      # extra pytest arguments after --

Prints one line per set (tests passed, failed, wall seconds, load before and after) and exits
non-zero when a set fails. docs/testing.md keeps the figures it printed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETS = {"fast loop": ["-m", "not slow"], "whole suite": []}
SUMMARY = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected)")


def run_set(name: str, marks: list[str], extra: list[str]) -> tuple[int, str]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *marks, *extra]
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - started
    tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-300:]
    counts = {kind.rstrip("s"): int(n) for n, kind in SUMMARY.findall(tail)}
    line = (f"{name:12s} {counts.get('passed', 0):5d} passed {counts.get('failed', 0):3d} failed "
            f"{counts.get('error', 0):3d} errors  {wall:7.1f} s ({wall / 60:.1f} min)  "
            f"load {load_before:.1f} -> {os.getloadavg()[0]:.1f}  {os.cpu_count()} CPUs")
    failed = [f"  {ln}" for ln in done.stdout.splitlines() if ln.startswith(("FAILED ", "ERROR "))]
    return done.returncode, "\n".join([line, *failed] if done.returncode == 0 or failed else [line, f"  {tail}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fast", action="store_true", help="time the fast loop only")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    worst = 0
    for name, marks in SETS.items():
        if args.fast and name != "fast loop":
            continue
        code, line = run_set(name, marks, args.pytest_args)
        print(line, flush=True)
        worst = worst or code
    return worst


if __name__ == "__main__":
    sys.exit(main())
