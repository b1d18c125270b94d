"""Time the paired tests of `compare` (issue 31): every default metric of two synthetic runs of
N items, the code before issue 31 (--old-rev, loaded from git into a temporary module) against
the working tree, in CPU seconds, with both p values checked equal.

    python scripts/bench_compare.py --sizes 10000 100000 --new-only 1000000
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def synthetic(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    third = np.round(rng.random(n) * 3) / 3
    return {"precision": third, "recall": np.round(rng.random(n) * 2) / 2, "f1": rng.random(n),
            "exact_match": (rng.random(n) < 0.4).astype(float), "squad_em": (rng.random(n) < 0.5).astype(float),
            "answer_recall": rng.random(n), "n_citations": rng.integers(0, 4, n).astype(float),
            "cites_nothing": (rng.random(n) < 0.1).astype(float), "mean_probability": rng.random(n)}


# The last commit before issue 31's shared sign flips (HEAD has them since they were committed).
BEFORE_ISSUE_31 = "9f0f8025c152ffd594e193e3a73c519621010e19"


def old_module(rev: str):
    text = subprocess.run(["git", "show", f"{rev}:engine/statistics/compare_stats.py"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "compare_stats_head.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("compare_stats_head", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def timed(fn):
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--new-only", type=int, nargs="*", default=[])
    parser.add_argument("--old-rev", default=BEFORE_ISSUE_31, help="the commit whose compare_stats is 'old'")
    args = parser.parse_args()
    from engine.statistics import compare_stats as new

    old = old_module(args.old_rev) if args.sizes else None
    print("items  old_cpu_s  new_cpu_s  ratio  p_equal")
    for n in [*args.sizes, *args.new_only]:
        a, b = synthetic(n, 1), synthetic(n, 2)
        got, t_new = timed(lambda a=a, b=b: new.compare_metrics(a, b))
        if n in args.new_only:
            print(f"{n:>9,}  {'-':>9}  {t_new:9.1f}      -  -", flush=True)
            continue
        assert old is not None
        want, t_old = timed(lambda a=a, b=b: old.compare_metrics(a, b))
        same = [g.p for g in got] == [w.p for w in want]
        print(f"{n:>9,}  {t_old:9.1f}  {t_new:9.1f}  {t_old / t_new:5.1f}  {same}", flush=True)


if __name__ == "__main__":
    main()
