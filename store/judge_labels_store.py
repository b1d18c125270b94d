"""The writer of imported human labels (`python -m engine import-labels`, migration 019).

All of a file's labels and its judge's row go in ONE transaction: a file is imported whole or
not at all. Rows already stored (same run, item, position and judge) are kept, never
overwritten, so importing the same file again adds nothing.

A caller may bound what the import adds to the store (`room`): it is asked before the first row
goes in, with the writer's lock held (no other writer can grow the store meanwhile), and again
between chunks of rows, since DuckDB writes a large insert into the file before it commits.
A refusal rolls the whole transaction back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import UserError
from store.db import DEFAULT_TIMEOUT_S, Database, utc_now

CHUNK_ROWS = 50_000  # rows per insert: the store's size is looked at between them
_ROW = "STRUCT(run_id VARCHAR, item_id VARCHAR, position INTEGER, doc_id VARCHAR, label VARCHAR, source VARCHAR)[]"


@dataclass(frozen=True)
class LabelRow:
    """One checked label: the cited document `position` (1-based, as shown) of an answer."""

    run_id: str
    item_id: str
    position: int
    doc_id: str  # generations.shown_doc_ids[position]
    label: str  # attributable | not_attributable
    source: str  # FILE:line N


def write_labels(path: str | os.PathLike[str], judge: str, provenance: dict[str, Any], rows: Sequence[LabelRow],
                 *, timeout_s: float = DEFAULT_TIMEOUT_S, room: Callable[[int], str | None] | None = None) -> int:
    """Store `judge` (kind 'human', unless the store has it already) and its labels in one
    transaction; returns the labels added. `room(rows still to write)` returns why they may not
    be written (one line: raised as UserError, nothing written) or None."""

    database = Database(Path(path), timeout_s)
    with database.connect() as conn:
        now = utc_now()
        before = None
        for start in range(0, max(len(rows), 1), CHUNK_ROWS):
            problem = room(len(rows) - start) if room is not None else None
            if problem:
                raise UserError(problem)
            if before is None:
                conn.execute(
                    "INSERT INTO judges (judge, kind, model_id, mapping, provenance, created_utc) "
                    "VALUES (?, 'human', NULL, NULL, ?, ?) ON CONFLICT DO NOTHING",
                    [judge, json.dumps(provenance, sort_keys=True), now],
                )
                before = _count(conn, judge)
            chunk = rows[start:start + CHUNK_ROWS]
            if chunk:
                conn.execute(
                    "INSERT INTO judge_labels (run_id, item_id, position, judge, doc_id, label, source, created_utc) "
                    f"SELECT r.run_id, r.item_id, r.position, ?, r.doc_id, r.label, r.source, ? "
                    f"FROM (SELECT unnest(?::{_ROW}) AS r) ON CONFLICT DO NOTHING",
                    [judge, now, [_row(r) for r in chunk]],
                )
        return _count(conn, judge) - (before or 0)


def _count(conn, judge: str) -> int:
    return conn.execute("SELECT count(*) FROM judge_labels WHERE judge = ?", [judge]).fetchone()[0]


def _row(r: LabelRow) -> dict[str, Any]:
    return {"run_id": r.run_id, "item_id": r.item_id, "position": r.position, "doc_id": r.doc_id,
            "label": r.label, "source": r.source}
