"""Where compare_metrics' CPU goes at N items: each part timed alone, then the whole, CPU
seconds, and the peak RSS.

    /usr/bin/time -v python scripts/profile_compare.py 1000000
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def timed(label, fn):
    start = time.process_time()
    out = fn()
    print(f"{label:48s} {time.process_time() - start:7.2f}", flush=True)
    return out


def main() -> None:
    from bench_compare import synthetic

    from engine.statistics import compare_stats as cs
    from engine.statistics.stats import bootstrap_mean_ci

    n = int(sys.argv[1])
    a, b = timed("synthetic runs", lambda: (synthetic(n, 1), synthetic(n, 2)))
    timed("import scipy.stats", lambda: __import__("scipy.stats"))
    continuous = [k for k in cs.DEFAULT_METRICS if not cs.METRICS[k].binary]
    pairs = [(a[k] * cs.METRICS[k].scale, b[k] * cs.METRICS[k].scale) for k in continuous]
    timed(f"sign flips, {len(pairs)} continuous metrics", lambda: cs.paired_permutations(pairs))
    d = pairs[0][1] - pairs[0][0]
    timed("one bootstrap_mean_ci (2,000 resamples)", lambda: bootstrap_mean_ci(d))
    timed(f"bootstrap, {len(pairs)} continuous metrics (one draw)", lambda: cs.bootstrap_diff_cis(pairs))
    timed("paired t-tests, every continuous metric", lambda: [cs.paired_t(x, y) for x, y in pairs])
    em = cs.METRICS["exact_match"]
    timed("one 0/1 metric (compare_metric exact_match)", lambda: cs.compare_metric(em, a[em.name], b[em.name]))
    timed("the whole compare_metrics", lambda: cs.compare_metrics(a, b))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{'peak RSS, MB':48s} {peak:7.0f}   load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
