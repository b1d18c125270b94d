"""scripts/bench_app.py at a tiny size: its store is one the real views and handlers accept, and
migration 006's query_metrics gives 005's rows on it (so the bench cannot rot, and the speed-up
changed no number)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from store.db import connect
from tests.support.helpers import load_script

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    return load_script("bench_app")


@pytest.fixture(scope="module")
def bench():
    return _bench()


@pytest.fixture(scope="module")
def store(bench, tmp_path_factory):
    # 8 runs: experiments of vanilla, base and cf, the last one partial (vanilla and base).
    return bench.build_store(tmp_path_factory.mktemp("bench") / "tiny.duckdb", n_items=12, n_runs=8)


def test_the_store_has_the_shape_asked_for(store):
    assert store.n_generations == 8 * 12
    assert store.experiment_id == "exp-0001"  # the newest experiment with all three modes
    with connect(store.path, read_only=True) as conn:
        modes = conn.execute(
            "SELECT experiment_id, list(rag_mode ORDER BY run_id) FROM runs GROUP BY 1 ORDER BY 1"
        ).fetchall()
        assert modes == [("exp-0000", ["vanilla", "base", "cf"]), ("exp-0001", ["vanilla", "base", "cf"]),
                         ("exp-0002", ["vanilla", "base"])]
        # Citations name the shown document at their position, with the item's relevance flag.
        bad = conn.execute(
            """
            SELECT count(*) FROM citations c JOIN generations g USING (run_id, item_id)
            JOIN items i ON i.item_id = c.item_id
            WHERE c.position <= len(g.shown_doc_ids)
              AND (c.doc_id <> g.shown_doc_ids[c.position]
                   OR c.relevant <> list_filter(i.documents, lambda d: d.id = c.doc_id)[1].relevant)
            """
        ).fetchone()[0]
        out_of_range = conn.execute(
            "SELECT count(*) FILTER (WHERE doc_id IS NULL), count(*) FILTER (WHERE relevant IS NULL) "
            "FROM citations WHERE position > 10"
        ).fetchone()
        assert bad == 0 and out_of_range[0] == out_of_range[1]
        assert conn.execute("SELECT count(*) FROM citations").fetchone()[0] > 0
        # Every item has one or two relevant documents among its ten.
        relevant = conn.execute(
            "SELECT min(n), max(n) FROM (SELECT len(list_filter(documents, lambda d: d.relevant)) AS n FROM items)"
        ).fetchone()
        assert 1 <= relevant[0] <= relevant[1] <= 2


@pytest.mark.parametrize("handler", ["query_detail", "runs_page", "bias_page", "  cached", "  bias_inputs"])
def test_handlers_return_sensible_results(bench, store, handler):
    result = bench.call(handler, store)
    bench.check(handler, store, result)  # raises SystemExit on anything odd


def test_handler_results_on_the_bench_store(bench, store):
    html, metrics = bench.call("query_detail", store)
    assert list(metrics["mode"]) == ["vanilla", "base", "cf"] and "Question number 6" in html
    rows = bench.call("runs_page", store)
    assert [r[0] for r in rows] == ["exp-0002", "exp-0001", "exp-0000"]  # newest first
    page = bench.call("bias_page", store)
    assert page.experiment_ids == ("exp-0001",) and "hai" in page.summary  # metadata types cycle gender, hai, race
    from demo.handlers.bias import RESULT_COLUMNS

    at = len(page.results[0]) - len(RESULT_COLUMNS)  # the experiment's cells come first
    assert {(r[at], r[at + 1]) for r in page.results} == {
        (m, k) for m in ("CAS", "CAB") for k in ("precision", "recall", "f1")
    }


def test_timing_gives_a_median_per_handler_and_store(bench, store):
    medians = bench.time_handlers(("runs_page",), {"10k": store}, repeats=2)
    assert set(medians) == {("runs_page", "10k")} and medians["runs_page", "10k"] > 0


def test_query_metrics_006_equals_005(store, tmp_path):
    """006 regroups the citations for filter pushdown; 005's definition must give the same rows,
    on the whole store and filtered as bias_inputs and query_detail filter it."""
    source = (ROOT / "tests" / "support" / "old_migrations" / "005_query_metrics_pushdown.sql").read_text()
    old = re.search(r"CREATE OR REPLACE VIEW query_metrics AS\n(.*?\nFROM scored;)", source, re.S).group(1)
    path = tmp_path / "copy.duckdb"
    path.write_bytes(store.path.read_bytes())
    with connect(path) as conn:
        conn.execute(f"CREATE VIEW query_metrics_005 AS {old}")
        # A generation without citations, and citations of a generation that does not exist.
        conn.execute("DELETE FROM citations WHERE run_id = 'run-0004' AND item_id = 'q000003'")
        conn.execute("INSERT INTO citations VALUES ('run-0004', 'q999999', 0, 1, NULL, NULL, 0.5)")
    with connect(path, read_only=True) as conn:
        new = conn.execute("SELECT * FROM query_metrics ORDER BY run_id, item_id").fetchall()
        before = conn.execute("SELECT * FROM query_metrics_005 ORDER BY run_id, item_id").fetchall()
        some = conn.execute(
            "SELECT * FROM query_metrics WHERE run_id IN (?, ?) AND item_id = ? ORDER BY run_id",
            ["run-0004", "run-0005", "q000003"],
        ).fetchall()
    assert len(new) == 8 * 12 and new == before
    assert some == [r for r in new if r[0] in ("run-0004", "run-0005") and r[1] == "q000003"]
    empty = next(r for r in new if r[0] == "run-0004" and r[1] == "q000003")
    assert empty[2] == [] and empty[11] == 0 and empty[13] is None  # cited, n_citations, p_relevant


def test_bias_reports_are_cached_per_store_state(store, tmp_path, monkeypatch):
    """A cached report is served only while the store is unchanged; a write is never hidden."""
    from engine.usecases.bias import report as bias_command

    path = tmp_path / "cache.duckdb"
    path.write_bytes(store.path.read_bytes())
    with connect(path) as conn:  # reports the app kept in the store (store.derived) by earlier tests
        conn.execute("DELETE FROM derived_values")
    computed = []
    real = bias_command._bias_report
    monkeypatch.setattr(bias_command, "_bias_report", lambda *a, **k: computed.append(1) or real(*a, **k))
    bias_command.clear_report_cache()
    first = bias_command.bias_report(path, "exp-0001")
    first.report["results"].clear()  # a caller changing its copy changes nothing kept
    again = bias_command.bias_report(path, "exp-0001")
    assert len(computed) == 1 and len(again.report["results"]) == 6
    assert bias_command.bias_report(path, "exp-0001", seed=1).report != again.report and len(computed) == 2

    with connect(path) as conn:  # base loses its citations: CAB changes
        conn.execute("DELETE FROM citations WHERE run_id = 'run-0004'")
    changed = bias_command.bias_report(path, "exp-0001")
    assert len(computed) == 3 and changed.report["results"] != again.report["results"]
    bias_command.clear_report_cache()
    assert bias_command.bias_report(path, "exp-0001").report == changed.report


@pytest.mark.parametrize("handler", ["  computed, nothing kept", "  computed, answers kept",
                                     "  bias_inputs, nothing kept", "  bias_inputs, answers kept"])
def test_the_computed_paths_read_what_they_name_and_put_back_what_they_hid(bench, store, handler):
    """'nothing kept' reads the experiment's runs through query_metrics, 'answers kept' from the
    answers' kept rows; both give the kept rows' numbers, and the hidden rows come back."""
    import numpy as np

    from store.answer_metrics import current_answer_runs
    from store.kept_metrics import current_item_runs
    from store.queries import reading
    from store.queries.bias_tables import bias_inputs

    expected = bias_inputs(store.path, store.experiment_id).metrics
    runs = sorted(expected)
    bench.prepare(handler, store)
    with reading(store.path) as conn:
        assert current_item_runs(conn, runs) == []
        assert current_answer_runs(conn, runs) == ([] if "nothing" in handler else runs)
    got = bias_inputs(store.path, store.experiment_id).metrics
    bench.check(handler, store, bench.call(handler, store))
    bench.restore(handler, store)
    with reading(store.path) as conn:
        assert current_item_runs(conn, runs) == runs == current_answer_runs(conn, runs)
    for run_id in runs:
        assert got[run_id].item_ids == expected[run_id].item_ids
        np.testing.assert_array_equal(got[run_id].values, expected[run_id].values)
        np.testing.assert_array_equal(got[run_id].cites, expected[run_id].cites)
