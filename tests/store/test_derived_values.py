"""Values the Bias tab keeps in the store (store.derived, table derived_values): a kept report or
Table 2 is used only while the experiment's runs are as they were, so after a run is added,
resumed, merged in or changed, the tab shows what a fresh computation gives."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from demo.handlers import bias as handler
from engine.usecases.bias import report as usecase
from store import RunStore, connect
from store.merge import merge_stores
from tests.demo.handlers.test_app_bias import EXPERIMENTS, ITEMS, _generation, _spec, build_store
from tests.support.helpers import copy_store

SHOWN = "exp-hai, exp-gender, exp-race"


def _page(db: Path) -> tuple:
    """What the tab shows, computed from scratch or from what is kept (the caches in memory emptied)."""
    handler.clear_cache()
    page = handler.bias_page(db, SHOWN, resamples=100)
    return page.results, page.confidence, page.table1, page.table2, page.summary


def _fresh(db: Path) -> tuple:
    """The same, with nothing kept in the store (what the tab showed before values were kept)."""
    with connect(db) as conn:
        conn.execute("DELETE FROM derived_values")
    return _page(db)


def _kept(db: Path) -> dict[str, int]:
    with connect(db, read_only=True) as conn:
        return dict(conn.execute("SELECT kind, count(*) FROM derived_values GROUP BY kind").fetchall())


def _add_run(db: Path, run_id: str, experiment: str, mode: str, items=ITEMS, status="complete", seed=1) -> None:
    store = RunStore(db, timeout_s=10)
    model, meta, _ = EXPERIMENTS[experiment]
    store.start_run(_spec(run_id, experiment, model, meta, mode))
    store.write_batch(run_id, [_generation(item, 0.3, random.Random(seed)) for item in items])
    if status:
        store.finish_run(run_id, status)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return build_store(tmp_path_factory.mktemp("kept-built") / "kept.duckdb")


@pytest.fixture
def db(built, tmp_path) -> Path:
    """The module's store, copied: each test changes its own."""
    return copy_store(built, tmp_path / "kept.duckdb")


def test_the_first_request_keeps_what_later_requests_read(db, monkeypatch):
    first = _page(db)
    from engine.usecases.bias.report import BIAS_REPORT

    assert _kept(db) == {BIAS_REPORT: 3, "bias_rows/2": 3}
    computed = []
    real = usecase._bias_report
    monkeypatch.setattr(usecase, "_bias_report", lambda *a, **k: computed.append(1) or real(*a, **k))
    assert _page(db) == first and computed == []  # read back, not computed
    assert _fresh(db) == first and len(computed) == 3


def test_an_added_run_is_shown_as_a_fresh_computation_shows_it(db):
    before = _page(db)
    _add_run(db, "exp-hai-cf", "exp-hai", "cf")
    after = _page(db)
    assert after != before and "CAB" in {row[3] for row in after[0] if row[0] == "exp-hai"}
    assert after == _fresh(db)


def test_a_resumed_run_is_shown_as_a_fresh_computation_shows_it(db):
    # cf of exp-hai stops half-way (failed: not chosen), then is resumed and completed.
    _add_run(db, "exp-hai-cf", "exp-hai", "cf", items=ITEMS[:6], status="failed")
    before = _page(db)
    with connect(db) as conn:
        conn.execute("UPDATE runs SET status = 'running' WHERE run_id = 'exp-hai-cf'")
    store = RunStore(db, timeout_s=10)
    store.write_batch("exp-hai-cf", [_generation(item, 0.3, random.Random(2)) for item in ITEMS[6:]])
    store.finish_run("exp-hai-cf", "complete")
    after = _page(db)
    assert after != before and after == _fresh(db)


def test_a_changed_run_is_shown_as_a_fresh_computation_shows_it(db):
    before = _page(db)
    with connect(db) as conn:  # same number of answers, other citations
        conn.execute("DELETE FROM citations WHERE run_id = 'exp-gender-base' AND item_id IN ('q01', 'q02', 'q03')")
    after = _page(db)
    assert after != before and after == _fresh(db)


def test_a_merged_run_is_shown_as_a_fresh_computation_shows_it(db, tmp_path):
    source = tmp_path / "source.duckdb"
    shutil.copy(db, source)
    _add_run(source, "exp-hai-cf", "exp-hai", "cf")
    before = _page(db)
    merge_stores(db, source)
    after = _page(db)
    assert after != before and "CAB" in {row[3] for row in after[0] if row[0] == "exp-hai"}
    assert after == _fresh(db)


def test_a_store_that_cannot_take_the_values_still_shows_the_page(db, monkeypatch):
    import store.db

    real = store.db.connect

    def refusing(path, *, read_only=False, **kwargs):
        if not read_only:
            raise OSError("read-only file system")
        return real(path, read_only=read_only, **kwargs)

    monkeypatch.setattr(store.db, "connect", refusing)
    handler.clear_cache()
    assert handler.bias_page(db, SHOWN, resamples=100).results
    monkeypatch.setattr(store.db, "connect", real)
    assert _kept(db) == {}


# ---------------------------------------------------------------- run_metric_rows and bias_rows


def _live(db: Path, experiment: str | None = None) -> tuple:
    """run_metric_table and bias_table as computed straight from the views (the code before the kept values)."""
    from store.queries._read import fetch_frame

    runs = fetch_frame(db, "SELECT *, dataset_name(dataset) AS dataset_name, dataset_label(dataset, dataset_sha) "
                           "AS dataset_label FROM run_metrics ORDER BY created_utc, run_id")
    bias = fetch_frame(
        db,
        "SELECT b.*, r.created_utc, r.dataset_sha, dataset_name(r.dataset) AS dataset_name, "
        "dataset_label(r.dataset, r.dataset_sha) AS dataset_label, "
        "label_short_a(r.config_json, r.metadata_type) AS label_a, "
        "label_short_b(r.config_json, r.metadata_type) AS label_b "
        "FROM bias b JOIN runs r ON r.run_id = CASE b.measure WHEN 'CAS' THEN b.run_b ELSE b.run_a END "
        f"{'WHERE b.experiment_id = ?' if experiment else ''} "
        "ORDER BY r.created_utc, b.experiment_id, b.measure DESC, b.metric", [experiment] if experiment else None)
    return runs, bias


def _same_as_views(db: Path) -> None:
    import pandas as pd

    from store import queries

    runs, bias = _live(db)
    pd.testing.assert_frame_equal(queries.run_metric_table(db, status=None), runs)
    pd.testing.assert_frame_equal(queries.bias_table(db), bias)
    for experiment in ("exp-hai", "exp-gender"):
        pd.testing.assert_frame_equal(queries.bias_table(db, experiment), _live(db, experiment)[1])
    nothing = queries.bias_table(db, "nope")
    assert nothing.empty and list(nothing.columns) == list(bias.columns)


def _kept_runs(db: Path) -> tuple[int, int]:
    with connect(db, read_only=True) as conn:
        return (conn.execute("SELECT count(*) FROM run_metric_rows").fetchone()[0],
                conn.execute("SELECT count(*) FROM bias_rows").fetchone()[0])


def test_the_writer_keeps_every_complete_run_and_pair(db):
    # 11 complete runs; pairs: gender CAS+CAB, race CAS+CAB, hai CAS, same CAB = 6, 3 rows each.
    assert _kept_runs(db) == (11, 18)
    _same_as_views(db)


def test_kept_rows_follow_added_resumed_running_and_merged_runs(db, tmp_path):
    _add_run(db, "exp-hai-cf", "exp-hai", "cf", items=ITEMS[:6], status="failed")
    _same_as_views(db)
    with connect(db) as conn:  # resumed: running again, its answers grow before it completes
        conn.execute("UPDATE runs SET status = 'running' WHERE run_id = 'exp-hai-cf'")
    store = RunStore(db, timeout_s=10)
    store.write_batch("exp-hai-cf", [_generation(item, 0.3, random.Random(2)) for item in ITEMS[6:]])
    _same_as_views(db)
    store.finish_run("exp-hai-cf", "complete")
    _same_as_views(db)
    # A vanilla run of exp-base still running: not paired yet, as in the view.
    _add_run(db, "exp-base-vanilla", "exp-base", "vanilla", items=ITEMS[:4], status=None)
    _same_as_views(db)
    source = tmp_path / "source.duckdb"
    shutil.copy(db, source)
    _add_run(source, "exp-base-cf", "exp-base", "cf", seed=5)
    merge_stores(db, source)
    _same_as_views(db)


def test_rows_kept_by_no_writer_or_for_other_answers_are_not_used(db):
    with connect(db) as conn:
        conn.execute("DELETE FROM run_metric_rows WHERE run_id = 'exp-gender-base'")
        conn.execute("UPDATE run_metric_rows SET n_answers = n_answers + 1, precision = 0.5 WHERE run_id = 'exp-race-cf'")
        conn.execute("UPDATE bias_rows SET n_a = n_a + 1, value = 99 WHERE experiment_id = 'exp-race'")
        conn.execute("DELETE FROM bias_rows WHERE experiment_id = 'exp-gender' AND measure = 'CAB' AND metric = 'f1'")
    _same_as_views(db)


def test_one_pass_keeps_the_rows_the_writer_keeps_run_by_run(db):
    from store.kept_metrics import keep_all

    def rows():
        with connect(db, read_only=True) as conn:
            return (conn.execute("SELECT * EXCLUDE (computed_utc) FROM run_metric_rows ORDER BY run_id").fetchall(),
                    conn.execute("SELECT * EXCLUDE (computed_utc) FROM bias_rows ORDER BY ALL").fetchall())

    by_run = rows()
    with connect(db) as conn:
        keep_all(conn)
    assert _close(rows(), by_run)


def _close(a, b) -> bool:
    """Equal, floats to 1e-12 relative (parallel sums may differ in the last bits)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-12, abs=1e-12, nan_ok=True)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


# ---------------------------------------------------------------- one definition: kept values equal fresh ones


def _by_name(conn, sql: str, params=None) -> list[dict]:
    """The rows as {column: value}."""
    cursor = conn.execute(sql, params or [])
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def test_every_kept_value_equals_the_value_the_views_compute_now(db):
    """Each kept row, column by column: run_metric_rows against run_metric_wide (and n_answers against
    the run's generations), bias_rows against the bias view, run_scores against query_metrics."""
    with connect(db, read_only=True) as conn:
        kept_runs = _by_name(conn, "SELECT * EXCLUDE (computed_utc) FROM run_metric_rows ORDER BY run_id")
        assert kept_runs
        for kept in kept_runs:
            (fresh,) = _by_name(conn, "SELECT w.*, (SELECT count(*) FROM generations WHERE run_id = $r) AS n_answers "
                                      "FROM run_metric_wide w WHERE run_id = $r", {"r": kept["run_id"]})
            assert set(kept) == set(fresh) and _close([kept[k] for k in sorted(kept)], [fresh[k] for k in sorted(kept)])
        kept_bias = _by_name(conn, "SELECT * EXCLUDE (computed_utc) FROM bias_rows ORDER BY ALL")
        fresh_bias = _by_name(conn, "SELECT b.*, ca.n AS n_a, cb.n AS n_b FROM bias b "
                                    "JOIN (SELECT run_id, count(*) AS n FROM generations GROUP BY ALL) ca ON ca.run_id = b.run_a "
                                    "JOIN (SELECT run_id, count(*) AS n FROM generations GROUP BY ALL) cb ON cb.run_id = b.run_b "
                                    "ORDER BY ALL")
        assert len(kept_bias) == 18 and [set(r) for r in kept_bias] == [set(r) for r in fresh_bias]
        assert _close([[r[k] for k in sorted(r)] for r in kept_bias], [[r[k] for k in sorted(r)] for r in fresh_bias])
        kept_scores = conn.execute("SELECT run_id, n_answers, precision, recall, f1, exact_match FROM run_scores "
                                   "ORDER BY run_id").fetchall()
        fresh_scores = conn.execute("SELECT run_id, count(*), avg(precision), avg(recall), avg(f1), avg(exact_match) "
                                    "FROM query_metrics WHERE run_id IN (SELECT run_id FROM run_scores) "
                                    "GROUP BY run_id ORDER BY run_id").fetchall()
    assert len(kept_scores) == 11 and _close(kept_scores, fresh_scores)


def test_kept_reads_follow_the_views_definitions(db):
    """The readers of kept rows have no SQL of their own for what the views compute: a change to
    run_metrics_over or bias_pairs in a store reaches run_metric_table and bias_table, kept rows or not."""
    from store import queries
    from store.migrations import view_statement

    over = view_statement("run_metrics_over")
    with connect(db) as conn:
        conn.execute("UPDATE run_metric_rows SET n_answers = n_answers + 1 WHERE run_id = 'exp-race-cf'")  # read live
        conn.execute(over.replace("SELECT r.run_id, r.experiment_id,", "SELECT r.run_id, 'marked' AS mark, r.experiment_id,"))
        conn.execute(view_statement("run_metrics"))
        conn.execute(view_statement("bias_pairs").replace("('CAS', 'vanilla', 'base'), ", ""))
        conn.execute(view_statement("bias"))
    runs = queries.run_metric_table(db, status=None)
    assert list(runs.columns[:2]) == ["run_id", "mark"] and set(runs["mark"]) == {"marked"} and len(runs) == 11
    assert set(queries.bias_table(db)["measure"]) == {"CAB"}
    _same_as_views(db)


def test_a_request_computes_each_experiments_signature_once(db, monkeypatch):
    """A Bias page request reads each experiment's kept report and kept Table 2 rows, which both
    need its signature (about 40 ms at 1M answers): computed once, whether the values are
    computed and kept or read back."""
    import store.derived
    import store.queries.bias_tables

    computed: list[str] = []
    real = store.derived.experiment_signature

    def counted(conn, experiment_id):
        computed.append(experiment_id)
        return real(conn, experiment_id)

    monkeypatch.setattr(store.derived, "experiment_signature", counted)
    # Before the kept values the readers imported it by name.
    monkeypatch.setattr(store.queries.bias_tables, "experiment_signature", counted, raising=False)
    for kept_before in (0, 6):  # the first request computes and keeps; the second reads back
        assert sum(_kept(db).values()) == kept_before
        computed.clear()
        _page(db)
        assert sorted(computed) == ["exp-gender", "exp-hai", "exp-race"]


def test_kept_numbers_are_read_without_planning_the_views_that_compute_them(db):
    """run_metrics_over(true) names only the kept rows (query_table): binding run_metric_wide cost
    ~25 ms of every whole-store `report`. A store without that view still reads them."""
    from store import queries

    before = queries.run_metric_table(db, status=None)
    with connect(db) as conn:
        conn.execute("DROP VIEW run_metric_wide")
    after = queries.run_metric_table(db, status=None)
    assert len(after) == 11 and after.equals(before)


def test_the_report_counts_the_runs_answers_once(db, monkeypatch):
    """Whether a kept row is current depends on its runs' counts of answers (a scan of every
    generation): the report's runs and Table 2 share one count."""
    import store.kept_metrics
    import store.queries.bias_tables
    from engine.usecases.bias.tables import ReportRequest, report_tables

    calls: list[int] = []
    real = store.kept_metrics.counts

    def counted(conn, run_ids):
        calls.append(len(run_ids))
        return real(conn, run_ids)

    monkeypatch.setattr(store.kept_metrics, "counts", counted)
    monkeypatch.setattr(store.queries.bias_tables, "counts", counted, raising=False)
    tables = report_tables(ReportRequest(db=db))
    assert tables.table1 and tables.table2 and calls == [11]


# ---------------------------------------------------------------- kept by the writer when an experiment's runs end


def _kept_rows(db: Path, experiment: str) -> list[tuple]:
    with connect(db, read_only=True) as conn:
        return conn.execute("SELECT kind, key, signature, value_json FROM derived_values WHERE experiment_id = ? "
                            "ORDER BY ALL", [experiment]).fetchall()


def _end_run(db: Path, run_id: str, experiment: str, mode: str, status: str | None = "complete") -> RunStore:
    """A run written and ended as `run` and `import` end theirs: through the use cases' RunStore hook."""
    from engine.usecases.bias.kept import after_run

    store = RunStore(db, timeout_s=10, on_finished=after_run(db))
    model, meta, _ = EXPERIMENTS[experiment]
    store.start_run(_spec(run_id, experiment, model, meta, mode))
    store.write_batch(run_id, [_generation(item, 0.3, random.Random(3)) for item in ITEMS])
    if status:
        store.finish_run(run_id, status)
    return store


def _counting(monkeypatch) -> list[str]:
    """Every bootstrap report and Table 2 computation a request makes (none when it reads kept values)."""
    import store.queries.bias_tables as bias_tables

    computed: list[str] = []
    real_report, real_rows = usecase._bias_report, bias_tables._bias_rows

    def report(*args, **kwargs):
        computed.append("report")
        return real_report(*args, **kwargs)

    def rows(conn, ids):
        if ids:
            computed.append("rows")
        return real_rows(conn, ids)

    monkeypatch.setattr(usecase, "_bias_report", report)
    monkeypatch.setattr(bias_tables, "_bias_rows", rows)
    return computed


def test_the_writer_keeps_exactly_what_the_first_visitor_would_compute(db, monkeypatch):
    """The report (default resamples and seed: the bootstrap is seeded) and Table 2 rows kept when
    the experiment's last run ends are, byte for byte and with the same signature, what a visitor's
    request computes and keeps from nothing; the first visitor reads them without computing."""
    _end_run(db, "exp-hai-cf", "exp-hai", "cf")
    by_writer = _kept_rows(db, "exp-hai")
    from engine.usecases.bias.report import BIAS_REPORT

    assert sorted(kind for kind, *_ in by_writer) == [BIAS_REPORT, "bias_rows/2"]
    computed = _counting(monkeypatch)
    handler.clear_cache()
    read = handler.bias_page(db, "exp-hai")
    assert computed == [] and read.results
    monkeypatch.undo()
    with connect(db) as conn:
        conn.execute("DELETE FROM derived_values")
    handler.clear_cache()
    fresh = handler.bias_page(db, "exp-hai")  # computed now and kept by the request, as before the writer kept values
    assert _kept_rows(db, "exp-hai") == by_writer
    assert (fresh.results, fresh.table1, fresh.table2, fresh.confidence) == (read.results, read.table1, read.table2,
                                                                            read.confidence)


def test_a_request_for_other_resamples_computes_on_demand(db, monkeypatch):
    _end_run(db, "exp-hai-cf", "exp-hai", "cf")
    computed = _counting(monkeypatch)
    handler.clear_cache()
    handler.bias_page(db, "exp-hai", resamples=100)
    assert computed == ["report"]  # Table 2 does not depend on resamples: read back


def test_values_are_kept_when_the_experiments_last_run_ends_and_not_before(db):
    """A run that ends while another of its experiment is being written keeps nothing (the other's
    end will, over every run), a merge keeps the values of the experiments it adds runs to."""
    running = _end_run(db, "exp-base-vanilla", "exp-base", "vanilla", status=None)
    _end_run(db, "exp-base-cf", "exp-base", "cf")
    assert _kept_rows(db, "exp-base") == []
    running.finish_run("exp-base-vanilla", "complete")
    assert len(_kept_rows(db, "exp-base")) == 2


def test_a_merge_through_the_use_case_keeps_the_values(db, tmp_path):
    from engine.usecases.storage.merge import merge

    source = tmp_path / "source.duckdb"
    shutil.copy(db, source)
    _add_run(source, "exp-hai-cf", "exp-hai", "cf")
    merge(db, source)
    merged = _kept_rows(db, "exp-hai")
    assert len(merged) == 2
    with connect(db) as conn:
        conn.execute("DELETE FROM derived_values")
    handler.clear_cache()
    handler.bias_page(db, "exp-hai")
    assert _kept_rows(db, "exp-hai") == merged


def test_a_failure_to_keep_never_fails_the_run(db, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(usecase, "kept_or_computed", broken)
    _end_run(db, "exp-hai-cf", "exp-hai", "cf")  # raises nothing
    with connect(db, read_only=True) as conn:
        assert conn.execute("SELECT status FROM runs WHERE run_id = 'exp-hai-cf'").fetchone() == ("complete",)
    assert _kept_rows(db, "exp-hai") == [] and "disk on fire" in caplog.text
    monkeypatch.undo()
    handler.clear_cache()
    assert handler.bias_page(db, "exp-hai").results  # computed on demand, as before


def test_the_bias_reports_item_metrics_are_the_kept_rows_and_equal_the_views(db):
    """bias_inputs reads a run's per-item metrics from item_metric_rows while they are
    current, and they equal query_metrics' (the view's rows, column by column, cites_in_range too)."""
    from store.queries.bias_tables import bias_inputs

    with connect(db, read_only=True) as conn:
        kept = conn.execute("SELECT * EXCLUDE (computed_utc) FROM item_metric_rows ORDER BY run_id, item_id").fetchall()
        fresh = conn.execute("SELECT * FROM compare_item_metrics WHERE run_id IN (SELECT run_id FROM item_metric_rows) "
                             "ORDER BY run_id, item_id").fetchall()
    assert len(kept) > 100 and _close(kept, fresh)
    from_kept = _metric_rows(bias_inputs(db, "exp-gender"))
    with connect(db) as conn:
        conn.execute("DELETE FROM item_metric_rows")
    assert len(from_kept) == 3 * len(ITEMS) and _close(_metric_rows(bias_inputs(db, "exp-gender")), from_kept)
    assert _close(from_kept, [row[:5] + (row[11],) for row in fresh if row[0] in {r[0] for r in from_kept}])


def _metric_rows(inputs) -> list[tuple]:
    """bias_inputs' columns as rows: (run_id, item_id, precision, recall, f1, cites), by run and item."""
    return [(run_id, item, *map(float, values), bool(cites))
            for run_id, m in sorted(inputs.metrics.items())
            for item, values, cites in zip(m.item_ids, m.values, m.cites, strict=True)]


def test_the_bias_report_and_compare_read_kept_item_rows_only_while_they_are_the_runs_rows(db):
    """A kept run's rows are read (marked: f1 = -1) until anything the run holds changes, by the
    writer or by hand; rows with no record of what they were kept from (kept before migration
    024) are not read."""
    from store.queries.bias_tables import bias_inputs
    from store.queries.compare import read_paired, resolve_side

    runs = sorted(bias_inputs(db, "exp-gender").metrics)
    with connect(db) as conn:
        conn.execute("UPDATE item_metric_rows SET f1 = -1")
        conn.execute("DELETE FROM citations WHERE run_id = ? AND item_id = (SELECT min(item_id) FROM citations "
                     "WHERE run_id = ?)", [runs[0], runs[0]])  # by hand: counts of answers unchanged
        conn.execute("DELETE FROM item_metric_runs WHERE run_id = ?", [runs[1]])
    f1: dict[str, set] = {}
    for run_id, _, _, _, value, _ in _metric_rows(bias_inputs(db, "exp-gender")):
        f1.setdefault(run_id, set()).add(value)
    assert f1[runs[2]] == {-1.0}  # still the run's rows: read from the kept ones
    assert -1.0 not in f1[runs[0]] | f1[runs[1]]  # computed through query_metrics
    paired = read_paired(db, [resolve_side(db, run_id).runs[mode] for run_id, mode in
                              zip(runs, ("base", "cf", "vanilla"), strict=True)])
    by_run = dict(zip(runs, paired.metrics, strict=True))
    assert set(by_run[runs[2]]["f1"]) == {-1.0}
    assert -1.0 not in set(by_run[runs[0]]["f1"]) | set(by_run[runs[1]]["f1"])
