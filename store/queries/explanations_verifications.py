"""Explanations (Prompt 5) and verifications (migration 010): the answers still to explain or
judge, the per-run shares of their views, and the stored explanations the Explain tab shows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.types import Document, ExplainRun, ExplainSource, Item, StoredAnswer
from store.db import DbLike
from store.queries._read import DONE, MODE_ORDER, Readable, fetch, marks, reading, rows_of_runs, run_or_experiment
from store.queries.drilldown import metadata_labels, shown_labels


def explain_runs(db: DbLike, *, experiment: str | None = None, run: str | None = None):
    """The runs `explain` works on: one run by id, or every run of an experiment (id or name),
    in mode order, as engine.judges.explain.ExplainRun; None when the run or experiment is unknown."""
    where, params = run_or_experiment(experiment, run)

    def explain_run(run_id, experiment_id, model, mode, metadata_type, config_json, n_done) -> ExplainRun:
        label_a, label_b = metadata_labels(config_json)
        return ExplainRun(run_id, experiment_id, model, mode, metadata_type, label_a, label_b, int(n_done))

    runs = fetch(
        db,
        "SELECT r.run_id, r.experiment_id, r.model, r.rag_mode, r.metadata_type, r.config_json, "
        f"coalesce(d.n_done, 0) FROM runs r LEFT JOIN {DONE} d USING (run_id) WHERE {where} "
        f"ORDER BY {MODE_ORDER}, r.created_utc, r.run_id",
        params,
        into=explain_run,
    )
    return runs or None


def explain_sources(db: DbLike, run, explainer_model: str, limit: int | None = None):
    """The answers of `run` (an ExplainRun) still to explain by `explainer_model`, as
    engine.judges.explain.ExplainSource, in the order the run stored them.

    `limit` covers the run's first N answers, explained or not, so a larger limit later extends
    the same explanations. Labels are those the answering model saw (see shown_labels).
    """
    rows = fetch(
        db,
        "WITH g AS (SELECT item_id, answer, shown_doc_ids, shown_labels, created_utc FROM generations "
        "           WHERE run_id = $run ORDER BY created_utc, item_id LIMIT $limit) "
        "SELECT g.item_id, g.answer, g.shown_doc_ids, i.question, i.answers, i.documents, g.shown_labels "
        "FROM g JOIN runs r ON r.run_id = $run "
        "JOIN items i ON i.dataset_sha = r.dataset_sha AND i.item_id = g.item_id "
        "WHERE NOT EXISTS (SELECT 1 FROM explanations e WHERE e.run_id = $run "
        "                  AND e.item_id = g.item_id AND e.explainer_model = $model) "
        "ORDER BY g.created_utc, g.item_id",
        {"run": run.run_id, "model": explainer_model, "limit": limit if limit is not None else 2**62},
    )
    sources = []
    for item_id, answer, shown, question, answers, documents, stored_labels in rows:
        item = _item(item_id, question, answers, documents)
        shown_ids = list(shown or [])
        if stored_labels is not None:
            # As the prompt showed them (since migration 014): one-sided and many-valued labels too.
            labels = tuple(stored_labels)
        else:
            relevant: dict[str, bool] = {}
            for d in item.documents:  # a repeated id is relevant if any copy is, as in query_metrics
                relevant[d.id] = relevant.get(d.id, False) or d.relevant
            derived = shown_labels(run.rag_mode, run.label_a, run.label_b, shown_ids, relevant)
            labels = tuple(derived.get(d) for d in shown_ids)
        sources.append(ExplainSource(
            run_id=run.run_id,
            item=item,
            answer=answer,
            shown_doc_ids=tuple(shown_ids),
            labels=labels,
        ))
    return tuple(sources)


def _item(item_id: str, question: str, answers, documents) -> Item:
    """A dataset item as its `items` row holds it."""
    docs = tuple(Document(d["id"], d["text"], bool(d["relevant"]), d["title"] or "") for d in documents)
    return Item(item_id, question, tuple(answers or ()), docs)


def explanation_rates(db: DbLike, run_ids: list[str]) -> tuple[tuple, ...]:
    """Per run and explainer model, from the explanation_rates view: (run_id, explainer_model,
    rag_mode, n_explanations, n_mention_label, label_share), in the order of `run_ids`; empty
    when none of the runs has explanations."""
    return rows_of_runs(db, "explanation_rates", "run_id, explainer_model, rag_mode, n_explanations, "
                         "n_mention_label, label_share", "explainer_model", run_ids, source="explanations")


def answers_to_verify(db: DbLike, run: ExplainRun, judge_model: str,
                      limit: int | None = None) -> tuple[StoredAnswer, ...]:
    """The answers of `run` (from explain_runs) in the order the run stored them, each with the
    (sentence index, position) pairs `judge_model` has judged already. engine.judges.verify.sources_to_verify
    turns them into the claims still to judge (the store does not parse answers).

    `limit` covers the run's first N answers, as in explain_sources.
    """
    params = {"run": run.run_id, "limit": limit if limit is not None else 2**62}
    with reading(db) as conn:
        rows = conn.execute(
            "WITH g AS (SELECT item_id, answer, shown_doc_ids, created_utc FROM generations "
            "           WHERE run_id = $run ORDER BY created_utc, item_id LIMIT $limit) "
            "SELECT g.item_id, g.answer, g.shown_doc_ids, i.question, i.answers, i.documents "
            "FROM g JOIN runs r ON r.run_id = $run "
            "JOIN items i ON i.dataset_sha = r.dataset_sha AND i.item_id = g.item_id "
            "ORDER BY g.created_utc, g.item_id",
            params,
        ).fetchall()
        done = conn.execute(
            "SELECT item_id, sentence_index, position FROM verifications WHERE run_id = $run AND judge_model = $model",
            {"run": run.run_id, "model": judge_model},
        ).fetchall()
    judged: dict[str, set[tuple[int, int]]] = {}
    for item_id, sentence_index, position in done:
        judged.setdefault(item_id, set()).add((sentence_index, position))
    return tuple(
        StoredAnswer(run.run_id, _item(item_id, question, answers, documents), answer, tuple(shown or ()),
                     frozenset(judged.get(item_id, ())))
        for item_id, answer, shown, question, answers, documents in rows
    )


def verification_shares(db: DbLike, run_ids: list[str]) -> tuple[tuple, ...]:
    """Per run and judge model, from the verification_shares view: (run_id, judge_model, rag_mode,
    n_citations, attributable_share, extrapolatory_share, contradictory_share, unparsed_share), in
    the order of `run_ids`; empty when none of the runs has verifications."""
    return rows_of_runs(db, "verification_shares", "run_id, judge_model, rag_mode, n_citations, attributable_share, "
                         "extrapolatory_share, contradictory_share, unparsed_share", "judge_model", run_ids,
                         source="verifications")


@dataclass(frozen=True)
class StoredExplanation:
    """One stored Prompt 5 explanation of one answer, with what it mentions."""

    run_id: str
    rag_mode: str
    item_id: str
    explainer_model: str
    text: str
    finish_reason: str | None
    mentioned_docs: tuple[int, ...]  # document numbers as shown to the answering model
    mentioned_labels: tuple[str, ...]  # label texts as configured, then categories
    created_utc: Any

    @property
    def mentions_label(self) -> bool:
        return bool(self.mentioned_labels)


def item_explanations(db: Readable, run_ids: list[str] | tuple[str, ...], item_id: str) -> tuple[StoredExplanation, ...]:
    """The stored explanations of one item's answers in the given runs, in the order of
    `run_ids`, then by explainer model; empty when there are none."""
    if not run_ids:
        return ()
    rows = fetch(
        db,
        f"SELECT {_EXPLANATION_COLUMNS} FROM explanations e JOIN runs r USING (run_id) "
        f"WHERE e.item_id = ? AND e.run_id IN ({marks(list(run_ids))}) ORDER BY e.explainer_model",
        [item_id, *run_ids],
        into=_stored_explanation,
    )
    order = {run_id: i for i, run_id in enumerate(run_ids)}
    return tuple(sorted(rows, key=lambda e: order[e.run_id]))


def run_explanations(db: DbLike, run_id: str) -> tuple[StoredExplanation, ...]:
    """Every stored explanation of one run's answers, in the order the run stored its answers,
    then by explainer model; empty when there are none (or no such run)."""
    return fetch(
        db,
        f"SELECT {_EXPLANATION_COLUMNS} FROM explanations e JOIN runs r USING (run_id) "
        "LEFT JOIN generations g ON g.run_id = e.run_id AND g.item_id = e.item_id "
        "WHERE e.run_id = $run ORDER BY g.created_utc, e.item_id, e.explainer_model",
        {"run": run_id},
        into=_stored_explanation,
    )


_EXPLANATION_COLUMNS = ("e.run_id, r.rag_mode, e.item_id, e.explainer_model, e.text, e.finish_reason, "
                        "e.mentioned_docs, e.mentioned_labels, e.created_utc")


def _stored_explanation(run_id, mode, item, model, text, finish, docs, labels, created) -> StoredExplanation:
    """A row of _EXPLANATION_COLUMNS as a StoredExplanation."""
    return StoredExplanation(run_id, mode, item, model, text, finish, tuple(docs or ()), tuple(labels or ()), created)
