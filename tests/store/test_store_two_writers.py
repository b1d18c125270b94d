"""Two processes that both write one store, and read between their writes, never lose a batch.

Each writer process starts runs, writes two batches of four answers each and marks the run
complete, a few hundred times; one of them also reads (the listings, the run's answers and what it
holds) before every batch, as the app does between a visitor's pages. Every batch whose
`write_batch` returned must be in the file afterwards, found both by a scan and by its key, and no
run may be `complete` short of answers. The writers run as `python tests/store/test_store_two_writers.py
ROLE ...` so that they share no DuckDB instance, file lock or Python lock with the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # when run as a script for a writer role
    sys.path.insert(0, str(REPO))

from engine.types import Citation, Document, Generation, Item, RunSpec  # noqa: E402
from store import RunStore, connect, queries  # noqa: E402

SHA = "sha-two-writers"
TRIES = 150  # per writer: 300 runs and 600 batches in all
PER_BATCH = 4


def spec(run_id: str) -> RunSpec:
    return RunSpec(
        run_id=run_id, experiment_id=f"exp-{run_id}", config_hash=f"hash-{run_id}", model="tiny",
        model_revision=None, quantization="none", dtype="float32", device="cpu", dataset="d.jsonl",
        dataset_sha=SHA, metadata_type=None, rag_mode="vanilla", seed=0, prompt_version="p1",
        git_sha=None, library_versions={}, config={}, n_items=2 * PER_BATCH,
    )


def items() -> list[Item]:
    return [Item(f"q{i}", f"question {i}", (f"a{i}",), (Document(f"q{i}-d1", "text", True),))
            for i in range(2 * PER_BATCH)]


def generation(item_id: str) -> Generation:
    return Generation(item_id=item_id, prompt="p" * 200, answer="a [1]", shown_doc_ids=(f"{item_id}-d1",),
                      finish_reason="stop", n_prompt_tokens=50, tokens=(),
                      citations=(Citation(0, 1, f"{item_id}-d1", True, 0.9),))


def role_writer(db: str, flag: str, prefix: str, reads: str) -> None:
    """Runs prefix0, prefix1, ...; prints each batch as soon as write_batch has returned."""
    deadline = time.monotonic() + 30
    while not Path(flag).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    store = RunStore(db, timeout_s=120)
    for t in range(TRIES):
        run_id = f"{prefix}{t}"
        store.start_run(spec(run_id))
        for batch in range(2):
            if reads == "1":
                queries.list_runs(store)
                queries.generations_for_run(store, run_id)
                store.done_item_ids(run_id)
            store.write_batch(run_id, [generation(f"q{batch * PER_BATCH + k}") for k in range(PER_BATCH)])
            print(json.dumps([run_id, batch]), flush=True)
        store.finish_run(run_id, "complete")


def _spawn(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, __file__, "writer", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow  # 300 runs written by two processes: a few minutes on two cores
def test_two_writers_that_read_between_writes_never_lose_a_returned_batch(tmp_path: Path):
    db = tmp_path / "shared.duckdb"
    flag = tmp_path / "go"
    RunStore(db).put_items(SHA, items())
    writers = [_spawn(str(db), str(flag), "w", "0"), _spawn(str(db), str(flag), "a", "1")]
    time.sleep(0.5)  # both interpreters are up and waiting
    flag.touch()
    returned: list[tuple[str, int]] = []
    for proc in writers:
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-2000:]
        returned += [(str(run_id), int(batch)) for run_id, batch in map(json.loads, out.splitlines())]
    assert len(returned) == 2 * TRIES * 2

    with connect(db, read_only=True) as conn:
        held = dict(conn.execute("SELECT run_id, count(*) FROM generations GROUP BY run_id").fetchall())
        status = dict(conn.execute("SELECT run_id, status FROM runs").fetchall())
        missing = [(run_id, batch) for run_id, batch in returned if held.get(run_id, 0) < PER_BATCH * (batch + 1)]
        # By key too: a run or an answer a scan finds and its key's lookup does not is lost to
        # every write that looks it up first (write_batch's "unknown run").
        unkeyed_runs = [r for r in status
                        if conn.execute("SELECT count(*) FROM runs WHERE run_id = ?", [r]).fetchone() != (1,)]
        unkeyed_answers = [
            key for key in conn.execute("SELECT run_id, item_id FROM generations").fetchall()
            if conn.execute("SELECT count(*) FROM generations WHERE run_id = ? AND item_id = ?",
                            list(key)).fetchone() != (1,)
        ]
    assert missing == []
    assert unkeyed_runs == [] and unkeyed_answers == []
    assert len(status) == 2 * TRIES
    assert {r for r, s in status.items() if s == "complete" and held.get(r, 0) < 2 * PER_BATCH} == set()
    assert set(status.values()) == {"complete"}


if __name__ == "__main__":
    {"writer": role_writer}[sys.argv[1]](*sys.argv[2:])
