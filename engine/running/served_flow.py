"""How many requests a served run keeps in flight, and the daemon threads that send them.

Why a limit that fits the server: a server computes only so many requests at once (llama.cpp's
server: its slots, often one; vLLM: as many as fit its batch). Requests beyond that wait in the
server's queue, and the wait counts against --request-timeout: with 8 in flight on a one-slot
CPU server, the last of each round waited past 300 s, timed out, and the server went on
computing answers nobody would read. So:

- `--concurrency N` given: N, as asked (a server that says it has fewer slots gets a warning).
- The server says how many slots it has (llama.cpp's `GET /props` `total_slots`, or the length
  of `GET /slots`): that many.
- Otherwise (vLLM, SGLang, hosted APIs say nothing): found by probing. Start at 1, measure the
  latency per answer token (seconds from sending to the answer, over completion tokens + 1,
  summed over a window of answers, so that long and short answers weigh what they cost), then
  step up one at a time while it holds. A step whose latency is more than HOLD times level 1's
  is taken back and the level stays there: on a one-at-a-time server every request at level 2
  also waits for the other one (twice the latency), so it settles at 1; a batching one computes
  them together and climbs to AUTO_MAX. An answer that takes more than half of
  --request-timeout steps the level down at once. Latency, not answers per second: the
  client's own time between two requests is in the rate at level 1 and hidden at level 2, and
  looked like a gain where the server computes in a few milliseconds. The run's first answer is
  not measured: it carries one-time costs (a new connection, the server's and the client's first
  use), which on a busy machine made level 1 look slow enough that level 2's doubled latency
  passed, and a one-at-a-time server was sent three requests.

The threads are daemons, and a `Flow` that closes cancels its queued requests (the backend
shuts the sockets of those in flight): a Ctrl-C ends a served run within seconds, as a local
one, instead of waiting for every request in flight (a ThreadPoolExecutor's threads are joined
at interpreter exit, which kept an interrupted run alive until the server had answered them all).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from engine.errors import RunCancelled
from engine.running.served_client import ServedConnectionError, ServedHTTPError

AUTO_MAX = 8  # the probing's ceiling: the old fixed default, enough to fill a small batching server
MAX_SLOTS = 64  # a server's own count is used up to this (a typo'd -np 10000 must not start 10000 threads)
HOLD = 1.5  # a level is kept while its latency stays within this factor of level 1's
STOP_POLL_S = 0.2  # how often a wait for an answer asks whether the run was cancelled


def window_size(level: int) -> int:
    """Answers measured at `level` before deciding: enough to see each in-flight request end twice."""
    return max(6, 2 * level)


class ConcurrencyLimit:
    """The requests allowed in flight: fixed (`adaptive` False) or probed as the module says.

    `observe` is called once per answer, from any thread; `limit` is read by the senders."""

    def __init__(self, start: int, *, adaptive: bool, source: str, cap: int | None = None) -> None:
        self.adaptive = adaptive
        self.source = source  # how the level was chosen, for the run's record and messages
        self.cap = max(start, cap or start)
        self._lock = threading.Lock()
        self._level = start
        self._settled = not adaptive
        self._base: float | None = None  # seconds per weight at level 1
        self._window_latency = 0.0
        self._window_weight = 0.0
        self._window_count = 0
        self._epoch = 0  # counts level changes: an answer sent at another level is not this level's
        self._warmed = False  # the first answer (one-time costs) is not measured
        self.peak = start

    @property
    def limit(self) -> int:
        return self._level

    def ticket(self) -> int:
        """Taken when a request is sent, given back to `observe` with its answer."""
        return self._epoch

    def describe(self) -> str:
        if not self.adaptive:
            return f"{self._level} ({self.source})"
        state = "settled" if self._settled else "still probing"
        return f"{self._level} ({self.source}, {state}; at most {self.peak} tried)"

    def observe(self, weight: float, latency_s: float, timeout_s: float, ticket: int | None = None) -> None:
        """One answer: its weight (completion tokens + 1), how long it took, and the `ticket`
        taken when it was sent (None: now)."""
        if not self.adaptive:
            return
        with self._lock:
            if latency_s > timeout_s / 2 and self._level > 1:
                self._set(self._level - 1, settled=True)  # queueing towards the timeout: back off now
                return
            if self._settled or (ticket is not None and ticket != self._epoch):
                return
            if not self._warmed:
                self._warmed = True
                return
            self._window_latency += latency_s
            self._window_weight += max(weight, 1e-9)
            self._window_count += 1
            if self._window_count < window_size(self._level):
                return
            unit = self._window_latency / self._window_weight
            if self._base is None:
                self._base = unit
            elif unit > HOLD * self._base:
                self._set(self._level - 1, settled=True)
                return
            if self._level >= self.cap:
                self._settled = True
            else:
                self._set(self._level + 1, settled=False)

    def _set(self, level: int, *, settled: bool) -> None:
        self._level = max(1, level)
        self.peak = max(self.peak, self._level)
        self._settled = settled
        self._epoch += 1
        self._window_latency = 0.0
        self._window_weight = 0.0
        self._window_count = 0


def server_slots(client: Any, wait_s: float) -> int | None:
    """How many requests the server computes at once, where it says: llama.cpp's server gives
    `total_slots` in GET /props and one entry per slot in GET /slots (beside /v1, not under it).
    vLLM, SGLang and hosted APIs answer 404 (or nothing in `wait_s`): None."""
    for path in ("props", "slots"):
        try:
            body = client.get(path, at_host=True, max_retries=0, timeout_s=wait_s).body
        except (ServedConnectionError, ServedHTTPError):
            continue
        n = body.get("total_slots") if isinstance(body, dict) else len(body) if isinstance(body, list) else None
        if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
            return n
    return None


def choose_limit(asked: int | None, slots: int | None) -> ConcurrencyLimit:
    """--concurrency as given; else the server's slots; else probed from 1."""
    if asked is not None:
        return ConcurrencyLimit(asked, adaptive=False, source="--concurrency")
    if slots is not None:
        return ConcurrencyLimit(min(slots, MAX_SLOTS), adaptive=False, source="the server's slots")
    return ConcurrencyLimit(1, adaptive=True, source="probed", cap=AUTO_MAX)


class Flow:
    """Runs `work(arg)` for submitted args on daemon threads, at most `limit.limit` at a time.

    `result(future)` waits for one future, but raises the first error of any request as soon as
    it happens (a timed-out request behind the one waited for must not wait its turn), and
    RunCancelled as soon as `stop()` says so (the app's cancel must not wait for an answer)."""

    def __init__(self, work: Callable[[Any], Any], limit: ConcurrencyLimit, name: str = "served") -> None:
        self._work = work
        self.limit = limit
        self._cond = threading.Condition()
        self._jobs: deque[tuple[Future, Any]] = deque()
        self._in_flight = 0
        self._closed = False
        self._error: BaseException | None = None
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True) for i in range(limit.cap)]
        for thread in self._threads:
            thread.start()

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered, now."""
        return self._in_flight

    def submit(self, arg: Any) -> Future:
        future: Future = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("Flow.submit after close")
            self._jobs.append((future, arg))
            self._cond.notify_all()
        return future

    def result(self, future: Future, stop: Callable[[], bool] | None = None) -> Any:
        with self._cond:
            while not future.done() and self._error is None:
                self._cond.wait(STOP_POLL_S if stop is not None else None)
                if stop is not None and not future.done() and stop():
                    raise RunCancelled("cancelled (the requests in flight were abandoned)")
            if not future.done():
                raise self._error  # type: ignore[misc]
        return future.result()

    def close(self) -> None:
        """Cancel what was not sent; the threads end as their requests do (daemons: never waited for)."""
        with self._cond:
            self._closed = True
            for future, _ in self._jobs:
                future.cancel()
            self._jobs.clear()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._jobs or self._in_flight >= self.limit.limit):
                    self._cond.wait()
                if self._closed:
                    return
                future, arg = self._jobs.popleft()
                if not future.set_running_or_notify_cancel():
                    continue
                self._in_flight += 1
            try:
                future.set_result(self._work(arg))
            except BaseException as err:  # noqa: BLE001 - handed to the waiting thread
                future.set_exception(err)
                with self._cond:
                    if self._error is None and not self._closed:
                        self._error = err
            finally:
                with self._cond:
                    self._in_flight -= 1
                    self._cond.notify_all()
