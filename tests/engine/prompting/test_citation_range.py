"""A cited number past 2**31 (or of thousands of digits) is an out-of-range
citation, in a run and in `import`: before, the store's INTEGER column ended the run with a
traceback (and greedy decoding repeats the answer on every resume) and `import` exited 1.
The parser's edges (reversed ranges, the range cap, distinct huge numbers)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from engine.__main__ import main
from engine.prompting.citations import MAX_CITATION_NUMBER, parse_citations
from tests.support.helpers import write_one_answer


@pytest.mark.parametrize("text, expected", [
    ("[12345678901]", [MAX_CITATION_NUMBER]),
    ("[2147483647]", [2147483647]),
    ("[2147483648]", [MAX_CITATION_NUMBER]),
    ("[" + "9" * 5000 + "]", [MAX_CITATION_NUMBER]),  # int() refuses past 4,300 digits
    ("[0000000000000000000002]", [2]),
    ("[1][99999999999-99999999999]", [1, MAX_CITATION_NUMBER]),
    ("[2147483646-99999999999]", [2147483646, MAX_CITATION_NUMBER]),
])
def test_huge_numbers_parse_as_out_of_range(text, expected):
    assert parse_citations(text) == expected


MAX = MAX_CITATION_NUMBER


# The parser's edges, each defined (engine/prompting/citations.py's docstring, docs/method.md).
@pytest.mark.parametrize("text, expected", [
    # A reversed range cites the same numbers, in the order written; before, it cited nothing.
    ("[3-1]", [3, 2, 1]),
    ("[3–1]", [3, 2, 1]),
    ("[2-2]", [2]),
    ("[1][5-3]", [1, 5, 4, 3]),
    # One cap: a range expands when it covers at most MAX_RANGE (100) numbers, else reads as its
    # two ends; before, [1-101] expanded to 101 citations and [1-102] read as 2.
    ("[1-100]", list(range(1, 101))),
    ("[100-1]", list(range(100, 0, -1))),
    ("[1-101]", [1, 101]),
    ("[1-102]", [1, 102]),
    ("[101-1]", [101, 1]),
    ("[5-104]", list(range(5, 105))),
    ("[5-105]", [5, 105]),
    # Numbers past the INTEGER column stay distinct: one stand-in each, counted down from 2**31-1,
    # skipping numbers the answer writes; before, all of them were 2**31-1.
    ("[99999999999][99999999998]", [MAX, MAX - 1]),
    ("[99999999999][99999999999]", [MAX, MAX]),
    ("[2147483647][99999999999]", [MAX, MAX - 1]),
    ("[99999999999][2147483647]", [MAX - 1, MAX]),
    ("[99999999999, 2147483646, 99999999998]", [MAX, 2147483646, MAX - 2]),
    ("[" + "9" * 5000 + "][" + "9" * 4999 + "8]", [MAX, MAX - 1]),
    ("[10000000000-10000000002]", [MAX, MAX - 1, MAX - 2]),
    ("[099999999999][99999999999]", [MAX, MAX]),  # leading zeros: the same number
])
def test_parser_edges(text, expected):
    assert parse_citations(text) == expected


def test_distinct_huge_numbers_count_as_distinct_false_positives(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": "q?", "answers": ["a"],
                                "documents": [{"id": "d1", "text": "a", "relevant": True},
                                              {"id": "d2", "text": "b", "relevant": False}]}) + "\n")
    answers = tmp_path / "a.jsonl"
    answers.write_text(json.dumps({"item_id": "q1", "answer": "a [1] [99999999999] [99999999998] [3-1]"}) + "\n")
    db = tmp_path / "i.duckdb"
    assert main(["import", "--dataset", str(data), "--answers", str(answers), "--name", "m", "--db", str(db)]) == 0
    capsys.readouterr()
    # Cited 1, 2, 3 and two different huge numbers: one relevant of five.
    assert _store_rows(db, "SELECT cited, precision, out_of_range_citations FROM query_metrics") == [
        ([1, 2, 3, MAX - 1, MAX], pytest.approx(0.2), 3)]


def _store_rows(db: Path, sql: str):
    conn = duckdb.connect(str(db), read_only=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_a_run_storing_a_huge_citation_completes(tmp_path):
    db = write_one_answer(tmp_path, "a [1][12345678901]")
    assert _store_rows(db, "SELECT status FROM runs") == [("complete",)]
    assert _store_rows(db, "SELECT position, doc_id FROM citations ORDER BY citation_index") == [
        (1, "q1-d1"), (MAX_CITATION_NUMBER, None)]


def test_import_of_a_huge_citation_counts_it_out_of_range(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": "q?", "answers": ["a"],
                                "documents": [{"id": "d1", "text": "a", "relevant": True},
                                              {"id": "d2", "text": "b", "relevant": False}]}) + "\n")
    answers = tmp_path / "a.jsonl"
    answers.write_text(json.dumps({"item_id": "q1", "answer": "a [1] [12345678901]"}) + "\n")
    db = tmp_path / "i.duckdb"
    code = main(["import", "--dataset", str(data), "--answers", str(answers), "--name", "m", "--db", str(db)])
    assert code == 0, capsys.readouterr().err
    assert _store_rows(db, "SELECT status FROM runs") == [("complete",)]
    assert _store_rows(db, "SELECT position, relevant FROM citations ORDER BY citation_index") == [
        (1, True), (MAX_CITATION_NUMBER, None)]
    # One relevant of two cited: the huge one counts against precision, as [3] of 2 would.
    assert _store_rows(db, "SELECT precision FROM query_metrics") == [(pytest.approx(0.5),)]


def test_a_long_digit_run_is_read_in_linear_time():
    # The range pattern backtracked through every split of a digit run: 5 s at 20,000 digits,
    # growing as the square. Now about 0.1 s at 100,000, the only cost being int().
    import time

    start = time.perf_counter()
    assert parse_citations("[1-" + "9" * 100_000 + "] [" + "8" * 100_000) == [1, MAX]
    assert time.perf_counter() - start < 3
