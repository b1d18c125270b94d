"""The labels each stored answer's model saw beside its documents, for a judge that is to see
them too (`python -m engine verify --show-label`), and the verdicts of one judge on a base and
a cf run side by side (the judge's own label bias)."""

from __future__ import annotations

from store.db import DbLike
from store.queries._read import fetch
from store.queries.drilldown import shown_labels


def labels_as_shown(db: DbLike, run) -> dict[str, tuple[str | None, ...]]:
    """item_id -> the label after each shown document, in shown order, as the run's prompt showed
    it (stored since migration 014; derived as store.queries.explain_sources does before); all
    None in vanilla. `run` is an ExplainRun."""
    rows = fetch(
        db,
        "SELECT g.item_id, g.shown_doc_ids, g.shown_labels, i.documents FROM generations g "
        "JOIN runs r ON r.run_id = g.run_id JOIN items i ON i.dataset_sha = r.dataset_sha AND i.item_id = g.item_id "
        "WHERE g.run_id = $run",
        {"run": run.run_id},
    )
    out: dict[str, tuple[str | None, ...]] = {}
    for item_id, shown, stored, documents in rows:
        shown_ids = list(shown or [])
        if stored is not None:
            out[item_id] = tuple(stored)
            continue
        relevant: dict[str, bool] = {}
        for d in documents:  # a repeated id is relevant if any copy is, as in query_metrics
            relevant[d["id"]] = relevant.get(d["id"], False) or bool(d["relevant"])
        derived = shown_labels(run.rag_mode, run.label_a, run.label_b, shown_ids, relevant)
        out[item_id] = tuple(derived.get(d) for d in shown_ids)
    return out


def paired_verdicts(db: DbLike, base_run: str, cf_run: str, judge: str) -> tuple[tuple, ...]:
    """(item_id, sentence_index, position, doc_id, base class, cf class) for every pair `judge`
    judged in both runs where the same document sits at that position, ordered."""
    return tuple(fetch(
        db,
        "SELECT b.item_id, b.sentence_index, b.position, b.doc_id, b.class, c.class "
        "FROM verifications b JOIN verifications c USING (item_id, sentence_index, position, judge_model) "
        "WHERE b.run_id = $base AND c.run_id = $cf AND b.judge_model = $judge AND b.doc_id = c.doc_id "
        "ORDER BY b.item_id, b.sentence_index, b.position",
        {"base": base_run, "cf": cf_run, "judge": judge},
    ))
