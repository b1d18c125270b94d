"""Every job kind is held to the store quota (PATTRIEVAL_MAX_STORE_MB), before it is
queued, before it starts, and while it runs: a real worker, real runs on the tiny model, DuckDB.

The quotas are whole MB; here demo.quotas.MB is one byte, so that a few KB of the tiny model's
answers pass a quota."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo import quotas
from demo.job_specs import ExplainSpec, JobSpec
from demo.jobs import JobQueue
from demo.settings import AppSettings
from engine.errors import UserError
from engine.usecases.runs.run import ExperimentRequest
from tests.demo.test_jobs import request, stored, wait_for
from tests.support.helpers import make_dataset


@pytest.fixture
def queue(tiny_llama):
    q = JobQueue(load=lambda req: tiny_llama)
    yield q
    q.shutdown(timeout=30)


@pytest.fixture
def answered(queue, tiny_llama_dir, tmp_path) -> Path:
    """A store with one complete experiment of 3 answers (vanilla)."""
    db = tmp_path / "runs.duckdb"
    job = queue.submit(JobSpec(ExperimentRequest(request(tiny_llama_dir, modes=("vanilla",), experiment="first"), str(make_dataset(tmp_path / "d.jsonl", 3)), db)))
    assert wait_for(queue, job).state == "complete"
    return db


def test_a_run_that_passes_the_store_quota_stops_and_says_why(queue, answered, tiny_llama_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(quotas, "MB", 1)
    quota = quotas.store_bytes(answered) + 1  # anything the run commits passes it
    data = make_dataset(tmp_path / "big.jsonl", 40)
    job = queue.submit(JobSpec(ExperimentRequest(request(tiny_llama_dir, modes=("vanilla",), experiment="big", limit=None), str(data), answered), max_store_mb=quota))
    status = wait_for(queue, job)
    # Before: no check while a job runs, and it completed its 40 answers whatever the store held.
    assert status.state == "failed", status
    assert status.message.startswith("the store is at its quota here") and "\n" not in status.message
    assert "stopped" in status.message and status.message.endswith("what was stored is kept")
    assert str(tmp_path) not in status.message
    # Consistent: the run ended as failed (resumable), with whole batches only.
    runs = stored(answered, "SELECT r.status, (SELECT count(*) FROM generations g WHERE g.run_id = r.run_id) "
                            "FROM runs r JOIN experiments e USING (experiment_id) WHERE e.name = 'big'")
    assert [r[0] for r in runs] == ["failed"]
    assert runs[0][1] < 40 and runs[0][1] % 4 == 0
    assert stored(answered, "SELECT count(*) FROM runs WHERE status = 'running'") == [(0,)]


def test_jobs_of_every_kind_wait_for_room_when_the_store_is_full(queue, answered, tiny_llama_dir, tmp_path):
    full = quotas.store_bytes(answered) // (1024 * 1024)  # the store holds more than this many MB
    assert full >= 0
    settings = AppSettings(answered, max_store_mb=max(1, full))
    if quotas.store_bytes(answered) < settings.max_store_mb * 1024 * 1024:
        pytest.skip("the store is smaller than 1 MB")
    # A run of unknown size (no item bound: the desktop, a served model) is refused at submit...
    unknown = request(tiny_llama_dir, modes=("vanilla",), experiment="later", limit=None)
    with pytest.raises(UserError, match=r"^the store is at its quota here \(\d+ MB of \d+ MB\): no job may add"):
        quotas.check_store_quota(settings, unknown)
    # ... and every job kind queued meanwhile fails before it starts, in one line.
    run = queue.submit(JobSpec(ExperimentRequest(unknown, str(make_dataset(tmp_path / "e.jsonl", 2)), answered),
                               max_store_mb=settings.max_store_mb))
    run_ids = tuple(r for (r,) in stored(answered, "SELECT run_id FROM runs"))
    explain = queue.submit(ExplainSpec(run_ids, request(tiny_llama_dir, modes=("vanilla",)), answered,
                                       max_store_mb=settings.max_store_mb))
    for job in (run, explain):
        status = wait_for(queue, job)
        assert status.state == "failed" and status.message.startswith("the store is at its quota here"), status
    assert stored(answered, "SELECT count(*) FROM runs") == [(1,)]
    assert stored(answered, "SELECT count(*) FROM explanations") == [(0,)]


def test_explanations_are_held_to_the_job_quota_before_they_are_queued(answered, monkeypatch):
    from demo.handlers.explain import explain_spec

    settings = AppSettings(answered, max_job_mb=1)
    spec = explain_spec(settings, "first", None, scope="all")  # 3 explanations of ~90 KB: fit 1 MB
    assert spec.max_store_mb is None
    monkeypatch.setattr(quotas, "MB", 1)  # a job quota of one byte
    with pytest.raises(UserError) as refused:
        explain_spec(settings, "first", None, scope="all")
    line = str(refused.value)
    # Before: explanations were queued whatever their size.
    assert line.startswith("this job would store about ") and "(3 answers at ~" in line and "\n" not in line
    assert str(answered) not in line


def test_an_explanation_row_is_estimated_from_its_prompt_and_tokens():
    assert quotas.estimate_explanation_bytes(256) == quotas.EXPLANATION_FIXED_BYTES + 256 * 288
