"""The rows of an export (`engine export`, the app's /export): one per stored answer of the
chosen experiments, query_metrics joined with its run, its experiment and its dataset item.
store/export.py writes them as CSV or Parquet."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import duckdb

from engine.errors import UserError
from engine.types import EXPORTED_METRICS
from store.db import DbLike
from store.queries._read import RESOLVE_EXPERIMENT, execute_over_runs, frame, mode_order, plain_columns, reading

if TYPE_CHECKING:
    import pandas as pd


class UnknownExperiment(UserError):
    """An experiment id or name that is not in the store (the message names no server path)."""

    def __init__(self, reference: str) -> None:
        super().__init__(f"no experiment '{reference}'")
        self.reference = reference


# The column order of an export; list cells (gold_answers, cited, gold) stay lists here. The
# metrics are query_metrics' columns: the exported ones of engine.types.ANSWER_METRICS, in their order.
EXPORT_COLUMNS = (
    "experiment_id", "experiment_name", "run_id", "status", "model", "quantization", "dataset",
    "dataset_sha", "metadata_type", "mode", "label_relevant", "label_nonrelevant", "item_id",
    "question", "gold_answers", "answer", "cited", "gold", *EXPORTED_METRICS,
)
_QUERY_METRICS = ", ".join(f"q.{name}" for name in EXPORTED_METRICS)


_EXPORT_SQL = f"""
SELECT r.experiment_id, e.name AS experiment_name, r.run_id, r.status, r.model, r.quantization,
       dataset_label(r.dataset, r.dataset_sha) AS dataset, r.dataset_sha, r.metadata_type,
       r.rag_mode AS mode,
       CASE r.rag_mode WHEN 'base' THEN label_short_a(r.config_json, r.metadata_type)
                       WHEN 'cf' THEN label_short_b(r.config_json, r.metadata_type) END AS label_relevant,
       CASE r.rag_mode WHEN 'base' THEN label_short_b(r.config_json, r.metadata_type)
                       WHEN 'cf' THEN label_short_a(r.config_json, r.metadata_type) END AS label_nonrelevant,
       q.item_id, i.question, i.answers AS gold_answers, g.answer, q.cited, q.gold,
       {_QUERY_METRICS}
FROM query_metrics q
JOIN runs r USING (run_id)
JOIN generations g USING (run_id, item_id)
LEFT JOIN experiments e USING (experiment_id)
LEFT JOIN items i ON i.dataset_sha = r.dataset_sha AND i.item_id = q.item_id
-- The runs as constants ($run0, $run1, ...), which DuckDB pushes into the view; a subquery here
-- made it compute query_metrics for the whole store (one experiment of a 1M store: 11-15 s).
WHERE q.run_id IN ({{runs}})
ORDER BY list_position($ids, r.experiment_id), {mode_order("r.rag_mode")}, r.created_utc, r.run_id, q.item_id
"""


def export_results_frame(db: DbLike, references: list[str] | tuple[str, ...]) -> pd.DataFrame:
    """Per-item results (EXPORT_COLUMNS) of the experiments named by id or name, in the order given,
    runs in mode order; UnknownExperiment (nothing read) if one is not in the store."""
    if not references:
        raise UserError("choose at least one experiment to export")
    with reading(db) as conn:
        ids = _resolve_all(conn, references)
        rows = frame(_export_cursor(conn, ids))
    return rows[list(EXPORT_COLUMNS)]


# Rows per chunk of a streamed export: a few MB of answers at a time, whatever the total.
EXPORT_CHUNK_ROWS = 2_000


@dataclass(frozen=True)
class ExportChunks:
    """The experiments an export covers and its rows, read chunk by chunk (a one-shot iterator)."""

    experiment_ids: tuple[str, ...]
    frames: Any  # Iterator[pd.DataFrame], each at most EXPORT_CHUNK_ROWS rows of EXPORT_COLUMNS


@contextmanager
def export_results_chunks(db: DbLike, references: list[str] | tuple[str, ...],
                          rows_per_chunk: int = EXPORT_CHUNK_ROWS, *, rows: str = "answers") -> Iterator[ExportChunks]:
    """export_results_frame's rows, fetched `rows_per_chunk` at a time inside one read
    transaction: the export's memory is one chunk's, not the whole result's (+741 MB for
    180,000 answers when built whole in the app). rows="decisions": the citation_decisions rows
    (store.queries.decisions.DECISION_COLUMNS), one per shown document per answer, instead."""
    from store.queries.decisions import DECISION_COLUMNS, decisions_cursor

    if not references:
        raise UserError("choose at least one experiment to export")
    columns = export_columns(rows)
    with reading(db) as conn:
        ids = _resolve_all(conn, references)
        cursor = decisions_cursor(conn, ids) if columns == DECISION_COLUMNS else _export_cursor(conn, ids)

        def frames() -> Iterator[pd.DataFrame]:
            while True:
                chunk = cursor.fetch_df_chunk(max(1, rows_per_chunk // 2048))
                if chunk.empty:
                    return
                plain_columns(chunk)
                yield chunk[list(columns)]

        yield ExportChunks(ids, frames())


def export_columns(rows: str) -> tuple[str, ...]:
    """The columns of an export of `rows` ("answers" or "decisions"); a one-line error otherwise."""
    from store.queries.decisions import DECISION_COLUMNS

    if rows == "answers":
        return EXPORT_COLUMNS
    if rows == "decisions":
        return DECISION_COLUMNS
    raise UserError(f"unknown rows '{rows}' to export: choose answers or decisions")


def _export_cursor(conn: duckdb.DuckDBPyConnection, ids: tuple[str, ...]) -> duckdb.DuckDBPyConnection:
    """The export query over the experiments `ids`, executed, with their runs as constants (see
    _EXPORT_SQL; no runs: no rows)."""
    return execute_over_runs(conn, _EXPORT_SQL, ids)


def _resolve_all(conn: duckdb.DuckDBPyConnection, references) -> tuple[str, ...]:
    """Experiment ids for ids or names, in order without repeats; UnknownExperiment for a miss."""
    ids: list[str] = []
    for reference in references:
        found = conn.execute(RESOLVE_EXPERIMENT, {"ref": reference}).fetchone()
        if not found:
            raise UnknownExperiment(reference)
        if found[0] not in ids:
            ids.append(found[0])
    return tuple(ids)
