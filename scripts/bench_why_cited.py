"""Benchmark: `python -m engine why-cited` at 100k and 1M answers, wall time, CPU and peak memory.

Runs the command in a fresh process per size (under /usr/bin/time -v, so the peak resident memory
is the whole process's) on a store built by scripts/bench_app.py (its "1M" store: 100 runs x
10,000 items in 34 experiments of vanilla, base and cf runs; `--keep FOLDER` keeps it). 100k is
experiments exp-0000..exp-0002 and the one-run exp-0033 (10 runs); 1M is every experiment.
--code runs another checkout's engine (e.g. the commit before a change, from `git archive`) on the
same store, for a before/after table in one run; --limit-gb caps the address space (ulimit -v), so
a fit that would take the machine's memory ends with a MemoryError instead. Prints one line per
run with the machine's load average before it.

Run: python scripts/bench_why_cited.py --db STORE.duckdb [--code DIR ...] [--sizes 100k,1M]
                                      [--limit-gb 6] [--timeout 900]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"100k": ["exp-0000", "exp-0001", "exp-0002", "exp-0033"],
         "1M": [f"exp-{i:04d}" for i in range(34)]}


def run(code: Path, db: Path, experiments: list[str], limit_gb: float, timeout: int) -> dict[str, str]:
    """One why-cited run in a fresh process: its exit, wall time, CPU and peak memory."""
    flags = " ".join(f"--experiment {e}" for e in experiments)
    limit = f"ulimit -v {int(limit_gb * 1024**2)}; " if limit_gb else ""
    command = (f"{limit}cd {code} && timeout {timeout} /usr/bin/time -v python -m engine why-cited {flags} "
               f"--db {db} > /dev/null")
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    err = done.stderr

    def field(name: str) -> str:
        found = re.search(rf"{re.escape(name)}: (.+)", err)
        return found.group(1).strip() if found else "?"

    last = [line for line in err.splitlines() if line.strip() and not line.startswith("\t")]
    return {"load": load, "rc": str(done.returncode), "wall": field("Elapsed (wall clock) time (h:mm:ss or m:ss)"),
            "cpu_s": f"{float(field('User time (seconds)')) + float(field('System time (seconds)')):.1f}"
            if field("User time (seconds)") != "?" else "?",
            "peak_gb": f"{int(field('Maximum resident set size (kbytes)')) / 1024**2:.2f}"
            if field("Maximum resident set size (kbytes)") != "?" else "?",
            "error": last[-1][:120] if done.returncode and last else ""}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True, help="a store built by scripts/bench_app.py --keep")
    parser.add_argument("--code", type=Path, action="append", default=None,
                        help="a checkout whose engine to run (repeatable; default: this one)")
    parser.add_argument("--sizes", default="100k,1M")
    parser.add_argument("--limit-gb", type=float, default=0.0, help="address-space cap per run (0: none)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per run")
    args = parser.parse_args(argv)
    for code in args.code or [ROOT]:
        for size in args.sizes.split(","):
            with tempfile.TemporaryDirectory() as tmp:  # a copy per run: no run sees another's writes
                db = Path(tmp) / "store.duckdb"
                shutil.copy(args.db, db)
                got = run(code.resolve(), db, SIZES[size], args.limit_gb, args.timeout)
            print(f"{code} {size}: " + ", ".join(f"{k} {v}" for k, v in got.items() if v), flush=True)


if __name__ == "__main__":
    main()
