"""Time the paired tests of `compare`: every default metric of two synthetic runs of
N items, the engine at --old-rev (default HEAD: the code before the working tree's change,
exported from git) against the working tree, each side in its own process one after the other:
CPU seconds, wall seconds, peak RSS, and every p value, interval and detectable difference
checked equal (the intervals to the bit, or their largest relative difference).

    python scripts/bench_compare.py --sizes 100000 1000000
    python scripts/bench_compare.py --sizes --new-only 1000000   # the working tree alone
    python scripts/bench_compare.py --sign-flips 1000000          # the sign flips on 1 thread and every core
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def synthetic(n: int, seed: int) -> dict[str, np.ndarray]:
    """Per-item metrics as a run's are: precision, recall, F1 and answer recall take a few values
    each (fractions of a few citations or gold answers), the mean token probability any value."""
    rng = np.random.default_rng(seed)
    precision, recall = np.round(rng.random(n) * 3) / 3, np.round(rng.random(n) * 2) / 2
    total = precision + recall
    f1 = np.divide(2 * precision * recall, total, out=np.zeros(n), where=total > 0)
    return {"precision": precision, "recall": recall, "f1": f1,
            "exact_match": (rng.random(n) < 0.4).astype(float), "squad_em": (rng.random(n) < 0.5).astype(float),
            "answer_recall": np.round(rng.random(n) * 4) / 4, "n_citations": rng.integers(0, 4, n).astype(float),
            "cites_nothing": (rng.random(n) < 0.1).astype(float), "mean_probability": rng.random(n)}


def worker(root: str, n: int) -> None:
    """One side: compare_metrics of the engine under `root`, its figures as one JSON line."""
    sys.path.insert(0, root)
    from engine.statistics import compare_stats

    a, b = synthetic(n, 1), synthetic(n, 2)
    rss_data = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cpu, wall = time.process_time(), time.perf_counter()
    got = compare_stats.compare_metrics(a, b)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    values = [[r.metric, repr(r.p), repr(r.ci_low), repr(r.ci_high), repr(r.min_detectable), repr(r.p_t)] for r in got]
    print(json.dumps({"cpu": cpu, "wall": wall, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "data_mb": rss_data / 1024, "values": values}))


def sign_flip_threads(n: int) -> None:
    """engine.statistics.sign_flips on one thread and on every core, alternately: wall and CPU
    seconds, and the p values (the same on any number of threads)."""
    sys.path.insert(0, str(ROOT))
    from engine.statistics.sign_flips import sign_flip_pvalues
    from engine.statistics.stats import usable_cores

    rng = np.random.default_rng(1)
    cols = [rng.random(n) - 0.5 for _ in range(6)]
    for workers in (1, usable_cores(), 1, usable_cores()):
        load = os.getloadavg()[0]
        cpu, wall = time.process_time(), time.perf_counter()
        p = sign_flip_pvalues(cols, n_resamples=9_999, seed=0, batch=1, workers=workers)
        print(f"{n:,} items, {workers} thread(s): wall {time.perf_counter() - wall:.1f} s, CPU "
              f"{time.process_time() - cpu:.1f} s, load {load:.2f}, p {p}", flush=True)


def agreement(old: list[list[str]], new: list[list[str]]) -> str:
    """'to the bit', or how far apart: p values and t-test p compared exactly, the intervals and
    detectable differences by their largest relative difference."""
    if old == new:
        return "to the bit"
    same_p = all(o[0] == w[0] and o[1] == w[1] and o[5] == w[5] for o, w in zip(old, new, strict=True))
    worst = 0.0
    for o, w in zip(old, new, strict=True):
        for a, b in zip(o[2:5], w[2:5], strict=True):
            x, y = float(a) if a != "None" else 0.0, float(b) if b != "None" else 0.0
            if x != y:
                worst = max(worst, abs(x - y) / max(abs(x), abs(y)))
    return f"p {'equal' if same_p else 'DIFFER'}; intervals, MDD within {worst:.1e} relative"


def export(rev: str) -> str:
    """The engine package at `rev`, in a temporary folder (imported from there by the old side)."""
    folder = tempfile.mkdtemp(prefix="bench_compare_")
    archive = subprocess.run(["git", "archive", rev, "engine"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    return folder


def side(root: str, n: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", root, str(n)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--new-only", type=int, nargs="*", default=[])
    parser.add_argument("--old-rev", default="HEAD", help="the commit whose engine is 'old' (default HEAD)")
    parser.add_argument("--sign-flips", type=int, default=None, metavar="N",
                        help="instead: the sign-flip tests of 6 continuous metrics of N items alone, on one "
                             "thread and on every core, in turn (twice each), with their p values")
    parser.add_argument("--worker", nargs=2, metavar=("ROOT", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]))
        return
    if args.sign_flips:
        sign_flip_threads(args.sign_flips)
        return
    old_root = export(args.old_rev) if args.sizes else ""
    print(f"old = {args.old_rev}, new = working tree; CPU and wall seconds, peak RSS MB (the synthetic runs "
          "alone in brackets), load average at the start of each side")
    print("    items  side  cpu_s  wall_s  peak_mb (data)  load1  same_values")
    for n in [*args.sizes, *args.new_only]:
        rows = [("old", old_root)] if n in args.sizes else []
        results = {}
        for name, root in [*rows, ("new", str(ROOT))]:
            load = os.getloadavg()[0]
            results[name] = r = side(root, n)
            same = "" if name == "old" or "old" not in results else agreement(results["old"]["values"], r["values"])
            print(f"{n:>9,}  {name:>4}  {r['cpu']:5.1f}  {r['wall']:6.1f}  {r['peak_mb']:7.0f} ({r['data_mb']:4.0f})"
                  f"  {load:5.2f}  {same}", flush=True)
        if "old" in results:
            print(f"{'':>9}  ratio old/new: cpu {results['old']['cpu'] / results['new']['cpu']:.1f}x, "
                  f"peak {results['old']['peak_mb'] / results['new']['peak_mb']:.1f}x", flush=True)
    if old_root:
        shutil.rmtree(old_root)


if __name__ == "__main__":
    main()
