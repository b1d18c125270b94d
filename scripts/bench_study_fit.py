"""Time and memory of the study model's fit (engine.statistics.study_model.fit_study_model) at
scale, the code at --old-rev against the working tree, each in its own process, on one frame.

The frame is a simulated study (engine.statistics.study_simulation) of 33 configurations (a
`model` axis of 11 levels x an `order` axis of 3), base and cf, N items of 10 shown documents:
33 x 2 x N answers (N = 15,000: 990,000 answers, 9.9M rows, the size of the 1M store's study).
Answers and items are integer codes, as `why-cited --study` reads them from the store. Each side
prints its CPU seconds, the peak of what numpy and Python allocated during the fit (tracemalloc),
the process's peak RSS, and its estimates; the estimates must agree to 1e-8.

    python scripts/bench_study_fit.py --items 1500 5000 --new-only 15000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
AXES = ["model", "order"]


def simulated(items: int, seed: int = 1):
    import numpy as np

    from engine.statistics.study_simulation import StudyTruth, simulate_study

    truth = StudyTruth(axes=(("model", tuple(f"m{i}" for i in range(11))), ("order", ("ranked", "reversed", "third"))),
                       label=tuple(math.log(1.0 + 0.05 * c) for c in range(33)), n_items=items, n_shown=10)
    frame = simulate_study(truth, np.random.default_rng(seed))
    for column in ("answer", "item"):  # codes, as the store gives them: text was most of the memory
        frame[column] = frame[column].astype("category").cat.codes.astype(np.int64)
    for column in ("position_group", "label_side", "label", "mode", *AXES):
        frame[column] = frame[column].astype("category")
    return frame


def worker(module_path: str, frame_path: str) -> None:
    import importlib.util
    import tracemalloc

    with open(frame_path, "rb") as f:
        frame = pickle.load(f)
    spec = importlib.util.spec_from_file_location("study_model_under_test", module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    start = time.process_time()
    fit = module.fit_study_model(frame, AXES)
    cpu = time.process_time() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(json.dumps({"cpu_s": cpu, "fit_peak_mb": peak / 2**20, "rss_before_mb": rss_before / 1024,
                      "rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "params": list(fit.params), "rows": len(frame)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, nargs="+", default=[1500, 15000], help="items per configuration and mode")
    parser.add_argument("--new-only", type=int, nargs="*", default=[],
                        help="sizes (items) to run the working tree alone at (the old code needs ~19 GB at 15000)")
    parser.add_argument("--old-rev", default="HEAD", help="the commit whose study_model.py is 'old' (default HEAD)")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    with tempfile.TemporaryDirectory(prefix="bench-study-") as tmp:
        old = Path(tmp) / "study_model_old.py"
        old.write_text(subprocess.run(["git", "show", f"{args.old_rev}:engine/statistics/study_model.py"], cwd=ROOT,
                                      capture_output=True, text=True, check=True).stdout)
        sides = {"old": old, "new": ROOT / "engine" / "statistics" / "study_model.py"}
        print("answers   rows        side  cpu_s  fit peak MB (tracemalloc)  peak RSS MB  load1  same estimates")
        for items in [*args.items, *args.new_only]:
            frame_path = Path(tmp) / f"frame_{items}.pkl"
            frame = simulated(items)
            with open(frame_path, "wb") as f:
                pickle.dump(frame, f)
            answers, rows = frame["answer"].nunique(), len(frame)
            del frame
            results = {}
            for side, path in sides.items():
                if side == "old" and items in args.new_only:
                    continue
                load = os.getloadavg()[0]
                done = subprocess.run([sys.executable, __file__, "--worker", str(path), str(frame_path)],
                                      capture_output=True, text=True)
                if done.returncode:
                    print(f"{answers:>9,} {rows:>11,}  {side}  failed: {done.stderr.strip().splitlines()[-1:]}")
                    continue
                results[side] = json.loads(done.stdout.strip().splitlines()[-1])
                same = ""
                if side == "new" and "old" in results:
                    same = str(all(abs(a - b) <= 1e-8 * max(1.0, abs(a))
                                   for a, b in zip(results["old"]["params"], results["new"]["params"], strict=True)))
                r = results[side]
                print(f"{answers:>9,} {rows:>11,}  {side:4s}  {r['cpu_s']:5.1f}  {r['fit_peak_mb']:25.0f}  "
                      f"{r['rss_peak_mb']:11.0f}  {load:5.1f}  {same}", flush=True)


if __name__ == "__main__":
    main()
