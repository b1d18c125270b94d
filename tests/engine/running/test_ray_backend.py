"""The Ray backend in this process, on one local Ray instance shared by the module's tests (2 CPUs,
a small object store): same rows as a local run, resumes across backends, survives a killed
actor, and fails (never hangs) on a batch that always kills its worker.

Ray costs ~5 s to start and each pipeline ~10-15 s to start its actors (torch and transformers
import in every actor), so these tests run few, small pipelines. The module scope shuts Ray down
before test_ray_cli.py starts instances of its own.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
import time

import pytest

ray = pytest.importorskip("ray", reason="pip install -r requirements-ray.txt")

from engine.datasets.data import load_dataset  # noqa: E402
from engine.errors import RunCancelled, UserError  # noqa: E402
from engine.generation.threads import resolve_threads  # noqa: E402
from engine.running.backend_ray import Generator, RayBackend, load_driver_tokenizer, runtime_env  # noqa: E402
from engine.running.planner import check_prompt_lengths, plan_experiment  # noqa: E402
from engine.running.runner import execute_plan  # noqa: E402
from engine.usecases.runs.run import ExperimentRequest, run_experiment  # noqa: E402
from store import RunStore, connect  # noqa: E402
from tests.engine.running.test_run_experiments import make_dataset, req  # noqa: E402

pytestmark = pytest.mark.ray

# The workers unpickle this module's worker classes by value: they cannot import tests/.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray instance for the module: 2 CPUs (2 actors), a 100 MB object store."""
    ray.init(address="local", num_cpus=2, object_store_memory=100 * 2**20, include_dashboard=False,
             log_to_driver=False, runtime_env=runtime_env())
    yield
    ray.shutdown()


class SlowGenerator(Generator):
    """Takes a while per batch, so that a test can act while the run is in flight."""

    def generate(self, batch):
        time.sleep(0.4)
        return super().generate(batch)


class CrashingGenerator(Generator):
    """Kills its own process on the batch holding item q3, every time it is tried."""

    def generate(self, batch):
        if "q3" in batch.item_ids:
            os._exit(1)
        return super().generate(batch)


def request(model_dir, **changes):
    # batch_size 3 over 8 items: uneven batches; top-2 alternatives: log-probs beyond the chosen token.
    return req(model_dir, **{"batch_size": 3, "max_new_tokens": 4, "top_logprobs": 2, "device": "auto", **changes})


def ray_run(dataset, req_, db, *, worker=Generator, actors=2, sink=None, max_retries=2):
    sink = sink or RunStore(db)
    plan = plan_experiment(dataset, req_, sink)
    driver = load_driver_tokenizer(req_)
    plan = check_prompt_lengths(plan, driver)
    backend = RayBackend(req_, driver.tokenizer, actors=actors, worker=worker,
                         max_retries=max_retries).start()
    return execute_plan(plan, None, sink, backend=backend), backend


def stored_rows(db):
    """Every generation and citation column but the run id and time, keyed by mode and item."""
    with connect(db, read_only=True) as conn:
        generations = conn.execute(
            "SELECT r.rag_mode, g.* EXCLUDE (run_id, created_utc) FROM generations g JOIN runs r USING (run_id) "
            "ORDER BY r.rag_mode, g.item_id"
        ).fetchall()
        citations = conn.execute(
            "SELECT r.rag_mode, c.* EXCLUDE (run_id) FROM citations c JOIN runs r USING (run_id) "
            "ORDER BY ALL"
        ).fetchall()
        # The thread count every batch computed with: the driver's, on every actor (engine.generation.threads).
        runs = conn.execute("SELECT rag_mode, config_hash, status, n_items, config_json->>'torch_threads' "
                            "FROM runs ORDER BY rag_mode").fetchall()
    return generations, citations, runs


@pytest.fixture(scope="module")
def local_reference(tiny_llama, tiny_llama_dir, tmp_path_factory):
    """The 8 items x 3 modes run locally: what every Ray run must store."""
    tmp = tmp_path_factory.mktemp("local-reference")
    dataset = load_dataset(make_dataset(tmp / "d.jsonl", 8))
    db = tmp / "local.duckdb"
    run_experiment(ExperimentRequest(request(tiny_llama_dir), dataset, db), load=lambda r: tiny_llama)
    return dataset, stored_rows(db)


def test_ray_stores_exactly_the_rows_a_local_run_stores(ray_cluster, local_reference, tiny_llama_dir, tmp_path):
    dataset, (local_generations, local_citations, local_runs) = local_reference
    db = tmp_path / "ray.duckdb"
    outcome, backend = ray_run(dataset, request(tiny_llama_dir), db)

    generations, citations, runs = stored_rows(db)
    assert len(generations) == 24 and len({(g[0], g[1]) for g in generations}) == 24
    assert generations == local_generations  # prompt, answer, token ids, log-probs, top-n: column for column
    assert citations == local_citations
    assert runs == local_runs  # same config hashes: a run resumes on either backend
    assert {r[4] for r in runs} == {str(resolve_threads(None))}  # and the same recorded thread count
    assert [r.n_generated for r in outcome.runs] == [8, 8, 8]
    with connect(db, read_only=True) as conn:
        devices = conn.execute("SELECT DISTINCT device, quantization, dtype FROM runs").fetchall()
    assert devices == [("ray:cpu×2", "none", "float32")]
    assert backend.provenance.library_versions and dict(backend.provenance.library_versions)["torch"]


def _ray_worker_pids() -> list[int]:
    import psutil

    pids = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "MapWorker" in cmdline and "SlowGenerator" in cmdline:
            pids.append(proc.info["pid"])
    return pids


class StoppingStore(RunStore):
    """Counts the batches it stores, for a cancel asked for after the first."""

    stored = 0

    def write_batch(self, run_id, generations):
        super().write_batch(run_id, generations)
        self.stored += 1


class KillingStore(RunStore):
    """Kills one actor (SIGKILL) once the first Ray batch is stored."""

    killed: list[int] = []

    def write_batch(self, run_id, generations):
        super().write_batch(run_id, generations)
        if not self.killed:
            pids = _ray_worker_pids()
            assert pids, "no actor process found"
            os.kill(pids[0], signal.SIGKILL)
            self.killed.append(pids[0])


def test_a_local_run_resumes_on_ray_and_a_killed_actor_is_replaced_without_duplicates(
    ray_cluster, local_reference, tiny_llama, tiny_llama_dir, tmp_path
):
    dataset, (local_generations, _, local_runs) = local_reference
    db = tmp_path / "mixed.duckdb"
    # Started locally and cancelled after its first batch (3 answers)...
    plan = plan_experiment(dataset, request(tiny_llama_dir), RunStore(db))
    # Cancel is heard at every decoding step now, so it is asked for once a batch is stored.
    first = StoppingStore(db)
    with pytest.raises(RunCancelled):
        execute_plan(plan, tiny_llama, first, should_stop=lambda: first.stored > 0)
    assert len(stored_rows(db)[0]) == 3

    # ...then finished on Ray, one actor killed after the first batch Ray delivers.
    store = KillingStore(db)
    store.killed = []
    outcome, _ = ray_run(dataset, request(tiny_llama_dir), db, worker=SlowGenerator, sink=store)
    assert store.killed
    generations, _, runs = stored_rows(db)
    assert len(generations) == 24 and len({(g[0], g[1]) for g in generations}) == 24  # none twice
    assert generations == local_generations
    assert runs == local_runs  # all complete, under the same hashes
    assert sum(r.n_generated for r in outcome.runs) == 21


def test_a_batch_that_always_kills_its_worker_fails_the_run_instead_of_hanging(ray_cluster, tiny_llama_dir, tmp_path):
    dataset = load_dataset(make_dataset(tmp_path / "d.jsonl", 6))
    db = tmp_path / "crash.duckdb"
    errors: list[BaseException] = []

    def target():
        try:
            # One retry: each costs an actor restart (~10 s here, torch imports again).
            ray_run(dataset, request(tiny_llama_dir, modes=("vanilla",), batch_size=1), db,
                    worker=CrashingGenerator, actors=1, max_retries=1)
        except BaseException as err:  # noqa: BLE001 - the test inspects it
            errors.append(err)

    started = time.monotonic()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout=150)
    assert not thread.is_alive(), "the run hangs on a batch that kills its worker"
    # The actor's death, raised as one line naming what to do.
    assert errors and isinstance(errors[0], UserError) and "Ray worker died" in str(errors[0]), errors
    assert time.monotonic() - started < 150
    with connect(db, read_only=True) as conn:
        assert conn.execute("SELECT status FROM runs").fetchall() == [("failed",)], repr(errors[0])
        stored = {r[0] for r in conn.execute("SELECT item_id FROM generations").fetchall()}
        assert "q3" not in stored
        assert conn.execute("SELECT count(*) FROM run_owners").fetchone() == (0,)  # released: resumable


def test_device_cuda_n_is_refused_under_ray(tiny_llama_dir):
    with pytest.raises(UserError, match="Ray assigns each actor its GPU"):
        RayBackend(dataclasses.replace(request(tiny_llama_dir), device="cuda:1"), None)


def test_the_address_check_lets_a_real_cluster_through(ray_cluster):
    from engine.running.backend_ray import check_address

    check_address(ray.get_runtime_context().gcs_address)  # the GCS answers the HTTP/2 preface


def _grid_rows(db):
    with connect(db, read_only=True) as conn:
        rows = conn.execute(
            "SELECT r.metadata_type, r.rag_mode, g.* EXCLUDE (run_id, created_utc) FROM generations g "
            "JOIN runs r USING (run_id) ORDER BY ALL"
        ).fetchall()
        runs = conn.execute(
            "SELECT metadata_type, rag_mode, config_hash, status, config_json->>'shared_from' IS NOT NULL "
            "FROM runs ORDER BY ALL"
        ).fetchall()
        study = conn.execute("SELECT count(*) FROM study_experiments").fetchone()
    return rows, runs, study


def test_a_study_grid_runs_through_one_ray_pipeline_with_the_rows_of_a_local_grid(ray_cluster, tiny_llama_dir, tmp_path):
    from engine.__main__ import main

    data = make_dataset(tmp_path / "d.jsonl", 4)
    args = ["run", "--model", str(tiny_llama_dir), "--dataset", str(data), "--metadata", "gender,race",
            "--modes", "vanilla,base", "--max-new-tokens", "3", "--batch-size", "2", "--quantize", "none",
            "--study", "grid"]
    assert main([*args, "--db", str(tmp_path / "local.duckdb")]) == 0
    assert main([*args, "--db", str(tmp_path / "ray.duckdb"), "--backend", "ray", "--actors", "2"]) == 0

    local, ray_ = _grid_rows(tmp_path / "local.duckdb"), _grid_rows(tmp_path / "ray.duckdb")
    assert len(ray_[0]) == 16 and ray_ == local
    # race's vanilla run is gender's, copied once gender's was generated in the same pipeline.
    assert [r for r in ray_[1] if r[4]] == [r for r in local[1] if r[4]] and sum(r[4] for r in ray_[1]) == 1
    assert {r[3] for r in ray_[1]} == {"complete"} and ray_[2] == (2,)
