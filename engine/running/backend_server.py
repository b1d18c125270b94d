"""ServerBackend: the planned batches answered by an OpenAI-compatible server, written by the driver.

`python -m engine run ... --backend server --base-url URL --model NAME [--tokenizer PATH]
[--concurrency N] [--api-key-env VAR]`

- **The prompt is ours** (engine.running.served_request builds each request): each planned row is one
  user turn built by engine.prompting.prompts. `chat` (default): POST /chat/completions, the server
  applies the model's chat template. `completions` (a local tokenizer named): the driver plans
  with the model's real tokenizer, exactly as a local run, and POST /completions sends the exact
  text (`add_special_tokens: false` for vLLM); the server's `usage.prompt_tokens` is checked
  against the planned length and a difference is said once. Greedy unless the config samples.
- **Log-probs:** `logprobs`/`top_logprobs` are asked for and parsed into TokenLogprob records.
  Servers give token text, not ids: `token_id` is UNKNOWN_TOKEN_ID (-1). Char offsets are
  rebuilt from the token texts so citation confidence works. A server that returns none gets
  one warning, and the rows carry no tokens (the store writes empty lists / NULL top-n).
- **Throughput:** requests in flight on daemon threads, as many as fit the server
  (engine.running.served_flow: --concurrency, else the server's slots, else probed from 1), at most
  twice that many queued ahead; retries with backoff on 429/5xx/dropped connections
  (engine.running.served_client), a wall-clock deadline per request, and a request that timed out is never sent
  again: the run fails, "busy", with what was stored kept. Results come back in the planned
  order, each batch once, so the one write loop sees what a LocalBackend would give it. A
  generate that ends early (Ctrl-C, a cancel, an error) shuts the sockets of its requests.
- **Bad input** (unreachable URL, wrong key, unknown model, logprobs refused) fails `start()`
  with one UserError line within seconds: GET /models, then one 1-token request. A server that
  refuses the connection is gone ("no server answers"); one that takes it and does not answer
  in time is busy, and is said so.
- **Keys:** read from an environment variable at `start`; only the client holds it. **Answers**
  are capped in bytes and checked field by field (engine.running.served_parse): a refusal is one line.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from engine.errors import RunCancelled, UserError
from engine.running.backends import BatchResult, PlannedBatch
from engine.running.provenance import Provenance
from engine.running.served_client import (
    MAX_REQUEST_S_ENV,
    Cancel,
    Client,
    ServedAnswerError,
    ServedConnectionError,
    ServedHTTPError,
    redact_url,
)
from engine.running.served_flow import ConcurrencyLimit, Flow, choose_limit, server_slots
from engine.running.served_parse import (
    MalformedAnswer,
    answer_byte_cap,
    check_answer,
    first_choice,
    parse_choice,
    usage_counts,
)
from engine.running.served_request import NEUTRAL_EXTENSIONS, ServerSettings, TextTokenizer, request_body, stop_strings
from engine.types import GenerationOutput

log = logging.getLogger(__name__)

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
PREFLIGHT_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = max(PREFLIGHT_TIMEOUT_S, 60.0)  # the first completion may load the model


@dataclass
class ServedInfo:
    """What a served run records beside the usual provenance (none of it hashed, no key)."""

    base_url: str  # redacted: no credentials, query or fragment
    endpoint: str
    requested_model: str
    reported_model: str | None = None
    system_fingerprints: set[str] = field(default_factory=set)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    logprobs_returned: bool | None = None
    neutral_penalties_sent: bool = True
    concurrency: str | None = None  # requests in flight and how chosen (ConcurrencyLimit.describe)
    # run id -> [prompt tokens, completion tokens] of its answers (the write loop's batches say whose)
    usage_by_run: dict[str, list[int]] = field(default_factory=dict)

    def as_config(self) -> dict:
        """For the run's config JSON (the integrator's `served` entry)."""
        return {
            "base_url": self.base_url,
            "endpoint": self.endpoint,
            "requested_model": self.requested_model,
            "reported_model": self.reported_model,
            "system_fingerprints": sorted(self.system_fingerprints),
            "logprobs_returned": self.logprobs_returned,
            "neutral_penalties_sent": self.neutral_penalties_sent,
            "concurrency": self.concurrency,
        }


def read_api_key(env_name: str | None) -> str | None:
    """The key from `env_name` (must be set), or from OPENAI_API_KEY when it is set, else None."""
    if env_name:
        value = os.environ.get(env_name)
        if not value:
            raise UserError(f"--api-key-env {env_name}: that environment variable is not set or empty")
        return value
    return os.environ.get(DEFAULT_KEY_ENV) or None


class ServerBackend:
    """Generates planned batches on an OpenAI-compatible server; `start` before `generate`."""

    def __init__(self, settings: ServerSettings, config: Any, tokenizer: Any = None,
                 interrupted: Callable[[], bool] | None = None) -> None:
        if settings.endpoint not in ("chat", "completions"):
            raise UserError(f"unknown endpoint '{settings.endpoint}': use chat or completions")
        if settings.endpoint == "completions" and tokenizer is None:
            raise UserError("the completions endpoint needs a local tokenizer (--tokenizer) to apply the chat template")
        if settings.concurrency is not None and settings.concurrency < 1:
            raise UserError("--concurrency must be at least 1")
        self.settings = settings
        self.config = config  # engine.generation.generate.GenerationConfig
        self.tokenizer = tokenizer if settings.endpoint == "completions" else TextTokenizer()
        self.interrupted = interrupted
        self.info = ServedInfo(redact_url(settings.base_url), settings.endpoint, settings.model)
        self.provenance: Provenance | None = None
        self.fingerprint = None  # one server: nothing for the write loop to compare
        self._client: Client | None = None
        self._limit: ConcurrencyLimit | None = None
        self._lock = threading.Lock()
        self._said: set[str] = set()
        self._stops = stop_strings(tokenizer) if settings.endpoint == "completions" else ()
        self._extensions: dict[str, Any] = dict(NEUTRAL_EXTENSIONS)
        if settings.endpoint == "completions":
            self._extensions["add_special_tokens"] = False  # vLLM: the text holds its BOS already

    # -- start: everything a user can get wrong, in one line, before anything is written --

    def start(self) -> ServerBackend:
        s = self.settings
        try:
            key = read_api_key(s.api_key_env)
            self._client = Client(s.base_url, key, timeout_s=s.timeout_s, max_retries=s.max_retries,
                                  backoff_s=s.backoff_s, on_retry=lambda why: log.info("server: %s", why))
        except ValueError as err:
            raise UserError(f"--base-url: {err}") from None
        where = self.info.base_url
        key_hint = (f"check ${s.api_key_env or DEFAULT_KEY_ENV}" if key else
                    f"set {DEFAULT_KEY_ENV} or name the key's variable with --api-key-env")
        wait_s = self._client.deadline_s(min(PREFLIGHT_TIMEOUT_S, s.timeout_s))
        try:
            listed = self._client.get("models", max_retries=0, timeout_s=wait_s).body
        except ServedConnectionError as err:
            if err.kind == "reset":  # something listens there, and dropped the request
                raise UserError(f"the server at {where} dropped GET models without an answer ({err}): is it an "
                                "OpenAI-compatible server, and does its log show a crash?") from None
            if err.kind == "timed out":  # it took the connection: there, but busy (llama-cpp-python's
                # GET models waits for the model, which an earlier run's abandoned requests may hold)
                raise UserError(f"the server at {where} is busy: it took the connection but did not answer GET models "
                                f"within {wait_s:g} s; it is still computing earlier requests (perhaps an interrupted "
                                "run's) or is stuck: try again when it is idle, or restart it") from None
            raise UserError(f"no server answers at {where} ({err}); check --base-url and that the server runs") from None
        except ServedAnswerError as err:
            raise self._refused(err, "GET models") from None
        except ServedHTTPError as err:
            if err.status in (401, 403):
                raise UserError(f"the server at {where} refused the API key (HTTP {err.status}): {key_hint}") from None
            if err.status == 404:
                raise UserError(f"no OpenAI-compatible API at {where} (GET models: HTTP 404); "
                                "the base URL usually ends in /v1") from None
            raise UserError(f"the server at {where} failed GET models ({err})") from None
        data = listed.get("data") if isinstance(listed, dict) else None
        names = [m["id"] for m in (data if isinstance(data, list) else []) if isinstance(m, dict) and isinstance(m.get("id"), str)]
        if names and s.model not in names:
            shown = ", ".join(map(str, names[:5])) + (", ..." if len(names) > 5 else "")
            raise UserError(f"unknown model '{s.model}' at {where}: it serves {shown}")
        answer = self._probe()
        self._limit = self._concurrency(wait_s)
        self.info.concurrency = self._limit.describe()
        self.info.reported_model = answer.get("model") or None
        if answer.get("system_fingerprint"):  # its tokens are not the run's: usage starts at 0
            self.info.system_fingerprints.add(str(answer["system_fingerprint"]))
        self.provenance = Provenance(
            revision=None,
            quantization="server",  # the server's business: not visible through the API
            dtype="server",
            device=f"server:{where}",
            library_versions=(),
        )
        return self

    def _started(self) -> Client:
        if self._client is None:
            raise RuntimeError("ServerBackend used before start (or after close)")
        return self._client

    def _probe(self) -> dict:
        """One 1-token request; a server that refuses our non-OpenAI fields is asked again without."""
        for attempt in range(2):
            try:
                body = self._body(self._probe_prompt(), max_tokens=1)
                answer = self._started().post(self._path(), body, max_retries=1, timeout_s=PROBE_TIMEOUT_S,
                                           max_bytes=answer_byte_cap(1, self.config)).body
                return check_answer(answer)
            except ServedConnectionError as err:
                raise self._gone(err, "a 1-token request", self._started().deadline_s(PROBE_TIMEOUT_S)) from None
            except (ServedAnswerError, MalformedAnswer) as err:
                raise self._refused(err, "a 1-token request") from None
            except ServedHTTPError as err:
                text = err.message.lower()
                refused_extension = err.status in (400, 422) and self._extensions and (
                    any(name in text for name in self._extensions) or "unrecognized" in text or "extra" in text)
                if attempt or not refused_extension:
                    raise self._request_error(err) from None
                log.info("server: it refuses non-OpenAI fields; sending without %s", ", ".join(self._extensions))
                self._extensions = {}
                self.info.neutral_penalties_sent = False
        raise AssertionError("unreachable")

    def _concurrency(self, wait_s: float) -> ConcurrencyLimit:
        """--concurrency as given (a warning where the server says it has fewer slots); else the
        server's slots; else probed (engine.running.served_flow)."""
        asked, slots = self.settings.concurrency, server_slots(self._started(), wait_s)
        if asked is not None and slots is not None and asked > slots:
            seconds, knob = self._deadline()
            log.warning("server: --concurrency %d, but the server at %s computes %d request%s at a time: the rest "
                        "wait in its queue, and that wait counts against %s (%g s)", asked,
                        self.info.base_url, slots, "s" if slots != 1 else "", knob, seconds)
        return choose_limit(asked, slots)

    def _deadline(self) -> tuple[float, str]:
        """The seconds one request gets, and what sets them: --request-timeout, or the operator's
        $PATTRIEVAL_MAX_REQUEST_S where that is lower (the one a user would raise)."""
        seconds = self._started().deadline_s()
        return seconds, "--request-timeout" if seconds >= self.settings.timeout_s else MAX_REQUEST_S_ENV

    def _gone(self, err: ServedConnectionError, what: str, timeout_s: float, slow_hint: str = "") -> UserError:
        """A connection error after GET models had answered: the server was there, so the address
        is right and it went away (crashed, stopped, restarted) or is busy (`slow_hint` then)."""
        where = self.info.base_url
        if err.kind == "timed out":
            return UserError(f"the server at {where} is busy: it took {what} but did not answer within {timeout_s:g} s, "
                             f"and the request was not sent again (the server may still be computing it){slow_hint}")
        answered = f"after {err.answered} answer{'s' if err.answered != 1 else ''}" if err.answered else "after answering"
        return UserError(f"the server at {where} went away {answered}: {what} got no answer ({err}); it crashed or "
                         "was stopped: its log says why")

    def _refused(self, err: ServedAnswerError | MalformedAnswer, what: str = "a request") -> UserError:
        return UserError(f"the server at {self.info.base_url} sent a bad answer to {what}, refused: "
                         f"{err.message if isinstance(err, ServedAnswerError) else err}")

    def _request_error(self, err: ServedHTTPError) -> UserError:
        s, where = self.settings, self.info.base_url
        text = err.message.lower()
        if err.status in (401, 403):
            return UserError(f"the server at {where} refused the API key (HTTP {err.status})")
        if err.status == 404 or "model" in text and ("not found" in text or "does not exist" in text):
            return UserError(f"unknown model '{s.model}' at {where} (HTTP {err.status}: {err.message})")
        if "logprob" in text:  # llama.cpp answers its validation errors with a 500
            return UserError(f"the server at {where} rejects log-probs (HTTP {err.status}: {err.message}); "
                             "ask for fewer top log-probs, or none")
        return UserError(f"the server at {where} rejected the request (HTTP {err.status}: {err.message})")

    def _probe_prompt(self):
        if self.settings.endpoint == "chat":
            return "Say OK."
        from engine.generation.models import chat_input_ids_for

        return tuple(chat_input_ids_for(self.tokenizer, "Say OK."))

    # -- requests --

    def _path(self) -> str:
        return "chat/completions" if self.settings.endpoint == "chat" else "completions"

    def _body(self, prompt: Any, max_tokens: int | None = None) -> dict:
        return request_body(self.settings, self.config, self.tokenizer, prompt, extensions=self._extensions,
                            stops=self._stops, max_tokens=max_tokens)

    def _ask(self, ids: tuple[int, ...], cancel: Cancel | None = None,
             flow: Flow | None = None) -> tuple[GenerationOutput, tuple[int, int]]:
        """One row's answer and its (prompt, completion) token usage."""
        if self.interrupted is not None and self.interrupted():
            raise RunCancelled("cancelled (queued requests were not sent)")
        limit, started = self._limit, time.monotonic()
        ticket = limit.ticket() if limit is not None else None
        try:
            answer = self._started().post(self._path(), self._body(ids), cancel=cancel,
                                       max_bytes=answer_byte_cap(None, self.config)).body
            usage = self._note(check_answer(answer))
            output = self._output(answer, len(ids))
        except ServedConnectionError as err:
            if err.kind == "cancelled":
                raise RunCancelled("cancelled (the request in flight was abandoned)") from None
            in_flight = flow.in_flight if flow is not None else 1  # this one included
            seconds, knob = self._deadline()
            raise self._gone(err, "a request", seconds,
                             f"; what was stored is kept, and the same command resumes once it is idle; "
                             f"{in_flight} request{'s were' if in_flight != 1 else ' was'} in flight: raise "
                             f"{knob} or lower --concurrency") from None
        except (ServedAnswerError, MalformedAnswer) as err:
            raise self._refused(err) from None
        except ServedHTTPError as err:
            raise self._request_error(err) from None
        if limit is not None:
            limit.observe(1 + (usage[1] or len(output.tokens)), time.monotonic() - started, self._deadline()[0],
                          ticket)
            with self._lock:
                self.info.concurrency = limit.describe()
        return output, usage

    def _note(self, answer: dict) -> tuple[int, int]:
        counts = usage_counts(answer)
        with self._lock:
            if answer.get("system_fingerprint"):
                self.info.system_fingerprints.add(str(answer["system_fingerprint"]))
            self.info.prompt_tokens += counts[0]
            self.info.completion_tokens += counts[1]
        return counts

    def _say_once(self, key: str, message: str) -> None:
        with self._lock:
            if key in self._said:
                return
            self._said.add(key)
        log.warning(message)

    def _output(self, answer: dict, n_planned: int) -> GenerationOutput:
        parsed = parse_choice(first_choice(answer), self.settings.endpoint,
                              int(getattr(self.config, "top_n_logprobs", 0) or 0), int(self.config.max_new_tokens))
        usage = answer.get("usage")  # checked by usage_counts (_note) before this
        n_prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if self.settings.logprobs and not parsed.has_logprobs and parsed.text:
            self.info.logprobs_returned = False
            self._say_once("no-logprobs", f"the server at {self.info.base_url} returns no log-probs: they are "
                           "stored as NULL, and citation confidence is unknown for this run")
        elif parsed.has_logprobs:
            self.info.logprobs_returned = True
        if self.settings.endpoint == "completions":
            if isinstance(n_prompt, int) and n_prompt != n_planned:
                self._say_once("prompt-length", f"the server counts {n_prompt} prompt tokens where the local "
                               f"tokenizer counts {n_planned}: it tokenizes the prompt differently (a BOS of its own?)")
            n_prompt = n_planned
        return GenerationOutput(
            text=parsed.text,
            tokens=parsed.tokens,
            finish_reason=parsed.finish_reason,
            n_prompt_tokens=int(n_prompt) if isinstance(n_prompt, int) else 0,
            char_offsets=parsed.offsets,
        )

    # -- the backend protocol --

    def generate(self, batches: Sequence[PlannedBatch]) -> Iterator[BatchResult]:
        """Each batch once, in the planned order, while up to `concurrency` requests run."""
        if self._client is None or self._limit is None:
            raise RuntimeError("ServerBackend.generate before start")
        from engine.generation.generate import check_config

        check_config(self.config)  # the local run's checks: the same config fails the same way
        rows = [ids for batch in batches for ids in batch.input_ids]
        window = 2 * self._limit.cap
        cancel = Cancel()
        pool = Flow(lambda ids: self._ask(ids, cancel, pool), self._limit)
        pending: deque[Future] = deque()  # in row order, so popleft is always the next row
        upcoming = iter(rows)
        try:
            def refill() -> None:
                for ids in upcoming:
                    pending.append(pool.submit(ids))
                    if len(pending) >= window:
                        return

            refill()
            for batch in batches:
                outputs = []
                used = self.info.usage_by_run.setdefault(batch.run_id, [0, 0])
                for _ in batch.input_ids:
                    output, (n_prompt, n_completion) = pool.result(pending.popleft(), self.interrupted)
                    outputs.append(output)
                    used[0] += n_prompt
                    used[1] += n_completion
                    refill()
                yield BatchResult(batch.batch_id, tuple(outputs))
        finally:
            # Not waiting: a Ctrl-C, a cancel or an error returns at once. The requests in flight
            # have their sockets shut (the server sees the client go) and their daemon threads end.
            pool.close()
            cancel.cancel()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = None


class ServedModel:
    """A served model where engine.generation.generate.iter_batches takes a loaded one: the explain and
    verify loops (engine.judges.plan.generate_plan) generate on the server through it, unchanged.
    `context_length` None: prompt lengths are the server's to refuse."""

    context_length = None

    def __init__(self, settings: ServerSettings, tokenizer: Any = None,
                 interrupted: Callable[[], bool] | None = None) -> None:
        from engine.generation.generate import GenerationConfig

        self.backend = ServerBackend(with_endpoint(settings, tokenizer), GenerationConfig(max_new_tokens=1), tokenizer,
                                     interrupted=interrupted)
        self.tokenizer = self.backend.tokenizer
        self.label = settings.model

    def start(self) -> ServedModel:
        self.backend.start()
        return self

    def close(self) -> None:
        """Close the connections the server's threads kept alive (engine.judges.plan.close_judge calls it
        when its loop ends)."""
        self.backend.close()

    def iter_batches(self, prompts: Sequence[str], config: Any) -> Iterator[list[tuple[int, GenerationOutput]]]:
        """As engine.generation.generate.iter_batches: (index into `prompts`, output) per finished batch."""
        from engine.running.backends import plan_batches

        self.backend.config = config  # each loop's own decoding (explain: 256 tokens; verify: top 20)
        batches = plan_batches(self.tokenizer, [("judge", [str(i) for i in range(len(prompts))], list(prompts))],
                               config.batch_size)
        for batch, result in zip(batches, self.backend.generate(batches), strict=True):
            yield [(int(i), output) for i, output in zip(batch.item_ids, result.outputs, strict=True)]


def served_provenance_config(backend: ServerBackend, run_id: str | None = None) -> dict:
    """The `served` entry of a run's config: URL (redacted), models, fingerprints, token usage
    (of `run_id`'s answers in this invocation; None: of every answer)."""
    info = backend.info
    used = info.usage_by_run.get(run_id, [0, 0]) if run_id is not None else [info.prompt_tokens, info.completion_tokens]
    return {**info.as_config(), "prompt_tokens": used[0], "completion_tokens": used[1]}


def with_endpoint(settings: ServerSettings, tokenizer: Any) -> ServerSettings:
    """`completions` when a local tokenizer is named, else the settings as given."""
    return replace(settings, endpoint="completions") if tokenizer is not None else settings
