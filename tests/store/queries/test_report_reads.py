"""The report's reads at scale: records of a frame without pandas' cell-by-cell
to_dict, the verification and explanation views left unread while their tables hold no row
(most stores: their IN list of every run cost 13 ms each at 10M answers), the Bias report's
per-item metrics read as columns, not a Python tuple per answer, and a report of one experiment
that counts only its runs' answers (every run's cost 20 ms at 10M)."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pytest

import store.queries.bias_tables
from engine.errors import UserError
from engine.usecases.bias.tables import ReportRequest, report_tables
from store.db import connect
from store.queries import explanation_rates, records, report_frames, verification_shares
from store.queries._read import frame
from tests.support.bias_store import add_experiment, biased


def _same(a: object, b: object) -> bool:
    """Equal, NaN equal to NaN (and NaT to NaT: one object), and of one type."""
    if a is b:
        return True
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def test_records_are_to_dicts_records_for_every_column_type_the_store_gives():
    with duckdb.connect() as conn:
        table = frame(conn.execute(
            "SELECT * FROM (VALUES "
            "(1, 'a', 0.5, 3::BIGINT, TIMESTAMP '2026-01-02 03:04:05', [1, 2], true, NULL::VARCHAR), "
            "(2, NULL, NULL, NULL::BIGINT, NULL::TIMESTAMP, NULL, NULL, 'x'), "
            "(3, 'c', 'NaN'::DOUBLE, 7::BIGINT, TIMESTAMP '2026-01-02 03:04:06', [], false, NULL)"
            ") t(i, s, f, n, stamp, xs, flag, note)"))
    want = table.to_dict("records")
    got = records(table)
    assert [list(r) for r in got] == [list(r) for r in want]
    for row_got, row_want in zip(got, want, strict=True):
        for key in row_want:
            assert _same(row_got[key], row_want[key]), (key, row_got[key], row_want[key])
    assert records(table.iloc[:0]) == []


@pytest.mark.parametrize(("read", "view", "table"), [
    (verification_shares, "verification_shares", "verifications"),
    (explanation_rates, "explanation_rates", "explanations"),
])
def test_a_view_over_an_empty_table_is_not_read(tmp_path, read, view, table):
    db = tmp_path / "store.duckdb"
    with connect(db):
        pass
    with duckdb.connect(str(db)) as raw:
        raw.execute(f"DROP VIEW {view}")  # read anyway, this would be a CatalogException
    assert read(db, ["run-1", "run-2"]) == ()
    with duckdb.connect(str(db)) as raw:  # one row (of any shape): the view must be read now
        raw.execute(f"DROP TABLE {table}")
        raw.execute(f"CREATE TABLE {table} AS SELECT 'run-1' AS run_id")
    with pytest.raises(duckdb.CatalogException, match=view):
        read(db, ["run-1"])


def test_per_item_metrics_are_cut_into_runs_with_nulls_as_the_rows_gave_them():
    """bias_inputs' columns: a NULL metric (precision of an answer that cites nothing) is NaN, a
    NULL cites_in_range False, and a chosen run with no answer has no items."""
    from store.queries.bias_tables import _per_run

    with duckdb.connect() as conn:
        columns = conn.execute(
            "SELECT * FROM (VALUES ('r1', 'a', NULL::DOUBLE, 1.0, 0.5, NULL::BOOLEAN), "
            "('r1', 'b', 0.5, NULL, 1.0, true), ('r2', 'a', 1.0, 1.0, 1.0, false)) "
            "t(run_id, item_id, precision, recall, f1, cites) ORDER BY run_id, item_id").fetchnumpy()
    got = _per_run(["r1", "r2", "r3"], columns)
    assert list(got) == ["r1", "r2", "r3"]
    assert got["r1"].item_ids == ("a", "b") and got["r2"].item_ids == ("a",) and got["r3"].item_ids == ()
    assert np.array_equal(got["r1"].values, [[np.nan, 1.0, 0.5], [0.5, np.nan, 1.0]], equal_nan=True)
    assert got["r1"].cites.tolist() == [False, True] and got["r2"].cites.tolist() == [False]
    assert got["r3"].values.shape == (0, 3) and got["r1"].values.dtype == float and got["r1"].cites.dtype == bool


def test_a_report_of_one_experiment_counts_its_runs_alone_and_gives_the_same_tables(tmp_path, monkeypatch):
    db = tmp_path / "store.duckdb"
    for name, k in (("one", 1), ("two", 2)):
        add_experiment(db, name, "m", *biased(4, k), vanilla=[(2,)] * 4)
    runs, bias = report_frames(db, "two")
    runs_alone, bias_alone = report_frames(db, "two", runs_of_experiment=True)
    assert runs_alone.equals(runs[runs["experiment_id"] == "two"].reset_index(drop=True)) and len(runs_alone) == 3
    assert bias_alone.equals(bias) and len(bias) == 6  # CAS and CAB, three metrics each
    counted: list[list[str]] = []
    real = store.queries.bias_tables.counts
    monkeypatch.setattr(store.queries.bias_tables, "counts", lambda conn, ids: counted.append(sorted(ids)) or real(conn, ids))
    tables = report_tables(ReportRequest(db=db, experiment="two"))
    assert counted == [["two-base", "two-cf", "two-vanilla"]]
    assert [row["run_id"] for row in tables.table1] == ["two-vanilla", "two-base", "two-cf"]
    # A model filter beside it still names what the whole store holds: every run is read then.
    with pytest.raises(UserError, match="models with complete runs: m"):
        report_tables(ReportRequest(db=db, experiment="two", model="nope"))
    assert counted[-1] == sorted(f"{e}-{m}" for e in ("one", "two") for m in ("base", "cf", "vanilla"))
