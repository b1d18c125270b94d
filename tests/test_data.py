"""Dataset loading: the three layouts, the four file formats, and every bad-input case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.data import load_dataset, normalize_text
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


BAD_ROWS = [
    ('{"id": "q1", "question": ', "line 2: invalid JSON"),
    (dict(NATIVE, question="  "), "line 2: item 'q1': empty question"),
    (dict(NATIVE, documents=[]), "line 2: item 'q1': no documents"),
    ({k: v for k, v in NATIVE.items() if k != "documents"}, "line 2: item 'q1': no documents"),
    (dict(NATIVE, documents=[dict(d, relevant=False) for d in NATIVE["documents"]]), "line 2: item 'q1': no relevant document"),
    (dict(NATIVE, answers=[]), "line 2: no answers"),
    (dict(NATIVE, answers=["  "]), "line 2: no answers"),
    (dict(NATIVE, documents=[{"text": "x", "relevant": "yes"}]), "document 1: 'relevant' must be true or false"),
    (dict(NATIVE, documents=[{"text": "", "relevant": True}]), "document 1 has empty text"),
    ([1, 2], "line 2: expected a JSON object"),
    (dict(NATIVE, id="q0"), "line 2: duplicate item id 'q0' (first at line 1)"),
]


@pytest.mark.parametrize("bad, message", BAD_ROWS)
def test_bad_rows_name_file_line_and_problem(tmp_path, bad, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [dict(NATIVE, id="q0"), bad if isinstance(bad, str) else json.dumps(bad) if not isinstance(bad, dict) else bad])
    with pytest.raises(UserError) as err:
        load_dataset(path)
    text = str(err.value)
    assert text.startswith(str(path) + ":"), text
    assert message in text, text
    assert "\n" not in text


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
