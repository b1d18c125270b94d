"""Benchmark: the statistics commands beside query_detail, in one run.

For each size, on the stores of scripts/bench_app.py's `build_store` (through the real schema):
- query_detail: demo.handlers.query.query_detail on the size's store (bench_app's call), in this
  process, median of every call; `--repeats` calls before each command and after the last, so the
  median spans the run and the commands are read as a ratio to it (the 2-core box is shared);
- why-cited: engine.usecases.bias.why_cited over every experiment of the same store (what
  `python -m engine why-cited --experiment ...` calls), in a fresh interpreter;
- why-cited-study: engine.usecases.study.effects.why_cited_study over the study 'bench' of every
  experiment of the same store (its axis: the metadata type; what `python -m engine why-cited
  --study bench` calls), in a fresh interpreter; the study is added to the store the first time;
- compare: engine.usecases.compare.compare of two runs of N items each, N the size (what `python -m engine
  compare RUN_A RUN_B` calls: the store reads, the pairing and every paired test), in a fresh
  interpreter, on a store of 3 runs x N items (vanilla, base and cf of one experiment; base against cf).
Each command's row: the child process's wall and CPU seconds (interpreter start included; in
brackets the use case's call alone, its lazy imports included) and its peak resident memory (getrusage), its wall over query_detail's median, and the
load average (1/5/15 min) just before it.

Sizes (generations in the query_detail / why-cited store; items per run in the compare store):
  2k:   20 runs x 100 items          compare: 3 runs x 2,000 items (the test's size)
  10k:  100 runs x 100 items         compare: 3 runs x 10,000 items (bench_app's "exp" store)
  100k: 10 runs x 10,000 items       compare: 3 runs x 100,000 items
  1M:   100 runs x 10,000 items      compare: 3 runs x 1,000,000 items
  10M:  1,000 runs x 10,000 items    compare: 3 runs x 10,000,000 items
A store missing from --keep is built in a fresh interpreter first, and its build time and peak
resident memory printed (bench_app's 10M store: about 20 min and 7 GB on a loaded 2-core box).
The file names are bench_app's (bench_ITEMSxRUNS.duckdb), so its --keep folder serves both.

Also, on the size's own store: why-cited-one, `why-cited` of its newest full experiment (30,000
answers); compare-runs, `compare` of that experiment's base and cf runs (10,000 items each), what
those commands read in a store of that size. --commands picks figures (10M: the compare store of
3 x 10,000,000 items would not build in 24 GB); --limit-gb caps each command's address space, so
that one past the machine's memory is a FAILED row, not a swapped machine.

Run: python scripts/bench_stats.py --sizes 10k 1M [--keep FOLDER] [--repeats 7] [--commands ...] [--limit-gb G]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Size:
    """The stores of one size: (items, runs) of bench_app's store, and the compare store's items per run."""

    items: int
    runs: int
    compare_items: int


SIZES = {
    "2k": Size(100, 20, 2_000),
    "10k": Size(100, 100, 10_000),
    "100k": Size(10_000, 10, 100_000),
    "1M": Size(10_000, 100, 1_000_000),
    "10M": Size(10_000, 1_000, 10_000_000),
}
# why-cited: every experiment of the size's store; why-cited-one: its newest full experiment;
# compare: base against cf in the compare store (3 runs x N items); compare-runs: base against cf of
# the newest full experiment in the size's store (10,000 items each: what `compare` reads in a big store).
COMMANDS = ("why-cited", "why-cited-one", "why-cited-study", "compare", "compare-runs")
STUDY = "bench"  # why-cited-study's study: every experiment of the store
COMPARE_RUNS = ("run-0001", "run-0002")  # base and cf of exp-0000 in a store of 3 runs


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    figure: str
    size: str
    load: str
    wall_s: float
    cpu_s: float
    call_s: float | None  # the use case's call alone, in the child
    peak_mb: float | None
    what: str  # what was computed, e.g. "1,000,000 answers"


def _bench_app():
    """scripts/bench_app.py as a module (scripts/ is not a package)."""
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import bench_app

    return bench_app


def load() -> str:
    with open("/proc/loadavg") as f:
        return " / ".join(f.read().split()[:3])


def store_path(folder: Path, items: int, runs: int) -> Path:
    return folder / f"bench_{items}x{runs}.duckdb"


# --- the children: each measured figure in a fresh interpreter ----------------------------------

def _child(kind: str, db: str, arg: str) -> dict:
    """One measured call in this (fresh) process: what it computed and how long the call took."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    started, cpu = time.perf_counter(), time.process_time()
    if kind == "build":
        items, runs = map(int, arg.split("x"))
        built = _bench_app().build_store(Path(db), n_items=items, n_runs=runs)
        what = f"{built.n_generations:,} generations"
    elif kind == "why-cited":
        from engine.usecases.bias.why_cited import WhyCitedRequest, why_cited
        from store.db import connect

        with connect(Path(db), read_only=True) as conn:
            ids = tuple(r[0] for r in conn.execute("SELECT experiment_id FROM experiments ORDER BY 1").fetchall())
        result = why_cited(WhyCitedRequest(ids), Path(db))
        if not result.fit.n_informative:
            raise SystemExit(f"why-cited fitted no answer on {db}")
        what = f"{len(ids)} experiments, {result.n_runs} runs, {result.fit.n_informative:,} informative answers"
    elif kind == "why-cited-study":
        from engine.usecases.study.effects import StudyEffectsRequest, why_cited_study

        _add_study(Path(db))
        study = why_cited_study(StudyEffectsRequest(STUDY), Path(db))
        what = (f"study '{STUDY}': {len(study.experiment_ids)} experiments, {len(study.fit.configurations)} "
                f"configurations, {study.fit.n_informative:,} informative answers")
    elif kind == "why-cited-one":
        from engine.usecases.bias.why_cited import WhyCitedRequest, why_cited

        result = why_cited(WhyCitedRequest((arg,)), Path(db))
        what = f"experiment {arg}: {result.n_runs} runs, {result.fit.n_informative:,} informative answers"
    elif kind in ("compare", "compare-runs"):
        from engine.usecases.compare.compare import CompareRequest, compare

        run_a, run_b, paired = arg.split(",") if kind == "compare-runs" else (*COMPARE_RUNS, arg)
        got = compare(CompareRequest(run_a, run_b), Path(db))
        n = got.runs[0].pairing.n_paired
        if n != int(paired) or not got.runs[0].metrics:
            raise SystemExit(f"compare paired {n} items on {db}, not {paired}")
        what = f"{run_a} against {run_b}: {n:,} paired items, {len(got.runs[0].metrics)} metrics"
    else:
        raise SystemExit(f"unknown child '{kind}'")
    return {"call_s": time.perf_counter() - started, "call_cpu_s": time.process_time() - cpu, "what": what,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}  # kB on Linux


def _add_study(db: Path) -> None:
    """The study STUDY of every experiment of the store, its grid the metadata types they use, where it is not yet."""
    from store.db import connect

    with connect(db) as conn:
        if conn.execute("SELECT count(*) FROM studies WHERE name = ?", [STUDY]).fetchall()[0][0]:
            return
        experiments = conn.execute("SELECT experiment_id FROM experiments ORDER BY experiment_id").fetchall()
        types = [r[0] for r in conn.execute("SELECT DISTINCT metadata_type FROM runs WHERE metadata_type IS NOT NULL "
                                            "ORDER BY 1").fetchall()]
        conn.execute("INSERT INTO studies VALUES (?, now(), ?)", [STUDY, json.dumps({"metadata": types})])
        conn.executemany("INSERT INTO study_experiments VALUES (?, ?, ?)",
                         [(STUDY, e, i) for i, (e,) in enumerate(experiments)])


def measure(figure: str, size: str, db: Path, arg: str) -> Row:
    """Run one child: its wall and CPU seconds (getrusage of the children: DuckDB's threads
    included) and its own report."""
    before_load = load()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    cap = None if LIMIT_GB[0] is None or figure == "build" else int(LIMIT_GB[0] * 2**30)
    done = subprocess.run([sys.executable, __file__, "--child", figure, str(db), arg], capture_output=True, text=True,
                          preexec_fn=None if cap is None else lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)))
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if done.returncode:  # a row that says so (e.g. killed for memory at 10M), and the run goes on
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Row(figure, size, before_load, wall, cpu, None, None, f"FAILED (exit {done.returncode}): {last[:150]}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return Row(figure, size, before_load, wall, cpu, got["call_s"], got["peak_mb"], got["what"])


# --limit-gb: each command child's address space (RLIMIT_AS), so that a command that would take
# more memory than the machine has fails as a row of the table instead of swapping the box.
LIMIT_GB: list[float | None] = [None]


def ensure(folder: Path, size: str, items: int, runs: int) -> Row | None:
    """The store of items x runs in `folder`: reused when there, else built in a child (its row)."""
    path = store_path(folder, items, runs)
    if path.exists():
        print(f"{size}: reusing {path}", flush=True)
        return None
    row = measure("build", size, path, f"{items}x{runs}")
    if row.peak_mb is None:
        raise SystemExit(f"bench_stats.py: building {path} failed: {row.what}")
    print(f"{size}: built {path.name} ({row.what}) in {row.wall_s:.1f} s, {row.cpu_s:.1f} s CPU, peak "
          f"{row.peak_mb:,.0f} MB while building, {path.stat().st_size / 1e6:,.0f} MB on disk", flush=True)
    return row


# --- the run ------------------------------------------------------------------------------------

def query_detail_times(bench, store, repeats: int) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of `repeats` query_detail calls."""
    out = []
    for _ in range(repeats):
        started, cpu = time.perf_counter(), time.process_time()
        bench.call("query_detail", store)
        out.append((time.perf_counter() - started, time.process_time() - cpu))
    return out


def run_size(size: str, folder: Path, repeats: int, commands: tuple[str, ...] = COMMANDS) -> tuple[list[Row], list[Row]]:
    """(build rows, measured rows) of one size: query_detail, then each command, interleaved."""
    bench = _bench_app()
    shape = SIZES[size]
    builds = [r for r in (ensure(folder, size, shape.items, shape.runs),
                          ensure(folder, size, shape.compare_items, 3) if "compare" in commands else None) if r]
    store = bench._reuse(store_path(folder, shape.items, shape.runs), shape.items, shape.runs)
    bench.check("query_detail", store, bench.call("query_detail", store))  # and the warm-up call
    base, cf = _base_and_cf(store.path, store.experiment_id)
    dbs = {"why-cited": (store.path, ""), "why-cited-one": (store.path, store.experiment_id),
           "why-cited-study": (store.path, ""),
           "compare": (store_path(folder, shape.compare_items, 3), str(shape.compare_items)),
           "compare-runs": (store.path, f"{base},{cf},{shape.items}")}
    query_load = load()
    times: list[tuple[float, float]] = []
    rows = []
    for figure in commands:
        times += query_detail_times(bench, store, repeats)
        db, arg = dbs[figure]
        rows.append(measure(figure, size, db, arg))
        print(f"{size}: {figure} {rows[-1].wall_s:.1f} s", flush=True)
    times += query_detail_times(bench, store, repeats)
    query = Row("query_detail", size, query_load, statistics.median(t for t, _ in times),
                statistics.median(c for _, c in times), None, None,
                f"median of {len(times)} calls, {store.n_generations:,} generations")
    return builds, [query, *rows]


def _base_and_cf(db: Path, experiment_id: str) -> tuple[str, str]:
    from store.db import connect

    with connect(db, read_only=True) as conn:
        runs = dict(conn.execute("SELECT rag_mode, run_id FROM runs WHERE experiment_id = ?", [experiment_id]).fetchall())
    return runs["base"], runs["cf"]


def table(rows: list[Row]) -> str:
    """The markdown table; each wall over query_detail's median of the same size and run."""
    medians = {r.size: r.wall_s for r in rows if r.figure == "query_detail"}
    lines = ["| figure | size | load (1/5/15 min) before | wall | CPU | peak RSS | ÷ query_detail | computed |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.figure == "query_detail":
            wall, cpu, peak = f"{1000 * r.wall_s:.1f} ms", f"{1000 * r.cpu_s:.1f} ms", "(in the parent)"
        else:
            call = f" (call {r.call_s:.1f} s)" if r.call_s is not None else ""
            peak = f"{r.peak_mb:,.0f} MB" if r.peak_mb is not None else "?"
            wall, cpu = f"{r.wall_s:.1f} s{call}", f"{r.cpu_s:.1f} s"
        ratio = "1×" if r.figure == "query_detail" else f"{r.wall_s / medians[r.size]:,.1f}×" if peak != "?" else "-"
        lines.append(f"| {r.figure} | {r.size} | {r.load} | {wall} | {cpu} | {peak} | {ratio} | {r.what} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["10k", "1M"], metavar="SIZE",
                        help=f"any of {', '.join(SIZES)} (default: 10k 1M)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="folder for the stores, kept for reuse (a store already there is reused)")
    parser.add_argument("--repeats", type=int, default=7, help="query_detail calls before each command and after")
    parser.add_argument("--commands", nargs="+", default=list(COMMANDS), metavar="COMMAND",
                        help=f"any of {', '.join(COMMANDS)} (default: all; 'compare' builds a store of 3 runs x N items)")
    parser.add_argument("--limit-gb", type=float, default=None,
                        help="cap each command's address space (a command past it fails as a row of the table)")
    parser.add_argument("--child", nargs=3, metavar=("KIND", "DB", "ARG"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(*args.child)))
        return
    unknown = [s for s in args.sizes if s not in SIZES]
    if unknown:
        raise SystemExit(f"bench_stats.py: unknown size '{unknown[0]}' (choose from {', '.join(SIZES)})")
    if args.repeats < 1:
        raise SystemExit(f"bench_stats.py: --repeats must be at least 1, not {args.repeats}")
    wrong = [c for c in args.commands if c not in COMMANDS]
    if wrong:
        raise SystemExit(f"bench_stats.py: unknown command '{wrong[0]}' (choose from {', '.join(COMMANDS)})")
    if args.limit_gb is not None and args.limit_gb <= 0:
        raise SystemExit(f"bench_stats.py: --limit-gb must be positive, not {args.limit_gb}")
    LIMIT_GB[0] = args.limit_gb
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
          f"python scripts/bench_stats.py {' '.join(argv if argv is not None else sys.argv[1:])}", flush=True)
    builds, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for size in dict.fromkeys(args.sizes):
            built, measured = run_size(size, folder, args.repeats, tuple(dict.fromkeys(args.commands)))
            builds += built
            rows += measured
    print()
    print(table(rows))
    if builds:
        print("\nstores built in this run (each in a fresh interpreter):")
    for r in builds:
        print(f"- {r.size}: {r.what} in {r.wall_s:.0f} s wall, {r.cpu_s:.0f} s CPU, peak {r.peak_mb:,.0f} MB "
              f"resident while building (load {r.load} before)")


if __name__ == "__main__":
    main()
