"""Generation computes with one explicit torch thread count, set in the thread that computes, and
the runs record it: the claim behind "a local run and a Ray run store the same rows"
(tests/engine/running/test_ray_backend.py checks the rows themselves)."""

from __future__ import annotations

import threading

import pytest
import torch

from engine.datasets.data import load_dataset
from engine.generation.generate import GenerationConfig, generate
from engine.generation.threads import default_threads, resolve_threads
from engine.running.run_request import generation_config
from engine.usecases.runs.run import ExperimentRequest, run_experiment
from tests.engine.running.test_run_experiments import make_dataset, req, rows


@pytest.fixture
def restore_threads():
    """Whatever a test sets, this thread computes with torch's default again afterwards."""
    yield
    torch.set_num_threads(default_threads())


def _counts_during_forward(loaded, monkeypatch) -> list[int]:
    """The thread count in effect at every forward pass of `loaded`'s model, recorded as it runs."""
    seen: list[int] = []
    forward = loaded.model.forward

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return forward(*args, **kwargs)

    monkeypatch.setattr(loaded.model, "forward", spy)
    return seen


def test_each_batch_computes_with_the_configured_count_even_in_a_thread_set_otherwise(
    tiny_llama, monkeypatch, restore_threads
):
    seen = _counts_during_forward(tiny_llama, monkeypatch)
    other = 2 if default_threads() == 1 else 1
    done: list[BaseException | None] = []

    def worker():
        try:
            # This thread has computed with another count before: the one set in another thread
            # (or left over from an earlier job) must not be what the batch computes with.
            torch.set_num_threads(other)
            (torch.ones(64, 64) @ torch.ones(64, 64)).sum()
            generate(tiny_llama, ["a question", "another"], GenerationConfig(max_new_tokens=3, threads=3))
            done.append(None)
        except BaseException as err:  # noqa: BLE001 - re-raised in the test's thread
            done.append(err)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert done == [None], done
    assert seen and set(seen) == {3}


def test_the_request_resolves_to_torchs_default_in_the_driver_or_the_count_asked():
    assert generation_config(req("m")).threads == default_threads() == resolve_threads(None)
    assert generation_config(req("m", threads=1)).threads == 1
    with pytest.raises(ValueError, match="threads must be between 1 and 1024"):
        resolve_threads(0)


def test_runs_record_the_count_and_a_resume_with_another_count_beside_the_first(
    tiny_llama, tmp_path, restore_threads
):
    dataset = load_dataset(make_dataset(tmp_path / "d.jsonl", 4))
    db = tmp_path / "runs.duckdb"
    load = lambda request: tiny_llama  # noqa: E731
    run_experiment(ExperimentRequest(req(tiny_llama.model_id, modes=("vanilla",), threads=1, limit=2), dataset, db), load=load)
    sql = "SELECT config_json->>'torch_threads', config_json->>'torch_threads_resumed' FROM runs"
    assert rows(db, sql) == [("1", None)]

    # The same run (threads are not part of its identity) resumed with 2 threads for 2 more items.
    run_experiment(ExperimentRequest(req(tiny_llama.model_id, modes=("vanilla",), threads=2, limit=4), dataset, db), load=load)
    assert rows(db, sql) == [("1", "[2]")]
    assert rows(db, "SELECT count(*), count(DISTINCT run_id) FROM generations") == [(4, 1)]
