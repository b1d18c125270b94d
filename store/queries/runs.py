"""Runs and their stored answers as DataFrames: the full record of a run, its answers, citations
and one answer's detail (the tests and scripts read the store through these)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from store.db import DbLike
from store.queries._read import DONE, MODE_ORDER, RUN_COLUMNS, fetch_frame, frame, plain, reading

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class RunInfo:
    """One run's full record, with its JSON columns parsed and its count of stored items."""

    run_id: str
    experiment_id: str
    config_hash: str
    created_utc: Any
    finished_utc: Any
    status: str
    model: str
    model_revision: str | None
    quantization: str | None
    dtype: str | None
    device: str | None
    dataset: str | None
    dataset_sha: str
    metadata_type: str | None
    rag_mode: str
    seed: int | None
    prompt_version: str | None
    git_sha: str | None
    library_versions: dict[str, Any]
    config: dict[str, Any]
    n_items: int | None
    n_done: int


@dataclass(frozen=True)
class GenerationDetail:
    """Everything about one answer: prompt, shown documents, tokens and citations."""

    run_id: str
    item_id: str
    question: str | None
    gold_answers: tuple[str, ...]
    prompt: str | None
    answer: str
    finish_reason: str | None
    n_prompt_tokens: int | None
    n_tokens: int | None
    documents: pd.DataFrame  # position (1-based, as shown), doc_id, title, text, relevant, cited
    tokens: pd.DataFrame  # step (from 0), token_id, token, logprob, probability, top
    citations: pd.DataFrame  # citation_index, position, doc_id, relevant, probability


def list_runs(db: DbLike) -> pd.DataFrame:
    """All runs, newest first, with how many items each has stored (n_done)."""
    return fetch_frame(
        db,
        f"SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN {DONE} d USING (run_id) "
        "ORDER BY r.created_utc DESC, r.run_id DESC",
    )


def get_run(db: DbLike, run_id: str) -> RunInfo | None:
    """One run's full record, or None if there is no such run."""
    found = fetch_frame(
        db,
        f"SELECT r.*, coalesce(d.n_done, 0) AS n_done FROM runs r LEFT JOIN {DONE} d "
        "USING (run_id) WHERE r.run_id = ?",
        [run_id],
    )
    if found.empty:
        return None
    row = {k: plain(v) for k, v in found.iloc[0].items()}
    row["library_versions"] = json.loads(row["library_versions"] or "{}")
    row["config"] = json.loads(row.pop("config_json") or "{}")
    return RunInfo(**row)


def list_experiments(db: DbLike) -> pd.DataFrame:
    """One row per experiment, newest first: its modes, runs, progress and overall status."""
    return fetch_frame(
        db,
        f"""
        SELECT r.experiment_id,
               min(r.created_utc) AS created_utc,
               max(r.finished_utc) AS finished_utc,
               CASE WHEN bool_or(r.status = 'running') THEN 'running'
                    WHEN bool_or(r.status = 'failed') THEN 'failed'
                    ELSE 'complete' END AS status,
               any_value(r.model) AS model,
               any_value(r.dataset) AS dataset,
               any_value(r.metadata_type) AS metadata_type,
               list(r.rag_mode ORDER BY {MODE_ORDER}) AS modes,
               list(r.run_id ORDER BY {MODE_ORDER}) AS run_ids,
               count(*) AS n_runs,
               max(r.n_items) AS n_items,
               CAST(sum(coalesce(d.n_done, 0)) AS BIGINT) AS n_done
        FROM runs r LEFT JOIN {DONE} d USING (run_id)
        GROUP BY r.experiment_id
        ORDER BY min(r.created_utc) DESC, r.experiment_id DESC
        """,
    )


def runs_for_experiment(db: DbLike, experiment_id: str) -> pd.DataFrame:
    """The runs of one experiment in mode order (vanilla, base, cf)."""
    return fetch_frame(
        db,
        f"SELECT {RUN_COLUMNS} FROM runs r LEFT JOIN {DONE} d USING (run_id) "
        f"WHERE r.experiment_id = ? ORDER BY {MODE_ORDER}, r.created_utc, r.run_id",
        [experiment_id],
    )


def done_counts(db: DbLike) -> pd.DataFrame:
    """Progress per run: run_id, status, n_items and n_done (items stored so far)."""
    return fetch_frame(
        db,
        f"SELECT r.run_id, r.status, r.n_items, coalesce(d.n_done, 0) AS n_done "
        f"FROM runs r LEFT JOIN {DONE} d USING (run_id) ORDER BY r.created_utc DESC, r.run_id",
    )


def generations_for_run(db: DbLike, run_id: str) -> pd.DataFrame:
    """One row per stored answer of a run, in the order written, with its item and citations.

    shown_relevant is aligned with shown_doc_ids; cited_positions are the numbers n as
    written in the answer (1-based as shown) and cited_doc_ids the documents they name
    (None where n was out of range); relevant_doc_ids come from the dataset item.
    """
    return fetch_frame(
        db,
        """
        WITH cites AS (
          SELECT item_id,
                 list(position ORDER BY citation_index) AS cited_positions,
                 list(doc_id ORDER BY citation_index) AS cited_doc_ids,
                 list(probability ORDER BY citation_index) AS citation_probabilities
          FROM citations WHERE run_id = $run GROUP BY item_id)
        SELECT g.item_id,
               i.question,
               i.answers AS gold_answers,
               g.answer,
               g.shown_doc_ids,
               list_transform(g.shown_doc_ids,
                 lambda s: list_filter(i.documents, lambda d: d.id = s)[1].relevant
               ) AS shown_relevant,
               list_transform(list_filter(i.documents, lambda d: d.relevant), lambda d: d.id)
                 AS relevant_doc_ids,
               coalesce(c.cited_positions, []) AS cited_positions,
               coalesce(c.cited_doc_ids, []) AS cited_doc_ids,
               coalesce(c.citation_probabilities, []) AS citation_probabilities,
               g.n_prompt_tokens, g.n_tokens, g.finish_reason, g.created_utc
        FROM generations g
        JOIN runs r ON r.run_id = g.run_id
        LEFT JOIN items i ON i.dataset_sha = r.dataset_sha AND i.item_id = g.item_id
        LEFT JOIN cites c ON c.item_id = g.item_id
        WHERE g.run_id = $run
        ORDER BY g.created_utc, g.rowid
        """,
        {"run": run_id},
    )


def citations_for_run(db: DbLike, run_id: str) -> pd.DataFrame:
    """Every citation of a run: item_id, citation_index, position, doc_id, relevant, probability."""
    return fetch_frame(
        db,
        "SELECT item_id, citation_index, position, doc_id, relevant, probability "
        "FROM citations WHERE run_id = ? ORDER BY item_id, citation_index",
        [run_id],
    )


def generation_detail(db: DbLike, run_id: str, item_id: str) -> GenerationDetail | None:
    """Prompt, answer, shown documents, tokens and citations of one answer; None if absent."""
    with reading(db) as conn:
        head = conn.execute(
            """
            SELECT g.prompt, g.answer, g.finish_reason, g.n_prompt_tokens, g.n_tokens,
                   i.question, i.answers, g.top_logprobs
            FROM generations g
            JOIN runs r ON r.run_id = g.run_id
            LEFT JOIN items i ON i.dataset_sha = r.dataset_sha AND i.item_id = g.item_id
            WHERE g.run_id = ? AND g.item_id = ?
            """,
            [run_id, item_id],
        ).fetchone()
        if head is None:
            return None
        documents = frame(
            conn.execute(
                """
                WITH shown AS (
                  SELECT unnest(g.shown_doc_ids) AS doc_id,
                         unnest(range(1, len(g.shown_doc_ids) + 1)) AS position,
                         r.dataset_sha
                  FROM generations g JOIN runs r USING (run_id)
                  WHERE g.run_id = $run AND g.item_id = $item),
                docs AS (
                  SELECT unnest(documents) AS d FROM items i, (SELECT DISTINCT dataset_sha FROM shown) s
                  WHERE i.dataset_sha = s.dataset_sha AND i.item_id = $item)
                SELECT s.position, s.doc_id, docs.d.title AS title, docs.d.text AS text,
                       docs.d.relevant AS relevant,
                       s.position IN (SELECT position FROM citations
                                      WHERE run_id = $run AND item_id = $item) AS cited
                FROM shown s LEFT JOIN docs ON docs.d.id = s.doc_id
                ORDER BY s.position
                """,
                {"run": run_id, "item": item_id},
            )
        )
        tokens = frame(
            conn.execute(
                "SELECT step, token_id, token, logprob, exp(logprob) AS probability "
                "FROM tokens WHERE run_id = ? AND item_id = ? ORDER BY step",
                [run_id, item_id],
            )
        )
        citations = frame(
            conn.execute(
                "SELECT citation_index, position, doc_id, relevant, probability FROM citations "
                "WHERE run_id = ? AND item_id = ? ORDER BY citation_index",
                [run_id, item_id],
            )
        )
    prompt, answer, finish_reason, n_prompt, n_tokens, question, gold, top_json = head
    top = json.loads(top_json) if top_json else None
    tokens["top"] = [top[i] if top and i < len(top) else None for i in range(len(tokens))]
    return GenerationDetail(
        run_id=run_id,
        item_id=item_id,
        question=question,
        gold_answers=tuple(gold or ()),
        prompt=prompt,
        answer=answer,
        finish_reason=finish_reason,
        n_prompt_tokens=n_prompt,
        n_tokens=n_tokens,
        documents=documents,
        tokens=tokens,
        citations=citations,
    )
