"""Parsing one OpenAI-compatible choice into the engine's answer, log-probs and char offsets.

Pure functions over decoded JSON, so they are tested without a server too. Two shapes:
- chat: `choice.message.content`, `choice.logprobs.content = [{token, logprob, bytes,
  top_logprobs: [{token, logprob, bytes}]}]`;
- completions (legacy): `choice.text`, `choice.logprobs = {tokens, token_logprobs,
  top_logprobs: [{token: logprob}], text_offset}`.

Servers name tokens by their text, not their id: every id is UNKNOWN_TOKEN_ID. Each token's
char span in the answer is rebuilt from the texts (from the `bytes` where every token has them,
since a token may hold half a UTF-8 character), as engine.generate.decode_with_offsets does for
local runs: spans are monotone, never overlap and always index into the text.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from engine.types import TokenLogprob, TopLogprob

UNKNOWN_TOKEN_ID = -1


@dataclass(frozen=True)
class ParsedChoice:
    text: str
    finish_reason: str  # "stop" | "length"
    tokens: tuple[TokenLogprob, ...]
    offsets: tuple[tuple[int, int], ...]

    @property
    def has_logprobs(self) -> bool:
        return bool(self.tokens)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)  # -inf is a real log-prob (a token the server forced)


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
    return "length" if reason == "length" else "stop"


def _trim_past_text(text: str, tokens: list[TokenLogprob], offsets: tuple[tuple[int, int], ...]):
    """Drop trailing tokens that add nothing to the text (a stop token the server listed)."""
    n = len(tokens)
    joined = "".join(t.token for t in tokens)
    while n and joined != text and offsets[n - 1][0] == offsets[n - 1][1] == len(text) and tokens[n - 1].token:
        n -= 1
    return tuple(tokens[:n]), offsets[:n]


def parse_chat(choice: dict, top_n: int) -> ParsedChoice:
    text = ((choice.get("message") or {}).get("content")) or ""
    content = ((choice.get("logprobs") or {}).get("content")) or []
    tokens: list[TokenLogprob] = []
    raws: list[bytes] = []
    for entry in content:
        logprob = _number(entry.get("logprob"))
        if logprob is None:
            return ParsedChoice(text, _finish(choice.get("finish_reason")), (), ())
        top = ()
        if top_n:
            alts = [(a.get("token", ""), _number(a.get("logprob"))) for a in entry.get("top_logprobs") or []]
            alts = sorted(((t, v) for t, v in alts if v is not None), key=lambda a: -a[1])[:top_n]
            top = tuple(TopLogprob(UNKNOWN_TOKEN_ID, str(t), v) for t, v in alts)
        tokens.append(TokenLogprob(UNKNOWN_TOKEN_ID, str(entry.get("token", "")), logprob, top))
        if isinstance(entry.get("bytes"), list):
            raws.append(bytes(entry["bytes"]))
    raw = raws if raws and len(raws) == len(tokens) else None
    offsets = token_offsets(text, [t.token for t in tokens], raw)
    kept, offsets = _trim_past_text(text, tokens, offsets)
    return ParsedChoice(text, _finish(choice.get("finish_reason")), kept, offsets)


def parse_completion(choice: dict, top_n: int) -> ParsedChoice:
    text = choice.get("text") or ""
    lp = choice.get("logprobs") or {}
    pieces = lp.get("tokens") or []
    values = lp.get("token_logprobs") or []
    tops = lp.get("top_logprobs") or [None] * len(pieces)
    tokens: list[TokenLogprob] = []
    if len(values) != len(pieces):
        pieces = []
    for piece, value, alts in zip(pieces, values, tops):
        logprob = _number(value)
        if logprob is None:
            return ParsedChoice(text, _finish(choice.get("finish_reason")), (), ())
        top = ()
        if top_n and isinstance(alts, dict):
            ranked = sorted(((t, _number(v)) for t, v in alts.items()), key=lambda a: -(a[1] if a[1] is not None else -math.inf))
            top = tuple(TopLogprob(UNKNOWN_TOKEN_ID, str(t), v) for t, v in ranked[:top_n] if v is not None)
        tokens.append(TokenLogprob(UNKNOWN_TOKEN_ID, str(piece), logprob, top))
    offsets = token_offsets(text, [t.token for t in tokens])
    kept, offsets = _trim_past_text(text, tokens, offsets)
    return ParsedChoice(text, _finish(choice.get("finish_reason")), kept, offsets)


def parse_choice(choice: dict, endpoint: str, top_n: int) -> ParsedChoice:
    """One choice of a chat or completions answer."""
    return parse_chat(choice, top_n) if endpoint == "chat" else parse_completion(choice, top_n)
