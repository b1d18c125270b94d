"""End to end: dataset -> tiny model -> DuckDB, through the Python API and the CLI.

Includes kill -9 in the middle of a real run and the resume that follows.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from engine.datasets.data import load_dataset
from engine.prompting.prompts import METADATA_TYPES, PromptConfig
from engine.running.run_request import RunRequest
from engine.usecases.runs.run import ExperimentRequest, run_experiment
from tests.support.engine_process import kill_once_stored, run_engine
from tests.support.helpers import make_ranked_dataset as make_dataset


def count_rows(db: Path, sql: str):
    from store.db import connect

    with connect(db, read_only=True) as con:
        return con.execute(sql).fetchall()


def test_run_experiment_stores_every_mode_and_resumes_nothing_twice(tmp_path, tiny_llama_dir):

    dataset = load_dataset(make_dataset(tmp_path / "d.jsonl", 5))
    request = RunRequest(
        model=str(tiny_llama_dir),
        modes=("vanilla", "base", "cf"),
        prompt=PromptConfig(metadata=METADATA_TYPES["gender"]),
        quantize="none",
        device="cpu",
        max_new_tokens=12,
        batch_size=2,
        top_logprobs=2,
    )
    db = tmp_path / "r.duckdb"
    outcome = run_experiment(ExperimentRequest(request, dataset, db))
    assert [r.status for r in outcome.runs] == ["complete"] * 3
    assert [r.n_generated for r in outcome.runs] == [5, 5, 5]
    runs = count_rows(db, "SELECT rag_mode, status, experiment_id, metadata_type, prompt_version FROM runs ORDER BY rag_mode")
    assert {r[0] for r in runs} == {"vanilla", "base", "cf"}
    assert {r[1] for r in runs} == {"complete"}
    assert len({r[2] for r in runs}) == 1 and runs[0][2] == outcome.experiment_id
    assert {r[3] for r in runs} == {"gender"}
    gens = count_rows(
        db,
        "SELECT run_id, item_id, len(shown_doc_ids), n_tokens, len(token_ids), len(logprobs), len(tokens), prompt "
        "FROM generations",
    )
    assert len(gens) == 15
    for _, item_id, n_shown, n_tokens, n_ids, n_lp, n_tok, prompt in gens:
        assert n_shown == 4 and n_tokens == n_ids == n_lp == n_tok
        assert f"topic {item_id[1:]}." in prompt
    # base and cf differ only in labels; the cf prompt gives label A to the non-relevant docs.
    base_prompt, cf_prompt = (
        count_rows(db, f"SELECT g.prompt FROM generations g JOIN runs r USING (run_id) WHERE r.rag_mode = '{m}' AND g.item_id = 'q0'")[0][0]
        for m in ("base", "cf")
    )
    assert "(written by a woman)" in base_prompt.split("Document [1]")[1].splitlines()[0]
    assert "(written by a man)" in cf_prompt.split("Document [1]")[1].splitlines()[0]

    again = run_experiment(ExperimentRequest(request, dataset, db))
    assert again.experiment_id == outcome.experiment_id
    assert [r.status for r in again.runs] == ["already complete"] * 3
    assert count_rows(db, "SELECT count(*) FROM generations")[0][0] == 15


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run_engine(args, timeout=timeout)


def test_cli_bad_dataset_fails_with_one_line_and_writes_nothing(tmp_path, tiny_llama_dir):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "a", "question": "q", "answers": ["x"], "documents": [{"text": "t", "relevant": False}]}) + "\n")
    db = tmp_path / "never.duckdb"
    proc = run_cli("run", "--model", str(tiny_llama_dir), "--dataset", str(bad), "--db", str(db))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {bad}:line 1: item 'a': no relevant document"
    assert not db.exists()


def test_cli_unknown_model_is_one_line(tmp_path):
    data = make_dataset(tmp_path / "d.jsonl", 2)
    proc = run_cli("run", "--model", str(tmp_path / "no-such-model"), "--dataset", str(data), "--db", str(tmp_path / "x.duckdb"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("error: unknown model"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_kill_minus_9_then_resume_finishes_without_duplicates(tmp_path, tiny_llama_dir, capsys):
    # 16 items: the kill lands after 3 stored, with 13 of the first mode's items still to go; 40
    # made the resume generate 117 answers of 48 tokens (three minutes under load) for no more claim.
    n = 16
    data = make_dataset(tmp_path / "d.jsonl", n)
    db = tmp_path / "k.duckdb"
    cmd = ["run", "--model", str(tiny_llama_dir), "--dataset", str(data), "--db", str(db), "--batch-size", "1",
           "--max-new-tokens", "48", "--quantize", "none", "--device", "cpu", "--metadata", "race"]

    def refused_meanwhile(proc):
        # The same command started meanwhile is refused, naming the run and its process.
        from engine.__main__ import main as cli_main

        assert cli_main(cmd) == 2
        refusal = capsys.readouterr().err.strip()
        assert refusal.startswith("error: run ") and f"is being generated by process {proc.pid} on " in refusal
        assert "\n" not in refusal

    kill_once_stored(cmd, db, "SELECT count(*) FROM generations", 3, before_kill=refused_meanwhile)
    before = dict(count_rows(db, "SELECT item_id || '@' || run_id, created_utc FROM generations"))
    # The command claimed its three runs before generating; killed inside the first mode's run,
    # none may say complete.
    assert sorted(count_rows(db, "SELECT rag_mode, status FROM runs")) == [
        ("base", "running"), ("cf", "running"), ("vanilla", "running")]
    assert count_rows(db, "SELECT DISTINCT r.rag_mode FROM generations JOIN runs r USING (run_id)") == [("vanilla",)]

    done = run_cli(*cmd, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = count_rows(db, "SELECT run_id, count(*), count(DISTINCT item_id) FROM generations GROUP BY run_id")
    assert len(rows) == 3 and all(k == n and d == n for _, k, d in rows)
    assert {s for (s,) in count_rows(db, "SELECT status FROM runs")} == {"complete"}
    assert len({e for (e,) in count_rows(db, "SELECT experiment_id FROM runs")}) == 1
    # Items stored before the kill were kept, not generated again.
    after = dict(count_rows(db, "SELECT item_id || '@' || run_id, created_utc FROM generations"))
    assert all(after[k] == v for k, v in before.items())
    generated = sum(int(line.split("generated ")[1].split(" of")[0]) for line in done.stdout.splitlines() if "generated " in line)
    assert generated == 3 * n - len(before)


def test_the_use_case_reports_each_step_and_stops_when_asked(tmp_path, tiny_llama_dir, tiny_llama):
    import pytest

    from engine.errors import RunCancelled

    dataset = load_dataset(make_dataset(tmp_path / "d.jsonl", 3))
    request = RunRequest(model=str(tiny_llama_dir), modes=("vanilla", "base"), quantize="none", device="cpu",
                         prompt=PromptConfig(metadata=METADATA_TYPES["gender"]), max_new_tokens=2, batch_size=2)
    db = tmp_path / "r.duckdb"
    with pytest.raises(RunCancelled, match="cancelled before generating"):
        run_experiment(ExperimentRequest(request, dataset, db), stop=lambda: True, load=lambda r: tiny_llama)
    assert not db.exists()  # asked before the first write

    events = []
    outcome = run_experiment(ExperimentRequest(request, dataset, db), progress=events.append, load=lambda r: tiny_llama)
    stages = [e.stage for e in events]
    assert stages[:3] == ["planned", "loading", "generating"] and set(stages[3:]) == {"stored"}, stages
    assert {e.experiment_id for e in events} == {outcome.experiment_id}
    assert events[2].total == 6 and events[2].label == str(tiny_llama_dir)
    assert sum(e.step for e in events) == events[-1].done == 6
    assert (outcome.dataset, outcome.n_dataset_items) == (dataset.source, 3)
