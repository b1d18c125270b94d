"""Each visitor's jobs are that visitor's, the queue is capped, the operator's
bounds hold on the server, cancel is heard within seconds, and the operator's HF_TOKEN never
reaches a visitor's load of a model outside the operator's allowlist."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import replace

import pytest

from demo.handlers.run import RunForm, build_run_request, cancel_run, run_status
from demo.job_specs import JobSpec
from demo.jobs import JobQueue, QueueFull
from demo.settings import SPACE_MODELS, AppSettings, settings_from_env
from engine.errors import RunCancelled, UserError
from engine.usecases.runs.run import ExperimentRequest
from tests.demo.test_jobs import make_dataset, request, stored, wait_for
from tests.support.app_server import served

JOB_ID = re.compile(r"^job-[A-Za-z0-9_-]{16}$")


def _space(db, **changes) -> AppSettings:
    """What a Space gets by default (settings_from_env with SPACE_ID), on a test's store."""
    base = AppSettings(db, allow_local_paths=False, allowed_models=SPACE_MODELS, operator_view=False,
                       operator_token_models=SPACE_MODELS, max_new_tokens=512, max_top_logprobs=5,
                       max_jobs_per_visitor=3, max_queued_jobs=20)
    return replace(base, **changes)


class GatedLoader:
    """Holds every load until `gate` is set; records the requests it was given."""

    def __init__(self, model):
        self.model, self.gate, self.requests = model, threading.Event(), []

    def __call__(self, req):
        self.requests.append(req)
        self.gate.wait(60)
        return self.model


# ---------------------------------------------------------------- two visitors, one queue

def test_two_visitors_see_and_cancel_only_their_own_jobs_through_the_api(tmp_path, tiny_llama, tiny_llama_dir):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    loader = GatedLoader(tiny_llama)
    # Visitors, not the operator; local paths on so that the tiny model's folder can be named.
    settings = AppSettings(tmp_path / "app.duckdb", operator_view=False, max_jobs_per_visitor=2, max_queued_jobs=2)
    form = (str(tiny_llama_dir), None, "gender", "", "", "", ["vanilla"], "none", 2, 4, 2)
    with served(settings, JobQueue(load=loader), shutdown_timeout=30) as url:
        alice, bob, carol = (Client(url, verbose=False) for _ in range(3))
        first, _ = alice.predict(*form, "a1", "", api_name="/run_batch")
        second, _ = alice.predict(*form, "a2", "", api_name="/run_batch")
        assert JOB_ID.match(first) and JOB_ID.match(second)  # not job-1, job-2: nothing to guess
        with pytest.raises(AppError, match="you already have 2 jobs queued or running"):
            alice.predict(*form, "a3", "", api_name="/run_batch")

        # Bob names Alice's job, or none: he sees nothing of hers and cannot cancel it.
        assert bob.predict(first, api_name="/run_status")["data"] == []
        assert bob.predict("", api_name="/run_status")["data"] == []
        assert bob.predict(first, api_name="/cancel_run") == f"no job '{first}'"
        mine = alice.predict("", api_name="/run_status")
        assert [r[0] for r in mine["data"]] == [second, first]
        assert dict(zip(mine["headers"], mine["data"][1], strict=True))["state"] == "running"

        # The queue in all: Alice's second job and Bob's wait; Carol's is one too many.
        bobs, _ = bob.predict(*form, "b1", "", api_name="/run_batch")
        with pytest.raises(AppError, match="the queue is full"):
            carol.predict(*form, "c1", "", api_name="/run_batch")
        assert [r[0] for r in bob.predict("", api_name="/run_status")["data"]] == [bobs]

        # Alice cancels her running job (held in its model load): heard at the next step.
        assert alice.predict(first, api_name="/cancel_run") == f"{first}: cancelling"
        assert alice.predict(second, api_name="/cancel_run") == f"{second}: cancelled"
        assert bob.predict(bobs, api_name="/cancel_run") == f"{bobs}: cancelled"
        loader.gate.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            row = dict(zip(mine["headers"], alice.predict(first, api_name="/run_status")["data"][0], strict=True))
            if row["state"] != "running":
                break
            time.sleep(0.1)
        assert row["state"] == "cancelled", row


def test_the_operator_sees_and_cancels_every_visitors_job(tiny_llama, tiny_llama_dir, tmp_path):
    loader = GatedLoader(tiny_llama)
    jobs = JobQueue(load=loader)
    data = str(make_dataset(tmp_path / "d.jsonl", 2))
    try:
        a = jobs.submit(JobSpec(ExperimentRequest(request(tiny_llama_dir), data, tmp_path / "x.duckdb")), "session:a")
        b = jobs.submit(JobSpec(ExperimentRequest(request(tiny_llama_dir), data, tmp_path / "x.duckdb")), "session:b")
        assert [r["job"] for r in run_status(jobs, None, None)] == [b, a]  # None: the operator
        assert [r["job"] for r in run_status(jobs, None, "session:a")] == [a]
        assert run_status(jobs, b, "session:a") == []
        assert cancel_run(jobs, b, "session:a") == f"no job '{b}'"
        assert cancel_run(jobs, b, None) == f"{b}: cancelled"
    finally:
        loader.gate.set()
        jobs.shutdown(timeout=30)


def test_the_per_visitor_cap_counts_only_unfinished_jobs(tiny_llama, tiny_llama_dir, tmp_path):
    jobs = JobQueue(load=lambda r: tiny_llama)
    data = str(make_dataset(tmp_path / "d.jsonl", 1))
    spec = JobSpec(ExperimentRequest(request(tiny_llama_dir, modes=("vanilla",), max_new_tokens=1), data, tmp_path / "x.duckdb"))
    try:
        first = jobs.submit(spec, "session:a", max_per_owner=1)
        with pytest.raises(QueueFull):
            jobs.submit(spec, "session:a", max_per_owner=1)
        assert wait_for(jobs, first).state == "complete"
        jobs.submit(spec, "session:a", max_per_owner=1)  # the first one finished: room again
    finally:
        jobs.shutdown(timeout=30)


def test_a_space_refuses_more_new_tokens_and_top_log_probs_than_the_operator_allows(tmp_path):
    settings = _space(tmp_path / "x.duckdb")
    with pytest.raises(UserError, match="max new tokens is at most 512 here, not 4000"):
        build_run_request(settings, RunForm(model="smoke", max_new_tokens=4000))
    with pytest.raises(UserError, match="top log-probs is at most 5 here, not 20"):
        build_run_request(settings, RunForm(model="smoke", top_logprobs=20))
    ok = build_run_request(settings, RunForm(model="smoke", max_new_tokens=512, top_logprobs=5, limit=10**6))
    assert ok.max_new_tokens == 512 and ok.top_logprobs == 5
    assert ok.limit == 10**6 or settings.max_items is None
    capped = build_run_request(replace(settings, max_items=7), RunForm(model="smoke", limit=None))
    assert capped.limit == 7


def test_a_space_gets_bounds_and_the_paper_models_by_default(monkeypatch, tmp_path):
    for name in ("PATTRIEVAL_ALLOWED_MODELS", "PATTRIEVAL_OPERATOR", "PATTRIEVAL_MAX_NEW_TOKENS",
                 "PATTRIEVAL_MAX_ITEMS", "PATTRIEVAL_LOCAL_PATHS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPACE_ID", "someone/pattrieval")
    space = settings_from_env(str(tmp_path / "x.duckdb"))
    assert space.allowed_models == space.operator_token_models == SPACE_MODELS
    assert set(SPACE_MODELS) == {"mistralai/Mistral-7B-Instruct-v0.3", "openchat/openchat-3.6-8b-20240522",
                                 "meta-llama/Meta-Llama-3-8B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"}
    assert not space.operator_view and space.max_new_tokens and space.max_jobs_per_visitor and space.max_queued_jobs
    assert space.max_items and space.max_top_logprobs is not None
    monkeypatch.setenv("PATTRIEVAL_ALLOWED_MODELS", "*")  # any Hub id; the token still only for the default list
    anything = settings_from_env(str(tmp_path / "x.duckdb"))
    assert anything.allowed_models is None and anything.operator_token_models == SPACE_MODELS
    monkeypatch.setenv("PATTRIEVAL_OPERATOR", "1")
    assert settings_from_env(str(tmp_path / "x.duckdb")).operator_view
    monkeypatch.setenv("PATTRIEVAL_MAX_NEW_TOKENS", "lots")
    with pytest.raises(UserError, match="PATTRIEVAL_MAX_NEW_TOKENS must be a whole number"):
        settings_from_env(str(tmp_path / "x.duckdb"))
    monkeypatch.delenv("SPACE_ID")
    monkeypatch.delenv("PATTRIEVAL_MAX_NEW_TOKENS")
    monkeypatch.delenv("PATTRIEVAL_OPERATOR")
    monkeypatch.delenv("PATTRIEVAL_ALLOWED_MODELS")
    desktop = settings_from_env(str(tmp_path / "x.duckdb"))
    assert desktop.operator_view and desktop.operator_token_models is None and desktop.max_new_tokens is None


# ---------------------------------------------------------------- cancel within seconds

class StopAfter:
    """should_stop that says yes from its n-th call on."""

    def __init__(self, n: int):
        self.n, self.calls = n, 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls >= self.n


def _plan(tmp_path, tiny_llama_dir, n_items):
    from engine.datasets.data import load_dataset
    from engine.running.planner import plan_experiment
    from store.run_store import RunStore

    data = load_dataset(str(make_dataset(tmp_path / "d.jsonl", n_items)))
    sink = RunStore(tmp_path / "runs.duckdb")
    return plan_experiment(data, request(tiny_llama_dir, modes=("vanilla",), batch_size=4), sink), sink


def test_cancel_is_heard_while_the_items_are_stored(tmp_path, tiny_llama, tiny_llama_dir):
    from engine.running.runner import execute_plan

    plan, sink = _plan(tmp_path, tiny_llama_dir, 1200)
    with pytest.raises(RunCancelled, match="storing the dataset's items"):
        execute_plan(plan, tiny_llama, sink, should_stop=StopAfter(2))
    db = tmp_path / "runs.duckdb"
    # One chunk of items stored (kept for the resume), no run claimed, nothing generated.
    assert stored(db, "SELECT count(*) FROM items") == [(500,)]
    assert stored(db, "SELECT count(*) FROM runs") == [(0,)]


def test_cancel_is_heard_while_the_first_batch_is_planned(tmp_path, tiny_llama, tiny_llama_dir):
    from engine.running.runner import execute_plan

    plan, sink = _plan(tmp_path, tiny_llama_dir, 1200)
    # 3 item chunks + the check before the claim, then every 500 prompts built.
    with pytest.raises(RunCancelled, match="planning the first batch"):
        execute_plan(plan, tiny_llama, sink, should_stop=StopAfter(5))
    db = tmp_path / "runs.duckdb"
    assert stored(db, "SELECT status FROM runs") == [("failed",)]  # resumable, not left running
    assert stored(db, "SELECT count(*) FROM generations") == [(0,)]


def test_cancel_cuts_a_batch_short_and_writes_none_of_it(tiny_llama):
    from engine.generation.generate import GenerationConfig, generate_batch

    asked = StopAfter(3)  # two decoding steps, then the cancel
    started = time.monotonic()
    with pytest.raises(RunCancelled, match="during a batch"):
        generate_batch(tiny_llama, [[1, 2, 3, 4]], GenerationConfig(max_new_tokens=4000), asked)
    assert asked.calls <= 5 and time.monotonic() - started < 5


def test_a_running_job_is_cancelled_within_seconds_before_its_first_batch(tiny_llama, tiny_llama_dir, tmp_path):
    """The red team's 592k-item upload, scaled down: the job plans 3 x 6,000 prompts before its
    first batch; a cancel must not wait for that (before: it waited for the whole plan and batch)."""
    jobs = JobQueue(load=lambda r: tiny_llama)
    data = str(make_dataset(tmp_path / "d.jsonl", 6000))
    db = tmp_path / "runs.duckdb"
    try:
        job = jobs.submit(JobSpec(ExperimentRequest(request(tiny_llama_dir, batch_size=64, max_new_tokens=64), data, db)))
        deadline = time.monotonic() + 60
        while jobs.status(job).message != "generating" and time.monotonic() < deadline:
            time.sleep(0.01)
        asked = time.monotonic()
        assert jobs.cancel(job)
        status = wait_for(jobs, job, timeout=60)
        took = time.monotonic() - asked
    finally:
        jobs.shutdown(timeout=60)
    assert status.state == "cancelled", status
    assert took < 3.0, f"cancel took {took:.1f} s"
    # At most the batch in flight is kept. A cancel that lands before the runs are claimed leaves
    # no store at all (nothing is written half-way), which holds as well.
    assert not db.exists() or stored(db, "SELECT count(*) FROM generations")[0][0] <= 64


# ---------------------------------------------------------------- the operator's token

def test_a_visitor_without_a_token_never_gets_the_operators_token(monkeypatch, tmp_path):
    """Through the loader itself: what reaches from_pretrained is no token at all (False)."""
    import transformers

    from engine.running.run_request import load_model_for

    monkeypatch.setenv("HF_TOKEN", "hf_operator_secret")
    seen: list = []

    def record(model_id, *args, token=None, **kwargs):
        seen.append((model_id, token))
        raise OSError(f"{model_id} is not reachable from the tests")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", record)
    # The tests run offline, where the name pre-check refuses an uncached id before any load;
    # what is tested here is the token the load itself sends (the pre-check sends none).
    monkeypatch.setattr("engine.generation.model_check.check_model_name", lambda *a, **k: None)
    settings = _space(tmp_path / "x.duckdb")
    visitor = build_run_request(replace(settings, allowed_models=None), RunForm(model="someone/private-model"))
    assert visitor.hf_token is None and not visitor.environment_token
    with pytest.raises(OSError, match="not reachable from the tests"):
        load_model_for(replace(visitor, quantize="none", device="cpu"))
    assert seen == [("someone/private-model", False)]

    # The operator's own allowlist: their token serves it.
    paper = build_run_request(settings, RunForm(model="meta-llama/Meta-Llama-3-8B-Instruct"))
    with pytest.raises(OSError, match="not reachable from the tests"):
        load_model_for(replace(paper, quantize="none", device="cpu"))
    assert seen[-1] == ("meta-llama/Meta-Llama-3-8B-Instruct", "hf_operator_secret")

    # A token the visitor typed serves their load, whatever the model.
    typed = build_run_request(replace(settings, allowed_models=None),
                              RunForm(model="someone/private-model", hf_token=" hf_visitor "))
    with pytest.raises(OSError, match="not reachable from the tests"):
        load_model_for(replace(typed, quantize="none", device="cpu"))
    assert seen[-1] == ("someone/private-model", "hf_visitor")
    assert "hf_operator_secret" not in repr(typed) and "hf_visitor" not in repr(typed)


def test_the_worker_hands_a_visitors_load_no_token_and_keeps_models_apart_by_access(tiny_llama, tmp_path,
                                                                                    monkeypatch):
    """Through the app's queue: the request the loader gets carries no token and refuses the
    environment's; a model another visitor's token opened is loaded again for a visitor without it."""
    monkeypatch.setenv("HF_TOKEN", "hf_operator_secret")
    loads: list = []

    def loader(req):
        loads.append((req.model, req.hf_token, req.environment_token))
        return tiny_llama

    jobs = JobQueue(load=loader)
    settings = _space(tmp_path / "x.duckdb", allowed_models=None)
    try:
        for token in ("hf_visitor_a", "", ""):
            req = build_run_request(settings, RunForm(model="someone/gated", hf_token=token, modes=("vanilla",)))
            jobs.models.get(req)
    finally:
        jobs.shutdown(timeout=5)
    assert loads == [("someone/gated", "hf_visitor_a", False), ("someone/gated", None, False)]
