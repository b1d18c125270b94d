"""Benchmark: the Judges tab on a judged store the size a Space's store reaches.

Builds a store with scripts/bench_app.build_store (runs x items answers, 0-2 citations each),
two model judges' verdicts on every cited document (an LLM and an NLI judge, written by bulk
insert through the real schema), and four labels files of every cited document (CSV, `item_id,run,position,label`, about 35 bytes a row). Then, through the app launched as
`python -m demo` launches it (tests/support/app_server.served, its ordinary AppSettings):

- import:    the Judges tab's label import (the handler the Import button calls) of the labels
             files under new judges' names, the store's size before and after each, with
             PATTRIEVAL_MAX_STORE_MB given by --quota-mb;
- agreement: `/agreement` of every run through gradio_client, a visitor's first call and the same repeated,
             and meanwhile another visitor's page (`/runs`, the first page) timed in a loop
             against the same page with nothing else running.

Run: python scripts/bench_judges.py --build FOLDER [--items 8000] [--runs 24]
     python scripts/bench_judges.py --import FOLDER [--quota-mb 75] [--imports 4]
     python scripts/bench_judges.py --agreement FOLDER [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import zlib
from pathlib import Path

from engine.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

STORE = "judged.duckdb"
MB = 1024 * 1024


def build(folder: Path, items: int, runs: int) -> None:
    """The judged store and four labels files in `folder` (which must not hold a store yet)."""
    from bench_app import build_store

    from store.db import connect

    folder.mkdir(parents=True, exist_ok=True)
    db = folder / STORE
    started = time.perf_counter()
    build_store(db, n_items=items, n_runs=runs)
    with connect(db) as conn:
        for judge, kind in (("judge/llm", "llm"), ("judge/nli", "nli")):
            conn.execute("INSERT INTO judges VALUES (?, ?, ?, '{}', '{}', now())", [judge, kind, f"bench/{kind}"])
            # One sentence per cited document; verdicts drawn from a hash, the two judges agreeing often.
            conn.execute(
                "INSERT INTO verifications SELECT run_id, item_id, 0, position, ?, doc_id, 'claim', 'x', "
                "CASE WHEN (hash(run_id, item_id, position, ?) % 10) < 6 THEN 'attributable' "
                "     WHEN (hash(run_id, item_id, position) % 10) < 8 THEN 'extrapolatory' ELSE 'contradictory' END, "
                "NULL, NULL, NULL, now() FROM citations WHERE doc_id IS NOT NULL "
                "QUALIFY row_number() OVER (PARTITION BY run_id, item_id, position) = 1",
                [judge, judge if kind == "llm" else "same"],
            )
    with connect(db) as conn:
        conn.execute("CHECKPOINT")
        labelled = conn.execute(
            "SELECT DISTINCT run_id, item_id, position FROM citations WHERE doc_id IS NOT NULL ORDER BY ALL").fetchall()
    for n in range(4):
        lines = ["item_id,run,position,label"]
        lines += [f"{item},{run},{pos},{'attributable' if zlib.crc32(f'{run}{item}{pos}{n}'.encode()) % 3 else 'not_attributable'}"
                  for run, item, pos in labelled]
        (folder / f"labels-{n}.csv").write_text("\n".join(lines) + "\n")
    size = (folder / "labels-0.csv").stat().st_size
    print(f"built {db} in {time.perf_counter() - started:.0f} s: {db.stat().st_size / MB:.1f} MB, "
          f"{runs} runs x {items:,} items; labels files of {len(labelled):,} rows, {size / MB:.1f} MB each")


def _store_mb(db: Path) -> float:
    wal = Path(f"{db}.wal")
    return (db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)) / MB


def imports(folder: Path, quota_mb: int | None, n: int) -> None:
    """The Judges tab's import of each labels file under a new judge, through the handler the
    button calls, with the store quota `quota_mb`."""
    from demo.handlers.judges import import_labels_file
    from demo.settings import AppSettings

    db = folder / STORE
    settings = AppSettings(db, max_store_mb=quota_mb, max_upload_mb=50)
    for i in range(n):
        before = _store_mb(db)
        started = time.perf_counter()
        try:
            line = import_labels_file(settings, str(folder / f"labels-{i % 4}.csv"), f"bench-person-{time.time_ns()}")
        except UserError as err:
            line = f"refused: {err}"
        print(f"import {i + 1}: {time.perf_counter() - started:.1f} s, store {before:.1f} -> {_store_mb(db):.1f} MB "
              f"(quota {quota_mb} MB): {line[:160]}")


def agreement(folder: Path, repeats: int) -> None:
    """`/agreement` through the launched app, first and repeated, and another visitor's page meanwhile."""
    from gradio_client import Client

    from demo.jobs import JobQueue
    from demo.settings import AppSettings
    from tests.support.app_server import refuse_load, served

    db = folder / STORE
    from store.queries import label_runs

    # Every run at once: what a visitor wanting to slow the app would ask for.
    every_run = [r.run_id for r in label_runs(db)]
    with served(AppSettings(db), JobQueue(load=refuse_load)) as url:
        other = Client(url, verbose=False)

        def page() -> float:
            started = time.perf_counter()
            other.predict(1, "", "", "", "", "", api_name="/runs")
            return time.perf_counter() - started

        alone = [page() for _ in range(8)]
        visitor = Client(url, verbose=False)
        during: list[float] = []
        done = threading.Event()

        def loop() -> None:
            while not done.is_set():
                during.append(page())

        for i in range(repeats):
            thread = threading.Thread(target=loop) if i == 0 else None
            if thread:
                thread.start()
            started = time.perf_counter()
            result = visitor.predict("", every_run, api_name="/agreement")
            took = time.perf_counter() - started
            done.set()
            if thread:
                thread.join()
            print(f"/agreement call {i + 1}: {took:.2f} s ({len(result['judges'])} judges, "
                  f"{sum(j['n_verdicts'] for j in result['judges']):,} verdicts)")
        print(f"another visitor's /runs page: alone median {statistics.median(alone):.2f} s "
              f"(max {max(alone):.2f}); during the first /agreement median {statistics.median(during):.2f} s "
              f"(max {max(during):.2f}, {len(during)} pages)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--build", type=Path, metavar="FOLDER")
    what.add_argument("--import", dest="imports", type=Path, metavar="FOLDER")
    what.add_argument("--agreement", type=Path, metavar="FOLDER")
    parser.add_argument("--items", type=int, default=8_000)
    parser.add_argument("--runs", type=int, default=24)
    parser.add_argument("--quota-mb", type=int, default=75)
    parser.add_argument("--count", type=int, default=4, help="imports to make")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if args.build:
        build(args.build, args.items, args.runs)
    elif args.imports:
        imports(args.imports, args.quota_mb, args.count)
    else:
        agreement(args.agreement, args.repeats)


if __name__ == "__main__":
    main()
