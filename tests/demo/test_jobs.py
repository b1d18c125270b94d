"""The app's background worker: a real queue, real runs on the tiny model, real DuckDB."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import duckdb
import pytest

from demo.job_specs import JobSpec
from demo.jobs import JobQueue
from demo.model_cache import ModelCache
from engine.prompting.prompts import METADATA_TYPES, PromptConfig
from engine.running.run_request import RunRequest
from engine.types import MODES
from engine.usecases.runs.run import ExperimentRequest
from tests.support.helpers import make_dataset


def request(model_dir, **changes) -> RunRequest:
    base = RunRequest(
        model=str(model_dir), modes=MODES, prompt=PromptConfig(metadata=METADATA_TYPES["gender"]),
        quantize="none", device="cpu", max_new_tokens=2, batch_size=4,
    )
    return dataclasses.replace(base, **changes)


class CountingLoader:
    """Loads the session's tiny model (already in memory) and counts how often it was asked to."""

    def __init__(self, model):
        self.model = model
        self.calls: list[str] = []
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, req):
        self.calls.append(req.model)
        self.gate.wait(10)
        return self.model


def wait_for(queue: JobQueue, job_id: str, states=("complete", "cancelled", "failed"), timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = queue.status(job_id)
        if status.state in states:
            return status
        time.sleep(0.02)
    pytest.fail(f"{job_id} still {queue.status(job_id)}")


def stored(db: Path, sql: str):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.fixture
def queue(tiny_llama):
    loader = CountingLoader(tiny_llama)
    q = JobQueue(load=loader)
    q.loader = loader
    yield q
    q.shutdown(timeout=30)


def test_jobs_run_one_at_a_time_in_order_and_share_the_loaded_model(queue, tiny_llama_dir, tmp_path):
    data = make_dataset(tmp_path / "d.jsonl", 3)
    db = tmp_path / "runs.duckdb"
    queue.loader.gate.clear()  # hold the first job in its model load
    first = queue.submit(JobSpec(ExperimentRequest(request(tiny_llama_dir), str(data), db)))
    second = queue.submit(JobSpec(ExperimentRequest(request(tiny_llama_dir, modes=("vanilla",), experiment="other"), str(data), db)))
    deadline = time.monotonic() + 10
    while queue.status(first).state != "running" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert queue.status(first).state == "running"
    assert queue.status(second).state == "queued" and queue.status(second).queue_position == 1
    queue.loader.gate.set()
    done = wait_for(queue, first)
    assert (done.state, done.n_done, done.n_total) == ("complete", 9, 9), done
    assert wait_for(queue, second).state == "complete"
    # The second job names the same model: it was not loaded again.
    assert queue.loader.calls == [str(tiny_llama_dir)]
    assert stored(db, "SELECT count(*), count(DISTINCT experiment_id) FROM runs") == [(4, 2)]
    assert [s.job_id for s in queue.statuses()] == [second, first]


def test_cancel_stops_after_the_batch_in_flight_and_the_same_settings_resume(queue, tiny_llama_dir, tmp_path):
    data = make_dataset(tmp_path / "d.jsonl", 30)
    db = tmp_path / "runs.duckdb"
    spec = JobSpec(ExperimentRequest(request(tiny_llama_dir, batch_size=1), str(data), db))
    job = queue.submit(spec)
    deadline = time.monotonic() + 30
    while queue.status(job).n_done < 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert queue.cancel(job)
    status = wait_for(queue, job)
    assert status.state == "cancelled" and "resume" in status.message
    kept = stored(db, "SELECT count(*) FROM generations")[0][0]
    assert 1 <= kept < 90  # what was committed stays; the rest was never generated
    assert stored(db, "SELECT DISTINCT status FROM runs") == [("failed",)]
    assert not queue.cancel(job)  # a finished job cannot be cancelled again

    # Batch size is not part of a run's identity: larger batches resume it faster.
    bigger = dataclasses.replace(spec.work, run=dataclasses.replace(spec.work.run, batch_size=32))
    again = wait_for(queue, queue.submit(dataclasses.replace(spec, work=bigger)))
    assert again.state == "complete" and again.n_done == 90 - kept, again
    assert stored(db, "SELECT count(*), count(DISTINCT (run_id, item_id)) FROM generations") == [(90, 90)]
    assert stored(db, "SELECT count(DISTINCT run_id) FROM runs") == [(3,)]


def test_a_queued_job_cancels_at_once(queue, tiny_llama_dir, tmp_path):
    data = make_dataset(tmp_path / "d.jsonl", 2)
    db = tmp_path / "runs.duckdb"
    queue.loader.gate.clear()
    first = queue.submit(JobSpec(ExperimentRequest(request(tiny_llama_dir), str(data), db)))
    second = queue.submit(JobSpec(ExperimentRequest(request(tiny_llama_dir, experiment="later"), str(data), db)))
    assert queue.cancel(second)
    assert queue.status(second).state == "cancelled" and queue.status(second).queue_position is None
    queue.loader.gate.set()
    assert wait_for(queue, first).state == "complete"
    assert stored(db, "SELECT count(DISTINCT experiment_id) FROM runs") == [(1,)]


def test_a_model_that_cannot_load_fails_in_one_line_and_writes_nothing(tmp_path, capsys):
    data = make_dataset(tmp_path / "d.jsonl", 2)
    db = tmp_path / "runs.duckdb"
    q = JobQueue()  # the real loader
    try:
        job = q.submit(JobSpec(ExperimentRequest(request(tmp_path / "no-such-model", hf_token="hf_secret_123"), str(data), db)))
        status = wait_for(q, job)
    finally:
        q.shutdown(timeout=30)
    assert status.state == "failed"
    assert "\n" not in status.message and "Traceback" not in status.message
    assert "no-such-model" in status.message
    assert not db.exists()
    # The token is gone from the job once the load was tried, and never in what the page sees.
    assert all("hf_secret_123" not in repr(s) for s in q.statuses())
    assert q._jobs[job].spec.request.hf_token is None
    assert "hf_secret_123" not in capsys.readouterr().err


def test_a_bad_dataset_fails_the_job_not_the_worker(queue, tiny_llama_dir, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "q", "answers": ["x"], "documents": [{"text": "t", "relevant": false}]}\n')
    db = tmp_path / "runs.duckdb"
    failed = wait_for(queue, queue.submit(JobSpec(ExperimentRequest(request(tiny_llama_dir), str(bad), db))))
    assert failed.state == "failed" and "no relevant document" in failed.message
    assert failed.message.startswith("bad.jsonl:line 1: ") and str(tmp_path) not in failed.message
    good = make_dataset(tmp_path / "d.jsonl", 2)
    assert wait_for(queue, queue.submit(JobSpec(ExperimentRequest(request(tiny_llama_dir), str(good), db)))).state == "complete"


def test_the_model_cache_frees_one_model_before_loading_another():
    loads = []

    def load(req):
        loads.append(req.model)
        return {"model": req.model}

    cache = ModelCache(load)
    a = RunRequest(model="a", modes=("vanilla",), prompt=PromptConfig())
    first = cache.get(a)
    assert cache.get(a) is first and loads == ["a"]
    cache.get(dataclasses.replace(a, model="b"))
    assert loads == ["a", "b"] and cache.loaded == "b"
    cache.get(dataclasses.replace(a, model="b", quantize="4bit"))  # other settings: another model
    assert loads == ["a", "b", "b"]


def test_a_study_grid_runs_as_one_job_through_the_same_use_case(queue, tiny_llama_dir, tmp_path):
    from engine.prompting.study import Grid
    from engine.usecases.study.study import StudyRequest

    data = make_dataset(tmp_path / "d.jsonl", 2)
    db = tmp_path / "runs.duckdb"
    grid = Grid(model=(str(tiny_llama_dir),), metadata=("gender", "race"), top_k=(None,),
                order=("ranked", "reversed"), few_shot=(0,), xai=("none",))
    study = StudyRequest(grid, request(tiny_llama_dir), str(data), db, name="grid")
    job = queue.submit(JobSpec(study))
    status = wait_for(queue, job, timeout=180)
    assert status.state == "complete", status
    assert "study grid (4 experiments)" in status.message
    # 2 x 2 configurations x 3 modes; each order's vanilla run generated once and copied once.
    assert stored(db, "SELECT count(*), count(*) FILTER (WHERE status = 'complete') FROM runs") == [(12, 12)]
    assert stored(db, "SELECT count(*), count(DISTINCT (run_id, item_id)) FROM generations") == [(24, 24)]
    assert stored(db, "SELECT count(*) FROM study_experiments") == [(4,)]
    assert (status.n_done, status.n_total) == (24, 24)
    assert queue.loader.calls == [str(tiny_llama_dir)]  # one model, loaded once for the grid
