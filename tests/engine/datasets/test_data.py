"""Dataset loading: the three layouts, the four file formats, and every bad-input case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.commands._field_words import cli_message
from engine.datasets.data import load_dataset, normalize_text
from engine.errors import UserError

NATIVE = {
    "id": "q1",
    "question": "who wrote pride and prejudice",
    "answers": ["Jane Austen"],
    "documents": [
        {"id": "a", "title": "Novel", "text": "A novel of manners.", "relevant": False},
        {"id": "b", "text": "Pride and Prejudice was written by Jane Austen.", "relevant": True},
    ],
}


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_native_jsonl(tmp_path):
    ds = load_dataset(write_jsonl(tmp_path / "d.jsonl", [NATIVE]))
    (item,) = ds.items
    assert ds.layout == "native"
    assert item.id == "q1" and item.answers == ("Jane Austen",)
    assert [d.id for d in item.documents] == ["a", "b"]
    assert [d.relevant for d in item.documents] == [False, True]
    assert item.documents[0].title == "Novel"


def test_same_items_same_sha_across_formats(tmp_path):
    jsonl = load_dataset(write_jsonl(tmp_path / "d.jsonl", [NATIVE]))
    (tmp_path / "d.json").write_text(json.dumps([NATIVE]))
    as_json = load_dataset(tmp_path / "d.json")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([NATIVE]), tmp_path / "d.parquet")
    as_parquet = load_dataset(tmp_path / "d.parquet")
    assert jsonl.items == as_json.items == as_parquet.items
    assert jsonl.sha == as_json.sha == as_parquet.sha


def test_save_to_disk_folder_in_seed_layout(tmp_path):
    datasets = pytest.importorskip("datasets")
    row = {
        "query_id": 7,
        "query": "what is the capital of australia",
        "org_answers": ["Canberra"],
        "passages": [
            {"passage_text": "Sydney is the largest city.", "is_selected": 0},
            {"passage_text": "Canberra is the capital of Australia.", "is_selected": 1},
        ],
    }
    datasets.Dataset.from_list([row]).save_to_disk(str(tmp_path / "hf"))
    ds = load_dataset(tmp_path / "hf")
    (item,) = ds.items
    assert ds.layout == "seed"
    assert item.id == "7" and item.question == "what is the capital of australia"
    assert [d.relevant for d in item.documents] == [False, True]
    assert [d.id for d in item.documents] == ["7-d1", "7-d2"]


def test_alce_layout_relevance_from_flags_and_answer_rule(tmp_path):
    rows = [
        {
            "question": "when did apollo 11 land",
            "answers": [["1969", "July 1969"]],
            "docs": [
                {"title": "Apollo", "text": "It landed in 1969."},
                {"title": "Other", "text": "Launch complex 19690 in Florida."},
                {"title": "Gold", "text": "No year here.", "gold": True},
            ],
        }
    ]
    ds = load_dataset(write_jsonl(tmp_path / "alce.jsonl", rows))
    (item,) = ds.items
    assert ds.layout == "alce"
    assert item.answers == ("1969", "July 1969")
    # Answer-occurrence rule is whole-word; an explicit gold flag wins.
    assert [d.relevant for d in item.documents] == [True, False, True]
    assert item.id == "1"


def test_limit(tmp_path):
    second = dict(NATIVE, id="q2")
    ds = load_dataset(write_jsonl(tmp_path / "d.jsonl", [NATIVE, second]), limit=1)
    assert [i.id for i in ds.items] == ["q1"]


def test_normalize_text():
    assert normalize_text("  The  Beatles!\n(UK) ") == "the beatles uk"


# (bad second row, its problem): item problems read `FILE:line 2: item 'q1': problem`, "item" once.
ITEM_PROBLEMS = [
    (dict(NATIVE, question="  "), "item 'q1': empty question"),
    (dict(NATIVE, documents=[]), "item 'q1': no documents"),
    ({k: v for k, v in NATIVE.items() if k != "documents"}, "item 'q1': no documents"),
    (dict(NATIVE, documents=[dict(d, relevant=False) for d in NATIVE["documents"]]), "item 'q1': no relevant document"),
    (dict(NATIVE, answers=[]), "item 'q1': no answers"),
    (dict(NATIVE, answers=["  "]), "item 'q1': no answers"),
    (dict(NATIVE, answers=[3]), "item 'q1': 'answers' entry 1 must be a string or a list of strings, got number"),
    (dict(NATIVE, documents=[{"text": "x", "relevant": "yes"}]), "item 'q1': document 1 'relevant' must be true or false, got string"),
    (dict(NATIVE, documents=[{"text": "", "relevant": True}]), "item 'q1': document 1 has empty text"),
    (dict(NATIVE, documents=[{"text": "x"}]), "item 'q1': document 1 has no 'relevant' flag"),
    (dict(NATIVE, documents=[{"id": "a", "text": "x", "relevant": True}] * 2), "item 'q1': document id 'a' appears more than once"),
    (dict(NATIVE, documents=[{"text": 5, "relevant": True}]), "item 'q1': document 1 'text' must be a string, got number"),
    (dict(NATIVE, question=["who"]), "item 'q1': 'question' must be a string, got array"),
    (dict(NATIVE, id="q0"), "item 'q0': duplicate id (first at line 1)"),
    (dict(NATIVE, id={"a": 1}), "'id' must be a string or an integer, got object"),
    (dict(NATIVE, id=True), "'id' must be a string or an integer, got boolean"),
    (dict(NATIVE, id=7.0), "'id' must be a string or an integer, got the number 7.0"),
    (dict(NATIVE, documents=[{"id": [1], "text": "x", "relevant": True}]), "item 'q1': document 1 'id' must be a string or an integer, got array"),
]


@pytest.mark.parametrize("bad, problem", ITEM_PROBLEMS)
def test_item_problem_names_file_line_item_once(tmp_path, bad, problem):
    path = write_jsonl(tmp_path / "bad.jsonl", [dict(NATIVE, id="q0"), bad])
    with pytest.raises(UserError) as err:
        load_dataset(path)
    assert cli_message(err.value) == f"{path}:line 2: {problem} (1 of 2 items; run the other one with --skip-invalid)"


def test_item_problem_in_json_file_says_item_once(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([dict(NATIVE, id="q0"), dict(NATIVE, question="")]))
    with pytest.raises(UserError) as err:
        load_dataset(path)
    assert cli_message(err.value) == f"{path}:item 2, id 'q1': empty question (1 of 2 items; run the other one with --skip-invalid)"


FILE_PROBLEMS = [
    ('{"id": "q1", "question": ', "line 2: invalid JSON (Expecting value at column 26)"),
    ("[1, 2]", "line 2: expected a JSON object, got array"),
    ('"q"', "line 2: expected a JSON object, got string"),
]


@pytest.mark.parametrize("bad, problem", FILE_PROBLEMS)
def test_broken_row_stops_the_load(tmp_path, bad, problem):
    path = write_jsonl(tmp_path / "bad.jsonl", [NATIVE, bad])
    for skip in (False, True):  # a broken file is never skippable
        with pytest.raises(UserError) as err:
            load_dataset(path, skip_invalid=skip)
        assert str(err.value) == f"{path}:{problem}"


def test_bad_file_level_inputs(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_dataset(tmp_path / "missing.jsonl")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(UserError, match="unknown dataset format"):
        load_dataset(tmp_path / "x.csv")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(UserError, match="no items"):
        load_dataset(tmp_path / "empty.jsonl")
    (tmp_path / "odd.jsonl").write_text(json.dumps({"q": 1}) + "\n")
    with pytest.raises(UserError, match="unknown layout"):
        load_dataset(tmp_path / "odd.jsonl")
    (tmp_path / "bad.json").write_text("[{")
    with pytest.raises(UserError, match="bad.json: invalid JSON"):
        load_dataset(tmp_path / "bad.json")


def test_bundled_sample_dataset_is_valid():
    from engine.paths import SAMPLE_DATASET

    ds = load_dataset(SAMPLE_DATASET)
    assert len(ds.items) >= 50
    for item in ds.items:
        assert len(item.documents) == 10
        assert any(d.relevant for d in item.documents)
