"""The whole-store report's reads at 10M answers (issue 31): records of a frame without pandas'
cell-by-cell to_dict, and the verification and explanation views left unread while their
tables hold no row (most stores), where their IN list of every run cost 13 ms each."""

from __future__ import annotations

import math

import duckdb
import pytest

from store.db import connect
from store.queries import explanation_rates, records, verification_shares
from store.queries._read import frame


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
