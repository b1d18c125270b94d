"""Benchmark: the app's handlers on a store of 10k and of 1M generations, side by side.

Builds synthetic stores by bulk insert, directly in DuckDB through the real schema (created by
the project's migrations via store.db.connect), then times, in this process, as a visitor hits
them:
- query:  demo.handlers.query.query_detail (one item of one experiment, all its modes);
- runs:   demo.handlers.runs.runs_page, the first page;
- bias:   demo.handlers.bias.bias_page for one experiment, what /bias_table does: CAS and CAB
          (2,000 bootstrap resamples), Tables 1 and 2, and the plots' data; a visitor's first
          request (the report and Table 2 read from what the store keeps, store.derived), the
          same repeated, "after run": the first request after the experiment's last run ended
          (its values kept by the writer, engine.usecases.bias.kept), "writer keeps": that
          keeping, and "computed": with nothing kept (other resamples, or a writer that could not keep);
- report: with --report, `python -m engine report`'s tables for one experiment and for the
          whole store (engine.usecases.bias.tables.report_tables);
- memory: with --memory, each handler's peak resident memory in a fresh child process.

Store shapes (one dataset of ITEMS items x 10 documents; RUNS runs in experiments of vanilla,
base and cf, the last experiment partial when RUNS is not a multiple of 3; metadata types
cycle gender, hai, race; every run answers every item with 0-3 citations and ~8 tokens):
- "10k":  100 runs x 100 items = 10,000 generations (34 experiments, as at 1M);
- "1M":   100 runs x 10,000 items = 1,000,000 generations;
- "exp":  1 experiment alone, 3 runs x 10,000 items = 30,000 generations: the bias tab's work
          grows with the experiment it shows (10,000 items at 1M against 100 at 10k), so bias
          at 1M is also compared with the same experiment in a store that holds nothing else;
- "huge": with --huge 10000000, 1,000 runs x 10,000 items = 10,000,000 generations (2.3 GB,
          about 20 min to build on a loaded 2-core machine, 7 GB peak memory while building).
The timed experiment is the newest complete one (vanilla, base and cf), its item the middle one.

Run: python scripts/bench_app.py [--generations 1000000] [--items 10000] [--repeats 7]
                                 [--report] [--memory] [--huge 10000000] [--keep FOLDER]
(without --keep the stores go to a temporary folder that is removed at the end.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

N_DOCS = 10
MODES = ("vanilla", "base", "cf")
METADATA = ("gender", "hai", "race")
DATASET_SHA = "b3c4d5e6f7a8091a2b3c4d5e6f7a8091a2b3c4d5e6f7a8091a2b3c4d5e6f7a80"
DATASET = "/data/bench_nq.jsonl"


@dataclass(frozen=True)
class BenchStore:
    """A built store and what the bench reads from it."""

    path: Path
    n_items: int
    n_runs: int
    n_generations: int
    experiment_id: str  # the newest experiment with vanilla, base and cf
    item_id: str
    build_s: float


def item_id(i: int) -> str:
    return f"q{i:06d}"


# item_id in SQL, over a column `i`: printf, not lpad, which cuts ids of 1,000,000 and more to six
# digits (duplicates in the 10M-item store of scripts/bench_stats.py).
ITEM_ID_SQL = "printf('q%06d', i)"


def build_store(path: Path, *, n_items: int, n_runs: int) -> BenchStore:
    """Write a store of n_runs x n_items generations at `path` (which must not exist yet)."""
    from engine.prompting.prompts import METADATA_TYPES, PromptConfig
    from store.db import connect, utc_now
    from store.kept_metrics import keep_all
    from store.run_scores import live_scores

    if path.exists():
        raise SystemExit(f"{path} exists already: give a new path")
    started = time.perf_counter()
    runs = []
    experiments = []
    for r in range(n_runs):
        e, m = divmod(r, 3)
        mode = MODES[m]
        meta = METADATA[e % len(METADATA)]
        experiment = f"exp-{e:04d}"
        if m == 0:
            experiments.append((experiment, f"bench-{e:04d}", e))
        prompt = PromptConfig(mode=mode, metadata=METADATA_TYPES[meta]).to_dict()
        config = {"prompt": prompt, "generation": {"max_new_tokens": 48, "do_sample": False}}
        runs.append((f"run-{r:04d}", experiment, f"hash-{r:04d}", r, meta, mode, json.dumps(config, sort_keys=True)))
    with connect(path) as conn:
        conn.executemany(
            "INSERT INTO experiments (experiment_id, name, experiment_key, created_utc, model, dataset, "
            "dataset_sha, settings_json) VALUES (?, ?, ?, TIMESTAMP '2026-01-01' + to_minutes(? * 10), "
            "'bench/model-7b', ?, ?, '{}')",
            [(x, name, f"key-{e}", e, DATASET, DATASET_SHA) for x, name, e in experiments],
        )
        conn.executemany(
            "INSERT INTO runs (run_id, experiment_id, config_hash, created_utc, finished_utc, status, model, "
            "model_revision, quantization, dtype, device, dataset, dataset_sha, metadata_type, rag_mode, seed, "
            "prompt_version, git_sha, library_versions, config_json, n_items) "
            "VALUES ($1, $2, $3, TIMESTAMP '2026-01-01' + to_minutes($4 * 3), "
            "TIMESTAMP '2026-01-01' + to_minutes($4 * 3 + 2), 'complete', 'bench/model-7b', 'main', 'none', "
            "'float16', 'cuda', $8, $9, $5, $6, 0, 'v1', NULL, '{}', $7, $10)",
            [(*run, DATASET, DATASET_SHA, n_items) for run in runs],
        )
        # Per item: which ranked documents are relevant (one or two of the ten), and the answer.
        conn.execute(
            f"""
            CREATE TEMP TABLE plan_items AS
            SELECT i, {ITEM_ID_SQL} AS item_id,
                   CAST(hash(i, 'r1') % {N_DOCS} AS INTEGER) AS r1,
                   CASE WHEN hash(i, 'two') % 3 = 0 THEN CAST(hash(i, 'r2') % {N_DOCS} AS INTEGER) END AS r2
            FROM range({n_items}) t(i)
            """
        )
        conn.execute(
            f"""
            INSERT INTO items
            SELECT '{DATASET_SHA}', item_id, 'Question number ' || i || ' about topic ' || (i % 97) || '?',
                   ['answer ' || i, 'Answer #' || i],
                   list_transform(range({N_DOCS}), lambda j: {{
                     'id': item_id || '-d' || j, 'title': 'Document ' || j,
                     'text': CASE WHEN j = r1 OR j = r2 THEN 'This document says the answer is answer ' || i || '.'
                                  ELSE 'Unrelated text ' || j || ' for question ' || i || '.' END,
                     'relevant': j = r1 OR j = coalesce(r2, -1)}})
            FROM plan_items
            """
        )
        # Per generation: the cited positions (1-based; 11 is out of range now and then), chosen
        # so that base cites the relevant document a little more often than cf.
        conn.execute(
            f"""
            CREATE TEMP TABLE plan_gens AS
            WITH g AS (
              SELECT r.run_id, r.rag_mode, p.i, p.item_id, p.r1, p.r2,
                     hash(r.run_id, p.i) AS h
              FROM runs r, plan_items p)
            SELECT run_id, i, item_id, r1, r2,
                   list_transform(range(CAST(h % 3 AS INTEGER)), lambda c:
                     CASE WHEN (h >> (8 + 8 * c)) % 100 < CASE rag_mode WHEN 'base' THEN 70 WHEN 'cf' THEN 55 ELSE 62 END
                          THEN r1 + 1
                          WHEN (h >> (8 + 8 * c)) % 100 = 99 THEN {N_DOCS + 1}
                          ELSE CAST((h >> (16 + 8 * c)) % {N_DOCS} AS INTEGER) + 1 END) AS cites,
                   (h >> 40) % 5 = 0 AS wrong
            FROM g
            -- Written run after run, as the runner does (one mode at a time, in batches).
            ORDER BY run_id, i
            """
        )
        conn.execute(
            f"""
            INSERT INTO generations
            SELECT run_id, item_id, 'Answer the question using the documents. Question ' || i, answer,
                   list_transform(range({N_DOCS}), lambda j: item_id || '-d' || j),
                   180, len(tokens), 'stop',
                   list_transform(range(len(tokens)), lambda k: CAST(100 + k AS INTEGER)),
                   tokens,
                   list_transform(range(len(tokens)), lambda k: -0.05 * ((k * 7 + i) % 13)),
                   NULL, TIMESTAMP '2026-01-01' + to_microseconds(i),
                   NULL  -- shown_labels: derived from the mode, as for answers stored before migration 014
            FROM (
              SELECT *, string_split(answer, ' ') AS tokens FROM (
                SELECT run_id, item_id, i,
                       'The answer is ' || CASE WHEN wrong THEN 'something else' ELSE 'answer ' || i END
                       || coalesce(list_aggregate(list_transform(cites, lambda n: ' [' || n || ']'), 'string_agg', ''), '')
                       || '.' AS answer
                FROM plan_gens))
            ORDER BY run_id, i
            """
        )
        conn.execute(
            f"""
            INSERT INTO citations
            SELECT run_id, item_id, CAST(c - 1 AS INTEGER), position,
                   CASE WHEN position <= {N_DOCS} THEN item_id || '-d' || (position - 1) END,
                   CASE WHEN position <= {N_DOCS} THEN position - 1 = r1 OR position - 1 = coalesce(r2, -1) END,
                   0.3 + 0.7 * ((hash(run_id, item_id, c) % 1000) / 1000.0)
            FROM (SELECT run_id, item_id, r1, r2, unnest(cites) AS position,
                         unnest(range(1, len(cites) + 1)) AS c, i FROM plan_gens)
            ORDER BY run_id, i, c
            """
        )
        n = conn.execute("SELECT count(*) FROM generations").fetchone()[0]
        # The runs' cached averages, as RunStore.finish_run writes them when a run completes
        # (run_scores one run at a time, the kept run_metrics and bias rows in one pass: the
        # same rows, store.kept_metrics, without a pass per run).
        for run in runs:
            conn.execute("INSERT OR REPLACE INTO run_scores VALUES (?, ?, ?, ?, ?, ?, ?)",
                         [run[0], *live_scores(conn, run[0]), utc_now()])
        keep_all(conn)
    with connect(path) as conn:
        conn.execute("CHECKPOINT")
    full = [x for x, _, e in experiments if 3 * e + 2 < n_runs]
    return BenchStore(path, n_items, n_runs, n, full[-1], item_id(n_items // 2), time.perf_counter() - started)


HANDLERS = ("query_detail", "runs_page", "bias_page")
# `python -m engine report`'s tables (engine.usecases.bias.tables.report_tables), for one experiment
# and for the whole store; timed with --report (the whole store takes seconds a call at 1M).
REPORTS = ("report --experiment", "report (all)")
# The Bias tab keeps what it computed per store state (store.state_cache): "bias_page" is timed
# with those caches emptied before each call (a visitor's first look), "  cached" with them warm.
# "  bias_inputs" is not a handler but the CAS/CAB report's store reads (store.queries.bias_inputs),
# so the table tells reading the experiment from the bootstrap that follows.
# "  after run" is the first request after the experiment's last run ended: the values kept in
# the store removed, then kept again as the writer keeps them when a run ends (untimed:
# engine.usecases.bias.kept); "  writer keeps" times that keeping itself, the work it
# adds to the end of a run. "  computed" is bias_page with nothing kept in the store (store.derived):
# what a request for other resamples waits for, or one after a writer that could not keep them.
# The computed page where a run's rows kept at its completion are not current (a run resumed,
# failed or running, rows lost), side by side: "  computed, answers kept" reads each answer's
# precision, recall and F1 kept as it was written (store.answer_metrics), "  computed, nothing
# kept" has neither and reads them through query_metrics, as the page did before answers were
# kept; each with its "  bias_inputs". What is hidden is put back after each call.
HIDDEN = {
    "  computed, nothing kept": ("item_metric_runs", "answer_metric_runs"),
    "  bias_inputs, nothing kept": ("item_metric_runs", "answer_metric_runs"),
    "  computed, answers kept": ("item_metric_runs",),
    "  bias_inputs, answers kept": ("item_metric_runs",),
}
PARTS = ("  cached", "  after run", "  writer keeps", "  computed", "  bias_inputs", *HIDDEN)
BIAS_PAGES = ("bias_page", "  cached", "  after run", "  computed", "  computed, nothing kept",
              "  computed, answers kept")


def call(handler: str, store: BenchStore):
    """One visitor request; returns what the handler returned."""
    if handler == "query_detail":
        from demo.handlers.query import query_detail

        return query_detail(store.path, store.experiment_id, store.item_id)
    if handler == "runs_page":
        from demo.handlers.runs import runs_page

        return runs_page(store.path, 1)
    if handler in BIAS_PAGES:
        from demo.handlers.bias import bias_page

        return bias_page(store.path, store.experiment_id)
    if handler == "  writer keeps":
        from engine.usecases.bias.kept import keep_experiments

        return keep_experiments(store.path, [store.experiment_id])
    if handler in REPORTS:
        from engine.usecases.bias.tables import ReportRequest, report_tables

        return report_tables(ReportRequest(db=store.path, experiment=store.experiment_id if "--" in handler else None))
    from store.queries import bias_inputs

    return bias_inputs(store.path, store.experiment_id)


def prepare(handler: str, store: BenchStore) -> None:
    """What precedes a timed call, untimed: bias_page's first look empties the caches."""
    if handler in ("bias_page", "  after run", "  computed", *HIDDEN):
        from demo.handlers.bias import clear_cache

        clear_cache()
    if handler in ("  after run", "  writer keeps", "  computed", *HIDDEN):
        forget_kept(store.path)
    if handler in HIDDEN:
        from store.db import connect

        with connect(store.path) as conn:
            for table in HIDDEN[handler]:
                conn.execute(f"CREATE TABLE bench_hidden_{table} AS SELECT * FROM {table}")
                conn.execute(f"DELETE FROM {table}")
    if handler == "  after run":
        from engine.usecases.bias.kept import keep_experiments

        keep_experiments(store.path, [store.experiment_id])


def restore(handler: str, store: BenchStore) -> None:
    """What follows a timed call, untimed: the rows `prepare` hid put back."""
    if handler in HIDDEN:
        from store.db import connect

        with connect(store.path) as conn:
            for table in HIDDEN[handler]:
                conn.execute(f"INSERT INTO {table} SELECT * FROM bench_hidden_{table}")
                conn.execute(f"DROP TABLE bench_hidden_{table}")


def forget_kept(path: Path) -> None:
    """Remove the values kept in the store (store.derived), so the next bias_page computes them."""
    from store.db import connect

    with connect(path) as conn:
        conn.execute("DELETE FROM derived_values")


def check(handler: str, store: BenchStore, result) -> None:
    """Fail loudly when a handler returns nothing sensible (a wrong store shape, a broken query)."""
    if handler == "query_detail":
        html, metrics = result
        if len(metrics) != 3 or store.item_id not in html or metrics["f1"].isna().any():
            raise SystemExit(f"query_detail returned no detail on {store.path.name}: {html[:200]}")
    elif handler == "runs_page":
        if len(result) != min(50, -(-store.n_runs // 3)) or result[0][0] is None:
            raise SystemExit(f"runs_page returned {len(result)} rows on {store.path.name}")
    elif handler in REPORTS:
        if not result.table1 or not result.table2:
            raise SystemExit(f"{handler} returned no tables on {store.path.name}")
    elif handler == "  writer keeps":
        if result is not True:
            raise SystemExit(f"the writer kept nothing on {store.path.name}")
    elif handler in BIAS_PAGES:
        from demo.handlers.bias import RESULT_COLUMNS

        # Each row is the experiment's cells, then RESULT_COLUMNS.
        n_at = RESULT_COLUMNS.index("n") + len(result.results[0]) - len(RESULT_COLUMNS) if result.results else 0
        if (len(result.results) != 6 or len(result.confidence) != 6 or not result.table1 or not result.table2
                or not result.cab_bars or any(row[n_at] != store.n_items for row in result.results)):
            raise SystemExit(f"bias_page returned unexpected rows on {store.path.name}: {result.results}")
    elif sum(len(m.item_ids) for m in result.metrics.values()) != 3 * store.n_items:
        raise SystemExit(f"bias_inputs read {sum(len(m.item_ids) for m in result.metrics.values())} metric rows "
                         f"on {store.path.name}")


def time_handlers(names: tuple[str, ...], stores: dict[str, BenchStore], repeats: int) -> dict[tuple[str, str], float]:
    """Median seconds per call of each handler on each store, after one warm-up call (imports,
    first open). The stores take turns call by call, so that load from other processes on a
    shared machine falls on all of them alike."""
    times: dict[tuple[str, str], list[float]] = {}
    for handler in names:
        chosen = {k: v for k, v in stores.items() if k != "exp" or handler not in ("query_detail", "runs_page", *REPORTS)}
        for store in chosen.values():
            prepare(handler, store)
            check(handler, store, call(handler, store))
            restore(handler, store)
        for _ in range(repeats):
            for name, store in chosen.items():
                prepare(handler, store)
                started = time.perf_counter()
                call(handler, store)
                times.setdefault((handler, name), []).append(time.perf_counter() - started)
                restore(handler, store)
    return {key: statistics.median(values) for key, values in times.items()}


_CHILD = """
import sys
sys.path.insert(0, {root!r})
import importlib.util
spec = importlib.util.spec_from_file_location("bench_app", {script!r})
bench = importlib.util.module_from_spec(spec); sys.modules["bench_app"] = bench; spec.loader.exec_module(bench)
import demo.handlers.bias, demo.handlers.query, demo.handlers.runs, engine.usecases.bias.tables  # imports before the baseline
store = bench._reuse(bench.Path({path!r}), {items}, {runs})
bench.prepare({handler!r}, store)
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])
open("/proc/self/clear_refs", "w").write("5")  # the peak (VmHWM) starts again from the current size
before = status("VmRSS:")
bench.call({handler!r}, store)
print(before, status("VmHWM:"))
"""


def peak_memory(handler: str, store: BenchStore) -> tuple[float, float]:
    """(peak resident MB of a fresh process during one call, MB of that peak over its size
    before the call, after its imports): one child process per call, its kernel peak counter
    reset after the imports (Linux), so neither the imports nor another handler hide a peak."""
    import subprocess

    code = _CHILD.format(root=str(ROOT), script=str(Path(__file__).resolve()), path=str(store.path),
                         items=store.n_items, runs=store.n_runs, handler=handler)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    before, peak = int(out[-2]) / 1024, int(out[-1]) / 1024  # kB in /proc/self/status
    return peak, peak - before


def label(n: int) -> str:
    """10,000 -> 10k, 1,000,000 -> 1M, 10,000,000 -> 10M."""
    for size, suffix in ((1_000_000, "M"), (1_000, "k")):
        if n >= size:
            return f"{n / size:g}{suffix}"
    return str(n)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=1_000_000, help="size of the large store (default 1,000,000)")
    parser.add_argument("--items", type=int, default=10_000, help="items per run in the large store (default 10,000)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per handler and store (median)")
    parser.add_argument("--report", action="store_true",
                        help="also time `report`'s tables, for one experiment and the whole store")
    parser.add_argument("--memory", action="store_true",
                        help="also measure each handler's peak resident memory, one child process per call")
    parser.add_argument("--huge", type=int, default=0, metavar="GENERATIONS",
                        help="also a third store of this many generations (--items per run), timed beside the "
                             "others, e.g. 10000000 (1,000 runs; about 2.3 GB and 12 min to build)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="folder for the stores, kept for reuse (a store already there is reused)")
    args = parser.parse_args(argv)
    n_runs = max(3, args.generations // args.items)
    small_items = max(1, args.items // 100)
    shapes = {  # name: (items, runs)
        "10k": (small_items, n_runs),
        "1M": (args.items, n_runs),
        "exp": (args.items, 3),
    }
    if args.huge:
        shapes["huge"] = (args.items, max(3, args.huge // args.items))
    sized = [k for k in ("10k", "1M", "huge") if k in shapes]
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        stores = {}
        for name, (items, runs) in shapes.items():
            path = folder / f"bench_{items}x{runs}.duckdb"
            if path.exists():
                stores[name] = _reuse(path, items, runs)
                print(f"{name}: reusing {path} ({stores[name].n_generations:,} generations)", flush=True)
            else:
                stores[name] = build_store(path, n_items=items, n_runs=runs)
                print(f"{name}: built {stores[name].n_generations:,} generations ({runs} runs x {items:,} items) "
                      f"in {stores[name].build_s:.1f} s, {path.stat().st_size / 1e6:.0f} MB", flush=True)
        names = HANDLERS + PARTS + (REPORTS if args.report else ())
        # The machine is shared: its load (1, 5, 15 min) says how to read absolute times.
        print("load average before timing: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
        medians = time_handlers(names, stores, args.repeats)
        print("load average after timing: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
        memory = {(h, k): peak_memory(h, stores[k]) for h in HANDLERS + ("  computed",) + (REPORTS if args.report else ())
                  for k in sized} if args.memory else {}
    _print(args.repeats, names, stores, sized, medians, memory)


def _print(repeats: int, names: tuple[str, ...], stores: dict[str, BenchStore], sized: list[str],
           medians: dict[tuple[str, str], float], memory: dict[tuple[str, str], tuple[float, float]]) -> None:
    """The table: per handler, ms on each store, each store's ratio to the previous one, the
    largest against `exp`, and against query_detail on the same store; then peak memory."""
    labels = {k: label(stores[k].n_generations) for k in sized}
    last = sized[-1]
    print()
    print(f"median of {repeats} calls after one warm-up, in ms; "
          + ", ".join(f"{labels[k]} = {stores[k].n_runs} runs x {stores[k].n_items:,} items" for k in sized)
          + f", exp = 1 experiment alone (3 runs x {stores['exp'].n_items:,} items)")
    head = f"{'handler':<30}" + "".join(f"{labels[k]:>9}" for k in sized)
    head += "".join(f"{labels[b] + '/' + labels[a]:>10}" for a, b in zip(sized, sized[1:], strict=False))
    print(head + f"{'exp':>9}{labels[last] + '/exp':>10}{'/query':>8}   target: < 200 ms, within 2x a size up")
    for handler in names:
        values = [medians[handler, k] for k in sized]
        line = f"{handler:<30}" + "".join(f"{1000 * v:9.1f}" for v in values)
        line += "".join(f"{b / a:10.2f}" for a, b in zip(values, values[1:], strict=False))
        exp = medians.get((handler, "exp"))
        line += f"{1000 * exp:9.1f}{values[-1] / exp:10.2f}" if exp else f"{'':9}{'':10}"
        print(line + f"{values[-1] / medians['query_detail', last]:8.2f}")
    if memory:
        print()
        print("peak resident MB of a fresh process during one call (in brackets: over its size after imports), "
              + ", ".join(labels[k] for k in sized))
        for handler in sorted({h for h, _ in memory}, key=lambda h: names.index(h) if h in names else 99):
            print(f"{handler:<30}" + "".join(f"{memory[handler, k][0]:9.0f} ({memory[handler, k][1]:+5.0f})" for k in sized))


def _reuse(path: Path, items: int, runs: int) -> BenchStore:
    from store.db import connect

    with connect(path, read_only=True) as conn:
        n = conn.execute("SELECT count(*) FROM generations").fetchone()[0]
        full = conn.execute(
            "SELECT experiment_id FROM runs GROUP BY experiment_id HAVING count(*) = 3 "
            "ORDER BY min(created_utc) DESC LIMIT 1"
        ).fetchone()[0]
    return BenchStore(path, items, runs, n, full, item_id(items // 2), 0.0)


if __name__ == "__main__":
    main()
