"""Bounds that hold across sessions. Sessions are free (one gradio_client each), so
10 sessions of one client filled the 20-job queue, and 8 kept the SQL console busy for everyone.
Now jobs are capped per client address, the queue serves clients round-robin (fewest jobs
started first), and the SQL console admits one query per address."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from demo.fairness import round_robin
from demo.job_specs import JobSpec
from demo.jobs import JobQueue, QueueFull
from demo.settings import AppSettings, settings_from_env
from demo.visitors import client_key, fair_key
from engine.usecases.runs.run import ExperimentRequest
from tests.demo.handlers.test_sql_visitors import SLOW, build_store, refuse_load
from tests.demo.test_jobs import make_dataset, request, wait_for
from tests.support.app_server import served

SPACE = dict(operator_view=False, trust_forwarded_for=True)


def _request(session: str, host: str = "10.0.0.1", forwarded: str | None = None):
    headers = {"x-forwarded-for": forwarded} if forwarded else {}
    return SimpleNamespace(session_hash=session, headers=headers, client=SimpleNamespace(host=host))


def test_the_client_is_the_appended_forwarded_address_on_a_space_and_the_peer_elsewhere(tmp_path):
    space = AppSettings(tmp_path / "x.duckdb", **SPACE)
    # Behind HF's proxy the socket's peer is the proxy; the visitor is the address it appended,
    # the header's last (what came before is the visitor's to write: tests/demo/test_forwarded_for.py).
    assert client_key(_request("s1", forwarded="10.16.0.2, 203.0.113.7"), space) == "client:203.0.113.7"
    assert client_key(_request("s2", forwarded="203.0.113.7"), space) == "client:203.0.113.7"
    # Where no proxy rewrites it, anyone may write the header: the peer counts.
    direct = AppSettings(tmp_path / "x.duckdb", operator_view=False)
    assert client_key(_request("s1", host="198.51.100.4", forwarded="1.2.3.4"), direct) == "client:198.51.100.4"
    # Many sessions, one client: one key for the SQL console and the download bounds.
    assert fair_key(_request("s1"), direct) == fair_key(_request("s2"), direct) == "client:10.0.0.1"
    # The operator's tabs stay apart (the desktop): keyed by session.
    desktop = AppSettings(tmp_path / "x.duckdb")
    assert client_key(_request("s1"), desktop) is None
    assert fair_key(_request("s1"), desktop) != fair_key(_request("s2"), desktop)


def test_a_space_trusts_the_forwarded_header_and_caps_each_address(monkeypatch, tmp_path):
    for name in ("PATTRIEVAL_TRUST_FORWARDED_FOR", "PATTRIEVAL_MAX_JOBS_PER_CLIENT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    desktop = settings_from_env(str(tmp_path / "x.duckdb"))
    assert not desktop.trust_forwarded_for and desktop.max_jobs_per_client is None
    monkeypatch.setenv("SPACE_ID", "someone/pattrieval")
    space = settings_from_env(str(tmp_path / "x.duckdb"))
    assert space.trust_forwarded_for and space.max_jobs_per_client == 5
    monkeypatch.setenv("PATTRIEVAL_MAX_JOBS_PER_CLIENT", "2")
    assert settings_from_env(str(tmp_path / "x.duckdb")).max_jobs_per_client == 2


def test_round_robin_serves_the_client_with_the_fewest_jobs_first():
    queued = [("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1"), ("c", "c1"), ("b", "b2")]
    assert round_robin(queued, {}) == ["a1", "b1", "c1", "a2", "b2", "a3"]
    # A client that has had jobs started waits behind those who have had none.
    assert round_robin(queued, {"a": 2}) == ["b1", "c1", "b2", "a1", "a2", "a3"]
    assert round_robin([(None, "op"), ("a", "a1")], {None: 1}) == ["a1", "op"]


class _Held:
    """A loader that holds each load until released, records which experiment asked, then fails
    (the order is what these tests look at, not the answers)."""

    def __init__(self):
        self.gate, self.order = threading.Event(), []

    def __call__(self, req):
        self.order.append(req.experiment)
        self.gate.wait(30)
        raise RuntimeError("not loaded in this test")


def test_the_worker_takes_turns_between_clients(tiny_llama_dir, tmp_path, capsys):
    held = _Held()
    jobs = JobQueue(load=held)
    data = str(make_dataset(tmp_path / "d.jsonl", 1))

    def spec(name):
        return JobSpec(ExperimentRequest(request(tiny_llama_dir, modes=("vanilla",), experiment=name), data, tmp_path / "x.duckdb"))

    try:
        ids = {}
        for name, session, client in (("a1", "s1", "A"), ("a2", "s2", "A"), ("a3", "s3", "A"), ("b1", "s4", "B")):
            ids[name] = jobs.submit(spec(name), f"session:{session}", client=f"client:{client}")
            if name == "a1":
                deadline = time.monotonic() + 30
                while not held.order and time.monotonic() < deadline:  # a1 holds the worker
                    time.sleep(0.02)
        # Before: first come, first served; B's one job waited behind A's burst (position 3).
        assert jobs.status(ids["b1"]).queue_position == 1
        assert jobs.status(ids["a2"]).queue_position == 2
        held.gate.set()
        for job_id in ids.values():
            wait_for(jobs, job_id)
        assert held.order == ["a1", "b1", "a2", "a3"]
    finally:
        held.gate.set()
        jobs.shutdown(timeout=30)
    capsys.readouterr()  # the loader's deliberate failures go to the server's log


@pytest.mark.slow  # an app and five gradio_client sessions (~12 s)
def test_many_sessions_of_one_client_cannot_fill_the_queue(tiny_llama_dir, tmp_path):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    held = _Held()
    settings = AppSettings(tmp_path / "app.duckdb", operator_view=False, max_jobs_per_visitor=3,
                           max_jobs_per_client=3, max_queued_jobs=20)
    form = (str(tiny_llama_dir), None, "gender", "", "", "", ["vanilla"], "none", 2, 4, 2)
    with served(settings, JobQueue(load=held), shutdown_timeout=30) as url:
        sessions = [Client(url, verbose=False) for _ in range(5)]  # 5 sessions, one address
        for i, client in enumerate(sessions[:3]):
            client.predict(*form, f"s{i}", "", api_name="/run_batch")
        # Before: each fresh session got its own 3 jobs, and 10 of them filled the queue.
        for client in sessions[3:]:
            with pytest.raises(AppError, match="your address already has 3 jobs queued or running"):
                client.predict(*form, "more", "", api_name="/run_batch")
        held.gate.set()


def test_the_per_client_cap_counts_only_unfinished_jobs(tiny_llama, tiny_llama_dir, tmp_path):
    jobs = JobQueue(load=lambda r: tiny_llama)
    data = str(make_dataset(tmp_path / "d.jsonl", 1))
    spec = JobSpec(ExperimentRequest(request(tiny_llama_dir, modes=("vanilla",), max_new_tokens=1), data, tmp_path / "x.duckdb"))
    try:
        first = jobs.submit(spec, "session:a", client="client:x", max_per_client=1)
        with pytest.raises(QueueFull, match="your address"):
            jobs.submit(spec, "session:b", client="client:x", max_per_client=1)
        jobs.submit(spec, "session:c", client="client:y", max_per_client=1)  # another address
        assert wait_for(jobs, first).state == "complete"
        jobs.submit(spec, "session:b", client="client:x", max_per_client=1)
    finally:
        jobs.shutdown(timeout=30)


@pytest.mark.slow  # one deliberately slow query (up to its 10 s limit)
def test_sessions_of_one_client_share_one_sql_query(tmp_path):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    db = build_store(tmp_path / "store.duckdb")
    with served(AppSettings(db, operator_view=False), JobQueue(load=refuse_load)) as url:
        hog, second = Client(url, verbose=False), Client(url, verbose=False)
        slow = hog.submit(SLOW, api_name="/sql")
        time.sleep(1.5)  # the hog's query holds a slot
        # Before: keyed by session, every new session got a query of its own (8 filled the console).
        with pytest.raises(AppError, match="your previous query is still running"):
            second.predict("SELECT 1 AS one", api_name="/sql")
        try:
            slow.result(timeout=60)
        except AppError:
            pass  # the slow query's own time limit
