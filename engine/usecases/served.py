"""A run on an OpenAI-compatible server (engine.running.backend_server), for the run and study use cases.

The served model is named by the server, not loaded here: the request's model and label are
the served name, and its quantization, dtype and device read "server" (quantize is part of a
run's identity, so a served run never resumes a local one of the same name, or the reverse).
The backend starts (URL, key, model and log-probs checked, one line each) before any run is
claimed. After generation each run's config JSON gets a `served` entry: the base URL without
credentials, the requested and reported model names, system fingerprints, whether log-probs
came back, and the prompt and completion tokens of its answers, summed over every invocation.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from engine.errors import FieldError
from engine.running.run_request import generation_config
from engine.running.served_request import ServerSettings

if TYPE_CHECKING:
    from engine.running.run_request import RunRequest

SERVED: Final = "server"  # quantize, dtype and device of a served run


@dataclass(frozen=True)
class ServerOptions:
    """Generate on an OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp, a hosted API);
    this process plans, measures nothing and writes the store (engine.usecases.served)."""

    base_url: str  # e.g. http://127.0.0.1:8000/v1; stored without credentials
    model: str  # the name the server serves the model under
    tokenizer: str | None = None  # a local tokenizer (folder or Hub id): the completions endpoint
    concurrency: int | None = None  # requests in flight; None: the server's slots, else probed
    api_key_env: str | None = None  # the key's environment variable; None: OPENAI_API_KEY when set
    timeout: float = 300.0  # seconds per request


def check_api_key_env(name: str | None) -> None:
    """Refuse, in one line, a key where the NAME of its environment variable belongs (every face)."""
    if name is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        # Refused, not used: a key typed here would sit in the shell history and in `ps`.
        raise FieldError("api_key_env", "{api_key_env} takes the NAME of an environment variable holding the key, "
                         "not the key (export it first, e.g. export OPENAI_API_KEY=...; keys are never taken on the "
                         "command line)")


def check_server(server: ServerOptions | None, ray: Any) -> None:
    """Refuse server options that cannot work, in one line, before anything is read."""
    if server is None:
        return
    if ray is not None:
        raise FieldError("backend", "{backend} server and {backend} ray exclude each other: choose one")
    check_api_key_env(server.api_key_env)
    if not server.base_url:
        raise FieldError("base_url", "{backend} server needs {base_url} (for example http://127.0.0.1:8000/v1)")
    if not server.model or server.model in ("auto", "smoke"):
        raise FieldError("model", "{backend} server needs {model}: the model name the server serves "
                         "(GET /v1/models lists them)")
    if server.concurrency is not None and server.concurrency < 1:
        raise FieldError("concurrency", "{concurrency} must be at least 1")
    if not (math.isfinite(server.timeout) and server.timeout > 0):
        raise FieldError("request_timeout", "{request_timeout} must be a number of seconds above 0, not {timeout}",
                         timeout=server.timeout)


def served_run(run: RunRequest, server: ServerOptions) -> RunRequest:
    """The request as a served run records it: the served name, "server" for how it was loaded."""
    return replace(run, model=server.model, model_label=server.model, quantize=SERVED, dtype=SERVED, device=SERVED)


def server_backend(run: RunRequest, server: ServerOptions, stop: Callable[[], bool] | None = None):
    """A started ServerBackend for `run` (UserError, one line, when the server cannot serve it).

    With `server.tokenizer` the driver plans with that tokenizer and sends the completions
    endpoint the exact text a local run would generate from."""
    from engine.running.backend_server import ServerBackend, with_endpoint

    tokenizer = load_tokenizer(server.tokenizer, run) if server.tokenizer else None
    settings = with_endpoint(ServerSettings(server.base_url, server.model, concurrency=server.concurrency,
                                            timeout_s=server.timeout, api_key_env=server.api_key_env), tokenizer)
    return ServerBackend(settings, generation_config(run), tokenizer, interrupted=stop).start()


def load_tokenizer(name: str, run: RunRequest | None) -> Any:
    """A Hugging Face tokenizer (a folder or a Hub id), as a local run of that model loads it."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        return AutoTokenizer.from_pretrained(name, token=(run.hf_token if run is not None else None) or None)
    except (OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise FieldError("tokenizer", "{tokenizer} {name}: cannot load a tokenizer ({first})", name=name,
                         first=first) from None


def record_served(sink: Any, backend: Any) -> None:
    """Each run's `served` entry: this invocation's usage added to what its config holds.

    Called in a `finally` (a cancelled or failed run used tokens too), so a store that cannot
    take it (a full disk) is warned about, never raised: the error that ended the run stays the one said."""
    try:
        _record_served(sink, backend)
    except Exception as err:  # noqa: BLE001 - see above
        logging.getLogger(__name__).warning("the served runs' token usage was not recorded: %s", err)


def _record_served(sink: Any, backend: Any) -> None:
    from engine.running.backend_server import served_provenance_config

    for run_id in list(backend.info.usage_by_run):
        now = served_provenance_config(backend, run_id)

        def merged(before: Any, now: dict = now) -> dict:
            if not isinstance(before, dict):
                return now
            fingerprints = sorted({*before.get("system_fingerprints", ()), *now["system_fingerprints"]})
            return {**now, "system_fingerprints": fingerprints,
                    "prompt_tokens": int(before.get("prompt_tokens") or 0) + now["prompt_tokens"],
                    "completion_tokens": int(before.get("completion_tokens") or 0) + now["completion_tokens"]}

        sink.update_run_config(run_id, "served", merged)


def served_model(server: ServerOptions, stop: Callable[[], bool] | None = None):
    """A started engine.running.backend_server.ServedModel: explain and verify generate on the server."""
    from engine.running.backend_server import ServedModel

    if not server.model:
        raise FieldError("model", "{backend} server needs {model}: the model name the server serves")
    tokenizer = load_tokenizer(server.tokenizer, None) if server.tokenizer else None
    settings = ServerSettings(server.base_url, server.model, concurrency=server.concurrency, timeout_s=server.timeout,
                              api_key_env=server.api_key_env)
    return ServedModel(settings, tokenizer, interrupted=stop).start()
