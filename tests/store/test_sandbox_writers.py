"""Writer priority: visitors looping long queries never starve a run's writes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # when run as a script for the visitor role
    sys.path.insert(0, str(REPO))

from engine.types import (  # noqa: E402
    Document,
    Generation,
    Item,
    RunSpec,  # noqa: E402
)
from store import RunStore, queries  # noqa: E402
from store.db import connect  # noqa: E402
from store.db_markers import (  # noqa: E402
    make_marker,
    remove_marker,
    writers_waiting,  # noqa: E402
)
from store.sandbox import WRITER_FIRST  # noqa: E402

LIMIT_S = 1.5  # the visitors' query time limit (the app uses 10 s)
WRITER_WAIT_S = 1.0  # the sandbox's writer poll (0.1 s), the interrupt and the open, on a busy machine


def spec(n_items: int) -> RunSpec:
    return RunSpec(
        run_id="run-w", experiment_id="exp-w", config_hash="h", model="tiny", model_revision=None,
        quantization="none", dtype="float32", device="cpu", dataset="d.jsonl", dataset_sha="sha",
        metadata_type=None, rag_mode="vanilla", seed=0, prompt_version="p1", git_sha=None,
        library_versions={}, config={}, n_items=n_items,
    )


def test_markers_announce_live_writers_only(tmp_path: Path):
    db = tmp_path / "runs.duckdb"
    assert writers_waiting(db) == 0
    marker = make_marker(db)
    assert marker is not None and writers_waiting(db) == 1
    dead = tmp_path / "runs.duckdb.writer-999999999-dead"  # a writer killed while waiting
    dead.touch()
    old = tmp_path / f"runs.duckdb.writer-{os.getpid()}-old"
    old.touch()
    os.utime(old, (0, 0))  # stale: older than any wait
    other = tmp_path / f"other.duckdb.writer-{os.getpid()}-x"  # another database's writer
    other.touch()
    assert writers_waiting(db) == 1
    remove_marker(marker)
    assert writers_waiting(db) == 0


def test_a_waiting_writer_leaves_no_marker_behind(tmp_path: Path):
    db = tmp_path / "runs.duckdb"
    RunStore(db).put_items("sha", [])
    # Another process holds the file read-only for a moment, as a visitor's query does.
    holder = subprocess.Popen([sys.executable, "-c", (
        "import duckdb, sys, time; c = duckdb.connect(sys.argv[1], read_only=True); "
        "print('open', flush=True); time.sleep(1.0); c.close()"), str(db)], stdout=subprocess.PIPE)
    assert holder.stdout.readline().strip() == b"open"
    seen = []
    watcher = threading.Thread(target=lambda: (time.sleep(0.5), seen.append(writers_waiting(db))))  # type: ignore[func-returns-value]
    watcher.start()
    with connect(db, timeout_s=10) as conn:  # waits for the holder, announcing itself
        conn.execute("SELECT 1")
    watcher.join()
    holder.wait()
    assert seen == [1]
    assert writers_waiting(db) == 0
    assert [p.name for p in tmp_path.iterdir() if ".writer-" in p.name] == []


def visitor(db: str, stop_file: str) -> None:
    """A visitor process looping queries that run to the time limit, reconnecting at once.

    It calls the sandbox child's own entry (store.sandbox.run) in a loop: the same connection,
    settings and writer-yielding as `run_readonly_sql`, without the process start-up between
    queries that would leave a writer gaps to slip through.
    """
    from store.sandbox import SandboxRequest, run

    request = SandboxRequest(
        path=db, sql="SELECT count(*) FROM range(1000000000) a, range(1000) b", max_rows=10,
        timeout_s=LIMIT_S, lock_timeout_s=LIMIT_S, memory_limit="64MB", threads=1,
        max_result_bytes=1000, max_address_space=None)
    while not os.path.exists(stop_file):
        reply = run(request)
        print("time limit" if reply.error and "time limit" in reply.error else reply.error,
              flush=True)


@pytest.mark.slow  # visitor processes looping queries for seconds
def test_two_visitors_looping_long_queries_never_starve_a_writer(tmp_path: Path):
    db = tmp_path / "runs.duckdb"
    store = RunStore(db, timeout_s=15)  # without writer priority this gives up: DatabaseBusy
    n_batches = 6
    items = [Item(f"q{i}", "question", ("a",), (Document(f"q{i}-d", "text", True),))
             for i in range(n_batches)]
    store.put_items("sha", items)
    store.start_run(spec(n_batches))
    stop = tmp_path / "stop"
    visitors = []
    for _ in range(2):
        visitors.append(subprocess.Popen(
            [sys.executable, __file__, "visitor", str(db), str(stop)],
            stdout=subprocess.PIPE, text=True))
        time.sleep(LIMIT_S / 2)  # staggered: one of them always holds the file
    waits = []
    try:
        time.sleep(LIMIT_S)
        for i in range(n_batches):
            started = time.monotonic()
            store.write_batch("run-w", [Generation(
                item_id=f"q{i}", prompt="p", answer="a", shown_doc_ids=(f"q{i}-d",),
                finish_reason="stop", n_prompt_tokens=1, tokens=(), citations=())])
            waits.append(time.monotonic() - started)
            time.sleep(0.3)  # the GPU's next batch
    finally:
        stop.touch()
        outcomes = [line.strip() for v in visitors for line in v.communicate(timeout=30)[0].splitlines()]
    assert queries.done_counts(db)["n_done"].tolist() == [n_batches]
    # The visitors really held the file: their queries ran to the limit, or were stopped for the writer.
    held = [o for o in outcomes if o == "time limit" or o == WRITER_FIRST]
    assert len(held) >= 6 and WRITER_FIRST in outcomes, outcomes
    # A waiting writer stops the query holding the file (writers first): it waits a
    # poll and an open, not a visitor query's time limit.
    assert max(waits) < WRITER_WAIT_S, [round(w, 2) for w in waits]
    assert writers_waiting(db) == 0


if __name__ == "__main__":
    if sys.argv[1] == "visitor":
        visitor(sys.argv[2], sys.argv[3])
