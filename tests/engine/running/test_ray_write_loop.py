"""The write loop every backend feeds, without Ray: results in any order, a batch delivered twice,
a worker that loaded the model differently, a backend that stops short; and the Ray options that
are refused before anything starts (no Ray needed for these)."""

from __future__ import annotations

import socket
import sys
import time

import pytest

from engine.datasets.data import load_dataset
from engine.errors import UserError
from engine.prompting.prompts import METADATA_TYPES, PromptConfig, build_prompt
from engine.running.backends import BatchResult, PlannedBatch
from engine.running.write_loop import OpenRun, write_loop
from engine.types import GenerationOutput
from tests.engine.running.test_run_experiments import make_dataset


class ListSink:
    """The Sink calls the write loop makes, kept in lists."""

    def __init__(self):
        self.written: list[tuple[str, str]] = []
        self.finished: dict[str, str] = {}

    def write_batch(self, run_id, generations):
        self.written += [(run_id, g.item_id) for g in generations]

    def finish_run(self, run_id, status):
        self.finished[run_id] = status

    def fail_runs(self, run_ids):
        self.finished.update(dict.fromkeys(run_ids, "failed"))


@pytest.fixture
def setup(tmp_path):
    dataset = load_dataset(make_dataset(tmp_path / "d.jsonl", 4))
    config = PromptConfig(mode="base", metadata=METADATA_TYPES["gender"])

    def runs():
        return [
            OpenRun(run_id, "base", 4, {it.id: (it, build_prompt(it, config)) for it in dataset.items})
            for run_id in ("r1", "r2")
        ]

    batches = [
        PlannedBatch(n, run_id, tuple(ids), tuple((1, 2) for _ in ids))
        for n, (run_id, ids) in enumerate(
            [("r1", ["q0", "q1"]), ("r1", ["q2", "q3"]), ("r2", ["q0", "q1", "q2"]), ("r2", ["q3"])]
        )
    ]
    return runs, batches


def result(batch, fingerprint=None):
    out = GenerationOutput(text="Paris [1].", tokens=(), finish_reason="stop", n_prompt_tokens=2)
    return BatchResult(batch.batch_id, tuple(out for _ in batch.item_ids), fingerprint)


def test_results_in_any_order_and_twice_are_written_once_and_each_run_completes_when_full(setup):
    runs, batches = setup
    open_runs, sink = runs(), ListSink()
    arrivals = [batches[2], batches[0], batches[0], batches[3], batches[1], batches[2]]  # Ray order, retries
    progress = []
    write_loop(open_runs, batches, [result(b) for b in arrivals], sink, on_progress=progress.append)
    assert sorted(sink.written) == sorted({(b.run_id, i) for b in batches for i in b.item_ids})
    assert len(sink.written) == 8  # no item twice
    assert sink.finished == {"r1": "complete", "r2": "complete"}
    assert progress == [3, 2, 1, 2]
    assert [(r.n_generated, r.n_cited) for r in open_runs] == [(4, 4), (4, 4)]


def test_a_worker_with_another_model_or_library_fails_every_open_run(setup):
    runs, batches = setup
    open_runs, sink = runs(), ListSink()
    recorded = (("dtype", "bfloat16"), ("libraries", (("torch", "2.13.0"),)))
    other = (("dtype", "float16"), ("libraries", (("torch", "2.13.0"),)))
    with pytest.raises(UserError, match="dtype bfloat16 recorded, float16 on a worker"):
        write_loop(open_runs, batches, [result(batches[0], recorded), result(batches[1], other)], sink,
                   fingerprint=recorded)
    assert sink.finished == {"r1": "failed", "r2": "failed"}
    assert len(sink.written) == 2  # the matching batch stays: it resumes from there


def test_a_backend_that_stops_short_fails_the_runs_it_left_unfinished(setup):
    runs, batches = setup
    open_runs, sink = runs(), ListSink()
    with pytest.raises(RuntimeError, match="not generated"):
        write_loop(open_runs, batches, [result(b) for b in batches[:3]], sink)
    assert sink.finished == {"r1": "complete", "r2": "failed"}


def test_an_interrupt_while_waiting_for_a_batch_fails_the_open_runs_and_stops_the_backend(setup):
    runs, batches = setup
    open_runs, sink = runs(), ListSink()
    closed = []

    def results():
        try:
            yield result(batches[0])
            raise KeyboardInterrupt
        finally:
            closed.append(True)

    with pytest.raises(KeyboardInterrupt):
        write_loop(open_runs, batches, results(), sink)
    assert sink.finished == {"r1": "failed", "r2": "failed"} and closed


# ------------------------------------------------ refused before Ray starts (no Ray needed)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_address_fails_in_one_line_within_seconds():
    from engine.running.backend_ray import check_address

    with pytest.raises(UserError, match="no Ray cluster answers at 127.0.0.1:"):
        check_address(f"127.0.0.1:{_closed_port()}")
    with socket.socket() as silent:  # accepts (the backlog does) but never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(UserError, match=rf"no Ray cluster answers at ray://127.0.0.1:{port} \(timed out\)"):
            check_address(f"ray://127.0.0.1:{port}", timeout=0.5)
        assert time.monotonic() - started < 3
    with pytest.raises(UserError, match="is not HOST:PORT"):  # a port is needed
        check_address("head-node")
    check_address(None)
    check_address("local")


def test_without_ray_installed_the_command_says_how_to_install_it(monkeypatch, capsys, tmp_path):
    from engine.__main__ import main

    # None in sys.modules makes `import ray` raise ImportError, as on a machine without it.
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setitem(sys.modules, "ray.data", None)
    data = make_dataset(tmp_path / "d.jsonl", 2)
    db = tmp_path / "r.duckdb"
    code = main(["run", "--model", "smoke", "--dataset", str(data), "--db", str(db), "--backend", "ray"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == ["error: the Ray backend needs ray[data], which is not installed: pip install -r requirements-ray.txt"]
    assert not db.exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--actors", "2"], "--actors needs --backend ray"),
        (["--backend", "ray", "--actors", "0"], "--actors must be at least 1"),
        (["--backend", "ray", "--device", "cuda:1"], "--device cuda:1 cannot be used with --backend ray"),
    ],
)
def test_ray_options_that_cannot_work_are_refused_in_one_line(extra, message, capsys, tmp_path):
    from engine.__main__ import main

    data = make_dataset(tmp_path / "d.jsonl", 2)
    code = main(["run", "--model", "smoke", "--dataset", str(data), "--db", str(tmp_path / "r.duckdb"), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0], err


def test_the_hf_token_never_reaches_what_ray_records(tmp_path):
    """Ray keeps actor arguments, the actor class and runtime environments in its logs and
    dashboard; the worker's settings (pickled into the class) and the runtime env hold no token."""
    import dataclasses
    import pickle

    from engine.running.backend_ray import RayBackend, runtime_env
    from tests.engine.running.test_run_experiments import req

    request = dataclasses.replace(req(tmp_path, device="auto"), hf_token="hf_SECRETsecret")
    backend = RayBackend(request, None, actors=2)
    assert b"hf_SECRETsecret" not in pickle.dumps(backend.settings)
    assert "hf_SECRETsecret" not in repr(runtime_env()) and set(runtime_env()) == {"py_modules"}


def test_several_plans_share_one_pipeline_and_a_vanilla_copy_waits_for_its_source(tiny_llama, tiny_llama_dir, tmp_path):
    """execute_plans (a grid on one backend; LocalBackend here, RayBackend in the app): the race
    experiment's vanilla run copies gender's, generated in the same pipeline, and generates the
    items gender's lacks in a second one."""
    import dataclasses

    from engine.running.backends import LocalBackend
    from engine.running.planner import plan_experiment
    from engine.running.run_request import generation_config
    from engine.running.runner import execute_plans
    from store import RunStore, connect
    from tests.engine.running.test_run_experiments import req

    dataset = load_dataset(make_dataset(tmp_path / "d.jsonl", 4))
    store = RunStore(tmp_path / "r.duckdb")
    gender = req(tiny_llama_dir, ("vanilla", "base"), metadata="gender", limit=2)
    race = dataclasses.replace(req(tiny_llama_dir, ("vanilla", "base"), metadata="race"))
    plans = [plan_experiment(dataset, gender, store), plan_experiment(dataset, race, store)]
    source = plans[0].runs[0].run_id
    calls = []

    class CountingBackend(LocalBackend):
        def generate(self, batches):
            calls.append(sorted({b.run_id for b in batches}))
            return super().generate(batches)

    claimed = []
    progress = []
    outcomes = execute_plans(plans, store, CountingBackend(tiny_llama, generation_config(gender), gender),
                             copy_from=[None, {"vanilla": source}],
                             on_claimed=lambda i, plan: claimed.append(i), on_progress=progress.append)
    race_vanilla = plans[1].runs[0].run_id
    assert claimed == [0, 1]
    assert len(calls) == 2 and race_vanilla not in calls[0] and calls[1] == [race_vanilla]
    assert [[(r.mode, r.status, r.n_items, r.n_generated) for r in o.runs] for o in outcomes] == [
        [("vanilla", "complete", 2, 2), ("base", "complete", 2, 2)],
        [("vanilla", "complete", 4, 2), ("base", "complete", 4, 4)],
    ]
    assert sum(progress) == 2 + 2 + 4 + 2 + 2  # generated, plus the 2 copied answers
    with connect(tmp_path / "r.duckdb", read_only=True) as conn:
        same = conn.execute(
            "SELECT count(*) FROM generations a JOIN generations b USING (item_id) "
            "WHERE a.run_id = ? AND b.run_id = ? AND a.answer = b.answer AND a.logprobs = b.logprobs",
            [source, race_vanilla],
        ).fetchone()
        assert same == (2,)
        assert conn.execute("SELECT DISTINCT status FROM runs").fetchall() == [("complete",)]


def test_runs_planned_again_keep_the_prompts_built_the_first_time(tmp_path):
    """The runner builds each item's prompt once, in place of its settings (Unplanned). Planning the
    same open runs again must reuse the built prompts: the todo once held untyped (settings,
    index) pairs, and a second planning unpacked a Prompt (TypeError)."""
    from types import SimpleNamespace

    from engine.running.run_request import RunRequest
    from engine.running.runner import _planned_batches
    from engine.running.served_request import TextTokenizer
    from engine.running.write_loop import Unplanned

    dataset = load_dataset(make_dataset(tmp_path / "d.jsonl", 3))
    config = PromptConfig(mode="base", metadata=METADATA_TYPES["gender"])
    state = OpenRun("r1", "base", 3, {it.id: (it, Unplanned(config, n)) for n, it in enumerate(dataset.items)})
    request = RunRequest("m", ("base",), config, batch_size=2)
    backend = SimpleNamespace(tokenizer=TextTokenizer())  # plans by code points; no model needed
    first = _planned_batches([state], request, backend)
    assert _planned_batches([state], request, backend) == first
    assert [p for _, p in state.todo.values()] == [build_prompt(it, config, n) for n, it in enumerate(dataset.items)]


def test_an_item_without_its_prompt_fails_the_run_in_one_line(setup):
    """An item whose prompt was never built reaching the write loop is a bug: it fails the run with
    a line naming the run and the item, never a generation stored with a missing prompt."""
    from engine.running.write_loop import Unplanned

    runs, batches = setup
    open_runs = runs()
    item = open_runs[0].todo["q0"][0]
    open_runs[0].todo["q0"] = (item, Unplanned(PromptConfig(mode="base", metadata=METADATA_TYPES["gender"]), 0))
    sink = ListSink()
    with pytest.raises(RuntimeError, match="run r1: item q0 was generated before its prompt was built"):
        write_loop(open_runs, batches, [result(batches[0])], sink)
    assert sink.written == [] and sink.finished == {"r1": "failed", "r2": "failed"}
