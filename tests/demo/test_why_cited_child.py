"""The Why-cited fit in a bounded child process (demo.fit_child) and the turns fits take between
visitors (demo.handlers.why_cited.FitGate): the child's page is the in-process fit's, a fit past
its memory or CPU time is refused in one line, the web process does not do the fit's work, and a
second visitor waits for their turn while the same visitor's second fit is refused.

The store is tests/engine/usecases/bias/test_why_cited.py's: simulated base and cf choices imported as answers."""

from __future__ import annotations

import functools
import statistics
import threading
import time

import pytest

from demo.fit_child import FitBounds
from demo.handlers import why_cited as h
from demo.settings import DEFAULT_MAX_FIT_DECISIONS
from engine.errors import UserError
from engine.usecases.bias.why_cited import WhyCitedRequest, why_cited
from tests.engine.usecases.bias.test_why_cited import imported  # noqa: F401  (the fixture)


def test_the_childs_page_is_the_in_process_fits(imported, monkeypatch):  # noqa: F811
    import engine.usecases.bias.why_cited as usecase

    db, experiment, _ = imported
    h.clear_cache()
    request = WhyCitedRequest((experiment,), None, None, "number", ("label:relevant",), max_answers=h.MAX_ANSWERS,
                              max_decisions=DEFAULT_MAX_FIT_DECISIONS)
    want = h._page(why_cited(request, db)).as_dict()
    # The web process never fits: only the child runs the use case.
    monkeypatch.setattr(usecase, "why_cited", lambda *a, **k: pytest.fail("fitted in the web process"))
    assert h.why_cited_page(db, experiment, [], "number", "label:relevant").as_dict() == want


def test_an_allocation_failure_under_the_cap_is_the_caps_refusal_however_it_surfaced():
    import duckdb

    from demo.fit_child import memory_message, user_error_line

    conn = duckdb.connect(config={"memory_limit": "2MB", "threads": 1})
    with pytest.raises(duckdb.OutOfMemoryException) as oom:
        conn.execute("SELECT list(i) FROM range(10000000) t(i)").fetchall()
    try:
        raise UserError(f"cannot open database the store: {oom.value}") from oom.value  # as store.db words it
    except UserError as err:
        wrapped = err
    assert user_error_line(wrapped, 200 * 1024**2) == memory_message(200 * 1024**2)
    # Without a cap, or from another cause, the UserError's own line.
    assert user_error_line(wrapped, None).startswith("cannot open database the store: Out of Memory Error")
    assert user_error_line(UserError("no such experiment\nmore"), 200 * 1024**2) == "no such experiment"


def test_under_any_small_cap_a_fit_is_fitted_or_refused_for_memory(imported):  # noqa: F811
    """Where the cap bites varies from run to run and between DuckDB versions (2.0.1 fails in the
    store's open at 200 MB, 2.0.0 in the fit): whichever, the visitor reads the cap's refusal."""
    db, experiment, _ = imported
    refusals = ("the choice model needs more memory than a fit may take here",
                "300 answers x their shown documents make 1,500 citation decisions")  # the memory check's
    for mb in range(150, 400, 40):
        h.clear_cache()
        try:
            h.why_cited_page(db, experiment, [], "number", "label:relevant",
                             bounds=FitBounds(max_address_space=mb * 1024**2))
        except UserError as err:
            assert str(err).startswith(refusals), (mb, str(err))


@pytest.mark.parametrize("bounds, message", [
    (FitBounds(max_address_space=200 * 1024**2), r"the choice model needs more memory than a fit may take here "
                                                  r"\(at most 200 MB\); choose fewer experiments or modes"),
    (FitBounds(timeout_s=0.05), r"the choice model took more than 0\.05 s of CPU to fit \(the time limit here\); "
                                r"choose fewer experiments or modes"),
])
def test_a_fit_past_its_memory_or_time_is_refused_in_one_line(imported, bounds, message):  # noqa: F811
    db, experiment, _ = imported
    h.clear_cache()
    with pytest.raises(UserError, match="^" + message) as caught:
        h.why_cited_page(db, experiment, [], "group", "", bounds=bounds)
    text = str(caught.value)
    assert "\n" not in text and "Traceback" not in text and str(db.parent) not in text


@functools.cache
def _bench():
    from tests.support.helpers import load_script

    return load_script("bench_fit_child")


def _chunk() -> float:
    """A light page's worth of pure-Python work (~10 ms), timed: the bench's (scripts/bench_fit_child.py)."""
    return _bench().page_work()


def test_a_running_fit_leaves_the_web_process_to_other_visitors(imported):  # noqa: F811
    """Before: the fit ran in this process, holding the GIL for much of its seconds of CPU (another
    page's reads took 3 s longer). Now this process only waits on the child's pipe: it spends
    (almost) no CPU on the fit, and another visitor's work goes at its own pace meanwhile."""
    import resource

    db, experiment, _ = imported
    h.clear_cache()
    alone = [_chunk() for _ in range(15)]
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = threading.Event()
    took: list[float] = []
    spent: list[float] = []

    def fit() -> None:
        started, cpu = time.perf_counter(), time.thread_time()
        h.why_cited_page(db, experiment, [], "group", "label:relevant")
        spent.append(time.thread_time() - cpu)
        took.append(time.perf_counter() - started)
        done.set()

    worker = threading.Thread(target=fit)
    worker.start()
    during = []
    while not done.is_set():
        during.append(_chunk())
    worker.join()
    alone += [_chunk() for _ in range(15)]
    child_cpu = sum(getattr(resource.getrusage(resource.RUSAGE_CHILDREN), f) - getattr(children, f)
                    for f in ("ru_utime", "ru_stime"))
    slowdown = statistics.median(during) / statistics.median(alone)
    print(f"fit {took[0]:.2f} s: the web process's fit thread used {spent[0]:.3f} s CPU, the child {child_cpu:.2f} s; "
          f"a 10 ms chunk of other work took {slowdown:.2f}x its time alone ({len(during)} chunks)")
    # The claim, measured where it cannot depend on what else the machine runs: the fit's CPU is
    # the child's, and this process spent almost none on it. The slowdown printed above is the
    # figure for docs (0.91-1.00x here against 1.64-1.75x before, helper's bench on an idle
    # machine); asserted, it failed under the full suite's load, which slows the chunks whether
    # or not a fit runs, so it is reported, not asserted.
    assert spent[0] < 0.1 and child_cpu > 0.25


def test_fits_take_turns_between_visitors(imported):  # noqa: F811
    """A second visitor waits and then gets the page; the first visitor's second fit meanwhile is
    refused at once, in one line."""
    db, experiment, _ = imported
    h.clear_cache()
    gate = h.FitGate(1)
    pages: dict[str, object] = {}
    finished: list[str] = []

    def visit(owner: str, modes: list[str]) -> None:
        pages[owner] = h.why_cited_page(db, experiment, [], "group", "", modes, owner=owner, gate=gate)
        finished.append(owner)

    first = threading.Thread(target=visit, args=("client:a", ["base"]))
    first.start()
    _until(lambda: gate._running == 1)
    second = threading.Thread(target=visit, args=("client:b", ["cf"]))
    second.start()
    _until(lambda: len(gate._waiting) == 1)
    started = time.perf_counter()
    with pytest.raises(UserError, match=f"^{h.PENDING}$"):
        h.why_cited_page(db, experiment, [], "number", "", owner="client:a", gate=gate)
    assert time.perf_counter() - started < 1.0 and gate._running == 1  # refused at once, not queued
    first.join()
    second.join()
    assert finished == ["client:a", "client:b"]
    assert len(pages["client:b"].suppression) == 1 and pages["client:b"].experiment_ids == (experiment,)
    # Both done: the first visitor may fit again.
    assert h.why_cited_page(db, experiment, [], "number", "", owner="client:a", gate=gate).effects


def test_the_queue_is_bounded_and_served_in_order():
    gate = h.FitGate(1, max_waiting=2)
    release = threading.Event()
    order: list[str] = []

    def fit(owner: str) -> None:
        def call() -> None:
            release.wait(10)
            order.append(owner)

        gate.run(owner, call)

    threads = [threading.Thread(target=fit, args=(f"client:{n}",)) for n in "abc"]
    for n, thread in enumerate(threads):
        thread.start()
        _until(lambda n=n: gate._running + len(gate._waiting) == n + 1)
    with pytest.raises(UserError, match=f"^{h.BUSY}$"):
        gate.run("client:d", lambda: pytest.fail("admitted to a full queue"))
    release.set()
    for thread in threads:
        thread.join()
    assert order == ["client:a", "client:b", "client:c"]
    assert gate.run("client:d", lambda: "ran") == "ran"  # room again


def _until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_operator_sets_the_fits_bounds(monkeypatch):
    from demo.fit_child import DEFAULT_FIT_MEMORY_MB, DEFAULT_FIT_TIMEOUT_S
    from demo.settings import settings_from_env

    for name in ("PATTRIEVAL_FIT_MEMORY_MB", "PATTRIEVAL_FIT_TIMEOUT_S", "PATTRIEVAL_MAX_FITS"):
        monkeypatch.delenv(name, raising=False)
    s = settings_from_env("x.duckdb")
    assert (s.fit_memory_mb, s.fit_timeout_s, s.max_fits) == (DEFAULT_FIT_MEMORY_MB, DEFAULT_FIT_TIMEOUT_S, 1)
    # A fit at the app's bounds (500,000 answers) peaked at 1,943 MB and 8.1 s: 3x under both caps.
    assert (DEFAULT_FIT_MEMORY_MB, DEFAULT_FIT_TIMEOUT_S) == (6144, 30)
    assert FitBounds().max_address_space == 6144 * 1024**2
    monkeypatch.setenv("PATTRIEVAL_FIT_MEMORY_MB", "1024")
    monkeypatch.setenv("PATTRIEVAL_FIT_TIMEOUT_S", "5")
    monkeypatch.setenv("PATTRIEVAL_MAX_FITS", "2")
    s = settings_from_env("x.duckdb")
    assert (s.fit_memory_mb, s.fit_timeout_s, s.max_fits) == (1024, 5, 2)
    monkeypatch.setenv("PATTRIEVAL_MAX_FITS", "0")
    with pytest.raises(UserError, match="PATTRIEVAL_MAX_FITS must be a whole number above 0"):
        settings_from_env("x.duckdb")


@pytest.mark.parametrize("mb", [80, 160])
def test_a_child_that_cannot_even_import_under_its_cap_says_memory(imported, mb):  # noqa: F811
    """Under a tiny cap pandas' or DuckDB's libraries cannot be mapped (an ImportError), or OpenBLAS
    gives up and ends the process: both are the memory cap's refusal, naming the setting and the
    command without a bound. Before, they read "could not be fitted (ImportError)" or "ended
    without a reply"."""
    from demo.fit_child import fit_in_child
    from engine.usecases.study.effects import StudyEffectsRequest

    db, experiment, _ = imported
    requests = [(WhyCitedRequest((experiment,)), "the choice model", "`python -m engine why-cited`"),
                (StudyEffectsRequest("grid"), "the study model", "`python -m engine why-cited --study grid`")]
    for request, what, command in requests:
        with pytest.raises(UserError) as caught:
            fit_in_child(request, db, FitBounds(max_address_space=mb * 1024**2))
        text = str(caught.value)
        assert text.startswith(f"{what} needs more memory than a fit may take here (at most {mb} MB)"), text
        assert "PATTRIEVAL_FIT_MEMORY_MB" in text and command in text and "\n" not in text
