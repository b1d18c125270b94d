"""Invalid items: one summary line by default; skipped and listed with skip_invalid; limit after skipping."""

from __future__ import annotations

import json

import pytest

from engine.commands._field_words import cli_message
from engine.datasets.data import dataset_sha, describe_skipped, load_dataset
from engine.errors import UserError
from engine.types import SkippedItem


def row(item_id: str, relevant: bool = True, **fields) -> dict:
    base = {
        "id": item_id,
        "question": f"question {item_id}?",
        "answers": ["x"],
        "documents": [{"text": "first document", "relevant": False}, {"text": "second document", "relevant": relevant}],
    }
    return base | fields


def write(path, rows):
    if path.suffix == ".json":
        path.write_text(json.dumps(rows))
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


FIVE = [row("q1"), row("q2", relevant=False), row("q3"), row("q4", relevant=False), row("q5")]


def test_no_relevant_items_refused_with_one_summary_line(tmp_path):
    path = write(tmp_path / "d.jsonl", FIVE)
    with pytest.raises(UserError) as err:
        load_dataset(path)
    assert cli_message(err.value) == (
        f"2 of 5 items have no relevant document among the shown documents (first: {path}:line 2, item 'q2'); "
        "run the other 3 with --skip-invalid"
    )


def test_no_relevant_summary_in_a_json_file_names_the_item_number_and_id(tmp_path):
    path = write(tmp_path / "d.json", FIVE)
    with pytest.raises(UserError) as err:
        load_dataset(path)
    assert f"(first: {path}:item 2, id 'q2');" in str(err.value)


def test_skip_invalid_keeps_the_valid_items_and_lists_the_others(tmp_path):
    ds = load_dataset(write(tmp_path / "d.jsonl", FIVE), skip_invalid=True)
    assert [i.id for i in ds.items] == ["q1", "q3", "q5"]
    assert ds.skipped == (
        SkippedItem("line 2", "q2", "no relevant document"),
        SkippedItem("line 4", "q4", "no relevant document"),
    )
    # The hash is of the items kept: the same as a file holding only those.
    only_valid = load_dataset(write(tmp_path / "v.jsonl", [FIVE[0], FIVE[2], FIVE[4]]))
    assert ds.sha == only_valid.sha == dataset_sha(ds.items)
    assert ds.sha != load_dataset(write(tmp_path / "all.jsonl", [row(f"q{i}") for i in range(1, 6)])).sha
    assert describe_skipped(ds.source, ds.skipped[0]) == f"{ds.source}:line 2: item 'q2': no relevant document"


def test_mixed_problems_are_counted_by_kind_and_the_first_is_spelt_out(tmp_path):
    rows = [row("q1"), row("q2", relevant=False), row("q3", question=" "), row("q4", relevant=False), row("q5")]
    path = write(tmp_path / "d.jsonl", rows)
    with pytest.raises(UserError) as err:
        load_dataset(path)
    assert cli_message(err.value) == (
        f"3 of 5 items are invalid (no relevant document: 2, empty question: 1; "
        f"first: {path}:line 2: item 'q2': no relevant document); run the other 2 with --skip-invalid"
    )
    ds = load_dataset(path, skip_invalid=True)
    assert [s.reason for s in ds.skipped] == ["no relevant document", "empty question", "no relevant document"]


def test_several_problems_of_one_kind(tmp_path):
    path = write(tmp_path / "d.jsonl", [row("q1", question=""), row("q2"), row("q3", question="")])
    with pytest.raises(UserError) as err:
        load_dataset(path)
    assert cli_message(err.value) == (
        f"2 of 3 items are invalid (first: {path}:line 1: item 'q1': empty question); run the other one with --skip-invalid"
    )


def test_nothing_left_after_skipping_is_an_error(tmp_path):
    path = write(tmp_path / "d.jsonl", [row("q1", relevant=False), row("q2", answers=[])])
    with pytest.raises(UserError) as err:
        load_dataset(path, skip_invalid=True)
    assert str(err.value) == f"none of the 2 items is valid, nothing to run (first: {path}:line 1: item 'q1': no relevant document)"
    with pytest.raises(UserError) as err:  # and without skipping there is no way out to suggest
        load_dataset(path)
    assert "--skip-invalid" not in str(err.value)


def test_limit_takes_the_first_valid_items_and_ignores_later_rows(tmp_path):
    path = write(tmp_path / "d.jsonl", FIVE)
    ds = load_dataset(path, limit=2, skip_invalid=True)
    assert [i.id for i in ds.items] == ["q1", "q3"]
    assert [s.item_id for s in ds.skipped] == ["q2"]  # q4 comes after the limit: not skipped, just unused
    assert ds.sha == dataset_sha(ds.items)
    assert [i.id for i in load_dataset(path, limit=1).items] == ["q1"]  # q2 is never reached
    with pytest.raises(UserError) as err:
        load_dataset(path, limit=2)
    assert cli_message(err.value) == f"{path}:line 2: item 'q2': no relevant document (1 of 3 items; run the other 2 with --skip-invalid)"


def test_duplicate_id_skips_the_later_row(tmp_path):
    path = write(tmp_path / "d.jsonl", [row("q1"), row("q1", question="another"), row("q2")])
    ds = load_dataset(path, skip_invalid=True)
    assert [(i.id, i.question) for i in ds.items] == [("q1", "question q1?"), ("q2", "question q2?")]
    assert ds.skipped == (SkippedItem("line 2", "q1", "duplicate id (first at line 1)"),)


def test_bad_id_is_reported_without_an_id(tmp_path):
    path = write(tmp_path / "d.jsonl", [row("q1"), row(["q", 2])])
    ds = load_dataset(path, skip_invalid=True)
    assert ds.skipped == (SkippedItem("line 2", None, "'id' must be a string or an integer, got array"),)
    assert describe_skipped(ds.source, ds.skipped[0]) == f"{path}:line 2: 'id' must be a string or an integer, got array"


def test_top_k_checks_relevance_among_the_shown_documents_only(tmp_path):
    path = write(tmp_path / "d.jsonl", [row("q1"), row("q2")])  # the relevant document is the second
    assert len(load_dataset(path, top_k=2).items) == 2
    with pytest.raises(UserError, match="^2 of 2 items have no relevant document among the shown documents"):
        load_dataset(path, top_k=1)


def test_ids_in_messages_cannot_break_the_line(tmp_path):
    path = write(tmp_path / "d.jsonl", [row("q1"), row("a\nb\u202e", question="")])
    with pytest.raises(UserError) as err:
        load_dataset(path)
    assert str(err.value).startswith(f"{path}:line 2: item 'a\\nb\\u202e': empty question")
    assert str(err.value).isprintable()


def test_item_numbers_stand_in_for_missing_ids(tmp_path):
    path = write(tmp_path / "d.jsonl", [{k: v for k, v in row("x").items() if k != "id"}, row("q2", relevant=False)])
    ds = load_dataset(path, skip_invalid=True)
    assert [i.id for i in ds.items] == ["1"]
