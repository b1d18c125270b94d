"""Helpers shared by test modules: small native-layout datasets and file digests.

Not a test module and not fixtures: plain functions, imported as `from tests.support.helpers import ...`.
The datasets are written byte for byte as the modules that used to define them wrote them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def digest(path: Path) -> str:
    """A file's SHA-256: proves that a command left it untouched."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_dataset(path: Path, n: int) -> Path:
    """n items of three documents; the first is relevant and the answer is the item's number."""
    return write_jsonl(path, (
        {
            "id": f"q{i}",
            "question": f"what is the number for topic {i}",
            "answers": [str(i)],
            "documents": [{"text": f"Topic {i}, passage {j}: {i + j}.", "relevant": j == 0} for j in range(3)],
        }
        for i in range(n)
    ))


def make_ranked_dataset(path: Path, n: int, *, titles: bool = False) -> Path:
    """n items of four documents with ids; the relevant one moves (document i % 4) and holds the
    answer. With titles, the first document of each item has one (the others an empty one)."""
    rows = []
    for i in range(n):
        docs: list[dict[str, Any]] = []
        for j in range(4):
            doc: dict[str, Any] = {"id": f"q{i}-d{j}", "text": f"Passage {j} about topic {i}; the answer is {i * 7 + j}.",
                                   "relevant": j == i % 4}
            if titles:
                doc["title"] = f"Topic {i}" if j == 0 else ""
            docs.append(doc)
        rows.append({"id": f"q{i}", "question": f"what is the number for topic {i}", "answers": [str(i * 7 + i % 4)],
                     "documents": docs})
    return write_jsonl(path, rows)


def copy_store(built: Path, dest: Path) -> Path:
    """A fresh copy of a store file written once per module (its WAL too, if one is left): a test
    that changes its store gets its own in milliseconds, not the seconds of writing it again
    through RunStore (each write opens, migrates-checks and closes the file)."""
    shutil.copyfile(built, dest)
    wal = built.with_name(built.name + ".wal")
    if wal.exists():
        shutil.copyfile(wal, dest.with_name(dest.name + ".wal"))
    return dest


def rows(db: Path, sql: str, params: Any = None) -> list[tuple]:
    """What a read-only query of the store returns, every row."""
    from store.db import connect

    with connect(db, read_only=True) as conn:
        return conn.execute(sql, params or []).fetchall()


def cli(*args: str) -> int:
    """`python -m engine ARGS` in this process: its exit status."""
    from engine.__main__ import main

    return main(list(args))


def wait_for_job(jobs: Any, job_id: str, timeout_s: float = 120) -> Any:
    """The app job queue's status of `job_id` once it has ended (complete, cancelled or failed);
    an AssertionError naming the status if it has not within `timeout_s`."""
    import time

    deadline = time.monotonic() + timeout_s
    while (status := jobs.status(job_id)).state not in ("complete", "cancelled", "failed"):
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    return status


def write_one_answer(tmp_path: Path, text: str, *, citation_syntax: str | None = None) -> Path:
    """Store `text` as the vanilla answer of a one-item, two-document run (the first document
    relevant) through the real write loop, as a run writes it; the store's path."""
    from engine.datasets.data import load_dataset
    from engine.prompting.prompts import PromptConfig, build_prompt
    from engine.running.backends import BatchResult, PlannedBatch
    from engine.running.write_loop import OpenRun, write_loop
    from engine.types import GenerationOutput, RunSpec
    from store.run_store import RunStore

    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "q1", "question": "q?", "answers": ["a"],
                                               "documents": [{"text": "a", "relevant": True},
                                                             {"text": "b", "relevant": False}]}])
    dataset = load_dataset(data)
    item = dataset.items[0]
    prompt = build_prompt(item, PromptConfig(mode="vanilla"))
    db = tmp_path / "r.duckdb"
    store = RunStore(db)
    store.put_items(dataset.sha, dataset.items)
    config = {"citation_syntax": citation_syntax} if citation_syntax else {}
    store.start_run(RunSpec(
        run_id="r1", experiment_id="e1", config_hash="h1", model="m", model_revision=None, quantization="none",
        dtype="float32", device="cpu", dataset=str(data), dataset_sha=dataset.sha, metadata_type=None,
        rag_mode="vanilla", seed=0, prompt_version="v", git_sha=None, library_versions={}, config=config,
        n_items=1))
    answer = GenerationOutput(text=text, tokens=(), finish_reason="stop", n_prompt_tokens=2)
    syntax = {"citation_syntax": citation_syntax} if citation_syntax else {}
    runs = [OpenRun("r1", "vanilla", 1, {item.id: (item, prompt)}, **syntax)]
    write_loop(runs, [PlannedBatch(0, "r1", (item.id,), ((1, 2),))], [BatchResult(0, (answer,), None)], store)
    return db


def load_script(name: str) -> Any:
    """scripts/NAME.py as a module (scripts/ is not a package), registered in sys.modules so
    that its dataclasses can look their module up."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[2] / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def served_app(db: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """`python -m demo --db DB ARGS` on a free port, as a visitor reaches it over HTTP; yields
    (its URL, the process) once it accepts connections, and stops it afterwards. `env` adds to
    this process's environment (offline, no analytics)."""
    import socket
    import sys
    import time

    import pytest

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).resolve().parents[2]
    full_env = dict(os.environ, PYTHONPATH=str(root), HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False",
                    **(env or {}))
    proc = subprocess.Popen([sys.executable, "-m", "demo", "--db", str(db), "--port", str(port), *args],
                            cwd=root, env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("the app did not start")
            time.sleep(0.3)
    try:
        yield f"http://127.0.0.1:{port}/", proc
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
