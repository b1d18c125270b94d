"""The labels each stored answer's model saw beside its documents, for a judge that is to see
them too (`python -m engine verify --show-label`), and the verdicts of one judge on a base run's
sentences with the label as base and as cf showed it, side by side (the judge's own label bias,
table judge_label_verdicts)."""

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


def labels_by_document(db: DbLike, run) -> dict[str, dict[str, str | None]]:
    """item_id -> {doc_id: the label the run's prompt showed after that document}: what a judge
    is shown as "the label in cf" beside a base run's sentence, whose numbering may differ."""
    rows = fetch(db, "SELECT item_id, shown_doc_ids FROM generations WHERE run_id = $run", {"run": run.run_id})
    labels = labels_as_shown(db, run)
    return {item_id: dict(zip(shown or (), labels.get(item_id, ()), strict=False)) for item_id, shown in rows}


def label_verdicts_done(db: DbLike, base_run: str, judge: str) -> frozenset[tuple[str, int, int, str, bool]]:
    """(item_id, sentence_index, position, label_from, label_shown) of every verdict `judge` has
    stored on the base run's pairs in judge_label_verdicts."""
    return frozenset(fetch(
        db,
        "SELECT item_id, sentence_index, position, label_from, label_shown FROM judge_label_verdicts "
        "WHERE run_id = $run AND judge_model = $judge",
        {"run": base_run, "judge": judge},
    ))


def paired_verdicts(db: DbLike, base_run: str, judge: str, shown: bool = True) -> tuple[tuple, ...]:
    """(item_id, sentence_index, position, doc_id, class with the base label, class with the cf
    label) of every pair of the base run `judge` judged both ways, ordered; `shown` False: the
    control, the same pairs judged with no label in each pass."""
    return tuple(fetch(
        db,
        "SELECT b.item_id, b.sentence_index, b.position, b.doc_id, b.class, c.class "
        "FROM judge_label_verdicts b JOIN judge_label_verdicts c "
        "USING (run_id, item_id, sentence_index, position, judge_model, label_shown) "
        "WHERE b.run_id = $base AND b.judge_model = $judge AND b.label_shown = $shown "
        "AND b.label_from = 'base' AND c.label_from = 'cf' "
        "ORDER BY b.item_id, b.sentence_index, b.position",
        {"base": base_run, "judge": judge, "shown": shown},
    ))
