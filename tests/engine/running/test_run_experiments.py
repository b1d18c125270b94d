"""Experiments: runs of one configuration join one experiment, named experiments grow, and two
commands never produce two runs of one mode or generate the same run at once."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from engine.__main__ import main as cli
from engine.commands.run import bias_hint
from engine.datasets.data import load_dataset
from engine.errors import UserError
from engine.prompting.prompts import METADATA_TYPES, PromptConfig
from engine.running.planner import plan_experiment
from engine.running.run_request import RunRequest
from engine.running.runner import execute_plan
from engine.types import MODES, RunSpec
from engine.usecases.runs.run import ExperimentRequest, run_experiment
from store import RunStore, connect
from store.db import utc_now
from store.migrations import apply_migrations, available_migrations
from store.owners import ProcessIdentity, owner_alive, process_start
from store.run_store import RunConflict
from tests.support.helpers import digest, make_dataset, rows


@pytest.fixture
def data(tmp_path):
    path = make_dataset(tmp_path / "d.jsonl", 2)
    return path, load_dataset(path)


@pytest.fixture
def db(tmp_path):
    return tmp_path / "runs.duckdb"


@pytest.fixture
def shared(tiny_llama):
    """A loader that hands out the session's tiny model instead of loading it again."""
    return lambda request: tiny_llama


def no_load(request):
    pytest.fail("the model was loaded although nothing was to be generated")


def req(model_dir, modes=MODES, *, metadata="gender", **changes) -> RunRequest:
    base = RunRequest(
        model=str(model_dir), modes=tuple(modes), prompt=PromptConfig(metadata=METADATA_TYPES[metadata]),
        quantize="none", device="cpu", max_new_tokens=2, batch_size=4,
    )
    return dataclasses.replace(base, **changes)


def cli_args(model_dir, dataset: Path, db: Path, *extra: str) -> list[str]:
    return ["run", "--model", str(model_dir), "--dataset", str(dataset), "--db", str(db), "--metadata", "gender",
            "--max-new-tokens", "2", "--batch-size", "4", "--quantize", "none", "--device", "cpu", *extra]


def test_modes_added_later_join_one_experiment(tiny_llama_dir, data, db, shared, capsys):
    path, dataset = data
    first = run_experiment(ExperimentRequest(req(tiny_llama_dir, ("vanilla",)), dataset, db), load=shared)
    second = run_experiment(ExperimentRequest(req(tiny_llama_dir, ("base", "cf")), dataset, db), load=shared)
    assert second.experiment_id == first.experiment_id
    assert second.modes == MODES
    assert rows(db, "SELECT DISTINCT experiment_id FROM runs") == [(first.experiment_id,)]
    assert rows(db, "SELECT count(*) FROM experiments") == [(1,)]

    # All three modes: nothing to do, no model loaded, nothing written, the one experiment named.
    again = run_experiment(ExperimentRequest(req(tiny_llama_dir), dataset, db), load=no_load)
    assert [r.status for r in again.runs] == ["already complete"] * 3
    before = digest(db)
    assert cli(cli_args(tiny_llama_dir, path, db)) == 0
    out = capsys.readouterr().out
    assert out.startswith("already complete, nothing to do (use --repeat for a new run)\n")
    assert f"experiment {first.experiment_id} " in out
    assert f"see the bias with: python -m engine bias --experiment {first.experiment_id} --db {db}" in out
    assert digest(db) == before


def test_the_next_command_names_the_missing_modes():
    assert bias_hint(("vanilla",), "e1", None) == (
        "to see the bias, add base and cf: run this command again with --modes base,cf "
        "(CAS compares vanilla with base, CAB base with cf)"
    )
    assert "--modes vanilla,cf" in bias_hint(("base",), "e1", None)
    assert "without --repeat" in bias_hint(("cf",), "e1", None, repeat=True)
    assert bias_hint(("vanilla", "base"), "e1", None) == "see the bias with: python -m engine bias --experiment e1"
    assert bias_hint(("base", "cf"), "e1", "my runs.duckdb").endswith("--experiment e1 --db 'my runs.duckdb'")
    assert bias_hint(("base", "cf"), "it's mine", None).endswith("""--experiment 'it'"'"'s mine'""")  # shell-quoted


def test_repeat_starts_a_new_experiment_that_later_commands_join(tiny_llama_dir, data, db, shared):
    _, dataset = data
    first = run_experiment(ExperimentRequest(req(tiny_llama_dir, ("vanilla",)), dataset, db), load=shared)
    repeated = run_experiment(ExperimentRequest(req(tiny_llama_dir, ("vanilla",), repeat=True), dataset, db), load=shared)
    assert repeated.experiment_id != first.experiment_id
    assert repeated.runs[0].run_id != first.runs[0].run_id and repeated.runs[0].n_generated == 2
    joined = run_experiment(ExperimentRequest(req(tiny_llama_dir, ("vanilla",)), dataset, db), load=no_load)
    assert joined.experiment_id == repeated.experiment_id  # the newest of that configuration
    assert rows(db, "SELECT count(*) FROM experiments") == [(2,)]


def test_a_named_experiment_grows_by_modes_and_items(tiny_llama_dir, data, db, shared):
    _, dataset = data
    first = run_experiment(ExperimentRequest(req(tiny_llama_dir, ("vanilla",), experiment="pilot", limit=1), dataset, db), load=shared)
    assert first.experiment_name == "pilot" and first.runs[0].n_items == 1
    more = run_experiment(ExperimentRequest(req(tiny_llama_dir, ("base", "cf"), experiment="pilot", limit=1), dataset, db), load=shared)
    assert more.experiment_id == first.experiment_id
    run_ids = {r.mode: r.run_id for r in first.runs + more.runs}

    # The whole dataset later: the same three runs, each extended by the items it lacks.
    full = run_experiment(ExperimentRequest(req(tiny_llama_dir, experiment="pilot"), dataset, db), load=shared)
    assert {r.mode: r.run_id for r in full.runs} == run_ids
    assert [(r.status, r.n_items, r.n_generated) for r in full.runs] == [("complete", 2, 1)] * 3
    assert rows(db, "SELECT count(*), count(DISTINCT (run_id, item_id)) FROM generations") == [(6, 6)]
    assert rows(db, "SELECT DISTINCT n_items, status FROM runs") == [(2, "complete")]
    assert rows(db, "SELECT name FROM experiments") == [("pilot",)]
    # Fewer items never shrink a run; the experiment id works as a name too.
    fewer = run_experiment(ExperimentRequest(req(tiny_llama_dir, experiment=first.experiment_id, limit=1), dataset, db), load=no_load)
    assert [(r.status, r.n_items) for r in fewer.runs] == [("already complete", 2)] * 3


def test_bias_report_and_list_know_an_experiment_by_its_name(tiny_llama_dir, data, db, shared, capsys):
    _, dataset = data
    made = run_experiment(ExperimentRequest(req(tiny_llama_dir, experiment="pilot"), dataset, db), load=shared)
    capsys.readouterr()
    assert cli(["bias", "--experiment", "pilot", "--db", str(db), "--json", "--resamples", "100"]) == 0
    assert json.loads(capsys.readouterr().out)["experiment_id"] == made.experiment_id
    assert cli(["report", "--experiment", "pilot", "--db", str(db), "--format", "json"]) == 0
    assert {r["experiment_id"] for r in json.loads(capsys.readouterr().out)["table2"]} == {made.experiment_id}
    assert cli(["list", "--db", str(db)]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:2] == [made.experiment_id, "pilot"]
    assert cli(["bias", "--experiment", "pilo", "--db", str(db)]) == 2
    # The newest experiments by id and by the name users gave them.
    assert capsys.readouterr().err == (
        f"error: no experiment 'pilo' in {db}; newest: {made.experiment_id} 'pilot' "
        f"({tiny_llama_dir}, gender, vanilla+base+cf)\n"
    )


def test_the_hint_after_run_names_the_experiment_as_the_user_did(tiny_llama_dir, data, db, capsys):
    path, _ = data
    assert cli(cli_args(tiny_llama_dir, path, db, "--modes", "base,cf", "--experiment", "gender pilot")) == 0
    hint = capsys.readouterr().out.splitlines()[-1]
    assert hint == f"see the bias with: python -m engine bias --experiment 'gender pilot' --db {shlex.quote(str(db))}"
    assert cli(["bias", "--experiment", "gender pilot", "--db", str(db), "--json", "--resamples", "100"]) == 0


def test_an_incompatible_experiment_is_refused_with_the_reason(tiny_llama_dir, data, db, shared, tmp_path):
    path, dataset = data
    run_experiment(ExperimentRequest(req(tiny_llama_dir, ("vanilla",), experiment="x"), dataset, db), load=shared)
    other = load_dataset(make_dataset(tmp_path / "other.jsonl", 3))
    before = digest(db)
    cases = [
        (dataset, dict(model_label="other/model"), f"experiment 'x' uses model {tiny_llama_dir}, not other/model"),
        (other, {}, f"experiment 'x' uses dataset {path} (content {dataset.sha}), not {other.source} (content {other.sha})"),
        (dataset, dict(max_new_tokens=3), "experiment 'x' uses --max-new-tokens 2, not 3"),
        (dataset, dict(prompt=PromptConfig(metadata=METADATA_TYPES["gender"], top_k=2)), "experiment 'x' uses --top-k all, not 2"),
        (dataset, dict(prompt=PromptConfig(metadata=METADATA_TYPES["race"])), "experiment 'x' uses --metadata gender, not race"),
        (dataset, dict(sample=True), "experiment 'x' uses --sample off, not on"),
        (dataset, dict(repeat=True), "experiment 'x' already exists and --repeat starts a new one: give --experiment a new name"),
    ]
    for ds, changes, message in cases:
        with pytest.raises(UserError) as caught:
            run_experiment(ExperimentRequest(req(tiny_llama_dir, ("base",), experiment="x", **changes), ds, db), load=no_load)
        assert str(caught.value) == message
    assert digest(db) == before
    # Without a name, other settings simply make another experiment.
    other_settings = run_experiment(ExperimentRequest(req(tiny_llama_dir, ("vanilla",), max_new_tokens=3), dataset, db), load=shared)
    assert rows(db, "SELECT count(*) FROM experiments") == [(2,)]
    assert other_settings.experiment_name is None


def spec(run_id: str, experiment_id: str, mode: str = "cf") -> RunSpec:
    return RunSpec(
        run_id=run_id, experiment_id=experiment_id, config_hash=f"hash-{run_id}", model="m", model_revision=None,
        quantization="none", dtype="float32", device="cpu", dataset="d.jsonl", dataset_sha="sha", metadata_type="gender",
        rag_mode=mode, seed=0, prompt_version="v", git_sha=None, library_versions={}, config={}, n_items=1,
    )


def test_an_experiment_never_holds_two_runs_of_one_mode(tiny_llama_dir, data, db, shared):
    _, dataset = data
    outcome = run_experiment(ExperimentRequest(req(tiny_llama_dir, ("cf",)), dataset, db), load=shared)
    with pytest.raises(RunConflict, match=rf"experiment {outcome.experiment_id} already has a cf run \({outcome.runs[0].run_id}\)"):
        RunStore(db).start_run(spec("second-cf", outcome.experiment_id))
    RunStore(db).start_run(spec("a-base", outcome.experiment_id, "base"))  # another mode is fine
    assert rows(db, "SELECT rag_mode, count(*) FROM runs GROUP BY ALL ORDER BY ALL") == [("base", 1), ("cf", 1)]


def test_a_second_command_refuses_while_a_live_process_generates_the_run(tiny_llama_dir, data, db, shared):
    _, dataset = data
    store = RunStore(db)
    # Two commands plan at the same time; the first to claim wins, the other is refused.
    slow = plan_experiment(dataset, req(tiny_llama_dir, ("vanilla",)), store)
    fast = run_experiment(ExperimentRequest(req(tiny_llama_dir, ("vanilla",)), dataset, db), load=shared)
    with pytest.raises(RunConflict, match=rf"experiment {fast.experiment_id} was created by another command while this one was starting"):
        execute_plan(slow, shared(None), store)
    assert rows(db, "SELECT count(*) FROM runs") == [(1,)]

    # A run claimed by a live process (here: this one, as the app's worker thread would) is refused
    # before any model is loaded, naming the run and the process.
    plan = plan_experiment(dataset, req(tiny_llama_dir, ("base", "cf")), store)
    store.claim(plan.spec, plan.experiment_id, {"base": None}, [
        dataclasses.replace(spec(plan.runs[0].run_id, plan.experiment_id, "base"), config_hash=plan.runs[0].config_hash,
                            model=str(tiny_llama_dir), config=plan.runs[0].config)], [])
    with pytest.raises(UserError) as caught:
        run_experiment(ExperimentRequest(req(tiny_llama_dir), dataset, db), load=no_load)
    assert str(caught.value) == (
        f"run {plan.runs[0].run_id} (base) of experiment {fast.experiment_id} is being generated by "
        f"process {os.getpid()} on {socket.gethostname()}; wait for it to finish, then run this command again"
    )
    # Once released (here: failed), the same run is resumed, not duplicated.
    store.finish_run(plan.runs[0].run_id, "failed")
    done = run_experiment(ExperimentRequest(req(tiny_llama_dir), dataset, db), load=shared)
    assert {r.mode: r.run_id for r in done.runs}["base"] == plan.runs[0].run_id
    assert rows(db, "SELECT rag_mode, status, n_items FROM runs ORDER BY rag_mode") == [
        ("base", "complete", 2), ("cf", "complete", 2), ("vanilla", "complete", 2)]


def test_a_run_whose_owner_died_is_resumable(tiny_llama_dir, data, db, shared):
    _, dataset = data
    store = RunStore(db)
    plan = plan_experiment(dataset, req(tiny_llama_dir, ("vanilla",)), store)
    run = plan.runs[0]
    store.claim(plan.spec, plan.experiment_id, {"vanilla": None}, [
        dataclasses.replace(spec(run.run_id, plan.experiment_id, "vanilla"), config_hash=run.config_hash,
                            model=str(tiny_llama_dir), config=run.config)], [])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with connect(db) as conn:  # what kill -9 leaves: status running, owner gone
        conn.execute("UPDATE run_owners SET pid = ?, process_start = NULL", [dead.pid])
    resumed = run_experiment(ExperimentRequest(req(tiny_llama_dir, ("vanilla",)), dataset, db), load=shared)
    assert (resumed.runs[0].run_id, resumed.runs[0].status, resumed.runs[0].n_generated) == (run.run_id, "complete", 2)
    assert rows(db, "SELECT count(*) FROM run_owners") == [(0,)]


def test_owner_liveness():
    now = utc_now()
    host = socket.gethostname()
    assert owner_alive(ProcessIdentity(host, os.getpid(), None), now)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        owner = ProcessIdentity(host, child.pid, process_start(child.pid))
        assert owner_alive(owner, now)
        if sys.platform == "linux":
            # The same pid started at another time is another process: the owner is gone.
            assert not owner_alive(dataclasses.replace(owner, start="other-boot:1"), now)
        child.kill()
        if sys.platform == "linux":
            deadline = time.monotonic() + 10
            while owner_alive(owner, now) and time.monotonic() < deadline:  # a zombie until reaped
                time.sleep(0.01)
            assert not owner_alive(owner, now)
    finally:
        child.kill()
        child.wait()
    assert not owner_alive(owner, now)
    # Another host cannot be asked: a recent heartbeat counts as alive, an old one as gone.
    elsewhere = ProcessIdentity("another-host", 1, None)
    assert owner_alive(elsewhere, now - timedelta(minutes=5), now)
    assert not owner_alive(elsewhere, now - timedelta(hours=1), now)


def test_migration_004_gives_duplicate_modes_their_own_experiments(tmp_path):
    path = tmp_path / "old.duckdb"
    conn = duckdb.connect(str(path))
    apply_migrations(conn, [m for m in available_migrations() if m.version < 4])
    insert = ("INSERT INTO runs (run_id, experiment_id, config_hash, created_utc, status, model, dataset, dataset_sha, rag_mode) "
              "VALUES (?, ?, 'h', ?, ?, 'm', 'd.jsonl', 'sha', ?)")
    t0 = utc_now()
    for run_id, experiment, minutes, status, mode in [
        ("cf-old", "e1", 0, "complete", "cf"), ("cf-new", "e1", 5, "failed", "cf"),
        ("base", "e1", 1, "complete", "base"), ("lone", "e2", 2, "running", "vanilla"),
    ]:
        conn.execute(insert, [run_id, experiment, t0 + timedelta(minutes=minutes), status, mode])
    conn.close()
    assert rows(path, "SELECT run_id, experiment_id FROM runs ORDER BY run_id") == [
        ("base", "e1"), ("cf-new", "e1~cf-new"), ("cf-old", "e1"), ("lone", "e2")]
    assert rows(path, "SELECT experiment_id, name, experiment_key, model FROM experiments ORDER BY 1") == [
        ("e1", None, None, "m"), ("e1~cf-new", None, None, "m"), ("e2", None, None, "m")]


def test_an_experiment_from_before_keys_is_found_by_its_runs(tiny_llama_dir, data, db, shared):
    _, dataset = data
    first = run_experiment(ExperimentRequest(req(tiny_llama_dir, ("vanilla",)), dataset, db), load=shared)
    with connect(db) as conn:  # as migration 004 leaves an older experiment
        conn.execute("UPDATE experiments SET experiment_key = NULL, settings_json = NULL")
    joined = run_experiment(ExperimentRequest(req(tiny_llama_dir, ("base", "cf")), dataset, db), load=shared)
    assert joined.experiment_id == first.experiment_id
    assert rows(db, "SELECT count(*) FROM experiments WHERE experiment_key IS NOT NULL") == [(1,)]  # adopted
