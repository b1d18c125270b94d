"""compare's reads at scale: two runs' per-item metrics computed through query_metrics
(what every read did before migration 023), the writer keeping them (what a run's completion now
adds), the same read from the kept rows, and the citation-flip counts; CPU and wall seconds each,
the arrays checked equal. Works on a copy of STORE (it writes the kept rows).

    python scripts/bench_compare_reads.py STORE.duckdb RUN_A RUN_B
    # e.g. scripts/bench_stats.py's compare store: bench_1000000x3.duckdb run-0000 run-0001
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def timed(label: str, fn):
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    print(f"{label:52s} {time.process_time() - cpu:7.1f} s CPU {time.perf_counter() - wall:7.1f} s wall", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store")
    parser.add_argument("run_a")
    parser.add_argument("run_b")
    args = parser.parse_args()
    import numpy as np

    from store.db import connect
    from store.kept_metrics import keep_item_metrics
    from store.queries.citation_flips import citation_flip_counts
    from store.queries.compare import read_paired, resolve_side

    with tempfile.TemporaryDirectory(prefix="bench-compare-reads-") as tmp:
        db = Path(tmp) / "store.duckdb"
        shutil.copyfile(args.store, db)
        with connect(db) as conn:  # migrates the copy; no kept rows for the two runs yet
            conn.execute("DELETE FROM item_metric_rows WHERE run_id IN (?, ?)", [args.run_a, args.run_b])
        runs = tuple(next(iter(resolve_side(db, r).runs.values())) for r in (args.run_a, args.run_b))
        computed = timed("read_paired, computed through query_metrics", lambda: read_paired(db, runs))
        for run in (args.run_a, args.run_b):
            def keep(run=run):
                with connect(db) as conn:
                    keep_item_metrics(conn, run)
            timed(f"keeping {run}'s per-item metrics (the writer)", keep)
        kept = timed("read_paired, from the kept rows", lambda: read_paired(db, runs))
        timed("citation flip counts (one SQL query)", lambda: citation_flip_counts(db, args.run_a, args.run_b))
        same = computed.item_ids == kept.item_ids and all(
            np.array_equal(a[name], b[name], equal_nan=True)
            for a, b in zip(computed.metrics, kept.metrics, strict=True) for name in a)
        print(f"{len(kept.item_ids):,} paired items; the same arrays: {same}; "
              f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
