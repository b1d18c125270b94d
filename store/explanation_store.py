"""The writer of Prompt 5 explanations (`python -m engine explain`): one transaction per batch.

Like store.run_store, every call opens the database, runs one short transaction and closes it,
so a kill -9 loses at most the batch in flight and the app can read in between. Rows already
stored (same run, item and explainer model) are kept, never overwritten: a resume that races
another explain command of the same run and model adds nothing twice.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.types import Explanation
from store.db import DEFAULT_TIMEOUT_S, Database, utc_now

_ROW = (
    "STRUCT(item_id VARCHAR, prompt VARCHAR, text VARCHAR, n_prompt_tokens INTEGER, n_tokens INTEGER, "
    "finish_reason VARCHAR, token_ids INTEGER[], tokens VARCHAR[], logprobs DOUBLE[], "
    "mentioned_docs INTEGER[], mentions_label BOOLEAN, mentioned_labels VARCHAR[])[]"
)


class ExplanationStore:
    """Writes explanations to a DuckDB store that already holds the runs they explain."""

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.database = Database(Path(path), timeout_s)

    def write_batch(self, explanations: Sequence[Explanation]) -> int:
        """Store one finished batch in a single transaction; returns the rows added."""
        if not explanations:
            return 0
        added = 0
        with self.database.connect() as conn:
            now = utc_now()
            by_key: dict[tuple[str, str], list[Explanation]] = {}
            for e in explanations:
                by_key.setdefault((e.run_id, e.explainer_model), []).append(e)
            for (run_id, model), rows in by_key.items():
                before = _count(conn, run_id, model)
                conn.execute(
                    "INSERT INTO explanations SELECT ?, r.item_id, ?, r.prompt, r.text, r.n_prompt_tokens, "
                    "r.n_tokens, r.finish_reason, r.token_ids, r.tokens, r.logprobs, r.mentioned_docs, "
                    f"r.mentions_label, r.mentioned_labels, ? FROM (SELECT unnest(?::{_ROW}) AS r) "
                    "ON CONFLICT DO NOTHING",
                    [run_id, model, now, [_row(e) for e in rows]],
                )
                added += _count(conn, run_id, model) - before
        return added


def _count(conn, run_id: str, model: str) -> int:
    return conn.execute(
        "SELECT count(*) FROM explanations WHERE run_id = ? AND explainer_model = ?", [run_id, model]
    ).fetchone()[0]


def _row(e: Explanation) -> dict[str, Any]:
    return {
        "item_id": e.item_id,
        "prompt": e.prompt,
        "text": e.text,
        "n_prompt_tokens": e.n_prompt_tokens,
        "n_tokens": len(e.tokens),
        "finish_reason": e.finish_reason,
        "token_ids": [t.token_id for t in e.tokens],
        "tokens": [t.token for t in e.tokens],
        "logprobs": [t.logprob for t in e.tokens],
        "mentioned_docs": list(e.mentioned_docs),
        "mentions_label": e.mentions_label,
        "mentioned_labels": list(e.mentioned_labels),
    }
