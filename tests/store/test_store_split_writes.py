"""A large write goes to DuckDB in several statements (store.rows.ROWS_PER_STATEMENT rows each, so
that DuckDB never converts one list parameter of 200,000 rows) and stays one transaction: a
statement that fails part-way leaves none of the batch's rows, and the rows that do go in are the
rows one statement would have written."""

from __future__ import annotations

import dataclasses

import duckdb
import pytest

import store.rows
import store.run_store
from store.run_store import RunStore
from tests.support.bias_store import DATASET, SHA, generation, items


@pytest.fixture
def split_small(monkeypatch):
    monkeypatch.setattr(store.rows, "ROWS_PER_STATEMENT", 2)
    monkeypatch.setattr(store.run_store, "ROWS_PER_STATEMENT", 2)


def _spec(n: int):
    from engine.types import RunSpec

    return RunSpec("r1", "e1", "h-r1", "m", None, "4bit", "bfloat16", "cpu", DATASET, SHA, None, "vanilla", 0, "v1",
                   None, {}, {}, n)


def _count(db, sql: str) -> int:
    with duckdb.connect(str(db), read_only=True) as conn:
        return conn.execute(sql).fetchone()[0]


def test_items_and_answers_split_over_statements_are_all_stored(tmp_path, split_small):
    db = tmp_path / "s.duckdb"
    run_store = RunStore(db)
    run_store.put_items(SHA, items(5))
    run_store.start_run(_spec(5))
    run_store.write_batch("r1", [generation(f"q{i:03d}", (1, 2)) for i in range(5)])
    run_store.finish_run("r1", "complete")
    assert _count(db, f"SELECT count(*) FROM items WHERE dataset_sha = '{SHA}'") == 5
    assert _count(db, "SELECT count(*) FROM generations WHERE run_id = 'r1'") == 5
    assert _count(db, "SELECT count(*) FROM citations WHERE run_id = 'r1'") == 10
    assert _count(db, "SELECT count(*) FROM answer_metrics WHERE run_id = 'r1'") == 5


def test_a_statement_that_fails_part_way_leaves_none_of_the_batch(tmp_path, split_small):
    db = tmp_path / "s.duckdb"
    run_store = RunStore(db)
    good = items(5)
    # The fifth item (the third statement) holds a value DuckDB cannot store as BOOLEAN.
    bad_doc = dataclasses.replace(good[4].documents[0], relevant="maybe")
    bad = (*good[:4], dataclasses.replace(good[4], documents=(bad_doc, *good[4].documents[1:])))
    with pytest.raises(duckdb.Error):
        run_store.put_items(SHA, bad)
    assert _count(db, "SELECT count(*) FROM items") == 0

    run_store.put_items(SHA, good)
    run_store.start_run(_spec(5))
    answers = [generation(f"q{i:03d}", (1,)) for i in range(5)]
    answers[4] = dataclasses.replace(answers[4], n_prompt_tokens="many")  # not an INTEGER
    with pytest.raises(duckdb.Error):
        run_store.write_batch("r1", answers)
    assert _count(db, "SELECT count(*) FROM generations") == 0
    assert _count(db, "SELECT count(*) FROM citations") == 0
    assert _count(db, "SELECT count(*) FROM answer_metrics") == 0
