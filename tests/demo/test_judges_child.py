"""The Judges tab's heavy work, bounded: a label import held to the store's quota before and while
it writes, and run with the agreement in a bounded child process (demo.judges_child), one per
visitor at a time; the agreement kept per store state. On tests/support/judged_store.py's store, through
the handlers and through the app launched as `python -m demo` launches it."""

from __future__ import annotations

import threading

import pytest

from demo.handlers import judges as h
from demo.settings import AppSettings
from engine.errors import UserError
from tests.support.helpers import copy_store
from tests.support.judged_store import build, cited, dump

LABELS = "item_id,experiment,mode,position,label"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    path = tmp_path_factory.mktemp("judges-child") / "judged.duckdb"
    return path, build(path)


@pytest.fixture
def store(built, tmp_path):
    path, info = built
    return copy_store(path, tmp_path / "s.duckdb"), info


def _labels(tmp_path, info, name: str = "ann.csv"):
    lines = [LABELS] + [f"{item},pilot,vanilla,{p},attributable" for i, item in enumerate(info["items"])
                        for p in cited(i)]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path, len(lines) - 1


def _one_line(err: pytest.ExceptionInfo, *forbidden: str) -> str:
    line = str(err.value)
    assert "\n" not in line and "Traceback" not in line and not any(f in line for f in forbidden), line
    return line


# ---------------------------------------------------------------- the store's quota


def test_a_label_import_is_refused_by_the_store_quota_before_it_writes(store, tmp_path):
    from engine.usecases.storage.import_labels import ImportLabelsRequest, import_labels, store_size

    db, info = store
    labels, n = _labels(tmp_path, info)
    before = dump(db)
    # The app's quota (MB): a store at it is refused before the file is read, nothing written.
    with pytest.raises(UserError, match=r"the store is at its quota here \(\d+ MB of 1 MB\)") as caught:
        h.import_labels_file(AppSettings(db, max_store_mb=1), str(labels), "ann")
    _one_line(caught, str(tmp_path))
    # Room left, but less than the labels' estimate: refused in one line, nothing written.
    size = store_size(db)
    with pytest.raises(UserError, match=rf"these {n} labels would store about 0 MB and the store has 0 MB left") as caught:
        import_labels(ImportLabelsRequest(db, labels, "ann", max_store_bytes=size + 1000))
    _one_line(caught)
    with pytest.raises(UserError, match=rf"these {n} labels would store about .* one import may store at most 0 MB"):
        import_labels(ImportLabelsRequest(db, labels, "ann", max_import_bytes=1000))
    assert dump(db) == before
    # With room for the estimate the same file goes in, and its estimate bounds what it added.
    result = import_labels(ImportLabelsRequest(db, labels, "ann", max_store_bytes=size + 2**20))
    assert result.n_added == n and store_size(db) - size <= 2**20


def test_a_quota_passed_while_labels_are_written_rolls_the_whole_import_back(store, monkeypatch):
    import store.judge_labels_store as writer
    from store.judge_labels_store import LabelRow, write_labels

    db, info = store
    before = dump(db)
    rows = [LabelRow(info["run"], item, p, f"{item}-d{p}", "attributable", f"f.csv:line {i}")
            for i, item in enumerate(info["items"]) for p in cited(i)]
    monkeypatch.setattr(writer, "CHUNK_ROWS", 10)  # several chunks, so that the writer asks between them
    asked: list[int] = []

    def room(left: int) -> str | None:
        asked.append(left)
        return "the store passed its quota" if len(asked) == 3 else None

    with pytest.raises(UserError, match="the store passed its quota"):
        write_labels(db, "ann", {}, rows, room=room)
    assert asked == [len(rows), len(rows) - 10, len(rows) - 20]
    assert dump(db) == before  # neither the judge nor the first chunks' labels


# ---------------------------------------------------------------- a bounded child, one per visitor


def test_a_label_import_runs_in_a_bounded_child_and_its_failure_writes_nothing(store, tmp_path):
    db, info = store
    labels, _ = _labels(tmp_path, info)
    before = dump(db)
    # An address space no import fits in: refused in one line by the child's cap.
    with pytest.raises(UserError, match="the labels' import needs more memory than this app gives it") as caught:
        h.import_labels_file(AppSettings(db, fit_memory_mb=48), str(labels), "ann")
    _one_line(caught, str(tmp_path))
    assert dump(db) == before
    assert h.import_labels_file(AppSettings(db), str(labels), "ann").startswith("ann.csv: 36 of 36 labels stored")


@pytest.mark.slow  # four child processes, each loading the statistics libraries: ~12 s
def test_the_agreement_is_kept_per_store_state(store, tmp_path, monkeypatch):
    import demo.judges_child
    from demo.handlers.why_cited import FitGate

    db, info = store
    h.clear_cache()
    children = []
    real = demo.judges_child.in_child
    monkeypatch.setattr(demo.judges_child, "in_child", lambda *a, **k: children.append(a[0].kind) or real(*a, **k))
    first = h.agreement_api(db, "pilot", [])
    assert h.agreement_api(db, "", [info["run"]])["pairs"] == first["pairs"] and children == ["agreement"] * 2
    assert h.agreement_api(db, "pilot", []) == first and len(children) == 2  # kept
    # A kept agreement is served without queuing: here at a gate that admits nothing.
    assert h.agreement_api(db, "pilot", [], gate=FitGate(0, max_waiting=0)) == first
    h.import_labels_file(AppSettings(db), str(_labels(tmp_path, info)[0]), "ann")  # the store changes
    assert "ann" in [j["judge"] for j in h.agreement_api(db, "pilot", [])["judges"]]
    assert children == ["agreement", "agreement", "import_labels", "agreement"]


def test_a_visitor_has_one_agreement_at_a_time_and_a_full_queue_is_refused(store):
    from demo.handlers.why_cited import FitGate

    db, _ = store
    h.clear_cache()
    gate, busy, release = FitGate(1, max_waiting=1), threading.Event(), threading.Event()
    holder = threading.Thread(target=gate.run, args=("client:a", lambda: busy.set() or release.wait(30)))
    holder.start()
    try:
        assert busy.wait(10)
        with pytest.raises(UserError, match=f"^{h.PENDING}$"):
            h.run_agreement(db, "pilot", [], owner="client:a", gate=gate)
        waiter = threading.Thread(target=lambda: h.run_agreement(db, "pilot", [], owner="client:b", gate=gate))
        waiter.start()
        while not gate._waiting:  # the other visitor waits their turn
            threading.Event().wait(0.01)
        with pytest.raises(UserError, match=f"^{h.BUSY}$"):
            h.run_agreement(db, "pilot", [], owner="client:c", gate=gate)
    finally:
        release.set()
        holder.join()
    waiter.join(60)
    assert not waiter.is_alive()


def test_the_operator_sets_the_judges_time_limit(monkeypatch):
    from demo.judges_child import DEFAULT_JUDGES_TIMEOUT_S
    from demo.settings import settings_from_env

    monkeypatch.delenv("PATTRIEVAL_JUDGES_TIMEOUT_S", raising=False)
    assert settings_from_env("x.duckdb").judges_timeout_s == DEFAULT_JUDGES_TIMEOUT_S == 120
    monkeypatch.setenv("PATTRIEVAL_JUDGES_TIMEOUT_S", "30")
    assert h.judges_bounds(settings_from_env("x.duckdb")).timeout_s == 30


@pytest.mark.slow  # the app launched: ~13 s
def test_agreement_through_the_app_runs_in_the_bounded_child(built):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    from demo.jobs import JobQueue
    from tests.support.app_server import refuse_load, served

    h.clear_cache()
    with served(AppSettings(built[0], fit_memory_mb=48), JobQueue(load=refuse_load)) as url:
        with pytest.raises(AppError) as caught:
            Client(url, verbose=False).predict("pilot", [], api_name="/agreement")
    assert "the judges' agreement needs more memory than this app gives it" in str(caught.value)
    assert "\n" not in str(caught.value)
