"""Parsing servers' answers and URLs: pure functions, no server (tests/engine/running/test_served_backend.py has one)."""

from __future__ import annotations

import pytest

from engine.running.served_client import api_root, redact_url
from engine.running.served_parse import UNKNOWN_TOKEN_ID, parse_chat, parse_completion, token_offsets


def test_redact_url_drops_credentials_query_and_fragment():
    assert redact_url("https://user:s3cret@api.example.com:8443/v1/?key=s3cret#x") == "https://api.example.com:8443/v1"
    assert redact_url("http://[::1]:8000/v1") == "http://[::1]:8000/v1"
    assert api_root("http://127.0.0.1:8000") == "/v1"
    assert api_root("http://127.0.0.1:8000/") == "/v1"
    assert api_root("https://api.example.com/openai/v1/") == "/openai/v1"


def test_chat_logprobs_with_top_and_a_trailing_stop_token():
    choice = {
        "message": {"content": "Paris [1]."},
        "finish_reason": "stop",
        "logprobs": {"content": [
            {"token": "Paris", "logprob": -0.1, "top_logprobs": [{"token": "London", "logprob": -3.0},
                                                                {"token": "Paris", "logprob": -0.1}]},
            {"token": " [", "logprob": -0.2, "top_logprobs": []},
            {"token": "1", "logprob": -0.3, "top_logprobs": []},
            {"token": "].", "logprob": -0.4, "top_logprobs": []},
            {"token": "<|im_end|>", "logprob": -0.01, "top_logprobs": []},  # some servers list the stop
        ]},
    }
    parsed = parse_chat(choice, top_n=2)
    assert parsed.text == "Paris [1]." and parsed.finish_reason == "stop"
    assert [t.token for t in parsed.tokens] == ["Paris", " [", "1", "]."]
    assert parsed.offsets == ((0, 5), (5, 7), (7, 8), (8, 10))
    assert [(a.token, a.logprob) for a in parsed.tokens[0].top] == [("Paris", -0.1), ("London", -3.0)]
    assert all(t.token_id == UNKNOWN_TOKEN_ID for t in parsed.tokens)
    assert parse_chat(choice, top_n=0).tokens[0].top == ()


def test_chat_bytes_place_a_character_split_over_two_tokens():
    text = "é!"
    raw = list("é".encode())
    choice = {"message": {"content": text}, "finish_reason": "length", "logprobs": {"content": [
        {"token": "bytes:\\xc3", "logprob": -1.0, "bytes": raw[:1]},
        {"token": "bytes:\\xa9", "logprob": -1.0, "bytes": raw[1:]},
        {"token": "!", "logprob": -1.0, "bytes": list(b"!")},
    ]}}
    parsed = parse_chat(choice, top_n=0)
    assert parsed.finish_reason == "length"
    assert parsed.offsets == ((0, 0), (0, 1), (1, 2))  # the half character waits for its second byte


def test_no_logprobs_gives_no_tokens():
    assert parse_chat({"message": {"content": "hi"}, "logprobs": None}, 3).tokens == ()
    assert not parse_completion({"text": "hi", "logprobs": None}, 3).has_logprobs
    broken = {"message": {"content": "hi"}, "logprobs": {"content": [{"token": "hi", "logprob": None}]}}
    assert parse_chat(broken, 3).tokens == ()


def test_completion_logprobs_legacy_shape():
    choice = {"text": " 4", "finish_reason": "length", "logprobs": {
        "tokens": [" ", "4"], "token_logprobs": [-0.5, -0.25],
        "top_logprobs": [{" ": -0.5, " The": -1.5, "4": -2.0}, {"4": -0.25, "5": -3.0}], "text_offset": [40, 41]}}
    parsed = parse_completion(choice, top_n=2)
    assert parsed.offsets == ((0, 1), (1, 2))
    assert [[a.token for a in t.top] for t in parsed.tokens] == [[" ", " The"], ["4", "5"]]
    assert sum(t.logprob for t in parsed.tokens) == pytest.approx(-0.75)


def test_offsets_when_the_tokens_do_not_spell_the_text():
    # A server that normalises the text (strips a leading space) after generating it.
    assert token_offsets("Paris", [" Par", "is"]) == ((0, 3), (3, 5))
    assert token_offsets("Paris", [" Lon", "don"]) == ((0, 0), (0, 0))  # nothing shared: no spans
    assert token_offsets("Paris", ["Par", "is"]) == ((0, 3), (3, 5))
