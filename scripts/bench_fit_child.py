"""Benchmark: the app's Why-cited fits inside their bounded child (demo.fit_child), by size.

For each store (scripts/bench_app.py's build_store with 6 runs: experiments exp-0000 and
exp-0001, gender and hai, vanilla, base and cf runs of N items; a study 'grid' of the two), fits
the pooled choice model and the study model of the base and cf answers (2 x 2 x N answers, 10
shown documents each) in the child the app starts, under the app's default bounds
(PATTRIEVAL_FIT_MEMORY_MB, PATTRIEVAL_FIT_TIMEOUT_S) and without the answer and decision bounds,
and prints the child's CPU seconds, wall seconds and peak address space (VmPeak, what the cap
limits) and peak resident memory (VmHWM), read from /proc while it runs. Linux only.

Run: python scripts/bench_fit_child.py STORE.duckdb [STORE.duckdb ...]
     python scripts/bench_fit_child.py --build FOLDER N [N ...]   (builds FOLDER/sN.duckdb, then fits each)
     --neighbour first: while each fit runs, time ~10 ms chunks of pure-Python work in this process
     (another visitor's page in the web process) against the same work before and after it
"""

from __future__ import annotations

import os
import pickle
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _peaks(pid: int, found: dict[str, int], stop: threading.Event) -> None:
    """VmPeak and VmHWM (kB) of `pid`, read until it ends."""
    while not stop.is_set():
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    key = line.split(":")[0]
                    if key in ("VmPeak", "VmHWM"):
                        found[key] = max(found.get(key, 0), int(line.split()[1]))
        except (OSError, ValueError):
            return
        time.sleep(0.02)


def fit(request, db: Path) -> dict:
    """One fit in the app's child, with its default bounds: its reply, time and peaks."""
    from demo.fit_child import _ONE_THREAD, FitBounds, _python_path
    from store.sandbox import child_environment

    bounds = FitBounds()
    env = {**child_environment(os.environ, _python_path()), **_ONE_THREAD}
    message = pickle.dumps({"request": request, "db": str(db), "max_address_space": bounds.max_address_space,
                            "cpu_s": bounds.timeout_s})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "demo.fit_child"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env)
    found: dict[str, int] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_peaks, args=(child.pid, found, stop))
    watcher.start()
    out, _ = child.communicate(message, bounds.wall_s)
    wall = time.perf_counter() - started
    stop.set()
    watcher.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    reply = pickle.loads(out) if out else {"error": f"no reply (exit {child.returncode})"}
    return {"ok": "result" in reply, "error": reply.get("error", ""), "cpu_s": round(
        after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1), "wall_s": round(wall, 1),
        "vm_peak_mb": found.get("VmPeak", 0) // 1024, "rss_peak_mb": found.get("VmHWM", 0) // 1024,
        "cap_mb": (bounds.max_address_space or 0) // 2**20, "cap_cpu_s": bounds.timeout_s}


def page_work() -> float:
    """A light page's worth of pure-Python work (~10 ms), timed (tests/demo/test_why_cited_child.py times it too)."""
    started = time.perf_counter()
    total = 0
    for i in range(200_000):
        total += i * i
    return time.perf_counter() - started


def fit_beside_work(request, db: Path) -> dict:
    """fit(), run while this process times chunks of other work: their median time during the fit
    over their median alone (before and after), and how many ran."""
    import statistics

    alone = [page_work() for _ in range(15)]
    got: dict = {}
    worker = threading.Thread(target=lambda: got.update(fit(request, db)))
    worker.start()
    during = []
    while worker.is_alive():
        during.append(page_work())
    worker.join()
    alone += [page_work() for _ in range(15)]
    return {**got, "neighbour_slowdown": round(statistics.median(during) / statistics.median(alone), 2),
            "neighbour_chunks": len(during)}


def build(folder: Path, items: int) -> Path:
    """The store of 6 runs x `items` (bench_app's build_store) with the study 'grid' of its two
    experiments, at folder/s{items}.duckdb (reused when there)."""
    import json

    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_app

    from store.db import connect

    path = folder / f"s{items}.duckdb"
    if path.exists():
        return path
    bench_app.build_store(path, n_items=items, n_runs=6)
    with connect(path) as conn:
        conn.execute("INSERT INTO studies VALUES ('grid', now(), ?)", [json.dumps({"metadata": ["gender", "hai"]})])
        conn.executemany("INSERT INTO study_experiments VALUES ('grid', ?, ?)", [("exp-0000", 0), ("exp-0001", 1)])
    return path


def main(argv: list[str]) -> None:
    from engine.usecases.bias.why_cited import WhyCitedRequest
    from engine.usecases.study.effects import StudyEffectsRequest
    from store.queries import count_answers

    measure = fit
    if argv[:1] == ["--neighbour"]:
        measure, argv = fit_beside_work, argv[1:]
    if argv[:1] == ["--build"]:
        if len(argv) < 3 or not all(a.isdigit() for a in argv[2:]):
            raise SystemExit("bench_fit_child.py: --build FOLDER N [N ...] (items per run, whole numbers)")
        folder = Path(argv[1])
        folder.mkdir(parents=True, exist_ok=True)
        argv = [str(build(folder, int(n))) for n in argv[2:]]
    for db in map(Path, argv):
        n = count_answers(db, ("exp-0000", "exp-0001"), ("base", "cf"))
        for name, request in (
                ("pooled", WhyCitedRequest(("exp-0000", "exp-0001"), modes=("base", "cf"))),
                ("study", StudyEffectsRequest("grid", modes=("base", "cf")))):
            with open("/proc/loadavg") as f:
                load = " ".join(f.read().split()[:3])
            got = measure(request, db)
            print(f"{db.name} {n.answers:,} answers / {n.decisions:,} decisions, {name}: load {load}, "
                  + ", ".join(f"{k} {v}" for k, v in got.items()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
