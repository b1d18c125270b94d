"""The app through its public API, as a script would use it: launched for real, driven by gradio_client."""

from __future__ import annotations

import time

import duckdb
import pytest

from demo.handlers.bias import bias_table
from demo.handlers.run import RunForm, cancel_run, run_batch
from demo.jobs import JobQueue
from demo.settings import AppSettings
from engine.errors import UserError
from tests.support.app_server import served

API_NAMES = ("/run_batch", "/run_status", "/cancel_run", "/runs", "/bias_table", "/query_detail")



@pytest.fixture
def launched(tmp_path, tiny_llama):
    db = tmp_path / "app.duckdb"
    with served(AppSettings(db), JobQueue(load=lambda request: tiny_llama), shutdown_timeout=30) as url:
        yield url, db


def test_a_run_started_through_the_api_is_stored_and_listed(launched, tiny_llama_dir):
    from gradio_client import Client

    url, db = launched
    client = Client(url, verbose=False)
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert set(API_NAMES) <= set(endpoints)

    job_id, token_box = client.predict(
        str(tiny_llama_dir), None, "gender", "", "", "", ["vanilla", "base", "cf"], "none", 2, 4, 2, "api-run",
        "hf_do_not_echo", api_name="/run_batch",
    )
    assert job_id.startswith("job-") and token_box == ""  # the token is never sent back
    deadline = time.monotonic() + 120
    while True:
        table = client.predict(job_id, api_name="/run_status")
        row = dict(zip(table["headers"], table["data"][0], strict=True))
        if row["state"] in ("complete", "failed", "cancelled") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert (row["state"], row["progress"]) == ("complete", "6/6"), row
    assert "hf_do_not_echo" not in str(table)
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM generations").fetchone() == (6,)
    finally:
        con.close()
    runs = client.predict(1, "", "", api_name="/runs")
    assert [r[1] for r in runs["data"]] == ["api-run"]
    assert client.predict(job_id, api_name="/cancel_run") == f"{job_id} is already complete"
    summary, results, confidence, *tables_and_plots = client.predict("api-run", api_name="/bias_table")
    assert row["experiment"] in summary and "label A = Woman" in summary
    columns = [dict(zip(results["headers"], r, strict=True)) for r in results["data"]]
    assert [(r["measure"], r["metric"]) for r in columns] == [(m, k) for m in ("CAS", "CAB") for k in ("precision", "recall", "f1")]
    assert len(confidence["data"]) == 6
    html, metrics = client.predict("api-run", "nq-001", api_name="/query_detail")
    assert "who wrote the novel pride and prejudice" in html and len(metrics["data"]) == 3


def test_the_handlers_refuse_in_one_line(tmp_path):
    jobs = JobQueue(load=lambda request: pytest.fail("nothing may load"))
    try:
        with pytest.raises(UserError, match="read-only"):
            run_batch(jobs, AppSettings(tmp_path / "x.duckdb", read_only=True), RunForm())
        with pytest.raises(UserError, match="not offered here"):
            run_batch(jobs, AppSettings(tmp_path / "x.duckdb", allowed_models=("a/b",)), RunForm(model="c/d"))
        with pytest.raises(UserError, match="at least one mode"):
            run_batch(jobs, AppSettings(tmp_path / "x.duckdb"), RunForm(modes=()))
        assert cancel_run(jobs, "job-404") == "no job 'job-404'"
        with pytest.raises(UserError, match="nothing is stored yet"):
            bias_table(tmp_path / "x.duckdb", "e1")
    finally:
        jobs.shutdown(timeout=5)
    assert not (tmp_path / "x.duckdb").exists()


def test_bias_errors_never_show_the_server_path(tmp_path, tiny_llama_dir, tiny_llama):
    from engine.datasets.data import load_dataset
    from engine.usecases.runs.run import ExperimentRequest, run_experiment
    from tests.demo.test_jobs import make_dataset, request

    db = tmp_path / "secret-server-folder" / "app.duckdb"
    data = load_dataset(make_dataset(tmp_path / "d.jsonl", 2))
    run_experiment(ExperimentRequest(request(tiny_llama_dir, modes=("vanilla",)), data, db), load=lambda r: tiny_llama)
    with pytest.raises(UserError) as caught:
        bias_table(db, "no-such-experiment")
    assert "secret-server-folder" not in str(caught.value) and "no experiment 'no-such-experiment'" in str(caught.value)
