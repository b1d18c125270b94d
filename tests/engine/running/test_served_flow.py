"""How many requests a served run keeps in flight (engine.running.served_flow), what a timeout does, how a
busy server is told from a gone one, and that an ended run leaves no request behind: against
tests.support.served_server.PacedServer, a stand-in server that computes nothing and takes a set time
per answer, one at a time (as llama-cpp-python's server) or many at once (as vLLM). Fast; the
same against the real llama.cpp server are in tests/engine/running/test_served_backend.py and test_served_cli.py.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from engine.errors import UserError
from engine.generation.generate import GenerationConfig
from engine.running.backend_server import ServerBackend
from engine.running.backends import plan_batches
from engine.running.served_flow import AUTO_MAX, ConcurrencyLimit, choose_limit, window_size
from engine.running.served_request import ServerSettings
from tests.support.served_server import PacedServer, free_port


def backend(url: str, **settings) -> ServerBackend:
    s = ServerSettings(url, "paced", backoff_s=0.01, api_key_env=None, logprobs=False, **settings)
    return ServerBackend(s, GenerationConfig(max_new_tokens=4, batch_size=1))


def rows(n: int) -> tuple[list[str], list[str]]:
    return [f"q{i}" for i in range(n)], [f"question {i}" for i in range(n)]


def generate(b: ServerBackend, n: int):
    ids, texts = rows(n)
    batches = plan_batches(b.tokenizer, [("run-1", ids, texts)], 1)
    return batches, b.generate(batches)


@pytest.fixture(autouse=True)
def no_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


# ------------------------------------------------------------------ the level, simulated


def simulate(latency, answers: int = 200, *, timeout_s: float = 300.0, limit: ConcurrencyLimit | None = None):
    """Feed a probing limit the answers of a server in steady state whose latency at each level
    is `latency(level)`; the limit and the levels it went through."""
    limit = limit or ConcurrencyLimit(1, adaptive=True, source="probed", cap=AUTO_MAX)
    levels = []
    for _ in range(answers):
        limit.observe(5, latency(limit.limit), timeout_s)
        levels.append(limit.limit)
    return limit, levels


def test_probing_settles_at_one_on_a_one_at_a_time_server_and_climbs_on_a_batching_one():
    # one at a time: each request waits for the others, so latency grows with the level
    limit, serial = simulate(lambda level: 2.0 * level)
    assert max(serial) == 2 and serial[-1] == 1 and serial.count(2) == window_size(2)  # tried once, taken back
    assert limit.describe() == "1 (probed, settled; at most 2 tried)"
    # batching: the same latency at every level
    limit, batching = simulate(lambda level: 2.0)
    assert batching[-1] == AUTO_MAX and batching == sorted(batching)
    # part way: 30 % more latency per extra request; level 3 (1.6 x) passes HOLD (1.5 x)
    assert simulate(lambda level: 2.0 * (1 + 0.3 * (level - 1)))[1][-1] == 2


def test_a_slow_first_answer_does_not_lift_a_one_at_a_time_server_past_two():
    """The first answer carries one-time costs (a connection, first use): measured, it made level
    1 look slow enough that level 2's doubled latency passed, and probing went on to 3."""
    answers = iter([4.0] + [1.0] * 1000)  # then serial: each request waits for the others
    limit, levels = simulate(lambda level: next(answers) * level)
    assert max(levels) == 2 and levels[-1] == 1


def test_an_answer_past_half_the_timeout_steps_down_at_once():
    limit, _ = simulate(lambda level: 2.0, 100)
    assert limit.limit == AUTO_MAX
    limit.observe(5, 151.0, 300.0)
    assert limit.limit == AUTO_MAX - 1 and "settled" in limit.describe()
    fixed = ConcurrencyLimit(8, adaptive=False, source="--concurrency")
    fixed.observe(5, 299.0, 300.0)
    assert fixed.limit == 8  # what the user asked for stays


def test_the_choice_given_slots_and_asked():
    assert choose_limit(3, 1).limit == 3 and choose_limit(3, 1).source == "--concurrency"
    assert choose_limit(None, 4).limit == 4 and not choose_limit(None, 4).adaptive
    assert choose_limit(None, 100000).limit == 64
    probed = choose_limit(None, None)
    assert probed.limit == 1 and probed.adaptive and probed.cap == AUTO_MAX


# ------------------------------------------------------------------ against a paced server


def test_a_one_at_a_time_server_that_says_nothing_gets_at_most_two_requests():
    """The default used to be 8 in flight: on a one-slot server, 7 waited in its queue, the
    wait counting against --request-timeout."""
    # 250 ms an answer. At level 2 the window's mean latency is about 1.83 answer-times (the first
    # request sent at the change waits for nobody), so with a client overhead of o seconds per
    # request the ratio to level 1 is (1.83 p + o) / (p + o), which passes HOLD (1.5) once o
    # reaches 0.67 p: at 100 ms that was 67 ms, which a loaded CI machine reached once (3 in
    # flight). At 250 ms it takes 167 ms, as a real model's seconds make it.
    with PacedServer(0.25, serial=True) as paced:
        b = backend(paced.base_url).start()
        batches, results = generate(b, 16)
        assert [r.batch_id for r in results] == [x.batch_id for x in batches]
    assert paced.max_in_server <= 2, paced.max_in_server
    assert b.info.concurrency.startswith("1 (probed, settled")
    assert b.info.as_config()["concurrency"] == b.info.concurrency


def test_a_batching_server_gets_more_in_flight():
    with PacedServer(0.05, serial=False) as paced:
        b = backend(paced.base_url).start()
        list(generate(b, 64)[1])
    assert paced.max_in_server >= 4, (paced.max_in_server, b.info.concurrency)


def test_the_servers_own_slots_are_used_and_an_asked_level_above_them_is_warned(caplog):
    with PacedServer(0.02, serial=False, parallel=2, slots=2) as paced:
        b = backend(paced.base_url).start()
        list(generate(b, 16)[1])
        assert paced.max_in_server == 2 and b.info.concurrency == "2 (the server's slots)"
        caplog.set_level(logging.WARNING)
        asked = backend(paced.base_url, concurrency=4).start()
    assert asked.info.concurrency == "4 (--concurrency)"
    assert "--concurrency 4, but the server at" in caplog.text and "computes 2 requests at a time" in caplog.text


def test_a_timed_out_request_is_not_sent_again_and_the_server_is_said_busy():
    """Three in flight on a one-at-a-time server, 0.4 s each, 0.6 s allowed: the second waits
    0.4 s and times out. It used to be sent again (5 retries), queueing copies behind itself."""
    with PacedServer(0.4, serial=True) as paced:
        b = backend(paced.base_url, concurrency=3, timeout_s=0.6, max_retries=5).start()
        started = time.monotonic()
        with pytest.raises(UserError) as caught:
            list(generate(b, 6)[1])
        took = time.monotonic() - started
        sent = paced.prompts[1:]  # after the 1-token probe
    message = str(caught.value)
    assert message.startswith(f"the server at {paced.base_url} is busy: it took a request but did not answer "
                              "within 0.6 s, and the request was not sent again"), message
    assert "--request-timeout" in message and "3 requests were in flight" in message and "went away" not in message
    assert len(sent) == len(set(sent)), sent  # no row sent twice
    assert took < 3.0


def test_busy_and_gone_are_told_apart_at_start():
    """A server that takes the connection and does not answer GET models in time (llama-cpp-
    python's waits for the model while it computes) is busy; nothing listening is gone."""
    with PacedServer(models_delay_s=2.0) as paced:
        started = time.monotonic()
        with pytest.raises(UserError) as caught:
            backend(paced.base_url, timeout_s=0.5).start()
        assert time.monotonic() - started < 1.5
    busy = str(caught.value)
    assert busy.startswith(f"the server at {paced.base_url} is busy: it took the connection but did not answer "
                           "GET models within 0.5 s"), busy
    assert "--base-url" not in busy
    with pytest.raises(UserError) as caught:
        backend(f"http://127.0.0.1:{free_port()}/v1").start()
    gone = str(caught.value)
    assert "no server answers at" in gone and "connection refused" in gone and "check --base-url" in gone


def head_text(batches) -> str:
    """The prompt of the first planned row: the one the write loop waits for first."""
    from engine.running.served_request import TextTokenizer

    return TextTokenizer.decode(batches[0].input_ids[0])


def served_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("served")]


def test_an_ended_generate_abandons_its_requests_at_once_and_leaves_no_thread():
    """What a Ctrl-C does to a served run: the write loop stops reading (here: close), and the
    requests in flight end now, their sockets shut, not when the server answers (30 s here).
    Their threads used to live on, and Python waited for them at exit."""
    fast = {"Say OK."}  # the probe, and below the first row: 10 ms; the others 30 s
    with PacedServer(30.0, serial=False, service_for=lambda p: 0.01 if p in fast else 30.0) as paced:
        b = backend(paced.base_url, concurrency=3).start()
        batches, results = generate(b, 5)
        fast.add(head_text(batches))
        first = next(results)
        assert first.batch_id == batches[0].batch_id
        deadline = time.monotonic() + 5
        while paced.in_server < 3 and time.monotonic() < deadline:  # three requests are being computed
            time.sleep(0.01)
        started = time.monotonic()
        results.close()
        assert time.monotonic() - started < 0.5
        while served_threads() and time.monotonic() - started < 2:
            time.sleep(0.01)
        assert not served_threads(), served_threads()
        assert len(paced.prompts) == 1 + 4  # the probe, the first answer, three in flight: no queued one sent


def test_a_cancel_does_not_wait_for_the_answer_in_flight():
    """The app's cancel (`interrupted`) is asked while an answer is awaited, as a local run asks
    it at every decoding step: it used to be asked only between answers (30 s here)."""
    from engine.errors import RunCancelled

    cancelled = threading.Event()
    fast = {"Say OK."}
    with PacedServer(30.0, serial=False, service_for=lambda p: 0.01 if p in fast else 30.0) as paced:
        b = backend(paced.base_url, concurrency=2)
        b.interrupted = cancelled.is_set
        b.start()
        batches, results = generate(b, 4)
        fast.add(head_text(batches))
        next(results)
        threading.Timer(0.2, cancelled.set).start()
        started = time.monotonic()
        with pytest.raises(RunCancelled):
            next(results)
        assert time.monotonic() - started < 1.5


def test_closing_a_client_closes_every_threads_connection():
    """Each thread keeps its own keep-alive connection, in a thread-local no other thread can
    reach; close() shuts them all while those threads live on (a backend's pool threads idle, and
    held them open until they ended or a garbage collection, with a ResourceWarning)."""
    from engine.running.served_client import Client

    with PacedServer(0.01, serial=False, parallel=4) as paced:
        client = Client(paced.base_url, None, timeout_s=5, max_retries=0)
        asked, release = threading.Barrier(3), threading.Event()
        sockets = []

        def ask() -> None:
            client.get("models")
            sockets.append(client._local.conn.sock)  # this thread's, kept alive for its next request
            asked.wait(5)
            release.wait(5)  # alive, its connection in its thread-local, until the test is done

        threads = [threading.Thread(target=ask) for _ in range(2)]
        for t in threads:
            t.start()
        asked.wait(5)
        try:
            assert len(sockets) == 2 and all(sock is not None and sock.fileno() >= 0 for sock in sockets)
            client.close()
            assert [sock.fileno() for sock in sockets] == [-1, -1]  # closed
        finally:
            release.set()
            for t in threads:
                t.join(5)


def test_a_closed_backend_has_closed_its_client():
    with PacedServer(0.01, serial=False) as paced:
        b = backend(paced.base_url, concurrency=2).start()
        generate(b, 4)
        client = b._client
        assert client is not None and client._conns  # the pool's threads' connections
        b.close()
    assert not client._conns
