"""The Run tab through its public API, as a script drives it: launched for real, gradio_client, the tiny model."""

from __future__ import annotations

import json
import time

import duckdb
import pytest

from demo.jobs import JobQueue
from demo.settings import AppSettings
from tests.demo.test_app_api import launched  # noqa: F401 - the shared fixture
from tests.support.app_server import served

FINISHED = ("complete", "failed", "cancelled")


def _status(client, job_id: str) -> dict:
    table = client.predict(job_id, api_name="/run_status")
    return dict(zip(table["headers"], table["data"][0], strict=True))


def _wait(client, job_id: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        row = _status(client, job_id)
        if row["state"] in FINISHED or time.monotonic() > deadline:
            return row
        time.sleep(0.1)


def _stored(db, sql: str):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_a_smoke_run_shows_progress_cancels_after_the_batch_in_flight_and_resumes(launched, tiny_llama_dir):
    from gradio_client import Client

    url, db = launched
    client = Client(url, verbose=False)
    # The sample, 12 items x 3 modes, one item per batch: long enough to cancel half-way.
    settings = dict(model=str(tiny_llama_dir), dataset_file=None, metadata="gender", label_a="", label_b="",
                    consideration="", modes=["vanilla", "base", "cf"], quantize="none", limit=12, batch_size=1,
                    max_new_tokens=4, experiment="resume-me", hf_token="")
    job_id, _ = client.predict(**settings, api_name="/run_batch")
    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        row = _status(client, job_id)
        seen.append(row["progress"])
        done, _, total = row["progress"].partition("/")
        if row["state"] == "running" and total and int(done) >= 2:
            break
        time.sleep(0.02)
    assert client.predict(job_id, api_name="/cancel_run") == f"{job_id}: cancelling"
    cancelled = _wait(client, job_id)
    assert cancelled["state"] == "cancelled" and "resume" in cancelled["message"], cancelled
    done, total = map(int, cancelled["progress"].split("/"))
    assert total == 36 and 2 <= done < 36, cancelled
    assert any(p.endswith("/36") and 0 < int(p.split("/")[0]) < 36 for p in seen), seen  # progress as it went
    assert _stored(db, "SELECT count(*) FROM generations") == [(done,)]  # the batches that finished stay
    partial = client.predict(job_id, api_name="/run_metrics")  # the metrics of what landed so far
    assert partial["headers"][:4] == ["run_id", "mode", "relevant_label", "n"]
    assert sum(row[3] for row in partial["data"]) == done and {row[1] for row in partial["data"]} <= {"vanilla", "base", "cf"}

    again, _ = client.predict(**{**settings, "batch_size": 8}, api_name="/run_batch")
    resumed = _wait(client, again)
    assert resumed["state"] == "complete" and resumed["progress"] == f"{36 - done}/{36 - done}", resumed
    assert resumed["experiment"] == cancelled["experiment"]
    assert _stored(db, "SELECT count(*), count(DISTINCT (run_id, item_id)) FROM generations") == [(36, 36)]
    assert _stored(db, "SELECT count(*), count(DISTINCT experiment_id) FROM runs WHERE status = 'complete'") == [(3, 1)]
    final = client.predict(again, api_name="/run_metrics")
    assert [(row[1], row[3]) for row in final["data"]] == [("vanilla", 12), ("base", 12), ("cf", 12)]


def test_every_option_reaches_the_stored_run(launched, tiny_llama_dir, tmp_path):
    from gradio_client import Client, handle_file

    url, db = launched
    client = Client(url, verbose=False)
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({
        "id": f"q{i}", "question": f"what is {i}", "answers": [str(i)],
        "documents": [{"text": f"{i} is {i}", "relevant": True}] + [{"text": f"other {j}", "relevant": False}
                                                                     for j in range(4)],
    }) + "\n" for i in range(3)))
    info = client.predict(handle_file(str(data)), None, api_name="/validate_dataset")
    assert info == "mine.jsonl: native layout, 3 items, ready to run"
    job_id, _ = client.predict(
        model=str(tiny_llama_dir), dataset_file=handle_file(str(data)), metadata="age",
        label_a="written by a young person", label_b="written by an old person",
        consideration="Some documents are written by young people, others by old people.", modes=["base", "cf"],
        quantize="none", limit=2, batch_size=2, max_new_tokens=3, experiment="options", hf_token="",
        top_k=3, order="reversed", few_shot=1, xai="direct", sample=True, temperature=0.5, top_p=0.8,
        sample_top_k=7, seed=11, top_logprobs=2, skip_invalid=False, local_path="", api_name="/run_batch",
    )
    row = _wait(client, job_id)
    assert (row["state"], row["progress"]) == ("complete", "4/4"), row
    configs = [json.loads(c) for (c,) in _stored(db, "SELECT config_json FROM runs ORDER BY rag_mode")]
    for config in configs:
        prompt, generation = config["prompt"], config["generation"]
        assert (prompt["top_k"], prompt["order"], prompt["few_shot"], prompt["xai"], prompt["seed"]) == (
            3, "reversed", 1, "direct", 11)
        assert (prompt["metadata"]["name"], prompt["metadata"]["label_a"]) == ("age", "written by a young person")
        assert generation == {"max_new_tokens": 3, "do_sample": True, "temperature": 0.5, "top_p": 0.8, "top_k": 7,
                              "seed": 11, "top_n_logprobs": 2}
    assert _stored(db, "SELECT count(*), count(top_logprobs) FROM generations") == [(4, 4)]
    # A bad value: one line, nothing queued.
    with pytest.raises(Exception, match="top-p must be in") as caught:  # the form's label, not an option
        client.predict(str(tiny_llama_dir), None, "gender", "", "", "", ["vanilla"], "none", 2, 2, 2, "", "",
                       top_p=3.0, api_name="/run_batch")
    assert "--" not in str(caught.value)


@pytest.fixture
def space(tmp_path, tiny_llama):
    """The app as a Space serves it: no local paths, a 1 MB upload limit (Gradio's and the handler's)."""
    settings = AppSettings(tmp_path / "space.duckdb", allow_local_paths=False, max_upload_mb=1)
    with served(settings, JobQueue(load=lambda request: tiny_llama), shutdown_timeout=30, max_file_size=settings.max_upload_bytes) as url:
        yield url, settings.db_path


def test_a_space_refuses_server_paths_and_big_uploads(space, tmp_path):
    from gradio_client import Client, handle_file

    url, db = space
    client = Client(url, verbose=False)
    server_file = tmp_path / "server-only.jsonl"
    server_file.write_text('{"id": "x"}\n')
    with pytest.raises(Exception, match="not a path on the server"):
        client.predict("smoke", None, "gender", "", "", "", ["vanilla"], "none", 1, 1, 2, "", "",
                       local_path=str(server_file), api_name="/run_batch")
    with pytest.raises(Exception, match="model folders on the server cannot be named here"):
        client.predict("/models/x", None, "gender", "", "", "", ["vanilla"], "none", 1, 1, 2, "", "",
                       api_name="/run_batch")
    # A file reference to a server path that was never uploaded, sent raw (gradio_client would upload
    # a local file first): Gradio refuses it before the handler runs.
    import httpx

    data = ["smoke", {"path": str(server_file), "meta": {"_type": "gradio.FileData"}}, "gender", "", "", "",
            ["vanilla"], "none", 1, 1, 2, "", "", "all", "ranked", 0, "none", False, 1.0, 1.0, 0, 0, 0, False, ""]
    event = httpx.post(f"{url}gradio_api/call/run_batch", json={"data": data}, timeout=30).json()["event_id"]
    stream = httpx.get(f"{url}gradio_api/call/run_batch/{event}", timeout=30).text
    assert "event: error" in stream and "event: complete" not in stream, stream
    big = tmp_path / "big.jsonl"
    big.write_bytes(b" " * (2 * 2**20))
    with pytest.raises(Exception, match="(?i)size"):
        client.predict(handle_file(str(big)), None, api_name="/validate_dataset")
    assert client.predict(None, None, api_name="/validate_dataset").startswith("the bundled sample")
    assert not db.exists()  # nothing was queued
