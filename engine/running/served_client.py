"""A small HTTP client for OpenAI-compatible servers (vLLM, SGLang, TGI, llama.cpp, hosted APIs).

Standard library only (http.client): one keep-alive connection per thread, JSON in and out,
retries with exponential backoff on 429 and 5xx and on a dropped connection, a deadline per
request (wall clock, from connecting to the answer's last byte: a server that trickles a byte at
a time cannot hold a request past it), and a cap on the answer's size (read in chunks, never
trusting Content-Length: an answer without one, or one claiming a terabyte, is refused at the cap
rather than filling the client's memory). The operator may set both (read at each request, so a
setting holds for a process that imported this earlier): PATTRIEVAL_MAX_ANSWER_MB and
PATTRIEVAL_MAX_REQUEST_S (docs/operations.md). A request that timed out is never sent again: the server took it and may still be
working on it (llama.cpp's server answers one at a time, and a resent request only queues
behind the abandoned one). A `Cancel` ends the requests that carry it at once, from any thread:
their sockets are shut, so a thread blocked waiting for an answer returns within milliseconds.
Everything that reaches the user is one line, and never holds the API key:

- the key lives in one private attribute, is sent only in the Authorization header, and is
  masked out of any server text we quote (a server may echo a bad key back in its error);
- the base URL we show or store is `redact_url(url)`: no user:password@, no query, no fragment.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from engine.errors import UserError

RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
# What a dropped or refused connection raises; refused counts too because a server behind a
# load balancer restarts, and a preflight (max_retries=0) still fails at once.
# HTTPException: a kept-alive connection the server closed meanwhile (RemoteDisconnected), a cut
# answer (IncompleteRead), a connection left in a bad state: a fresh connection fixes all of them.
# Not a timeout (TimeoutError is an OSError, not a ConnectionError): the server took the request
# and may still be computing it, so sending it again would queue a copy behind the original.
RETRYABLE_ERRORS = (ConnectionError, http.client.HTTPException)
MAX_BACKOFF_S = 20.0
# The most bytes of a 2xx answer read unless the caller says (GET models, /props; engine.
# served_parse.answer_byte_cap adds room for many log-probs): an OpenAI model list is tens of KB.
# The default of $PATTRIEVAL_MAX_ANSWER_MB (max_answer_bytes).
MAX_ANSWER_BYTES = 8 * 1024 * 1024
MAX_ANSWER_MB_ENV = "PATTRIEVAL_MAX_ANSWER_MB"
# The most seconds one request may take, whatever the caller asks (--request-timeout, the Run
# tab's field, a probe's own): unset, the caller's deadline holds (request_deadline_s).
MAX_REQUEST_S_ENV = "PATTRIEVAL_MAX_REQUEST_S"
# Of an error answer only its first line is quoted: the rest is not read (the connection is dropped).
MAX_ERROR_BYTES = 64 * 1024
_CHUNK = 64 * 1024


class ServedHTTPError(Exception):
    """A non-2xx answer (after retries): its status and the server's message, key masked."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class ServedConnectionError(Exception):
    """Nothing usable answered: refused, unknown host, timed out, reset (after retries), cancelled.

    `kind` tells a server that is not there ("refused", "unknown host": gone) from one that took
    the request and dropped it ("reset") or sat on it ("timed out": busy); "cancelled": a Cancel
    ended it here. `answered` is how many answers this client had had before, so that a caller
    can say the server went away rather than that the address is wrong."""

    def __init__(self, reason: str, *, kind: str = "other", answered: int = 0) -> None:
        super().__init__(reason)
        self.kind = kind
        self.answered = answered


class ServedAnswerError(ServedHTTPError):
    """A 2xx answer we refuse to use: larger than the cap, not JSON. A ServedHTTPError, so that a
    caller probing an optional endpoint (engine.running.served_flow.server_slots) passes over it too."""


def max_answer_bytes() -> int:
    """The most bytes a 2xx answer may take before its log-prob allowance: $PATTRIEVAL_MAX_ANSWER_MB
    MiB, else MAX_ANSWER_BYTES (UserError, one line naming the variable, when malformed)."""
    value = os.environ.get(MAX_ANSWER_MB_ENV, "").strip()
    if not value:
        return MAX_ANSWER_BYTES
    if not (value.isascii() and value.isdigit() and len(value) <= 7 and 0 < int(value) <= 2**20):
        raise UserError(f"{MAX_ANSWER_MB_ENV} must be a whole number of megabytes from 1 to {2**20}, "
                        f"not {value[:40]!r}")
    return int(value) * 2**20


def request_deadline_s(asked: float) -> float:
    """`asked` seconds, or $PATTRIEVAL_MAX_REQUEST_S where that is fewer (UserError, one line naming
    the variable, when malformed): an operator bounds how long any server may hold a request."""
    value = os.environ.get(MAX_REQUEST_S_ENV, "").strip()
    if not value:
        return asked
    try:
        cap = float(value)
    except ValueError:
        cap = math.nan
    if not (math.isfinite(cap) and cap > 0):
        raise UserError(f"{MAX_REQUEST_S_ENV} must be a number of seconds above 0, not {value[:40]!r}")
    return min(asked, cap)


def redact_url(url: str) -> str:
    """The URL without credentials, query or fragment: what may be shown, logged and stored."""
    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def api_root(url: str) -> str:
    """The API's root path: a bare host gets /v1 (the OpenAI convention); a path given is kept
    (hosted APIs put theirs elsewhere, e.g. /openai/v1)."""
    path = urlsplit(url.strip()).path.rstrip("/")
    return path if path else "/v1"


class Cancel:
    """Ends every request that carries it, now and later: no new try starts, a backoff wait
    ends, and a socket waiting for an answer is shut (its thread gets ServedConnectionError
    "cancelled" at once instead of sitting out --request-timeout). Safe from any thread."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._open: set[http.client.HTTPConnection] = set()

    @property
    def is_set(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        self._event.set()
        with self._lock:
            open_now = list(self._open)
        for conn in open_now:
            _shut(conn)

    def wait(self, seconds: float) -> None:
        self._event.wait(seconds)

    def _enter(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._open.add(conn)
        if self._event.is_set():  # cancelled between the check and here
            _shut(conn)

    def _leave(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._open.discard(conn)


def _shut(conn: http.client.HTTPConnection) -> None:
    """Wake a thread blocked on `conn`'s socket: shutdown, unlike close, interrupts a recv in
    another thread (and tells the server the client has gone)."""
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


@dataclass(frozen=True)
class Answer:
    """A decoded 2xx JSON body and the response headers that matter."""

    body: Any
    status: int


class Client:
    """JSON over HTTP(S) to one base URL; safe to share between threads."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout_s: float = 120.0,
                 max_retries: int = 5, backoff_s: float = 0.5,
                 on_retry: Callable[[str], None] | None = None) -> None:
        parts = urlsplit(base_url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base URL '{redact_url(base_url)}' is not http(s)://HOST[:PORT][/PATH]")
        self.url = redact_url(base_url)
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._root = api_root(base_url)
        self.__key = api_key or None  # name-mangled: never in vars() dumps by accident, never in repr
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.on_retry = on_retry
        self._local = threading.local()
        self._conns: set[http.client.HTTPConnection] = set()  # every thread's, for close()
        self._answers = 0  # HTTP answers of any status: the server was there (ServedConnectionError says how many)
        self._count_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Client({self.url!r}, key={'set' if self.__key else 'none'})"

    @property
    def has_key(self) -> bool:
        return self.__key is not None

    def mask(self, text: str) -> str:
        """`text` with the key (should a server echo it) replaced by ***."""
        return text.replace(self.__key, "***") if self.__key else text

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        with self._count_lock:
            if conn is not None and conn in self._conns:  # not one close() has closed
                return conn
        cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=self.timeout_s)
        self._local.conn = conn
        with self._count_lock:
            self._conns.add(conn)
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
            with self._count_lock:
                self._conns.discard(conn)

    def close(self) -> None:
        """Close the keep-alive connection of every thread that used this client. Each thread
        keeps its own in a thread-local, which another thread cannot reach: left to the garbage
        collector, their sockets stayed open until a collection, then closed with a
        ResourceWarning. A request after this opens a new one."""
        with self._count_lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            conn.close()

    def get(self, path: str, *, max_retries: int | None = None, timeout_s: float | None = None,
            at_host: bool = False) -> Answer:
        return self.request("GET", path, None, max_retries=max_retries, timeout_s=timeout_s, at_host=at_host)

    def post(self, path: str, body: dict, *, max_retries: int | None = None, timeout_s: float | None = None,
             cancel: Cancel | None = None, max_bytes: int | None = None) -> Answer:
        return self.request("POST", path, body, max_retries=max_retries, timeout_s=timeout_s, cancel=cancel,
                            max_bytes=max_bytes)

    def request(self, method: str, path: str, body: dict | None, *, max_retries: int | None = None,
                timeout_s: float | None = None, cancel: Cancel | None = None, at_host: bool = False,
                max_bytes: int | None = None) -> Answer:
        """The decoded JSON answer; retries what may pass, raises ServedHTTPError (ServedAnswerError:
        a 2xx answer over `max_bytes`, None: max_answer_bytes(), or not JSON) or ServedConnectionError
        (one line, key masked) for the rest. Each try has `timeout_s` of wall clock in all, or
        $PATTRIEVAL_MAX_REQUEST_S where fewer (deadline_s). `at_host`: `path` is from the host's
        root, not the API's (llama.cpp's /props sits beside /v1). A malformed bound: UserError."""
        cap = max_answer_bytes() if max_bytes is None else max_bytes
        seconds = self.deadline_s(timeout_s)
        retries = self.max_retries if max_retries is None else max_retries
        payload = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if self.__key:
            headers["Authorization"] = f"Bearer {self.__key}"
        target = f"/{path.lstrip('/')}" if at_host else f"{self._root}/{path.lstrip('/')}"
        attempt = 0
        while True:
            delay: float | None = None
            if cancel is not None and cancel.is_set:
                raise ServedConnectionError("cancelled", kind="cancelled", answered=self._answers)
            conn = None
            deadline: _Deadline | None = None
            connected = False  # a socket to the server: a timeout after this is the server's, not the network's
            try:
                conn = self._connection()
                conn.timeout = seconds
                if conn.sock is not None:
                    conn.sock.settimeout(conn.timeout)
                if cancel is not None:
                    cancel._enter(conn)
                deadline = _Deadline(conn, conn.timeout)
                try:
                    if conn.sock is None:
                        conn.connect()  # here, so that the deadline sees the socket it must shut
                    connected = True
                    deadline.check()
                    conn.request(method, target, body=payload, headers=headers)
                    if cancel is not None and cancel.is_set:  # cancelled while the socket did not exist yet
                        raise ConnectionAbortedError("cancelled")
                    response = conn.getresponse()
                    ok = 200 <= response.status < 300
                    raw, whole = _read_capped(response, cap if ok else MAX_ERROR_BYTES, head=not ok)
                    deadline.check()  # a shut socket can look like an answer that ended
                finally:
                    deadline.stop()
                    if cancel is not None:
                        cancel._leave(conn)
                with self._count_lock:
                    self._answers += 1
                if not whole or response.getheader("Connection", "").lower() == "close":
                    self._drop_connection()  # an answer left unread cannot share the connection
                if ok:
                    if not whole:
                        raise ServedAnswerError(response.status, f"the answer is larger than {_size(cap)} "
                                                f"(the most this request may take); not read further")
                    try:
                        return Answer(json.loads(raw.decode("utf-8")), response.status)
                    except (ValueError, RecursionError):  # RecursionError: nested too deep to decode
                        raise ServedAnswerError(response.status, "the answer is not JSON") from None
                if response.status not in RETRYABLE_STATUSES or attempt >= retries:
                    raise ServedHTTPError(response.status, self._message(raw, response.reason))
                delay = _retry_after(response.getheader("Retry-After"))
                why = f"HTTP {response.status}"
            except RETRYABLE_ERRORS + (OSError,) as err:
                self._drop_connection()
                if cancel is not None and cancel.is_set:
                    raise ServedConnectionError("cancelled", kind="cancelled", answered=self._answers) from None
                # Past the deadline, whatever the shut socket raised is a timeout.
                failure = TimeoutError("timed out") if deadline is not None and deadline.passed else err
                reason, kind = _reason(failure), _kind(failure)
                if kind == "timed out" and not connected:  # no connection within the time: nothing took it
                    reason = kind = "connect timed out"
                if not isinstance(failure, RETRYABLE_ERRORS) or attempt >= retries:
                    tried = f"; {attempt + 1} tries" if attempt else ""
                    raise ServedConnectionError(reason + tried, kind=kind, answered=self._answers) from None
                why = reason
            attempt += 1
            wait = delay if delay is not None else min(MAX_BACKOFF_S, self.backoff_s * 2 ** (attempt - 1))
            wait *= 1.0 + random.random() * 0.1  # a little jitter: many threads retry together
            if self.on_retry is not None:
                self.on_retry(f"{why}; retry {attempt} of {retries} in {wait:.1f} s")
            if cancel is not None:
                cancel.wait(wait)
            else:
                time.sleep(wait)

    def deadline_s(self, timeout_s: float | None = None) -> float:
        """The seconds a request asking `timeout_s` (None: the client's) gets: what request() uses,
        for messages that name it."""
        return request_deadline_s(timeout_s or self.timeout_s)

    def _message(self, raw: bytes, reason: str) -> str:
        """The server's error text in one short line: OpenAI's {"error": {"message"}} or
        FastAPI's {"detail"}, else the body's start, else the reason phrase."""
        text = raw.decode("utf-8", errors="replace").strip()
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            err = data.get("error", data.get("detail", data.get("message")))
            if isinstance(err, dict):
                err = err.get("message", err)
            if isinstance(err, list):  # FastAPI validation: [{"loc": .., "msg": ..}]
                err = "; ".join(str(e.get("msg", e)) if isinstance(e, dict) else str(e) for e in err)
            if err:
                text = str(err)
        line = " ".join(self.mask(text or reason or "no message").split())
        return line[:300] + ("..." if len(line) > 300 else "")


class _Deadline:
    """Shuts `conn`'s socket `seconds` after it starts: a socket timeout bounds one read only, and
    a server sending a byte now and then would hold the request for ever. `check` raises
    TimeoutError once it has passed (the socket may not have existed yet to be shut)."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float) -> None:
        self.passed = False
        self._conn = conn
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.passed = True
        _shut(self._conn)

    def check(self) -> None:
        if self.passed:
            raise TimeoutError("timed out")

    def stop(self) -> None:
        self._timer.cancel()


def _read_capped(response: http.client.HTTPResponse, cap: int, *, head: bool) -> tuple[bytes, bool]:
    """At most `cap` bytes of the body, in chunks, and whether that is all of it. A Content-Length
    over the cap is refused before reading (http.client would allocate it at once), unless `head`:
    the first `cap` bytes are wanted even so (an error's message)."""
    if response.length is not None and response.length > cap and not head:
        return b"", False
    chunks: list[bytes] = []
    size = 0
    while size <= cap:
        chunk = response.read(min(_CHUNK, cap + 1 - size))
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)[:cap], False


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB"


def _retry_after(value: str | None) -> float | None:
    """Seconds from a numeric Retry-After header (capped); None when absent or a date."""
    try:
        return min(MAX_BACKOFF_S, max(0.0, float(value))) if value else None
    except ValueError:
        return None


def _kind(err: BaseException) -> str:
    """"refused" and "unknown host": nothing listens there; "timed out" (the caller tells a
    connect that timed out, "connect timed out", from an answer that did not come); "reset":
    the server took the connection and dropped it (closed it, reset it, cut its answer short)."""
    if isinstance(err, (TimeoutError, socket.timeout)):
        return "timed out"
    if isinstance(err, socket.gaierror):
        return "unknown host"
    if isinstance(err, ConnectionRefusedError):
        return "refused"
    if isinstance(err, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, http.client.HTTPException)):
        return "reset"
    return "other"


def _reason(err: BaseException) -> str:
    kind = _kind(err)
    if kind == "refused":
        return "connection refused"
    if isinstance(err, http.client.RemoteDisconnected):
        return "connection closed without an answer"
    if isinstance(err, http.client.IncompleteRead):
        return "answer cut short"
    if isinstance(err, ConnectionResetError):
        return "connection reset"
    if kind in ("timed out", "unknown host"):
        return kind
    return getattr(err, "strerror", None) or type(err).__name__
