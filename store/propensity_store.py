"""The writer of citation propensities (`python -m engine propensity`, migration 015).

Like store.explanation_store, every call opens the database, runs one short transaction and
closes it, so a kill -9 loses at most the items in flight and the app can read in between.
Rows already stored are kept, never overwritten: a re-run adds nothing twice.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from store.db import DEFAULT_TIMEOUT_S, Database, utc_now

# One row: (rag_mode, item_id, site_index, position, logprob, probability).
PropensityRow = tuple[str, str, int, int, float, float]

_ROWS = ("STRUCT(rag_mode VARCHAR, item_id VARCHAR, site_index INTEGER, position INTEGER, "
         "logprob DOUBLE, probability DOUBLE)[]")


class PropensityStore:
    """Writes the probe's rows to a store that already holds the experiment they read."""

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.database = Database(Path(path), timeout_s)

    def write_items(self, experiment_id: str, probe_model: str, rows: Sequence[PropensityRow]) -> int:
        """Store the rows of a batch of items in one transaction; returns the rows added."""
        if not rows:
            return 0
        keys = ("rag_mode", "item_id", "site_index", "position", "logprob", "probability")
        with self.database.connect() as conn:
            before = _count(conn, experiment_id, probe_model)
            conn.execute(
                "INSERT INTO citation_propensities SELECT ?, r.rag_mode, r.item_id, r.site_index, r.position, "
                f"r.logprob, r.probability, ?, ? FROM (SELECT unnest(?::{_ROWS}) AS r) ON CONFLICT DO NOTHING",
                [experiment_id, probe_model, utc_now(), [dict(zip(keys, row, strict=True)) for row in rows]],
            )
            return _count(conn, experiment_id, probe_model) - before


def _count(conn, experiment_id: str, probe_model: str) -> int:
    return conn.execute("SELECT count(*) FROM citation_propensities WHERE experiment_id = ? AND probe_model = ?",
                        [experiment_id, probe_model]).fetchone()[0]
