"""ALCE's releases as they come: ASQA (gold = qa_pairs short answers), QAMPARI (alias lists), plain."""

from __future__ import annotations

import json

import pytest

from engine.commands._field_words import cli_message
from engine.datasets.data import load_dataset
from engine.datasets.normalize import normalize_answer
from engine.errors import UserError


def asqa_row(sample_id: str, qa_pairs: list, docs: list) -> dict:
    """One row shaped like ALCE's asqa_eval_gtr_top100.json."""
    return {
        "qa_pairs": qa_pairs,
        "wikipages": [{"title": "Breaking Bad", "url": "https://en.wikipedia.org/wiki/Breaking_Bad"}],
        "annotations": [
            {
                "knowledge": [{"content": "Vince Gilligan created the series.", "wikipage": "Breaking Bad"}],
                "long_answer": "Vince Gilligan created Breaking Bad; Bryan Cranston played Walter White.",
            }
        ],
        "sample_id": sample_id,
        "question": "Who starred in Breaking Bad?",
        "answer": "Vince Gilligan created Breaking Bad; Bryan Cranston played Walter White.",
        "docs": docs,
    }


def qa(question: str, *short_answers: str) -> dict:
    return {"context": "No context provided", "question": question, "short_answers": list(short_answers), "wikipage": "Breaking Bad"}


def doc(doc_id: str, title: str, text: str) -> dict:
    return {"id": doc_id, "title": title, "text": text, "score": 1.5, "summary": "", "extraction": text, "answers_found": [0, 0]}


ASQA = asqa_row(
    "-4469503464110108318",
    [qa("Who played Walter White?", "Bryan Cranston", "Cranston"), qa("Who played Jesse?", "Aaron Paul", "Bryan Cranston")],
    [
        doc("20994", "Vince Gilligan", "Vince Gilligan is an American writer."),  # only in the long answer
        doc("20995", "Breaking Bad (cast)", "Aaron Paul played Jesse Pinkman."),
        doc("20996", "Walter White", "Walter White was played by Bryan Cranston."),
    ],
)


def write_json(path, rows):
    path.write_text(json.dumps(rows))
    return path


def test_asqa_gold_is_the_short_answers_not_the_long_answer(tmp_path):
    ds = load_dataset(write_json(tmp_path / "asqa_eval_gtr_top100.json", [ASQA]))
    (item,) = ds.items
    assert ds.layout == "alce-asqa"
    assert item.id == "-4469503464110108318"
    assert item.question == "Who starred in Breaking Bad?"
    # Flattened over qa_pairs, duplicates dropped, first occurrence order kept.
    assert item.answers == ("Bryan Cranston", "Cranston", "Aaron Paul")
    assert [d.id for d in item.documents] == ["20994", "20995", "20996"]
    # The long-form answer names Vince Gilligan; that must not make his document relevant.
    assert [d.relevant for d in item.documents] == [False, True, True]


def test_asqa_without_any_short_answer_is_an_invalid_item(tmp_path):
    rows = [ASQA, dict(ASQA, sample_id="s2", qa_pairs=[qa("Who?")])]
    path = write_json(tmp_path / "asqa.json", rows)
    with pytest.raises(UserError) as err:
        load_dataset(path)
    assert cli_message(err.value) == (f"{path}:item 2, id 's2': no answers (1 of 2 items; run the other one with "
                                      "--skip-invalid)")


@pytest.mark.parametrize(
    "qa_pairs, problem",
    [
        ("Bryan Cranston", "'qa_pairs' must be a list, got string"),
        ([{"question": "Who?"}], "'qa_pairs' entry 1 must be an object with a 'short_answers' list"),
        ([qa("Who?"), {"short_answers": [["Bryan Cranston"]]}], "'qa_pairs' entry 2 'short_answers' must hold strings, got array"),
    ],
)
def test_asqa_malformed_qa_pairs(tmp_path, qa_pairs, problem):
    path = write_json(tmp_path / "asqa.json", [dict(ASQA, qa_pairs=qa_pairs)])
    with pytest.raises(UserError) as err:
        load_dataset(path)
    assert str(err.value) == f"{path}:item 1, id '-4469503464110108318': {problem}"


def test_qampari_alias_lists_flatten_and_each_alias_marks_relevance(tmp_path):
    row = {
        "id": "4__wikidata_simple__dev",
        "question": "Which films did Steven Spielberg direct?",
        "answers": [["Jaws", "Jaws (film)"], ["E.T.", "E.T. the Extra-Terrestrial"], ["Duel"]],
        "docs": [
            {"id": "1", "title": "Jaws (film)", "text": "A 1975 thriller.", "score": 1.0},
            {"id": "2", "title": "Dueling", "text": "Dueling pianos are a show."},  # "Duel" only as part of a word
            {"id": "3", "title": "Spielberg", "text": "He directed E.T. in 1982."},
        ],
    }
    ds = load_dataset(write_json(tmp_path / "qampari_eval_gtr_top100.json", [row]))
    (item,) = ds.items
    assert ds.layout == "alce"
    assert item.id == "4__wikidata_simple__dev"
    assert item.answers == ("Jaws", "Jaws (film)", "E.T.", "E.T. the Extra-Terrestrial", "Duel")
    assert [d.relevant for d in item.documents] == [True, False, True]


def test_qampari_alias_of_the_wrong_type_is_named(tmp_path):
    row = {"id": "q", "question": "Which?", "answers": [["Jaws"], ["Duel", 1975]], "docs": [{"title": "Jaws", "text": "Jaws."}]}
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(UserError) as err:
        load_dataset(path)
    assert str(err.value) == f"{path}:line 1: item 'q': 'answers' entry 2 must be a string or a list of strings, got number"


# Gold answer, document text: relevance must be whole-word containment after normalize_answer,
# whatever that function's normalisation is (it is the paper's exact-match normalisation).
ANSWER_RULE_CASES = [
    ("U.S.", "Made in the U.S. in 1950."),
    ("1,000", "About 1000 people came."),
    ("\u201cHey Jude\u201d", "They played Hey Jude last."),
    ("2\u20131", "The score was 2-1 at half time."),
    ("Jay-Z", "A song by Jay Z and others."),
    ("Beyonc\u00e9", "BEYONC\u00c9 sang."),
    ("19", "It was 1969."),
]


@pytest.mark.parametrize("gold, text", ANSWER_RULE_CASES)
def test_answer_rule_is_whole_words_under_normalize_answer(tmp_path, gold, text):
    row = {"id": "q", "question": "Q?", "answers": [gold], "docs": [{"title": "", "text": text}, {"title": "", "text": gold, "gold": True}]}
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (item,) = load_dataset(path).items
    expected = f" {normalize_answer(gold)} " in f" {normalize_answer(' ' + text)} "
    assert item.documents[0].relevant is expected
