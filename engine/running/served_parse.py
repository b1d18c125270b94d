"""Parsing one OpenAI-compatible choice into the engine's answer, log-probs and char offsets.

Pure functions over decoded JSON, so they are tested without a server too. Two shapes:
- chat: `choice.message.content`, `choice.logprobs.content = [{token, logprob, bytes,
  top_logprobs: [{token, logprob, bytes}]}]`;
- completions (legacy): `choice.text`, `choice.logprobs = {tokens, token_logprobs,
  top_logprobs: [{token: logprob}], text_offset}`.

Nothing a server sends is trusted: every field read is checked for its type and range, and a
choice with more text or log-prob entries than `max_tokens` new tokens can hold is refused rather
than cut (cut text would be stored as if the model had said it). Refusals raise MalformedAnswer,
one line that engine.running.backend_server prefixes with the server's address; a null log-prob or no
log-probs at all is not malformed (servers that give none) and yields no tokens.

Servers name tokens by their text, not their id: every id is UNKNOWN_TOKEN_ID. Each token's
char span in the answer is rebuilt from the texts (from the `bytes` where every token has them,
since a token may hold half a UTF-8 character), as engine.generation.generate.decode_with_offsets does for
local runs: spans are monotone, never overlap and always index into the text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from engine.running.served_client import max_answer_bytes
from engine.types import TokenLogprob, TopLogprob

UNKNOWN_TOKEN_ID = -1
# A token's text is a few characters (a vocabulary's longest are runs of spaces or symbols, far
# shorter): more than this per new token asked for is not an answer, whatever the server says.
MAX_CHARS_PER_TOKEN = 1024
# Bytes of JSON one log-prob entry may take (its token escaped, its bytes listed): an estimate
# with room to spare, since a 16-byte token so written is about 250 bytes.
BYTES_PER_LOGPROB_ENTRY = 1024
MAX_COUNT = 2**31 - 1  # token counts are stored as INTEGER (store/rows.py)
LOGPROB_SLACK = 1e-3  # a log-prob is <= 0; servers round a certain token's to a hair above


class MalformedAnswer(ValueError):
    """A server's answer we refuse: a field of the wrong type or out of range (the message names it)."""


def answer_byte_cap(max_tokens: int | None, config: Any) -> int:
    """The most bytes an answer may take: max_answer_bytes() ($PATTRIEVAL_MAX_ANSWER_MB, read now)
    plus an allowance per log-prob entry, for `max_tokens` new tokens (None: the config's
    max_new_tokens) with the config's top-n."""
    n = int(config.max_new_tokens if max_tokens is None else max_tokens)
    return max_answer_bytes() + max(0, n) * (1 + max(0, int(getattr(config, "top_n_logprobs", 0) or 0))) * \
        BYTES_PER_LOGPROB_ENTRY


def check_answer(answer: Any) -> dict:
    """`answer` if it is a JSON object whose `model` and `system_fingerprint` are text or absent."""
    if not isinstance(answer, dict):
        raise MalformedAnswer(f"the answer is a JSON {_kind(answer)}, not an object")
    for name in ("model", "system_fingerprint"):
        if answer.get(name) is not None and not isinstance(answer[name], str):
            raise MalformedAnswer(f"'{name}' is a {_kind(answer[name])}, not text")
    return answer


def first_choice(answer: dict) -> dict:
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedAnswer("'choices' is not a list of choices" if choices else "the answer has no choice")
    return _obj(choices[0], "choices[0]")


def usage_counts(answer: dict) -> tuple[int, int]:
    """(prompt tokens, completion tokens) of `usage`; 0 where absent or null."""
    usage = answer.get("usage")
    if usage is None:
        return 0, 0
    usage = _obj(usage, "usage")
    return _count(usage.get("prompt_tokens"), "usage.prompt_tokens"), _count(usage.get("completion_tokens"),
                                                                            "usage.completion_tokens")


def _count(value: Any, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise MalformedAnswer(f"'{where}' is {_shown(value)}, not a count from 0 to {MAX_COUNT:,}")
    return value


def _kind(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, (int, float, bool)) or value is None else f"a {_kind(value)}"
    return text if len(text) <= 40 else text[:37] + "..."


def _obj(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise MalformedAnswer(f"'{where}' is a {_kind(value)}, not an object")
    return value


def _list(value: Any, where: str) -> list:
    """A list, or [] for null/absent."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise MalformedAnswer(f"'{where}' is a {_kind(value)}, not an array")
    return value


def _text(value: Any, where: str) -> str:
    """Text, or "" for null/absent."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MalformedAnswer(f"'{where}' is a {_kind(value)}, not text")
    return value


@dataclass(frozen=True)
class ParsedChoice:
    text: str
    finish_reason: str  # "stop" | "length"
    tokens: tuple[TokenLogprob, ...]
    offsets: tuple[tuple[int, int], ...]

    @property
    def has_logprobs(self) -> bool:
        return bool(self.tokens)


def _number(value: Any, where: str = "logprob") -> float | None:
    """A log-prob: a number <= 0 (-inf is real: a token the server forced); None for null."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MalformedAnswer(f"'{where}' is a {_kind(value)}, not a number")
    number = float(value)
    if not number <= LOGPROB_SLACK:  # NaN fails this too
        raise MalformedAnswer(f"'{where}' is {_shown(value)}, not a log-probability (<= 0)")
    return min(number, 0.0)


def token_offsets(text: str, pieces: list[str], raw: list[bytes] | None = None) -> tuple[tuple[int, int], ...]:
    """Each piece's (start, end) in `text`: from the end of the previous prefix to the end of its
    own, counting only the part of the prefix the text shares. A server that strips the answer's
    leading whitespace (the tokens still hold it) is aligned as if it had not."""
    if raw is not None:
        prefixes = []
        joined_bytes = b""
        for chunk in raw:
            joined_bytes += chunk
            prefixes.append(joined_bytes.decode("utf-8", errors="ignore"))  # half a character waits
    else:
        prefixes, joined = [], ""
        for piece in pieces:
            joined += piece
            prefixes.append(joined)
    full = prefixes[-1] if prefixes else ""
    lead = len(full) - len(full.lstrip())
    shift = lead if lead and not text[:1].isspace() and full[lead:lead + len(text)] == text[: len(full) - lead] else 0
    target = full[:shift] + text
    offsets: list[tuple[int, int]] = []
    start = 0
    for prefix in prefixes:
        end = len(prefix) if target.startswith(prefix) else len(os.path.commonprefix([prefix, target]))
        end = max(start, end)
        offsets.append((max(0, start - shift), max(0, end - shift)))
        start = end
    return tuple(offsets)


def _finish(reason: Any) -> str:
    if reason is not None and not isinstance(reason, str):
        raise MalformedAnswer(f"'finish_reason' is a {_kind(reason)}, not text")
    return "length" if reason == "length" else "stop"


def _bytes(value: Any, where: str) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255
                                              for b in value):
        raise MalformedAnswer(f"'{where}' is not an array of bytes (0 to 255)")
    return bytes(value)


def _trim_past_text(text: str, tokens: list[TokenLogprob], offsets: tuple[tuple[int, int], ...]):
    """Drop trailing tokens that add nothing to the text (a stop token the server listed)."""
    n = len(tokens)
    joined = "".join(t.token for t in tokens)
    while n and joined != text and offsets[n - 1][0] == offsets[n - 1][1] == len(text) and tokens[n - 1].token:
        n -= 1
    return tuple(tokens[:n]), offsets[:n]


def parse_chat(choice: dict, top_n: int) -> ParsedChoice:
    message = choice.get("message")
    text = _text(_obj(message, "message").get("content") if message is not None else None, "message.content")
    finish = _finish(choice.get("finish_reason"))
    logprobs = choice.get("logprobs")
    content = _list(_obj(logprobs, "logprobs").get("content") if logprobs is not None else None, "logprobs.content")
    tokens: list[TokenLogprob] = []
    raws: list[bytes] = []
    dropped = False
    for i, entry in enumerate(content):
        where = f"logprobs.content[{i}]"
        entry = _obj(entry, where)
        token = _text(entry.get("token"), f"{where}.token")
        logprob = _number(entry.get("logprob"), f"{where}.logprob")
        raw = _bytes(entry.get("bytes"), f"{where}.bytes")
        alts = []
        for j, alt in enumerate(_list(entry.get("top_logprobs"), f"{where}.top_logprobs")):
            alt = _obj(alt, f"{where}.top_logprobs[{j}]")
            value = _number(alt.get("logprob"), f"{where}.top_logprobs[{j}].logprob")
            alts.append((_text(alt.get("token"), f"{where}.top_logprobs[{j}].token"), value))
        if logprob is None:  # a server that gives none for some token: none for the answer
            dropped = True
            continue
        ranked = sorted(((t, v) for t, v in alts if v is not None), key=lambda a: -a[1])[:top_n] if top_n else []
        tokens.append(TokenLogprob(UNKNOWN_TOKEN_ID, token, logprob,
                                   tuple(TopLogprob(UNKNOWN_TOKEN_ID, t, v) for t, v in ranked)))
        if raw is not None:
            raws.append(raw)
    if dropped:
        return ParsedChoice(text, finish, (), ())
    raw_all = raws if raws and len(raws) == len(tokens) else None
    offsets = token_offsets(text, [t.token for t in tokens], raw_all)
    kept, offsets = _trim_past_text(text, tokens, offsets)
    return ParsedChoice(text, finish, kept, offsets)


def parse_completion(choice: dict, top_n: int) -> ParsedChoice:
    text = _text(choice.get("text"), "text")
    finish = _finish(choice.get("finish_reason"))
    lp = choice.get("logprobs")
    lp = _obj(lp, "logprobs") if lp is not None else {}
    pieces = [_text(p, f"logprobs.tokens[{i}]") for i, p in enumerate(_list(lp.get("tokens"), "logprobs.tokens"))]
    values = [_number(v, f"logprobs.token_logprobs[{i}]")
              for i, v in enumerate(_list(lp.get("token_logprobs"), "logprobs.token_logprobs"))]
    tops = _list(lp.get("top_logprobs"), "logprobs.top_logprobs")
    alternatives: list[list[tuple[str, float]]] = []
    for i, alts in enumerate(tops):
        if alts is not None:
            alts = _obj(alts, f"logprobs.top_logprobs[{i}]")
        ranked = [(str(t), _number(v, f"logprobs.top_logprobs[{i}] value")) for t, v in (alts or {}).items()]
        alternatives.append(sorted(((t, v) for t, v in ranked if v is not None), key=lambda a: -a[1])[:top_n])
    if len(values) != len(pieces) or any(v is None for v in values):
        return ParsedChoice(text, finish, (), ())  # no usable log-probs: a server that gives none
    alternatives += [[]] * (len(pieces) - len(alternatives))
    tokens = [TokenLogprob(UNKNOWN_TOKEN_ID, piece, float(value),  # type: ignore[arg-type]
                           tuple(TopLogprob(UNKNOWN_TOKEN_ID, t, v) for t, v in alts) if top_n else ())
              for piece, value, alts in zip(pieces, values, alternatives, strict=True)]
    offsets = token_offsets(text, [t.token for t in tokens])
    kept, offsets = _trim_past_text(text, tokens, offsets)
    return ParsedChoice(text, finish, kept, offsets)


def parse_choice(choice: dict, endpoint: str, top_n: int, max_tokens: int | None = None) -> ParsedChoice:
    """One choice of a chat or completions answer; with `max_tokens` (what was asked for), one
    with more text or log-prob entries than that many tokens can hold is refused."""
    parsed = parse_chat(choice, top_n) if endpoint == "chat" else parse_completion(choice, top_n)
    if max_tokens is not None:
        if len(parsed.text) > max(1, max_tokens) * MAX_CHARS_PER_TOKEN:
            raise MalformedAnswer(f"the answer has {len(parsed.text):,} characters, more than {max_tokens:,} new "
                                  f"tokens hold ({MAX_CHARS_PER_TOKEN:,} characters a token at most)")
        if len(parsed.tokens) > max_tokens + 1:  # + 1: the stop token some servers list
            raise MalformedAnswer(f"the answer has {len(parsed.tokens):,} log-prob entries for at most "
                                  f"{max_tokens:,} new tokens")
    return parsed
