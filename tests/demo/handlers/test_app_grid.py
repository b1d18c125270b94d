"""Study grids and the backend choice in the Run tab, as plain handler calls (no browser): a form
with comma lists becomes the study use case's StudyRequest, its plan is the use case's, refusals
are one line, and the /run_batch API keeps its positional inputs."""

from __future__ import annotations

import duckdb
import pytest

from demo.handlers.grid import PLAN_COLUMNS, build_study_request, form_grid, is_grid, plan_run, ray_options, run_form
from demo.handlers.run import RunForm
from demo.jobs import JobQueue
from demo.settings import AppSettings, settings_from_env
from engine.errors import UserError
from tests.support.helpers import wait_for_job

# The sample's items without a relevant document among the first 3 are skipped, as `run --skip-invalid`.
GRID = RunForm(model="smoke", metadata="gender,race", top_k="3,5", limit=2, batch_size=4, max_new_tokens=3,
               study="app-grid", skip_invalid=True)



def test_a_2x2_grid_form_becomes_the_study_request(tmp_path):
    settings = AppSettings(tmp_path / "db.duckdb")
    assert is_grid(GRID) and not is_grid(RunForm())
    # A name alone makes a study of one configuration, as `run --study` does.
    assert is_grid(RunForm(study="one"))
    study = build_study_request(settings, GRID)
    grid = study.grid
    assert (grid.model, grid.metadata, grid.top_k, grid.order, grid.few_shot, grid.xai) == (
        ("smoke",), ("gender", "race"), (3, 5), ("ranked",), (0,), ("none",))
    assert grid.size == 4 and study.name == "app-grid" and study.ray is None and study.db == settings.db_path
    run = study.run
    assert (run.limit, run.batch_size, run.max_new_tokens, run.modes, run.experiment) == (
        2, 4, 3, ("vanilla", "base", "cf"), None)
    # Every axis takes a list; single values (as the API always sent them) are one-value axes.
    grid = form_grid(RunForm(model="smoke", order="ranked,random", few_shot="0,2", xai="none,counterfactual",
                             top_k="all,5"))
    assert (grid.order, grid.few_shot, grid.xai, grid.top_k) == (
        ("ranked", "random"), (0, 2), ("none", "counterfactual"), (None, 5))
    assert form_grid(RunForm(top_k=5, few_shot=2)).top_k == (5,)


def test_the_plan_is_the_use_cases_one_row_per_configuration_and_the_total(tmp_path):
    head, rows = plan_run(AppSettings(tmp_path / "db.duckdb"), GRID)
    assert not (tmp_path / "db.duckdb").exists()  # planning writes nothing
    assert head.startswith("study app-grid: 4 configurations (2 metadata x 2 top-k), 2 vanilla runs shared; plan:")
    table = [dict(zip(PLAN_COLUMNS, r, strict=True)) for r in rows]
    assert [(r["#"], r["metadata"], r["k"]) for r in table[:4]] == [(1, "gender", 3), (2, "gender", 5),
                                                                    (3, "race", 3), (4, "race", 5)]
    # Vanilla is generated once per cut-off and shared with race's experiment, as the CLI plans it.
    assert [r["vanilla"] for r in table[:4]] == ["its own", "its own", "shared from #1", "shared from #2"]
    assert [(r["items"], r["runs to generate"], r["answers to generate"]) for r in table[:4]] == [
        (2, 3, 6), (2, 3, 6), (2, 2, 4), (2, 2, 4)]
    assert table[4]["model"] == "total" and table[4]["answers to generate"] == 20
    assert table[4]["vanilla"] == "4 answers shared"
    # A dataset's refusal names the file, never its folder on the server.
    from dataclasses import replace

    with pytest.raises(UserError, match="run the other 39 with skip invalid items ticked") as err:
        plan_run(AppSettings(tmp_path / "db.duckdb", allow_local_paths=False), replace(GRID, skip_invalid=False))
    assert "sample_nq.jsonl" in str(err.value) and "/data/" not in str(err.value)
    with pytest.raises(UserError, match="the plan is for a grid"):
        plan_run(AppSettings(tmp_path / "db.duckdb"), RunForm())


@pytest.mark.parametrize("changes, message", [
    ({"order": "ranked,sideways"}, "the document order: unknown value 'sideways'; choose from"),
    ({"metadata": "gender,gender"}, "the metadata type lists 'gender' twice"),
    ({"top_k": "3,0"}, "the cut-off k must be at least 1, not 0"),
    ({"few_shot": "0,9"}, "the few-shot examples must be between"),
    ({"top_k": "3,,5"}, "the cut-off k: empty entry"),
    ({"experiment": "one-name"}, "the experiment name names one experiment; this grid has 4 configurations"),
    ({"metadata": "gender,age,city"}, "the metadata type lists 2 custom types"),
    ({"backend": "cluster"}, "unknown backend 'cluster' (choose from local, ray, server)"),
])
def test_a_bad_grid_is_refused_in_one_line(tmp_path, changes, message):
    from dataclasses import replace

    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        build_study_request(AppSettings(tmp_path / "db.duckdb"), replace(GRID, **changes))
    assert "\n" not in str(err.value)


def test_a_space_bounds_the_grid_and_offers_no_ray(tmp_path, monkeypatch):
    from dataclasses import replace

    monkeypatch.setenv("SPACE_ID", "someone/pattrieval")
    space = settings_from_env(str(tmp_path / "db.duckdb"))
    assert space.max_configurations == 12 and not space.allow_ray
    desktop = settings_from_env(str(tmp_path / "db.duckdb"), local_paths=True)
    monkeypatch.delenv("SPACE_ID")
    assert settings_from_env(str(tmp_path / "db.duckdb")).allow_ray
    assert settings_from_env(str(tmp_path / "db.duckdb")).max_configurations is None
    monkeypatch.setenv("PATTRIEVAL_MAX_CONFIGURATIONS", "3")
    bounded = settings_from_env(str(tmp_path / "db.duckdb"))
    with pytest.raises(UserError, match="this grid has 4 configurations; at most 3 here"):
        build_study_request(bounded, GRID)
    with pytest.raises(UserError, match="the ray backend is offered only by the desktop app"):
        build_study_request(space, replace(GRID, backend="ray"))
    with pytest.raises(UserError, match="the ray backend is offered only by the desktop app"):
        ray_options(space, RunForm(backend="ray"))
    # A grid's every model meets the app's list of models.
    with pytest.raises(UserError, match="model 'org/other' is not offered here"):
        build_study_request(space, replace(GRID, model="smoke,org/other"))
    assert desktop.allow_local_paths


def test_a_grid_form_runs_as_one_job_of_four_experiments(tmp_path):
    settings = AppSettings(tmp_path / "db.duckdb")
    jobs = JobQueue()
    try:
        job_id = run_form(jobs, settings, GRID)
        status = wait_for_job(jobs, job_id, 240)
    finally:
        jobs.shutdown(timeout=30)
    assert status.state == "complete", status.message
    assert (status.n_done, status.n_total) == (20 + 4, 24)
    assert "in study app-grid (4 experiments)" in status.message
    con = duckdb.connect(str(settings.db_path), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM study_experiments").fetchone() == (4,)
        assert con.execute("SELECT count(*) FROM runs WHERE status = 'complete'").fetchone() == (12,)
    finally:
        con.close()


def test_the_run_batch_api_keeps_its_old_positional_inputs_and_plan_run_takes_the_same(tmp_path):
    from gradio_client import Client

    from tests.support.app_server import served

    jobs = JobQueue()
    with served(AppSettings(tmp_path / "app.duckdb"), jobs, shutdown_timeout=30) as url:
        client = Client(url, verbose=False)
        # The 13 inputs of the first release: a single run, as before.
        job_id, token_box = client.predict("smoke", None, "gender", "", "", "", ["vanilla"], "none", 1, 4, 2, "old",
                                           "", api_name="/run_batch")
        assert job_id.startswith("job-") and token_box == ""
        # The plan below shares the job's vanilla run (same model and settings): planning while the
        # worker still generates it is refused in one line, so the job finishes first.
        status = wait_for_job(jobs, job_id, 120)
        assert status.state == "complete", status.message
        head, table = client.predict("smoke", None, "gender,race", "", "", "", ["vanilla", "base"], "none", 2, 4, 2,
                                     "", "", "all", "ranked", 0, "none,counterfactual", api_name="/plan_run")
        assert "4 configurations" in head and len(table["data"]) == 5
        with pytest.raises(Exception, match="the document order: unknown value 'sideways'"):
            client.predict("smoke", None, "gender,race", "", "", "", ["vanilla"], "none", 2, 4, 2, "", "", "all",
                           "ranked,sideways", api_name="/plan_run")


def test_a_ray_form_builds_ray_options(tmp_path):
    pytest.importorskip("ray")
    settings = AppSettings(tmp_path / "db.duckdb")
    options = ray_options(settings, RunForm(backend="ray", actors=2, gpus_per_actor=0.0))
    assert (options.address, options.actors, options.gpus_per_actor) == (None, 2, 0.0)
    assert ray_options(settings, RunForm()) is None
    from dataclasses import replace

    assert build_study_request(settings, replace(GRID, backend="ray")).ray == options.__class__(None, 1, None)
    with pytest.raises(UserError, match="Ray actors must be at least 1"):
        ray_options(settings, RunForm(backend="ray", actors=0))


@pytest.mark.ray
@pytest.mark.slow
def test_a_grid_from_the_form_runs_on_a_local_ray_instance(tmp_path):
    """The job queue hands the form's RayOptions to the study use case; Ray starts on this machine."""
    ray = pytest.importorskip("ray")
    from dataclasses import replace

    from engine.running.backend_ray import runtime_env

    ray.init(address="local", num_cpus=2, object_store_memory=100 * 2**20, include_dashboard=False,
             log_to_driver=False, runtime_env=runtime_env())
    settings = AppSettings(tmp_path / "db.duckdb")
    jobs = JobQueue(load=lambda request: pytest.fail("a Ray job loads its model on the actors"))
    try:
        form = replace(GRID, top_k="3", modes=("vanilla", "base"), backend="ray", study="ray-grid")
        status = wait_for_job(jobs, run_form(jobs, settings, form), 240)
    finally:
        jobs.shutdown(timeout=30)
        ray.shutdown()
    assert status.state == "complete", status.message
    assert "in study ray-grid (2 experiments)" in status.message
    con = duckdb.connect(str(settings.db_path), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM generations").fetchone() == (8,)  # 2 items x (vanilla, base) x 2 metadata, race's vanilla copied
    finally:
        con.close()
