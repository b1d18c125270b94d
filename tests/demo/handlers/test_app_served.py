"""The Run tab's "server" backend (an OpenAI-compatible server), as plain handler calls (no
browser): a form becomes the use case's ServerOptions, for one run or a grid; the desktop only;
the key's variable NAME only; the server is asked at Start, so a dead URL, a wrong key or an
unknown model is one line and nothing is queued or written; /run_batch keeps its positional
inputs. The slow tests run through the job queue against llama.cpp's server (tests/support/served_server.py).
"""

from __future__ import annotations

import json
from dataclasses import replace

import duckdb
import pytest

from demo.handlers.grid import build_study_request, plan_run, ray_options, run_form, server_options
from demo.handlers.run import RunForm, build_run_request
from demo.jobs import JobQueue
from demo.settings import AppSettings, settings_from_env
from engine.errors import UserError
from engine.usecases.served import ServerOptions
from tests.support.helpers import wait_for_job
from tests.support.served_server import API_KEY, free_port, key_env

# Two short answers on two documents, as tests/engine/running/test_served_cli.py runs them (one shared CPU core).
SERVED = RunForm(model="smollm2", backend="server", base_url="http://127.0.0.1:9/v1", modes=("vanilla",),
                 top_k=2, skip_invalid=True, limit=2, max_new_tokens=8, top_logprobs=2, batch_size=2,
                 api_key_env="PATTRIEVAL_APP_TEST_KEY", concurrency=2, request_timeout=60.0)



def test_a_server_form_becomes_the_use_cases_server_options(tmp_path):
    settings = AppSettings(tmp_path / "db.duckdb")
    options = server_options(settings, SERVED)
    assert options == ServerOptions(base_url="http://127.0.0.1:9/v1", model="smollm2", tokenizer=None, concurrency=2,
                                    api_key_env="PATTRIEVAL_APP_TEST_KEY", timeout=60.0)
    assert ray_options(settings, SERVED) is None
    assert server_options(settings, RunForm()) is None and server_options(settings, RunForm(backend="ray")) is None
    assert server_options(settings, replace(SERVED, tokenizer=" tok/dir ", api_key_env="")).tokenizer == "tok/dir"
    assert server_options(settings, replace(SERVED, api_key_env="")).api_key_env is None
    # The model box names the served model; the request is the form's, as `run --backend server`.
    assert build_run_request(settings, SERVED).model == "smollm2"
    # A grid: the model box's list are the served names, the study carries the options.
    grid = replace(SERVED, model="smollm2,other", study="served-grid")
    study = build_study_request(settings, grid)
    assert study.grid.model == ("smollm2", "other") and study.ray is None
    assert study.server.base_url == "http://127.0.0.1:9/v1" and study.server.concurrency == 2
    # Left empty, the requests in flight fit the server (engine.running.served_flow), as on the CLI: a
    # fixed 8 queued past the request timeout on llama.cpp's one-slot server.
    assert RunForm().concurrency is None
    assert server_options(settings, replace(SERVED, concurrency=None)).concurrency is None


def test_the_plan_of_a_server_grid_asks_no_server(tmp_path):
    # Port 9 answers nobody: the plan is the use case's, nothing is asked or written.
    head, rows = plan_run(AppSettings(tmp_path / "db.duckdb"), replace(SERVED, model="smollm2,other", study="sg"))
    assert head.startswith("study sg: 2 configurations (2 model)") and [r[1] for r in rows[:2]] == ["smollm2", "other"]
    assert not (tmp_path / "db.duckdb").exists()


@pytest.mark.parametrize("changes, message", [
    ({"api_key_env": "sk-abc123-the-key-itself"},
     "the API key's environment variable takes the NAME of an environment variable"),
    ({"base_url": " "}, "the backend server needs the server base URL"),
    ({"model": "smoke"}, "the backend server needs the model: the model name the server serves"),
    ({"concurrency": 0}, "requests in flight must be at least 1"),
    ({"request_timeout": 0.0}, "the request timeout must be a number of seconds above 0"),
    ({"backend": "cluster"}, "unknown backend 'cluster' (choose from local, ray, server)"),
])
def test_a_bad_server_form_is_refused_in_one_line_before_anything_is_asked(tmp_path, changes, message):
    jobs = JobQueue()
    try:
        for form in (replace(SERVED, **changes), replace(SERVED, study="g", **changes)):
            with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
                run_form(jobs, AppSettings(tmp_path / "db.duckdb"), form)
            assert "\n" not in str(err.value) and "sk-abc123" not in str(err.value)
        assert not jobs.statuses(None)
    finally:
        jobs.shutdown(timeout=10)
    assert not (tmp_path / "db.duckdb").exists()


def test_a_space_and_share_offer_no_server(tmp_path, monkeypatch):
    monkeypatch.setenv("SPACE_ID", "someone/pattrieval")
    space = settings_from_env(str(tmp_path / "db.duckdb"))
    assert not space.allow_server
    for form in (SERVED, replace(SERVED, study="g")):
        with pytest.raises(UserError, match="the server backend is offered only by the desktop app; choose local"):
            run_form(JobQueue(), space, form)
    monkeypatch.delenv("SPACE_ID")
    assert not settings_from_env(str(tmp_path / "db.duckdb"), share=True).allow_server
    assert settings_from_env(str(tmp_path / "db.duckdb")).allow_server


def test_an_unreachable_server_is_refused_at_start_in_one_line_and_nothing_is_written(tmp_path):
    jobs = JobQueue(load=lambda request: pytest.fail("a served run loads no model"))
    dead = replace(SERVED, base_url=f"http://127.0.0.1:{free_port()}/v1", api_key_env="")
    try:
        for form in (dead, replace(dead, model="smollm2,other", study="g")):
            with pytest.raises(UserError, match="no server answers at http://127.0.0.1:") as err:
                run_form(jobs, AppSettings(tmp_path / "db.duckdb"), form)
            assert "\n" not in str(err.value)
        assert not jobs.statuses(None)
    finally:
        jobs.shutdown(timeout=10)
    assert not (tmp_path / "db.duckdb").exists()


def test_the_run_batch_api_keeps_its_positional_inputs_and_takes_the_server_ones_last(tmp_path):
    from gradio_client import Client

    from tests.support.app_server import refuse_load, served

    jobs = JobQueue(load=refuse_load)
    with served(AppSettings(tmp_path / "app.duckdb"), jobs, shutdown_timeout=10) as url:
        client = Client(url, verbose=False)
        names = [p["parameter_name"] for p in client.view_api(print_info=False, return_format="dict")
                 ["named_endpoints"]["/run_batch"]["parameters"]]
        # The 30 inputs before the server's, in their order, then the server's five, then the
        # battery's three, each added at the end so older positional calls still work.
        assert names[25:] == ["study", "backend", "ray_address", "actors", "gpus_per_actor", "base_url", "tokenizer",
                              "concurrency", "api_key_env", "request_timeout", "relevant_at", "repetition",
                              "label_scope"]
        old = ["smollm2", None, "gender", "", "", "", ["vanilla"], "none", 1, 4, 2, "", "", "all", "ranked", 0,
               "none", False, 1.0, 1.0, 0, 0, 0, True, None, "", "server", "", 1, ""]
        # Every older call still works: without the server's inputs, the URL is missing.
        with pytest.raises(Exception, match="the backend server needs the server base URL"):
            client.predict(*old, api_name="/run_batch")
        with pytest.raises(Exception, match="the API key's environment variable takes the NAME of an environment"):
            client.predict(*old, "http://127.0.0.1:9/v1", "", 2, "sk-abc123-the-key-itself", 30,
                           api_name="/run_batch")
        dead = f"http://127.0.0.1:{free_port()}/v1"
        with pytest.raises(Exception, match="no server answers at"):
            client.predict(*old, dead, "", 2, "", 30, api_name="/run_batch")
        head, table = client.predict(*old[:2], "gender,race", *old[3:], dead, "", 2, "", 30, api_name="/plan_run")
        assert "2 configurations" in head and len(table["data"]) == 3
        assert not jobs.statuses(None)
    assert not (tmp_path / "app.duckdb").exists()


# ---------------------------------------------------------------- against a real server


@pytest.mark.slow
def test_a_served_run_from_the_form_completes_through_the_job_queue(server, tmp_path, monkeypatch):
    env = key_env(monkeypatch, API_KEY, "PATTRIEVAL_APP_TEST_KEY")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings = AppSettings(tmp_path / "db.duckdb")
    jobs = JobQueue(load=lambda request: pytest.fail("a served run loads no model"))
    form = replace(SERVED, model=server.model, base_url=server.base_url, api_key_env=env)
    try:
        # A wrong key and an unknown model: one line at Start, nothing queued or written.
        monkeypatch.setenv("PATTRIEVAL_APP_WRONG_KEY", "sk-wrong")
        with pytest.raises(UserError, match="refused the API key") as err:
            run_form(jobs, settings, replace(form, api_key_env="PATTRIEVAL_APP_WRONG_KEY"))
        assert "\n" not in str(err.value) and "sk-wrong" not in str(err.value)
        with pytest.raises(UserError, match="unknown model 'nobody'"):
            run_form(jobs, settings, replace(form, model="nobody"))
        assert not jobs.statuses(None) and not settings.db_path.exists()
        status = wait_for_job(jobs, run_form(jobs, settings, form), 300)
    finally:
        jobs.shutdown(timeout=30)
    assert status.state == "complete", status.message
    assert (status.n_done, status.n_total) == (2, 2) and status.model == server.model
    with duckdb.connect(str(settings.db_path), read_only=True) as con:
        generations = con.execute("SELECT answer, len(tokens), len(logprobs), top_logprobs IS NOT NULL "
                                  "FROM generations").fetchall()
        [(model, quantization, config)] = con.execute("SELECT model, quantization, config_json FROM runs").fetchall()
        everything = repr(con.execute("SELECT * FROM runs").fetchall())
    assert len(generations) == 2
    assert all(n_tokens and n_tokens == n_logprobs and has_top for _, n_tokens, n_logprobs, has_top in generations)
    assert (model, quantization) == (server.model, "server")
    served = json.loads(config)["served"]
    assert served["base_url"] == server.base_url and served["requested_model"] == server.model
    assert served["logprobs_returned"] is True and served["completion_tokens"] > 0
    assert API_KEY not in everything and API_KEY not in status.message
