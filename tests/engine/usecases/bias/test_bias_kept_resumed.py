"""A crashed run keeps the Bias page's values as every writer does: a process killed between a
run's end and its keeping leaves them to the same command run again (nothing left to generate),
and a run whose process was killed mid-run does not keep its experiment's other runs from
keeping theirs; resumed and ended, it keeps them again."""

from __future__ import annotations

import random
import subprocess
import sys

from demo.handlers import bias as handler
from engine.datasets.data import load_dataset
from engine.usecases.bias.kept import after_run
from engine.usecases.runs.run import ExperimentRequest, run_experiment
from store import RunStore, connect
from tests.demo.handlers.test_app_bias import EXPERIMENTS, ITEMS, _generation, _spec
from tests.engine.running.test_run_experiments import no_load, req, shared  # noqa: F401 - fixture
from tests.store.test_derived_values import _counting, _kept_rows, built, db  # noqa: F401 - fixtures
from tests.support.helpers import make_dataset


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_same_command_run_again_keeps_what_a_killed_process_left_unkept(tiny_llama_dir, shared, tmp_path,  # noqa: F811
                                                                            monkeypatch):
    path = make_dataset(tmp_path / "d.jsonl", 3)
    store = tmp_path / "runs.duckdb"
    request = ExperimentRequest(req(tiny_llama_dir), load_dataset(path), store)
    first = run_experiment(request, load=shared)
    kept = _kept_rows(store, first.experiment_id)
    assert kept  # kept when the last run ended
    with connect(store) as conn:  # the process killed after the runs ended, before it kept anything
        conn.execute("DELETE FROM derived_values")
    again = run_experiment(request, load=no_load)
    assert again.experiment_id == first.experiment_id
    assert _kept_rows(store, first.experiment_id) == kept
    computed = _counting(monkeypatch)
    handler.clear_cache()
    assert handler.bias_page(store, first.experiment_id).results and computed == []


def test_a_run_whose_process_was_killed_does_not_hold_back_the_others_values(db):  # noqa: F811
    model, meta, _ = EXPERIMENTS["exp-base"]
    crashed = RunStore(db, timeout_s=10)
    crashed.start_run(_spec("exp-base-vanilla", "exp-base", model, meta, "vanilla"))
    crashed.write_batch("exp-base-vanilla", [_generation(item, 0.3, random.Random(2)) for item in ITEMS[:4]])
    with connect(db) as conn:  # its process killed mid-run: the owner row stays, naming a dead pid
        conn.execute("UPDATE run_owners SET pid = ?, process_start = NULL WHERE run_id = 'exp-base-vanilla'",
                     [_dead_pid()])
    ending = RunStore(db, timeout_s=10, on_finished=after_run(db))
    ending.start_run(_spec("exp-base-cf", "exp-base", model, meta, "cf"))
    ending.write_batch("exp-base-cf", [_generation(item, 0.3, random.Random(3)) for item in ITEMS])
    ending.finish_run("exp-base-cf", "complete")
    before = _kept_rows(db, "exp-base")
    assert len(before) == 2
    # Resumed by the next command and ended: its end keeps the values over every run again.
    resumed = RunStore(db, timeout_s=10, on_finished=after_run(db))
    resumed.start_run(_spec("exp-base-vanilla", "exp-base", model, meta, "vanilla"))
    resumed.write_batch("exp-base-vanilla", [_generation(item, 0.3, random.Random(2)) for item in ITEMS[4:]])
    resumed.finish_run("exp-base-vanilla", "complete")
    after = _kept_rows(db, "exp-base")
    assert len(after) == 2 and {r[2] for r in after}.isdisjoint(r[2] for r in before)
