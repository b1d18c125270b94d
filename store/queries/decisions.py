"""Citation decisions (the citation_decisions view, migration 014): one row per shown document
per answer of the chosen experiments, for the citation choice model (engine.usecases.why_cited)
and `export --rows decisions`."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import duckdb

from store.db import DbLike
from store.queries._read import execute_over_runs, fetch, frame, mode_order, reading

if TYPE_CHECKING:
    import pandas as pd


# The column order of the decision rows (and of `export --rows decisions`).
DECISION_COLUMNS = (
    "experiment_id", "experiment_name", "run_id", "model", "metadata_type", "mode", "item_id",
    "position", "n_shown", "position_group", "doc_id", "label", "relevant", "repeated", "cited",
    "n_cited", "citation_probability", "answer_cites_any", "relevant_at", "repetition", "label_scope",
)

_DECISIONS_SQL = f"""
SELECT d.experiment_id, e.name AS experiment_name, d.run_id, d.model, d.metadata_type,
       d.rag_mode AS mode, d.item_id, d.position, d.n_shown, d.position_group, d.doc_id, d.label,
       d.relevant, d.repeated, d.cited, d.n_cited, d.citation_probability, d.answer_cites_any,
       d.relevant_at, d.repetition, d.label_scope
FROM citation_decisions d
JOIN runs r USING (run_id)
LEFT JOIN experiments e ON e.experiment_id = d.experiment_id
-- The runs as constants (store.queries._read.execute_over_runs).
WHERE d.run_id IN ({{runs}})
ORDER BY list_position($ids, d.experiment_id), {mode_order("d.rag_mode")}, r.created_utc, d.run_id,
         d.item_id, d.position
"""


def decisions_cursor(conn: duckdb.DuckDBPyConnection, experiment_ids: tuple[str, ...] | list[str],
                     modes: tuple[str, ...] | None = None) -> duckdb.DuckDBPyConnection:
    """The decision rows of these experiments (ids, in this order), executed; `modes` keeps only
    those modes' runs (None: every mode). No runs: no rows."""
    return execute_over_runs(conn, _DECISIONS_SQL, experiment_ids, modes)


def decision_frame(db: DbLike, experiment_ids: tuple[str, ...] | list[str],
                   modes: tuple[str, ...] | None = None) -> pd.DataFrame:
    """The decision rows (DECISION_COLUMNS) of these experiment ids, in one read transaction."""
    with reading(db) as conn:
        rows = frame(decisions_cursor(conn, experiment_ids, modes))
    return rows[list(DECISION_COLUMNS)]


def label_pairs(db: DbLike, experiment_ids: tuple[str, ...] | list[str]) -> tuple[tuple[str, str], ...]:
    """(label A, label B) of each metadata type these experiments' labelled runs used, oldest run
    first, once each."""
    rows = fetch(
        db,
        "SELECT json_extract_string(config_json, '$.prompt.metadata.label_a'), "
        "       json_extract_string(config_json, '$.prompt.metadata.label_b') "
        "FROM runs WHERE list_contains($ids, experiment_id) AND rag_mode <> 'vanilla' "
        "ORDER BY list_position($ids, experiment_id), created_utc, run_id",
        {"ids": list(experiment_ids)},
    )
    return tuple(dict.fromkeys((a, b) for a, b in rows if a and b))


class AnswerCount(NamedTuple):
    """Stored answers, and their decision rows (shown documents, summed over the answers)."""

    answers: int
    decisions: int


def count_answers(db: DbLike, experiment_ids: tuple[str, ...] | list[str],
                  modes: tuple[str, ...] | None = None) -> AnswerCount:
    """How many stored answers these experiments hold (in `modes`; None: every mode), and how many
    decision rows they make: what a fit's work and memory grow with, counted without reading them."""
    sql = ("SELECT count(*), coalesce(sum(len(g.shown_doc_ids)), 0) FROM generations g JOIN runs r USING (run_id) "
           "WHERE list_contains($ids, r.experiment_id)")
    params: dict = {"ids": list(experiment_ids)}
    if modes is not None:
        sql += " AND list_contains($modes, r.rag_mode)"
        params["modes"] = list(modes)
    answers, decisions = fetch(db, sql, params)[0]
    return AnswerCount(int(answers), int(decisions))
