"""The citation_decisions view (migration 014) against a plain Python computation, and its export."""

from __future__ import annotations

import random

import duckdb
import pytest

from engine.prompting.citations import parse_citations
from engine.prompting.prompts import METADATA_TYPES, PromptConfig
from engine.types import Citation, Document, Generation, Item, RunSpec
from store.run_store import RunStore
from tests.support.helpers import cli

GENDER = METADATA_TYPES["gender"]


def _items(rng: random.Random, n: int) -> list[Item]:
    items = []
    for i in range(n):
        docs = tuple(Document(f"q{i}-d{j}", f"text {i} {j}", rng.random() < 0.3 or j == 0) for j in range(rng.randint(1, 6)))
        items.append(Item(f"q{i}", f"question {i}", ("gold",), docs))
    return items


def _generation(rng: random.Random, item: Item, mode: str, stored_labels: bool) -> Generation:
    shown = list(item.documents)
    rng.shuffle(shown)
    non_relevant = [d for d in shown if not d.relevant]
    if non_relevant and rng.random() < 0.4:
        shown.append(non_relevant[0])  # the battery's repetition: the same document twice
    numbers = [rng.randint(1, len(shown) + 1) for _ in range(rng.randint(0, 3))]  # n + 1 is out of range
    answer = "answer " + "".join(f"[{n}]" for n in numbers)
    citations = []
    for index, number in enumerate(parse_citations(answer)):
        doc = shown[number - 1] if 1 <= number <= len(shown) else None
        citations.append(Citation(index, number, doc.id if doc else None, doc.relevant if doc else None,
                                  rng.random() if doc and rng.random() < 0.7 else None))
    labels: tuple[str | None, ...] = ()
    if stored_labels:  # as a battery prompt may show them: any label, or none, on any document
        labels = tuple(rng.choice([None, "Wikipedia", "a personal blog"]) for _ in shown)
    return Generation(item.id, "prompt", answer, tuple(d.id for d in shown), "stop", 3, (), tuple(citations),
                      shown_labels=labels)


def _spec(run_id: str, mode: str, n: int) -> RunSpec:
    meta = GENDER if mode != "vanilla" else None
    return RunSpec(run_id, "e1", f"hash-{run_id}", "model-x", None, "none", "float32", "cpu", "data.jsonl",
                   "sha", "gender", mode, 0, "v1", None, {},
                   {"prompt": PromptConfig(mode=mode, metadata=meta).to_dict()}, n)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = random.Random(7)
    path = tmp_path_factory.mktemp("decisions") / "d.duckdb"
    rs = RunStore(path)
    items = _items(rng, 40)
    rs.put_items("sha", items)
    written: dict[str, tuple[str, list[Generation]]] = {}
    for run_id, mode, stored in (("rv", "vanilla", False), ("rb", "base", False), ("rc", "cf", True)):
        gens = [_generation(rng, it, mode, stored) for it in items]
        rs.start_run(_spec(run_id, mode, len(gens)))
        rs.write_batch(run_id, gens)
        rs.finish_run(run_id, "complete")
        written[run_id] = (mode, gens)
    return path, {it.id: it for it in items}, written


def _expected(items: dict[str, Item], written) -> set[tuple]:
    rows = set()
    for run_id, (mode, gens) in written.items():
        for g in gens:
            relevant = {d.id: d.relevant for d in items[g.item_id].documents}
            cited = [c for c in g.citations if c.doc_id is not None]
            for position, doc_id in enumerate(g.shown_doc_ids, start=1):
                if g.shown_labels:
                    label = g.shown_labels[position - 1]
                elif mode == "vanilla":
                    label = None
                else:  # the paper's rule: label A on relevant documents in base, on the others in cf
                    label = GENDER.label_a if (mode == "base") == relevant[doc_id] else GENDER.label_b
                here = [c for c in cited if c.position == position]
                probs = [c.probability for c in here if c.probability is not None]
                n = len(g.shown_doc_ids)
                rows.add((run_id, g.item_id, position, n,
                          "first" if position == 1 else "last" if position == n else "middle",
                          doc_id, label, relevant[doc_id], g.shown_doc_ids.count(doc_id) > 1, bool(here), len(here),
                          round(max(probs), 9) if probs else None, bool(cited)))
    return rows


def test_the_view_has_one_row_per_shown_document_per_answer_as_python_computes_it(store):
    path, items, written = store
    with duckdb.connect(str(path), read_only=True) as conn:
        got = conn.execute(
            "SELECT run_id, item_id, position, n_shown, position_group, doc_id, label, relevant, repeated, cited, "
            "n_cited, round(citation_probability, 9), answer_cites_any FROM citation_decisions").fetchall()
        settings = conn.execute(
            "SELECT DISTINCT relevant_at, repetition, label_scope, experiment_id, model FROM citation_decisions").fetchall()
    assert len(got) == sum(len(g.shown_doc_ids) for _, gens in written.values() for g in gens)
    assert set(got) == _expected(items, written)
    assert settings == [("ranked", "none", "all", "e1", "model-x")]
    # The random answers cover each case the view distinguishes.
    assert {r[8] for r in got} == {True, False} and {r[9] for r in got} == {True, False}
    assert None in {r[6] for r in got if r[0] == "rc"} and any(r[11] is not None for r in got)


def test_the_decision_rows_export_as_csv_and_parquet(store, tmp_path):
    import pandas as pd

    from store.queries import DECISION_COLUMNS, decision_frame

    path, _, written = store
    n = sum(len(g.shown_doc_ids) for _, gens in written.values() for g in gens)
    assert cli("export", "--experiment", "e1", "--rows", "decisions", "--out", str(tmp_path / "d.parquet"),
               "--db", str(path)) == 0
    assert cli("export", "--experiment", "e1", "--rows", "decisions", "--out", str(tmp_path / "d.csv"),
               "--db", str(path)) == 0
    parquet = pd.read_parquet(tmp_path / "d.parquet")
    csv = pd.read_csv(tmp_path / "d.csv")
    frame = decision_frame(path, ["e1"])
    assert tuple(parquet.columns) == tuple(csv.columns) == DECISION_COLUMNS and len(parquet) == len(csv) == n
    assert parquet["cited"].dtype == bool and csv["cited"].dtype == bool
    assert parquet["cited"].tolist() == csv["cited"].tolist() == frame["cited"].tolist()
    # Modes in display order, then items and positions.
    assert list(dict.fromkeys(frame["mode"])) == ["vanilla", "base", "cf"]
    assert decision_frame(path, ["e1"], ("cf",))["mode"].unique().tolist() == ["cf"]


def test_an_unknown_export_row_kind_is_refused_in_one_line(store, tmp_path, capsys):
    path, _, _ = store
    with pytest.raises(SystemExit):
        cli("export", "--experiment", "e1", "--rows", "documents", "--out", str(tmp_path / "x.csv"), "--db", str(path))
    assert "invalid choice: 'documents'" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()
