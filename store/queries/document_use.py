"""What `python -m engine used` reads: the runs, their answers with the stored prompt and the
shown documents' texts, and the document_use rows already stored (migration 020)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from store.db import DbLike
from store.queries._read import MODE_ORDER, Readable, fetch, marks, reading, run_or_experiment


@dataclass(frozen=True)
class UseRun:
    """One run: its mode, the model as stored, whether a server answered, and its labels' config."""

    run_id: str
    experiment_id: str
    rag_mode: str
    model: str
    served: bool
    metadata_type: str | None
    config: dict[str, Any]
    n_answers: int


@dataclass(frozen=True)
class UseAnswer:
    """One stored answer with what re-reading it needs."""

    item_id: str
    answer: str
    prompt: str | None  # None for imported answers
    texts: tuple[str, ...] | None  # per shown document, its text; None where a shown id is not in the dataset
    relevant: tuple[bool, ...]  # per shown document
    cited: frozenset[int]  # the shown positions the answer cites (citations in range)


_RUN_COLUMNS = (
    "SELECT r.run_id, r.experiment_id, r.rag_mode, r.model, "
    "json_extract(r.config_json, '$.served') IS NOT NULL AND json_type(r.config_json, '$.served') <> 'NULL', "
    "r.metadata_type, r.config_json, (SELECT count(*) FROM generations g WHERE g.run_id = r.run_id) FROM runs r ")


def _run(row: tuple) -> UseRun:
    run_id, experiment_id, mode, model, served, metadata_type, config, n = row
    return UseRun(run_id, experiment_id, mode, model, bool(served), metadata_type,
                  json.loads(config) if isinstance(config, str) else dict(config or {}), int(n))


def use_runs(db: DbLike, *, experiment: str | None = None, run: str | None = None) -> tuple[UseRun, ...] | None:
    """One run by id, or every run of an experiment (id or name) in mode order; None when unknown."""
    where, params = run_or_experiment(experiment, run)
    found = fetch(db, f"{_RUN_COLUMNS} WHERE {where} ORDER BY {MODE_ORDER}, r.created_utc, r.run_id", params,
                  into=lambda *r: _run(r))
    return tuple(found) or None


def use_answers(db: DbLike, run_id: str, limit: int | None = None) -> tuple[UseAnswer, ...]:
    """The run's first `limit` answers (all where None) in the order it stored them."""
    with reading(db) as conn:
        rows = conn.execute(
            "WITH g AS (SELECT item_id, answer, prompt, shown_doc_ids, created_utc FROM generations "
            "           WHERE run_id = $run ORDER BY created_utc, item_id LIMIT $limit) "
            "SELECT g.item_id, g.answer, g.prompt, g.shown_doc_ids, i.documents FROM g "
            "JOIN runs r ON r.run_id = $run "
            "LEFT JOIN items i ON i.dataset_sha = r.dataset_sha AND i.item_id = g.item_id "
            "ORDER BY g.created_utc, g.item_id",
            {"run": run_id, "limit": limit if limit is not None else 2**62}).fetchall()
        cited: dict[str, set[int]] = {}
        for item_id, position in conn.execute(
                "SELECT item_id, position FROM citations WHERE run_id = ? AND doc_id IS NOT NULL", [run_id]).fetchall():
            cited.setdefault(item_id, set()).add(int(position))
    answers = []
    for item_id, answer, prompt, shown, documents in rows:
        by_id: dict[str, Any] = {}
        relevant: dict[str, bool] = {}
        for d in documents or ():
            by_id.setdefault(d["id"], d)
            relevant[d["id"]] = relevant.get(d["id"], False) or bool(d["relevant"])
        shown_ids = tuple(shown or ())
        texts = tuple(by_id[d]["text"] for d in shown_ids) if all(d in by_id for d in shown_ids) else None
        answers.append(UseAnswer(item_id, answer, prompt, texts, tuple(relevant.get(d, False) for d in shown_ids),
                                 frozenset(cited.get(item_id, ()))))
    return tuple(answers)


def stored_document_use(db: DbLike, run_ids: list[str], model: str) -> tuple[tuple, ...]:
    """The stored rows of the runs and model: (run_id, item_id, position, logp_full, logp_without,
    logp_cited_only, necessity, sufficiency, cited), ordered."""
    if not run_ids:
        return ()
    return fetch(
        db,
        "SELECT run_id, item_id, position, logp_full, logp_without, logp_cited_only, necessity, sufficiency, cited "
        "FROM document_use WHERE run_id IN (SELECT unnest($runs)) AND model = $model "
        "ORDER BY run_id, item_id, position",
        {"runs": run_ids, "model": model},
    )


def item_document_use(db: Readable, run_ids: list[str], item_id: str) -> tuple[tuple, ...]:
    """One item's stored rows in the runs, every model that read them: (run_id, position, model,
    necessity, sufficiency, cited), ordered. Keyed by the table's primary key (run, item) first,
    so the Query tab's read does not grow with the store."""
    if not run_ids:
        return ()
    # Placeholders, not IN (SELECT unnest(...)): a constant list DuckDB pushes into the scan.
    return fetch(
        db,
        "SELECT run_id, position, model, necessity, sufficiency, cited FROM document_use "
        f"WHERE run_id IN ({marks(run_ids)}) AND item_id = ? ORDER BY run_id, model, position",
        [*run_ids, item_id],
    )
