"""Is a cited document used? The answer's total log-probability under prompt variants, with the
answer's text held fixed (teacher forcing), as `propensity` reads an answer.

The prompt is chat-templated as generation fed it (engine.generation.models.chat_input_ids); the
answer is encoded on its own, without special tokens, control-token strings as text (as
engine.judges.propensity encodes it), and appended. The score of a variant is the sum over the
answer's tokens of log P(token | prompt, answer before it). The variants of one answer share
their prompt up to the first document they differ in: that prefix is read once and its cache
copied into every row (engine.judges.propensity.score_rows, which pads and batches).

Torch-bound core: no store here (engine.usecases.judges.used reads and writes).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from engine.judges.propensity import score_rows


def answer_token_ids(tokenizer: Any, answer: str) -> list[int]:
    """The answer's tokens as they are scored (module docstring)."""
    return list(tokenizer(answer, add_special_tokens=False, split_special_tokens=True)["input_ids"])


def answer_logprobs(loaded: Any, prompts: Sequence[str], answer: str, *, batch_size: int) -> list[float]:
    """Per prompt of `prompts`: the answer's summed log-probability after it; one row per prompt,
    `batch_size` rows per forward pass."""
    from engine.generation.models import chat_input_ids

    tail = answer_token_ids(loaded.tokenizer, answer)
    if not tail:
        raise ValueError("the answer has no tokens")
    prompt_ids = [chat_input_ids(loaded, p) for p in prompts]
    # The shared prefix stops a token short of the shortest prompt: the last prompt token's
    # logits predict the answer's first token, so every row keeps one.
    k = min(len(os.path.commonprefix(prompt_ids)), min(len(ids) for ids in prompt_ids) - 1)
    rows = [([*ids[k:], *tail], len(tail)) for ids in prompt_ids]
    return score_rows(loaded, rows, batch_size=batch_size, prefix=prompt_ids[0][:k])


def prompt_length(loaded: Any, prompt: str, answer: str) -> int:
    """Tokens of the chat-templated prompt and the answer together."""
    from engine.generation.models import chat_input_ids

    return len(chat_input_ids(loaded, prompt)) + len(answer_token_ids(loaded.tokenizer, answer))
