"""A served model that misbehaves: against tests.support.served_server.HostileServer on 127.0.0.1, an
answer without an end, a lying Content-Length, a server that trickles a byte at a time, fields
of the wrong type or range, more text than the tokens asked for can hold. Each is refused in one
line naming the server, within the request's deadline, with the client's memory bounded.
A sweep over every field we read checks that parsing raises MalformedAnswer or succeeds, never
anything else (engine.running.served_parse)."""

from __future__ import annotations

import copy
import json
import math
import time

import pytest

from engine.errors import UserError
from engine.generation.generate import GenerationConfig
from engine.running.backend_server import ServerBackend
from engine.running.backends import plan_batches
from engine.running.served_client import MAX_ANSWER_BYTES, Client, ServedAnswerError, ServedConnectionError
from engine.running.served_parse import (
    MAX_CHARS_PER_TOKEN,
    MalformedAnswer,
    answer_byte_cap,
    check_answer,
    first_choice,
    parse_choice,
    usage_counts,
)
from engine.running.served_request import ServerSettings
from tests.support.served_server import HostileServer, chat_answer


@pytest.fixture(autouse=True)
def no_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def run_one(url: str, *, timeout_s: float = 5.0, max_new_tokens: int = 16, top_n: int = 0) -> str:
    """Start a backend on `url`, generate one row; the UserError's line (the test fails otherwise)."""
    settings = ServerSettings(url, "hostile", backoff_s=0.01, max_retries=2, timeout_s=timeout_s, api_key_env=None,
                              logprobs=bool(top_n), concurrency=1)
    b = ServerBackend(settings, GenerationConfig(max_new_tokens=max_new_tokens, batch_size=1, top_n_logprobs=top_n))
    b.start()
    batches = plan_batches(b.tokenizer, [("run-1", ["q0"], ["question 0"])], 1)
    with pytest.raises(UserError) as caught:
        list(b.generate(batches))
    message = str(caught.value)
    assert "\n" not in message and url in message, message
    return message


# ------------------------------------------------------------------ size


def test_an_answer_without_an_end_is_refused_at_the_cap():
    """No Content-Length, bytes until the client goes: it used to read them all (3 GB in 17 s)."""
    def endless(h):
        h.send_raw(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
        chunk = b" " * 65536
        # Old code read it all: end at 256 MiB, so that it fails rather than swaps.
        while not h.hostile.stopping.is_set() and h.hostile.sent < 256 * 2**20:
            h.send_raw(chunk)

    with HostileServer(endless) as server:
        started = time.monotonic()
        message = run_one(server.base_url)
        took = time.monotonic() - started
        sent = server.sent
    assert "sent a bad answer to a request, refused: the answer is larger than 8.0 MiB" in message, message
    assert took < 3.0
    assert sent < 64 * 2**20  # what the socket buffers held when the client went


def test_a_content_length_of_a_terabyte_is_refused_before_reading():
    def lying(h):
        h.send_raw(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000000000\r\n\r\n{")
        h.hostile.stopping.wait(5)

    with HostileServer(lying) as server:
        started = time.monotonic()
        message = run_one(server.base_url)
        assert time.monotonic() - started < 2.0
    assert "the answer is larger than" in message and "MemoryError" not in message, message


def test_an_error_answer_is_read_only_as_far_as_its_message():
    """A 400 with 100 MB of body: its first line is quoted, the rest is not read."""
    def big_error(h):
        body = json.dumps({"error": {"message": "bad " + "x" * 100 * 2**20}}).encode()
        h.send_raw(f"HTTP/1.1 400 X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        h.send_raw(body)

    with HostileServer(big_error) as server:
        message = run_one(server.base_url)
        sent = server.sent
    assert 'rejected the request (HTTP 400: {"error": {"message": "bad xxx' in message and len(message) < 600, message
    assert sent < 64 * 2**20


def test_the_cap_grows_with_the_tokens_and_log_probs_asked_for():
    small = answer_byte_cap(None, GenerationConfig(max_new_tokens=16))
    big = answer_byte_cap(None, GenerationConfig(max_new_tokens=512, top_n_logprobs=5))
    assert small == MAX_ANSWER_BYTES + 16 * 1024
    assert big == MAX_ANSWER_BYTES + 512 * 6 * 1024


def test_a_ten_megabyte_answer_to_sixteen_tokens_is_not_stored():
    """It used to be stored whole. 10 MB is over the byte cap; 100 KB is under it but more text
    than 16 tokens hold: refused too, not cut (cut text would be stored as the model's)."""
    with HostileServer(lambda h: h.send_json(chat_answer("x" * 10 * 2**20))) as server:
        assert "the answer is larger than" in run_one(server.base_url)
    with HostileServer(lambda h: h.send_json(chat_answer("x" * 100_000))) as server:
        message = run_one(server.base_url)
    assert f"100,000 characters, more than 16 new tokens hold ({MAX_CHARS_PER_TOKEN:,} characters" in message, message


# ------------------------------------------------------------------ time


def trickle(gap_s: float, *, headers_too: bool):
    def send(h):
        body = json.dumps(chat_answer()).encode()
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        if not headers_too:
            h.send_raw(head)
        for byte in (head if headers_too else b"") + body:
            if h.hostile.stopping.wait(gap_s):
                return
            h.send_raw(bytes([byte]))
    return send


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "headers"])
def test_a_server_trickling_a_byte_at_a_time_is_cut_at_the_deadline(headers_too):
    """A byte every 0.2 s under a 1 s timeout: the timeout was per socket read, so this took
    the whole answer's time (120 s at a byte every 2 s under --request-timeout 5)."""
    with HostileServer(trickle(0.2, headers_too=headers_too)) as server:
        started = time.monotonic()
        message = run_one(server.base_url, timeout_s=1.0)
        took = time.monotonic() - started
        posts = len(server.requests)
    assert took < 2.5, took
    assert message.startswith(f"the server at {server.base_url} is busy: it took a request but did not answer "
                              "within 1 s, and the request was not sent again"), message
    assert posts == 2  # the probe, and the one that timed out: not sent again


def test_the_deadline_is_per_request_on_the_client_too():
    with HostileServer(trickle(0.1, headers_too=False), honest=0) as server:
        client = Client(server.base_url, timeout_s=0.5, max_retries=3)
        started = time.monotonic()
        with pytest.raises(ServedConnectionError) as caught:
            client.post("chat/completions", {"messages": []})
        assert time.monotonic() - started < 1.2
    assert caught.value.kind == "timed out"


# ------------------------------------------------------------------ the operator's bounds


def padded(h):
    """A well-formed answer of 2 MiB: under the default cap, over a 1 MB one."""
    h.send_json(chat_answer(padding=" " * 2 * 2**20))


def test_a_lowered_answer_cap_refuses_an_answer_the_default_takes(monkeypatch):
    monkeypatch.delenv("PATTRIEVAL_MAX_ANSWER_MB", raising=False)
    with HostileServer(padded) as server:
        b = ServerBackend(ServerSettings(server.base_url, "hostile", api_key_env=None, logprobs=False, timeout_s=5),
                          GenerationConfig(max_new_tokens=16, batch_size=1)).start()
        batches = plan_batches(b.tokenizer, [("run-1", ["q0"], ["question 0"])], 1)
        assert [o.text for r in b.generate(batches) for o in r.outputs] == ["ok"]
    monkeypatch.setenv("PATTRIEVAL_MAX_ANSWER_MB", "1")  # read at the request, not at import
    with HostileServer(padded) as server:
        message = run_one(server.base_url)
    assert "sent a bad answer to a request, refused: the answer is larger than 1.0 MiB" in message, message


def test_a_lowered_deadline_ends_a_trickling_server_sooner(monkeypatch):
    """--request-timeout 5, the operator's bound 0.5 s: the request ends at the lower one, and
    the message names the bound to raise, not --request-timeout."""
    monkeypatch.setenv("PATTRIEVAL_MAX_REQUEST_S", "0.5")
    with HostileServer(trickle(0.2, headers_too=False)) as server:
        started = time.monotonic()
        message = run_one(server.base_url, timeout_s=5.0)
        took = time.monotonic() - started
    assert took < 2.0, took
    assert "did not answer within 0.5 s" in message and "raise PATTRIEVAL_MAX_REQUEST_S" in message, message
    with HostileServer(trickle(0.1, headers_too=False), honest=0) as server:
        client = Client(server.base_url, timeout_s=30, max_retries=3)
        started = time.monotonic()
        with pytest.raises(ServedConnectionError) as caught:
            client.post("chat/completions", {"messages": []})
        assert time.monotonic() - started < 1.2
    assert caught.value.kind == "timed out"


@pytest.mark.parametrize(("name", "value"), [
    ("PATTRIEVAL_MAX_ANSWER_MB", "0"), ("PATTRIEVAL_MAX_ANSWER_MB", "1.5"), ("PATTRIEVAL_MAX_ANSWER_MB", "9" * 5000),
    ("PATTRIEVAL_MAX_ANSWER_MB", "8\n9"), ("PATTRIEVAL_MAX_REQUEST_S", "soon"), ("PATTRIEVAL_MAX_REQUEST_S", "-1"),
    ("PATTRIEVAL_MAX_REQUEST_S", "nan"), ("PATTRIEVAL_MAX_REQUEST_S", "inf"),
])
def test_a_malformed_bound_is_one_line_naming_it_before_anything_is_sent(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with HostileServer(padded) as server:
        settings = ServerSettings(server.base_url, "hostile", api_key_env=None, logprobs=False, timeout_s=5)
        with pytest.raises(UserError) as caught:
            ServerBackend(settings, GenerationConfig(max_new_tokens=4, batch_size=1)).start()
        posts = len(server.requests)
    message = str(caught.value)
    assert message.startswith(f"{name} must be a ") and "\n" not in message and len(message) < 200, message
    assert posts == 0


# ------------------------------------------------------------------ shape and range


@pytest.mark.parametrize(("answer", "said"), [
    (chat_answer(usage={"prompt_tokens": 10**30, "completion_tokens": 1}),
     "'usage.prompt_tokens' is 1000000000000000000000000000000, not a count"),
    (chat_answer(usage={"prompt_tokens": -3}), "'usage.prompt_tokens' is -3, not a count"),
    (chat_answer(usage={"completion_tokens": "12"}), "'usage.completion_tokens' is a string, not a count"),
    (chat_answer(choices="nope"), "'choices' is not a list of choices"),
    (chat_answer(choices=[]), "the answer has no choice"),
    (chat_answer(choices=["nope"]), "'choices[0]' is a string, not an object"),
    (chat_answer(model=["x"]), "'model' is a array, not text"),
    ([1, 2], "the answer is a JSON array, not an object"),
], ids=["huge-count", "negative-count", "text-count", "choices-text", "no-choice", "choice-text", "model", "array"])
def test_malformed_answers_are_refused_in_one_line(answer, said):
    with HostileServer(lambda h: h.send_json(answer)) as server:
        message = run_one(server.base_url)
    assert f"the server at {server.base_url} sent a bad answer to a request, refused: {said}" in message, message


def test_json_nested_too_deep_is_refused_not_a_recursion_error():
    with HostileServer(lambda h: h.send_json(b"[" * 200_000)) as server:
        message = run_one(server.base_url)
    assert "the answer is not JSON" in message, message


def test_a_malformed_probe_answer_fails_start_in_one_line():
    with HostileServer(lambda h: h.send_json({"model": {"name": "x"}}), honest=0) as server:
        settings = ServerSettings(server.base_url, "hostile", api_key_env=None, logprobs=False, timeout_s=5)
        with pytest.raises(UserError) as caught:
            ServerBackend(settings, GenerationConfig(max_new_tokens=4, batch_size=1)).start()
    assert str(caught.value).startswith(f"the server at {server.base_url} sent a bad answer to a 1-token request"), \
        str(caught.value)


def test_an_answer_over_the_callers_cap_is_refused_on_the_client():
    with HostileServer(lambda h: None) as server:  # GET models is answered well-formed, 70-odd bytes
        client = Client(server.base_url)
        assert client.request("GET", "models", None, max_bytes=200).body["data"][0]["id"] == "hostile"
        with pytest.raises(ServedAnswerError) as caught:
            client.request("GET", "models", None, max_bytes=10)
    assert str(caught.value) == "HTTP 200: the answer is larger than 0 KiB (the most this request may take); not read further"


CHAT = {
    "model": "m", "system_fingerprint": "fp", "usage": {"prompt_tokens": 5, "completion_tokens": 2},
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Hi!"},
                 "logprobs": {"content": [
                     {"token": "Hi", "logprob": -0.1, "bytes": [72, 105],
                      "top_logprobs": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105]}]},
                     {"token": "!", "logprob": -0.2, "bytes": [33], "top_logprobs": []}]}}],
}
COMPLETION = {
    "model": "m", "usage": {"prompt_tokens": 5, "completion_tokens": 2},
    "choices": [{"index": 0, "finish_reason": "length", "text": "Hi!", "logprobs": {
        "tokens": ["Hi", "!"], "token_logprobs": [-0.1, -0.2], "top_logprobs": [{"Hi": -0.1}, {"!": -0.2, "?": -2.0}],
        "text_offset": [0, 2]}}],
}
HOSTILE_VALUES = [None, "nope", 10**30, -(10**30), 1e308, math.inf, math.nan, -1, True, [], {}, [None], [1e30], {"a": 1}]


def paths(value, prefix=()):
    """Every path to a value inside `value` (dict keys and list indexes)."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, prefix + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from paths(item, prefix + (i,))


def replaced(value, path, new):
    value = copy.deepcopy(value)
    target = value
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return value


def parse(answer, endpoint):
    answer = check_answer(answer)
    usage_counts(answer)
    return parse_choice(first_choice(answer), endpoint, 2, 4)


@pytest.mark.parametrize(("base", "endpoint"), [(CHAT, "chat"), (COMPLETION, "completions")], ids=["chat", "completions"])
def test_every_field_of_the_wrong_type_or_range_is_malformed_or_harmless(base, endpoint):
    """Each field we read replaced by each hostile value: parsing succeeds with sane values or
    raises MalformedAnswer, never another exception (it raised AttributeError, TypeError...)."""
    parse(base, endpoint)  # the unchanged answer is fine
    tried = refused = 0
    for path in list(paths(base))[1:]:
        for new in HOSTILE_VALUES:
            tried += 1
            try:
                parsed = parse(replaced(base, path, new), endpoint)
            except MalformedAnswer as err:
                refused += 1
                assert "\n" not in str(err) and len(str(err)) < 200
                continue
            for token in parsed.tokens:
                assert isinstance(token.token, str) and token.logprob <= 0 and not math.isnan(token.logprob)
                assert all(isinstance(a.token, str) and a.logprob <= 0 for a in token.top)
            assert isinstance(parsed.text, str) and parsed.finish_reason in ("stop", "length")
    assert tried > 200 and refused > tried // 3, (tried, refused)


def test_a_null_log_prob_still_means_none_not_malformed():
    answer = replaced(CHAT, ("choices", 0, "logprobs", "content", 1, "logprob"), None)
    assert parse(answer, "chat").tokens == ()
    assert parse(replaced(CHAT, ("choices", 0, "logprobs"), None), "chat").tokens == ()
    assert len(parse(CHAT, "chat").tokens) == 2
