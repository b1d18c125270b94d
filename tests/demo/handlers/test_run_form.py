"""The Run tab's handlers as plain functions: the form to the engine's RunRequest, upload checks,
server paths on a Space, the operator's settings and the first screen of an empty store."""

from __future__ import annotations

import json
from datetime import UTC
from pathlib import Path

import pytest

from demo.handlers.run import (
    NO_SERVER_PATHS,
    RunForm,
    build_run_request,
    dataset_path,
    first_run_form,
    run_batch,
    store_is_empty,
    validate_upload,
)
from demo.jobs import JobQueue
from demo.settings import AppSettings, settings_from_env
from engine.errors import UserError
from engine.paths import SAMPLE_DATASET


def test_every_option_of_the_form_reaches_the_run_request(tmp_path):
    form = RunForm(
        model="org/some-model", metadata="age", label_a="written by a young person", label_b="written by an old person",
        consideration="3. Some documents are written by young people, others by old people.",
        modes=("base", "cf"), quantize="8bit", top_k=5, order="random", few_shot=2, xai="counterfactual",
        sample=True, temperature=0.7, top_p=0.9, sample_top_k=40, seed=1234, top_logprobs=3,
        limit=7, batch_size=3, max_new_tokens=21, skip_invalid=True, experiment="all-options", hf_token=" hf_x ",
    )
    r = build_run_request(AppSettings(tmp_path / "db.duckdb"), form)
    assert (r.model, r.label, r.modes, r.quantize) == ("org/some-model", "org/some-model", ("base", "cf"), "8bit")
    p = r.prompt
    assert (p.top_k, p.order, p.few_shot, p.xai, p.seed) == (5, "random", 2, "counterfactual", 1234)
    assert (p.metadata.name, p.metadata.label_a, p.metadata.label_b) == (
        "age", "written by a young person", "written by an old person")
    assert p.metadata.consideration == "Some documents are written by young people, others by old people."
    assert (r.sample, r.temperature, r.top_p, r.sample_top_k, r.seed, r.top_logprobs) == (True, 0.7, 0.9, 40, 1234, 3)
    assert (r.limit, r.batch_size, r.max_new_tokens, r.skip_invalid, r.experiment) == (7, 3, 21, True, "all-options")
    assert r.hf_token == "hf_x" and "hf_x" not in repr(r)
    # A built-in type ignores label boxes left filled in; the smoke model resolves to its folder.
    r = build_run_request(AppSettings(tmp_path / "db.duckdb"), RunForm(metadata="race", label_a="x", label_b="y"))
    assert (r.prompt.metadata.name, r.prompt.metadata.label_a) == ("race", "a white person")
    assert r.label == "smoke (tiny random Llama)" and Path(r.model, "config.json").exists()


def test_the_item_cap_of_the_operator_wins(tmp_path):
    settings = AppSettings(tmp_path / "db.duckdb", max_items=4)
    assert build_run_request(settings, RunForm(limit=100)).limit == 4
    assert build_run_request(settings, RunForm(limit=None)).limit == 4
    assert build_run_request(settings, RunForm(limit=2)).limit == 2


@pytest.mark.parametrize("changes, expected", [
    ({"sample": True, "temperature": 0.0}, "the temperature must be a finite number above 0, not 0.0"),
    ({"top_p": 1.5}, "top-p must be in (0, 1], not 1.5"),
    ({"sample_top_k": -1}, "the sampling top-k must be 0 or more"),
    ({"seed": -3}, "the seed must be between 0 and 2147483647, not -3"),
    ({"top_logprobs": 99}, "top log-probs must be between 0 and 20, not 99"),
    ({"batch_size": 0}, "the batch size must be at least 1"),
    ({"max_new_tokens": 0}, "max new tokens must be at least 1"),
    ({"limit": 0}, "the item limit must be at least 1"),
    ({"top_k": 0}, "the cut-off k must be at least 1, not 0"),
    ({"order": "sideways"}, "the document order: unknown value 'sideways'"),
    ({"xai": "why"}, "the XAI variant: unknown value 'why'"),
    ({"few_shot": 3}, "the few-shot examples must be between 0 and 2, not 3"),
    ({"quantize": "3bit"}, "the quantization: unknown value '3bit'"),
    ({"modes": ()}, "choose at least one mode"),
    ({"modes": ("vanilla", "both")}, "the modes: unknown mode(s) both"),
    ({"metadata": "age"}, "metadata type 'age' is not built in"),
    ({"metadata": "age", "label_a": "x", "label_b": "x", "consideration": "c"}, "custom label A and custom label B must differ"),
    ({"experiment": "x" * 101}, "the experiment name must be 1 to 100 printable characters"),
    ({"model": "auto"}, "choose a model: 'auto' is for the command line"),
])
def test_a_bad_value_gets_one_line(tmp_path, changes, expected):
    with pytest.raises(UserError) as caught:
        build_run_request(AppSettings(tmp_path / "db.duckdb"), RunForm(**changes))
    assert expected in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "db.duckdb").exists()


def _write(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _row(i: int, **changes) -> dict:
    row = {"id": f"q{i}", "question": f"question {i}", "answers": [str(i)],
           "documents": [{"text": f"passage {i}", "relevant": True}, {"text": "other", "relevant": False}]}
    return {**row, **changes}


def test_an_upload_is_checked_at_once_with_the_loaders_messages(tmp_path):
    settings = AppSettings(tmp_path / "db" / "app.duckdb")
    secret = tmp_path / "secret-server-folder"
    good = _write(secret / "good.jsonl", [_row(i) for i in range(3)])
    assert validate_upload(settings, str(good)) == "good.jsonl: native layout, 3 items, ready to run"
    assert validate_upload(settings, None).startswith("the bundled sample")
    assert validate_upload(settings, str(SAMPLE_DATASET)) == "sample_nq.jsonl: native layout, 67 items, ready to run"
    # The cut-off counts: an item whose relevant document is 2nd has none among the first 1.
    late = _write(secret / "late.jsonl", [_row(1), _row(2, documents=[{"text": "a", "relevant": False},
                                                                       {"text": "b", "relevant": True}])])
    assert validate_upload(settings, str(late), top_k=None).endswith("2 items, ready to run")
    line = validate_upload(settings, str(late), top_k=1)
    assert line.startswith("late.jsonl: native layout, 1 valid items; late.jsonl:line 2: item 'q2': no relevant document")

    broken = _write(secret / "broken.jsonl", [_row(1), "{not json"])
    line = validate_upload(settings, str(broken))
    assert line.startswith("broken.jsonl:line 2: invalid JSON (")
    wrong = _write(secret / "wrong.jsonl", [_row(1), _row(2), _row(3, question=42)])
    line = validate_upload(settings, str(wrong))
    assert line == ("wrong.jsonl: native layout, 2 valid items; wrong.jsonl:line 3: item 'q3': 'question' must be a "
                    "string, got number (1 of 3 items; run the other 2 with skip invalid items ticked)")
    # Every supported layout and file format: seed library as .json, ALCE as .parquet.
    seed = secret / "seed.json"
    seed.write_text(json.dumps([{"query": "q", "org_answers": ["a"],
                                 "passages": [{"passage_text": "a", "is_selected": 1}]}]))
    assert validate_upload(settings, str(seed)) == "seed.json: seed layout, 1 items, ready to run"
    import pyarrow as pa
    import pyarrow.parquet as pq

    alce = secret / "alce.parquet"
    pq.write_table(pa.Table.from_pylist([{"question": "who", "answers": [["Ann"]], "docs": [
        {"title": "t", "text": "Ann did it"}, {"title": "u", "text": "nobody"}]}]), alce)
    assert validate_upload(settings, str(alce)) == "alce.parquet: alce layout, 1 items, ready to run"
    odd = _write(secret / "notes.txt", ["hello"])
    assert validate_upload(settings, str(odd)).startswith("notes.txt: unknown dataset format")
    for path in (good, late, broken, wrong, seed, alce, odd):
        assert "secret-server-folder" not in validate_upload(settings, str(path), top_k=1)


def test_too_big_an_upload_is_refused(tmp_path):
    settings = AppSettings(tmp_path / "app.duckdb", max_upload_mb=1)
    big = _write(tmp_path / "big.jsonl", [_row(i, question="x" * 5000) for i in range(300)])
    assert big.stat().st_size > 2**20
    assert validate_upload(settings, str(big)) == f"big.jsonl is {big.stat().st_size / 2**20:.1f} MB; uploads here are limited to 1 MB"
    with pytest.raises(UserError, match="uploads here are limited to 1 MB"):
        dataset_path(settings, RunForm(dataset=str(big)))


def test_a_space_never_takes_a_server_path(tmp_path):
    from gradio.utils import get_upload_folder

    space = AppSettings(tmp_path / "app.duckdb", allow_local_paths=False)
    server_file = _write(tmp_path / "server" / "d.jsonl", [_row(1)])
    for form in (RunForm(local_path=str(server_file)), RunForm(dataset=str(server_file)),
                 RunForm(dataset="/etc/passwd"), RunForm(dataset=f"{get_upload_folder()}/../../etc/passwd")):
        with pytest.raises(UserError) as caught:
            dataset_path(space, form)
        assert str(caught.value) == NO_SERVER_PATHS
    for model in ("/models/llama", "./llama", "~/llama", "a/b/c", str(tmp_path)):
        with pytest.raises(UserError, match="model folders on the server cannot be named here"):
            build_run_request(space, RunForm(model=model))
    jobs = JobQueue(load=lambda request: pytest.fail("nothing may load"))
    try:
        with pytest.raises(UserError, match="not a path on the server"):
            run_batch(jobs, space, RunForm(local_path="/etc/passwd"))
    finally:
        jobs.shutdown(timeout=5)
    # What a Space accepts: the sample, an upload (Gradio's upload folder), a Hub id.
    assert dataset_path(space, RunForm()) == str(SAMPLE_DATASET)
    upload = _write(Path(get_upload_folder()) / "pattrieval-test-upload" / "mine.jsonl", [_row(1)])
    try:
        assert dataset_path(space, RunForm(dataset=str(upload))) == str(upload)
    finally:
        upload.unlink()
    assert build_run_request(space, RunForm(model="org/name")).model == "org/name"
    # The desktop takes a path typed in.
    assert dataset_path(AppSettings(tmp_path / "app.duckdb"), RunForm(local_path=f" {server_file} ")) == str(server_file)


def test_settings_from_the_environment(monkeypatch, tmp_path):
    for name in ("SPACE_ID", "PATTRIEVAL_LOCAL_PATHS", "PATTRIEVAL_MAX_UPLOAD_MB", "PATTRIEVAL_RESULTS_REPO",
                 "PATTRIEVAL_RESULTS_FILE"):
        monkeypatch.delenv(name, raising=False)
    db = str(tmp_path / "x.duckdb")
    desktop = settings_from_env(db)
    assert (desktop.allow_local_paths, desktop.max_upload_mb, desktop.results_repo, desktop.results_file) == (
        True, 50, None, "pattrieval.duckdb")
    assert desktop.max_upload_bytes == 50 * 2**20
    assert not settings_from_env(db, share=True).allow_local_paths
    assert not settings_from_env(db, local_paths=False).allow_local_paths
    monkeypatch.setenv("SPACE_ID", "someone/pattrieval")
    assert not settings_from_env(db).allow_local_paths
    monkeypatch.setenv("PATTRIEVAL_LOCAL_PATHS", "1")  # the operator's word wins
    assert settings_from_env(db).allow_local_paths
    monkeypatch.setenv("PATTRIEVAL_LOCAL_PATHS", "maybe")
    with pytest.raises(UserError, match="PATTRIEVAL_LOCAL_PATHS must be 1 or 0, not 'maybe'"):
        settings_from_env(db)
    monkeypatch.delenv("PATTRIEVAL_LOCAL_PATHS")
    monkeypatch.setenv("PATTRIEVAL_MAX_UPLOAD_MB", "5")
    monkeypatch.setenv("PATTRIEVAL_RESULTS_REPO", " org/results ")
    monkeypatch.setenv("PATTRIEVAL_RESULTS_FILE", "paper.duckdb")
    s = settings_from_env(db)
    assert (s.max_upload_mb, s.results_repo, s.results_file) == (5, "org/results", "paper.duckdb")
    monkeypatch.setenv("PATTRIEVAL_MAX_UPLOAD_MB", "-1")
    with pytest.raises(UserError, match="PATTRIEVAL_MAX_UPLOAD_MB must be a whole number"):
        settings_from_env(db)


def test_the_first_run_on_an_empty_store(tmp_path):
    from engine.generation.model_choice import DEFAULT_MODEL

    db = tmp_path / "app.duckdb"
    assert store_is_empty(db) and not db.exists()  # asking creates nothing
    offline, online = (lambda model_id: False), (lambda model_id: True)
    cpu = first_run_form(AppSettings(db), gpu=False, available=offline)
    assert (cpu.model, cpu.dataset, cpu.limit, cpu.modes) == ("smoke", "sample", 5, ("vanilla", "base", "cf"))
    gpu = first_run_form(AppSettings(db, max_items=3), gpu=True, available=online)
    assert (gpu.model, gpu.limit) == (DEFAULT_MODEL, 3)
    assert first_run_form(AppSettings(db, allowed_models=("org/x",)), gpu=True, available=online).model == "smoke"
    from store.db import connect

    with connect(db):
        pass
    assert store_is_empty(db)  # a store with its schema but no run is still empty


def test_the_first_run_takes_the_model_auto_would_and_says_why(tmp_path):
    """As `--model auto`: Qwen2.5-0.5B on a CPU where the Hub or the cache has it,
    Mistral on a GPU, smoke only where neither can be had, or the operator offers neither."""
    from demo.handlers.run import first_run
    from demo.render import SMOKE_NOTE
    from engine.generation.model_choice import CPU_MODEL, DEFAULT_MODEL

    settings = AppSettings(tmp_path / "app.duckdb")
    asked: list[str] = []

    def only_qwen(model_id: str) -> bool:
        asked.append(model_id)
        return model_id == CPU_MODEL

    cpu = first_run(settings, gpu=False, available=only_qwen)
    assert cpu.form.model == CPU_MODEL and "runs on a CPU" in cpu.why and asked == [CPU_MODEL]
    gpu_without_mistral = first_run(settings, gpu=True, available=only_qwen)
    assert gpu_without_mistral.form.model == CPU_MODEL and "Mistral cannot be had" in gpu_without_mistral.why
    gpu = first_run(settings, gpu=True, available=lambda model_id: True)
    assert gpu.form.model == DEFAULT_MODEL and "GPU" in gpu.why
    offline = first_run(settings, gpu=False, available=lambda model_id: False)
    assert offline.form.model == "smoke" and offline.why.startswith(SMOKE_NOTE)
    assert "Hub is not reachable" in offline.why and CPU_MODEL in offline.why
    # An operator's list without Qwen: smoke, and the line says so instead of blaming the network.
    restricted = first_run(AppSettings(tmp_path / "a.duckdb", allowed_models=("org/x",)), gpu=False,
                           available=lambda model_id: True)
    assert restricted.form.model == "smoke" and "offers no other model" in restricted.why


def test_the_job_banner_shows_progress_and_the_whole_failure(tmp_path):
    """The top of the Run tab: the job as soon as it is queued, a failure's message uncut, the
    smoke note once a smoke run is done; every piece of text escaped; Cancel only while it runs."""
    import html
    from datetime import datetime

    from demo.handlers.run import job_active, job_banner
    from demo.job_specs import JobStatus
    from demo.render import SMOKE_NOTE

    long_failure = "unknown model 'mistralai/<b>Mistral-7B-Instruct-v9</b>': " + "no such repository " * 20

    class Jobs:  # the JobQueue's read side, as the handlers use it
        def __init__(self, **changes):
            base = dict(job_id="job-1", state="queued", model="smoke (tiny random Llama)",
                        modes=("vanilla", "base", "cf"), queue_position=1, n_done=0, n_total=None,
                        experiment_id=None, message="waiting for the worker",
                        submitted_utc=datetime.now(UTC), finished_utc=None)
            self.snapshot = JobStatus(**{**base, **changes})

        def status(self, job_id, owner=None):  # job-1 is visitor "a"'s; the operator (None) sees it too
            return self.snapshot if job_id == "job-1" and owner in (None, "a") else None

    assert job_banner(Jobs(), None) == "" and job_banner(Jobs(), "job-9") == "" and not job_active(Jobs(), None)
    # Another visitor who names the id sees nothing and cannot cancel it.
    assert job_banner(Jobs(), "job-1", visitor="b") == "" and not job_active(Jobs(), "job-1", "b")
    assert job_banner(Jobs(), "job-1", visitor="a") != "" and job_active(Jobs(), "job-1", "a")
    queued = job_banner(Jobs(), "job-1", note="The first run uses smoke: <why>")
    assert "job-1" in queued and "queued" in queued and "position 1" in queued and job_active(Jobs(), "job-1")
    assert "&lt;why&gt;" in queued and "<why>" not in queued
    running = Jobs(state="running", queue_position=None, n_done=4, n_total=15, message="generating")
    shown = job_banner(running, "job-1")
    assert "4/15 answers" in shown and '<progress value="4" max="15">' in shown and job_active(running, "job-1")
    failed = Jobs(state="failed", queue_position=None, message=long_failure)
    shown = job_banner(failed, "job-1")
    assert html.escape(long_failure) in shown and "<b>Mistral" not in shown and not job_active(failed, "job-1")
    done = Jobs(state="complete", queue_position=None, n_done=15, n_total=15, experiment_id="e1",
                message="generated 15 answers in experiment e1")
    shown = job_banner(done, "job-1")
    assert "Experiment e1" in shown and html.escape(SMOKE_NOTE) in shown and "<progress" not in shown
    real = Jobs(state="complete", queue_position=None, model="Qwen/Qwen2.5-0.5B-Instruct", experiment_id="e1")
    assert html.escape(SMOKE_NOTE) not in job_banner(real, "job-1")


def test_python_m_demo_refuses_a_malformed_setting_in_one_line(monkeypatch, tmp_path, capsys):
    from demo.__main__ import build_parser, main

    monkeypatch.setenv("PATTRIEVAL_MAX_UPLOAD_MB", "lots")
    assert main(["--db", str(tmp_path / "x.duckdb")]) == 2
    err = capsys.readouterr().err
    assert err == "error: PATTRIEVAL_MAX_UPLOAD_MB must be a whole number of megabytes above 0, not 'lots'\n"
    assert not (tmp_path / "x.duckdb").exists()
    assert build_parser().parse_args(["--no-local-paths", "--share"]).no_local_paths
    assert "PATTRIEVAL_RESULTS_REPO" in build_parser().format_help()
