"""The Run tab's jobs table tells runs from Prompt 5 explanation jobs (the Explain tab queues its
jobs in the same worker): JobStatus.kind, the `kind` column of `/run_status`, last."""

from __future__ import annotations

import pandas as pd
import pytest

from demo.handlers.run import run_status
from demo.job_specs import ExplainSpec, JobSpec
from demo.jobs import JobQueue
from demo.tabs.run import STATUS_COLUMNS
from engine.prompting.prompts import PromptConfig
from engine.running.run_request import RunRequest
from engine.usecases.runs.run import ExperimentRequest
from store import connect
from tests.support.helpers import wait_for_job


def test_the_jobs_table_names_each_jobs_kind(tmp_path):
    db = tmp_path / "store.duckdb"
    with connect(db):
        pass  # an empty, migrated store
    jobs = JobQueue(load=lambda request: pytest.fail("nothing may load"))
    try:
        request = RunRequest(model="org/model", modes=("base", "cf"), prompt=PromptConfig())
        run_job = jobs.submit(JobSpec(ExperimentRequest(request, str(tmp_path / "missing.jsonl"), db)))
        explain_job = jobs.submit(ExplainSpec(("r-gone",), request, db))
        run, explain = wait_for_job(jobs, run_job, 30), wait_for_job(jobs, explain_job, 30)
        # Both fail before any model is loaded: a missing dataset, a run that is not stored.
        assert (run.kind, run.state, explain.kind, explain.state) == ("run", "failed", "explain", "failed")
        assert "no run 'r-gone'" in explain.message
        records = run_status(jobs)  # newest first
        assert [(r["job"], r["kind"]) for r in records] == [(explain_job, "explain"), (run_job, "run")]
        assert run_status(jobs, explain_job)[0]["kind"] == "explain"
        # The tab's table: every column filled, the kind last (readers of /run_status by position keep working).
        table = pd.DataFrame(records, columns=STATUS_COLUMNS)
        assert STATUS_COLUMNS[-1] == "kind" and list(table["kind"]) == ["explain", "run"]
        assert set(records[0]) == set(STATUS_COLUMNS)
    finally:
        jobs.shutdown(timeout=10)
