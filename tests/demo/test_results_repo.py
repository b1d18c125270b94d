"""PATTRIEVAL_RESULTS_REPO: a results store resolved by huggingface_hub from a real Hub cache, offline.

No mock of huggingface_hub: the tests lay out the cache as the library writes it
(datasets--OWNER--NAME/{refs/main, snapshots/COMMIT/FILE}) and HF_HUB_OFFLINE=1 (conftest) makes
hf_hub_download resolve from it for real.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from demo.results_repo import merge_at_start, merge_results_repo
from demo.settings import AppSettings

ROOT = Path(__file__).resolve().parents[2]
REPO = "pattrieval-test/paper-results"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def published(tmp_path_factory, tiny_llama_dir, tiny_llama) -> Path:
    """A store with one complete experiment (two modes), as an operator would publish it."""
    from engine.datasets.data import load_dataset
    from engine.usecases.runs.run import ExperimentRequest, run_experiment
    from tests.demo.test_jobs import make_dataset, request

    folder = tmp_path_factory.mktemp("published")
    data = load_dataset(make_dataset(folder / "d.jsonl", 3))
    db = folder / "pattrieval.duckdb"
    run_experiment(ExperimentRequest(request(tiny_llama_dir, modes=("base", "cf")), data, db), load=lambda r: tiny_llama)
    return db


def hub_cache(root: Path, source: Path, filename: str = "pattrieval.duckdb") -> Path:
    """huggingface_hub's cache layout for one file of a dataset repo: blob, snapshot link, refs/main."""
    repo = root / ("datasets--" + REPO.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    blob = repo / "blobs" / "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    blob.parent.mkdir()
    blob.write_bytes(source.read_bytes())
    snapshot = repo / "snapshots" / COMMIT / filename
    snapshot.parent.mkdir(parents=True)
    snapshot.symlink_to(os.path.relpath(blob, snapshot.parent))
    return root


def _counts(db: Path) -> tuple[int, int]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM generations)").fetchone()
    finally:
        con.close()


def test_the_published_store_is_merged_once(tmp_path, published):
    cache = hub_cache(tmp_path / "hub", published)
    before = published.read_bytes()
    app_db = tmp_path / "app.duckdb"
    result = merge_results_repo(app_db, REPO, cache_dir=cache)
    assert len(result.merged) == 2 and result.n_generations == 6
    assert _counts(app_db) == (2, 6)
    again = merge_results_repo(app_db, REPO, cache_dir=cache)  # every restart: nothing twice
    assert again.merged == () and len(again.already) == 2
    assert _counts(app_db) == (2, 6)
    assert published.read_bytes() == before  # the cache's copy is never written


def test_the_merge_at_start_keeps_the_bias_pages_values(tmp_path, published):
    """The Space's first Bias visitor after a start reads kept values, as after `engine merge`."""
    app_db = tmp_path / "app.duckdb"
    merge_results_repo(app_db, REPO, cache_dir=hub_cache(tmp_path / "hub", published))
    con = duckdb.connect(str(app_db), read_only=True)
    try:
        kinds = dict(con.execute("SELECT kind, count(*) FROM derived_values GROUP BY kind").fetchall())
    finally:
        con.close()
    assert {kind.split("/")[0] for kind in kinds} == {"bias_report", "bias_rows"}, kinds  # kind/version


def test_start_up_prints_one_line_and_never_raises(tmp_path, published):
    cache = hub_cache(tmp_path / "hub", published)
    settings = AppSettings(tmp_path / "app.duckdb", results_repo=REPO)
    out = io.StringIO()
    line = merge_at_start(settings, out=out, cache_dir=cache)
    assert out.getvalue() == line + "\n" and line == f"results repo {REPO}: merged 2 runs (6 answers)"
    line = merge_at_start(settings, out=io.StringIO(), cache_dir=cache)
    assert line == f"results repo {REPO}: nothing new (2 runs already here)"
    # Offline and not cached, a file the repo lacks, a malformed id: one line each, no exception.
    for repo, name in (("nobody/nothing", "pattrieval.duckdb"), (REPO, "other.duckdb"), ("not a repo id!", "x")):
        out = io.StringIO()
        line = merge_at_start(AppSettings(tmp_path / "app.duckdb", results_repo=repo, results_file=name),
                              out=out, cache_dir=cache)
        assert line.startswith(f"results repo {repo}: not merged (") and line.endswith("the app starts without it")
        assert out.getvalue().count("\n") == 1
    assert merge_at_start(AppSettings(tmp_path / "app.duckdb"), out=io.StringIO()) is None  # not set: nothing


def test_a_file_that_is_not_a_store_is_refused_in_one_line(tmp_path):
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"not a database at all" * 100)
    cache = hub_cache(tmp_path / "hub", junk)
    line = merge_at_start(AppSettings(tmp_path / "app.duckdb", results_repo=REPO), out=io.StringIO(), cache_dir=cache)
    assert "not merged" in line and "\n" not in line


def test_python_m_demo_settings_come_from_the_environment(tmp_path, published):
    """The operator's way: environment variables only, huggingface_hub reading HF_HUB_CACHE itself."""
    cache = hub_cache(tmp_path / "hub", published, filename="results/store.duckdb")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "PATTRIEVAL_RESULTS_REPO": REPO,
           "PATTRIEVAL_RESULTS_FILE": "results/store.duckdb", "PATTRIEVAL_DB": str(tmp_path / "app.duckdb")}
    code = "from demo.results_repo import merge_at_start; from demo.settings import settings_from_env; " \
           "merge_at_start(settings_from_env())"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"results repo {REPO}: merged 2 runs (6 answers)\n"
    assert _counts(tmp_path / "app.duckdb") == (2, 6)
