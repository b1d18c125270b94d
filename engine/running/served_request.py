"""What one request to an OpenAI-compatible server holds: where and how to ask (ServerSettings),
the prompt as text, the decoding fields, the stop strings and the JSON body.

Pure values and functions, apart from the server (engine.running.backend_server sends them):
- the `chat` endpoint gets the prompt as one user message (never a system role, as for local
  runs: Mistral has none). The driver has no tokenizer then, so `TextTokenizer` plans the
  batches: its "token ids" are the prompt's code points, turned back here into the exact text;
- the `completions` endpoint gets the decoded planned ids of the model's real tokenizer (chat
  template applied, BOS included) and the local run's stop tokens as stop strings;
- greedy decoding (temperature 0) unless the config samples; the config's seed is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Endpoint = Literal["chat", "completions"]
_OPENAI_MAX_STOPS = 4  # the OpenAI API takes at most four stop strings
# Penalties outside the OpenAI API that servers apply by default (llama.cpp: repeat_penalty 1.1)
# and that would move greedy decoding off the argmax: set neutral, as local runs set theirs.
# Hosted APIs refuse unknown fields: ServerBackend.start drops them there (and records that it did).
NEUTRAL_EXTENSIONS = {"repetition_penalty": 1.0, "repeat_penalty": 1.0}


@dataclass(frozen=True)
class ServerSettings:
    """Where and how to ask; never holds the key itself, only the variable's name."""

    base_url: str
    model: str
    endpoint: Endpoint = "chat"
    concurrency: int | None = None  # None: the server's slots, else probed (engine.running.served_flow)
    # One request: a long answer from a busy server takes a while ($PATTRIEVAL_MAX_REQUEST_S may
    # bound it lower: engine.running.served_client.request_deadline_s).
    timeout_s: float = 300.0
    max_retries: int = 5
    backoff_s: float = 0.5
    api_key_env: str | None = None  # None: OPENAI_API_KEY if set, else no key (a local server)
    logprobs: bool = True


class TextTokenizer:
    """Plans batches without a model tokenizer: the ids are the text's code points.

    engine.running.backends.plan_batches calls `chat_input_ids_for(tokenizer, text)`, which, for a
    tokenizer without a chat template or BOS, is `tokenizer(text)["input_ids"]`; `decode` gives
    the text back unchanged. Batches are then sorted by characters instead of tokens."""

    chat_template = None
    bos_token_id = None
    eos_token_id = None
    pad_token_id = None
    unk_token_id = None

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        return {"input_ids": [ord(c) for c in text]}

    @staticmethod
    def decode(ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return "".join(map(chr, ids))

    def __len__(self) -> int:
        return 0x110000


def sampling_fields(config: Any) -> dict:
    """Decoding fields every request carries, from an engine.generation.generate.GenerationConfig."""
    fields: dict[str, Any] = {"max_tokens": int(config.max_new_tokens), "seed": int(config.seed)}
    if getattr(config, "do_sample", False):
        fields.update(temperature=float(config.temperature), top_p=float(config.top_p))
        if getattr(config, "top_k_sampling", 0):
            fields["top_k"] = int(config.top_k_sampling)  # vLLM/llama.cpp extension: hosted APIs may refuse it
    else:
        fields["temperature"] = 0.0
    return fields


def stop_strings(tokenizer: Any) -> tuple[str, ...]:
    """The local run's stop tokens as text, for the completions endpoint."""
    from engine.generation.models import stop_token_ids_for

    ids = stop_token_ids_for(tokenizer, None)
    return tuple(dict.fromkeys(tokenizer.decode([i], skip_special_tokens=False) for i in ids))[:_OPENAI_MAX_STOPS]


def request_body(settings: ServerSettings, config: Any, tokenizer: Any, prompt: Any, *,
                 extensions: dict[str, Any], stops: Sequence[str] = (), max_tokens: int | None = None) -> dict:
    """The request for one planned row: its code points (chat) or token ids (completions);
    `extensions`: the non-OpenAI fields the server takes (NEUTRAL_EXTENSIONS, or none)."""
    top_n = int(getattr(config, "top_n_logprobs", 0) or 0)
    body: dict[str, Any] = {"model": settings.model, **sampling_fields(config), "n": 1, "stream": False,
                            "frequency_penalty": 0.0, "presence_penalty": 0.0, **extensions}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if settings.endpoint == "chat":
        text = prompt if isinstance(prompt, str) else TextTokenizer.decode(prompt)
        body["messages"] = [{"role": "user", "content": text}]
        if settings.logprobs:
            body["logprobs"] = True
            # Sent even when 0: llama-cpp-python's server returns no log-probs at all without it.
            body["top_logprobs"] = top_n
    else:
        body["prompt"] = tokenizer.decode(list(prompt), skip_special_tokens=False)
        if stops:
            body["stop"] = list(stops)
        if settings.logprobs:
            body["logprobs"] = max(top_n, 1)  # legacy API: N alternatives, the chosen one always
    return body
