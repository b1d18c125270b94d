"""The writer of document use (`python -m engine used`, migration 020).

Like store.propensity_store, every call opens the database, runs one short transaction and
closes it: an item's rows go in together, so a kill -9 loses at most the item in flight and the
app can read in between. Rows already stored are kept, never overwritten.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from store.db import DEFAULT_TIMEOUT_S, Database, utc_now

# One row: (position, logp_full, logp_without, logp_cited_only, cited).
UseRow = tuple[int, float, float, float, bool]

_ROWS = ("STRUCT(position INTEGER, logp_full DOUBLE, logp_without DOUBLE, logp_cited_only DOUBLE, "
         "cited BOOLEAN)[]")


class DocumentUseStore:
    """Writes the rows of measured answers to a store that holds their runs."""

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.database = Database(Path(path), timeout_s)

    def write_item(self, run_id: str, item_id: str, model: str, rows: Sequence[UseRow]) -> int:
        """Store one answer's rows (one per shown document) in one transaction; returns the rows added."""
        if not rows:
            return 0
        keys = ("position", "logp_full", "logp_without", "logp_cited_only", "cited")
        with self.database.connect() as conn:
            count = ("SELECT count(*) FROM document_use WHERE run_id = ? AND item_id = ? AND model = ?")
            before = conn.execute(count, [run_id, item_id, model]).fetchone()[0]
            conn.execute(
                "INSERT INTO document_use SELECT ?, ?, r.position, ?, r.logp_full, r.logp_without, r.logp_cited_only, "
                "r.logp_full - r.logp_without, r.logp_cited_only - r.logp_full, r.cited, ? "
                f"FROM (SELECT unnest(?::{_ROWS}) AS r) ON CONFLICT DO NOTHING",
                [run_id, item_id, model, utc_now(), [dict(zip(keys, row, strict=True)) for row in rows]],
            )
            return conn.execute(count, [run_id, item_id, model]).fetchone()[0] - before
