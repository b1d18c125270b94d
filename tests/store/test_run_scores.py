"""run_scores (migration 007): each complete run's query_metrics averages, cached by the writer
for the Runs tab, and read only where they cover every answer the run holds now."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from demo.handlers.runs import runs_page
from store import RunStore, connect
from store.merge import merge_stores
from store.queries import experiment_page
from store.run_scores import live_scores
from tests.store.test_export_merge import SHA, add_run, items
from tests.support.helpers import copy_store

# The Runs tab's averages as experiment_page computed them before run_scores (an IN-list over
# query_metrics): what the page must still show, whatever run_scores holds.
BEFORE_SQL = """
SELECT run_id, avg(precision), avg(recall), avg(f1), avg(exact_match)
FROM query_metrics WHERE run_id IN (SELECT unnest(?)) GROUP BY run_id
"""


def stored(db: Path) -> dict[str, tuple]:
    with connect(db, read_only=True) as conn:
        rows = conn.execute("SELECT run_id, n_answers, precision, recall, f1, exact_match FROM run_scores").fetchall()
    return {row[0]: tuple(row[1:]) for row in rows}


def live(db: Path, run_id: str) -> tuple:
    with connect(db, read_only=True) as conn:
        return tuple(live_scores(conn, run_id))


def before(db: Path) -> dict[str, tuple]:
    with connect(db, read_only=True) as conn:
        ids = [row[0] for row in conn.execute("SELECT run_id FROM runs").fetchall()]
        return {row[0]: tuple(row[1:]) for row in conn.execute(BEFORE_SQL, [ids]).fetchall()}


def page_metrics(db: Path) -> dict[str, tuple]:
    page = experiment_page(db, 0, 50)
    return {run.run_id: (run.precision, run.recall, run.f1, run.exact_match)
            for runs in page.runs.values() for run in runs}


def same(got: dict[str, tuple], expected: dict[str, tuple]) -> None:
    """Equal up to the last bit of a double: DuckDB's avg() may sum in another order from one
    query to the next (threads), even over the same rows."""
    assert set(got) == set(expected)
    for run_id, values in expected.items():
        assert got[run_id] == pytest.approx(values, rel=1e-12, abs=1e-15), run_id


def execute(db: Path, sql: str, params=None) -> None:
    with connect(db) as conn:
        conn.execute(sql, params)


@pytest.fixture
def mixed(mixed_built, tmp_path) -> Path:
    """The module's store, copied: each test changes its own."""
    return copy_store(mixed_built, tmp_path / "mixed.duckdb")


@pytest.fixture(scope="module")
def mixed_built(tmp_path_factory) -> Path:
    """Complete, running and failed runs; one complete run with more answers than the others."""
    db = tmp_path_factory.mktemp("mixed") / "mixed.duckdb"
    add_run(db, "r-van", "exp-a", "vanilla")
    add_run(db, "r-base", "exp-a", "base")
    add_run(db, "r-cf", "exp-a", "cf", status="running")
    add_run(db, "r-fail", "exp-b", "base", status="failed")
    RunStore(db).put_items(SHA, items(7))
    add_run(db, "r-long", "exp-c", "vanilla", n=7)
    return db


def test_marking_a_run_complete_stores_its_live_averages(mixed):
    rows = stored(mixed)
    assert set(rows) == {"r-van", "r-base", "r-long"}  # running and failed runs have no row
    for run_id, row in rows.items():
        assert row == pytest.approx(live(mixed, run_id), rel=1e-12)
    assert rows["r-long"][0] == 7 and rows["r-van"][0] == 3
    # Not a constant: the three answers score differently, so seven answers average otherwise.
    assert rows["r-long"][1:] != rows["r-van"][1:]


def test_the_page_shows_what_it_showed_before_the_cache(mixed):
    expected = before(mixed)
    assert set(expected) == {"r-van", "r-base", "r-cf", "r-fail", "r-long"}
    same(page_metrics(mixed), expected)  # the running and failed runs computed live
    with_rows = runs_page(mixed, 1)
    execute(mixed, "DELETE FROM run_scores")
    same(page_metrics(mixed), expected)
    assert runs_page(mixed, 1) == with_rows


def test_a_row_is_used_only_while_it_covers_every_answer(mixed):
    # A row whose count matches is read as it is (this is what makes the page fast) ...
    execute(mixed, "UPDATE run_scores SET precision = 0.123 WHERE run_id = 'r-van'")
    assert page_metrics(mixed)["r-van"][0] == 0.123
    # ... and one whose count does not is ignored: the run is computed live.
    execute(mixed, "UPDATE run_scores SET n_answers = 2 WHERE run_id = 'r-van'")
    assert page_metrics(mixed)["r-van"] == pytest.approx(before(mixed)["r-van"], rel=1e-12)


def test_an_extended_run_is_live_until_complete_again_then_its_row_is_replaced(mixed):
    old = stored(mixed)["r-van"]
    RunStore(mixed).put_items(SHA, items(7))
    add_run(mixed, "r-van", "exp-a", "vanilla", n=7, status="running")  # a larger --limit: running again
    assert stored(mixed)["r-van"] == old  # stale now: 3 answers of 7
    shown = page_metrics(mixed)["r-van"]
    assert shown == pytest.approx(before(mixed)["r-van"], rel=1e-12) and shown != pytest.approx(old[1:])
    RunStore(mixed).finish_run("r-van", "complete")
    assert stored(mixed)["r-van"] == pytest.approx(live(mixed, "r-van"), rel=1e-12) and stored(mixed)["r-van"][0] == 7
    same(page_metrics(mixed), before(mixed))


def test_a_merge_computes_the_rows_of_the_runs_it_copies(mixed, tmp_path):
    # A wrong row in the source is not copied: the target computes its own.
    execute(mixed, "UPDATE run_scores SET precision = 0.5 WHERE run_id = 'r-base'")
    target = tmp_path / "target.duckdb"
    add_run(target, "r-other", "exp-z", "cf")
    result = merge_stores(target, mixed)
    assert set(result.merged) == {"r-van", "r-base", "r-long"}
    rows = stored(target)
    assert set(rows) == {"r-other", "r-van", "r-base", "r-long"}
    for run_id, row in rows.items():
        assert row == pytest.approx(live(target, run_id), rel=1e-12)
    same(page_metrics(target), before(target))


def test_007_backfills_the_complete_runs_of_an_upgraded_store(mixed):
    expected = stored(mixed)
    # The store as migration 006 left it: no run_scores table, 007 not applied.
    # Later migrations are undone too (008: explanations, 009: studies, 010: verifications), or
    # the store would not be 006's; connecting re-applies them after 007.
    execute(mixed, "DROP VIEW IF EXISTS verification_shares")
    execute(mixed, "DROP TABLE IF EXISTS verifications")
    for sql in ("DROP VIEW explanation_rates", "DROP VIEW explanation_mentions", "DROP TABLE explanations"):
        execute(mixed, sql)
    execute(mixed, "DROP TABLE IF EXISTS study_experiments")
    execute(mixed, "DROP TABLE IF EXISTS studies")
    execute(mixed, "DROP TABLE run_scores")
    execute(mixed, "DELETE FROM schema_migrations WHERE version >= 7")
    with duckdb.connect(str(mixed), read_only=True) as raw:
        assert raw.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == 6
    rows = stored(mixed)  # connecting applies 007
    assert set(rows) == set(expected) == {"r-van", "r-base", "r-long"}
    for run_id, row in rows.items():
        assert row[0] == expected[run_id][0]
        assert row[1:] == pytest.approx(expected[run_id][1:], rel=1e-12)
    with connect(mixed, read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM run_scores WHERE computed_utc IS NULL").fetchone()[0] == 0
    same(page_metrics(mixed), before(mixed))


def test_the_bench_store_holds_the_rows_a_real_run_would(tmp_path):
    from tests.scripts.test_bench_app import _bench

    store = _bench().build_store(tmp_path / "bench.duckdb", n_items=4, n_runs=4)
    rows = stored(store.path)
    assert len(rows) == 4
    for run_id, row in rows.items():
        assert row == pytest.approx(live(store.path, run_id), rel=1e-12) and row[0] == 4
