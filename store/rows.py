"""Engine values as the store's rows: items, generations and citations as list-of-structs
parameters (one statement per batch), and JSON columns (used by store.run_store)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from engine.types import Citation, Generation, Item, TokenLogprob

# Rows travel as one list-of-structs parameter and are unnested by DuckDB: one statement per
# batch instead of one per row, which is ~20x faster than executemany for list-heavy rows.
_ITEM_ROW = (
    "STRUCT(item_id VARCHAR, question VARCHAR, answers VARCHAR[], "
    "documents STRUCT(id VARCHAR, title VARCHAR, text VARCHAR, relevant BOOLEAN)[])[]"
)


GENERATION_ROW = (
    "STRUCT(item_id VARCHAR, prompt VARCHAR, answer VARCHAR, shown_doc_ids VARCHAR[], "
    "n_prompt_tokens INTEGER, n_tokens INTEGER, finish_reason VARCHAR, token_ids INTEGER[], "
    "tokens VARCHAR[], logprobs DOUBLE[], top_logprobs VARCHAR, shown_labels VARCHAR[])[]"
)


# At most this many rows go in one list parameter; more are split over several statements of the
# caller's transaction (still all or none). A list parameter is built as Python dicts and converted
# to DuckDB's values whole: 50,000 items of three documents in one statement took some 420 MB
# (8 kB an item) above the items themselves, the peak of a large import.
ROWS_PER_STATEMENT = 5_000


CITATION_ROW = (
    "STRUCT(item_id VARCHAR, citation_index INTEGER, position INTEGER, doc_id VARCHAR, "
    "relevant BOOLEAN, probability DOUBLE)[]"
)


def insert_items(conn, dataset_sha: str, items: Sequence[Item]) -> None:
    """Insert the items not stored yet under this dataset content."""
    if not items:
        return
    stored = {
        row[0]
        for row in conn.execute(
            "SELECT item_id FROM items WHERE dataset_sha = ?", [dataset_sha]
        ).fetchall()
    }
    fresh = []
    for item in items:
        if item.id in stored:
            continue
        stored.add(item.id)  # a repeated id within `items` keeps its first occurrence
        fresh.append(item)
    for start in range(0, len(fresh), ROWS_PER_STATEMENT):
        rows = [_item_row(item) for item in fresh[start:start + ROWS_PER_STATEMENT]]
        conn.execute(
            "INSERT INTO items SELECT ?, r.item_id, r.question, r.answers, r.documents "
            f"FROM (SELECT unnest(?::{_ITEM_ROW}) AS r)",
            [dataset_sha, rows],
        )


def _item_row(item: Item) -> dict[str, Any]:
    """One items row as a struct value."""
    return {
        "item_id": item.id,
        "question": item.question,
        "answers": list(item.answers),
        "documents": [
            {"id": d.id, "title": d.title, "text": d.text, "relevant": d.relevant}
            for d in item.documents
        ],
    }


def generation_row(g: Generation) -> dict[str, Any]:
    """One generations row as a struct value (run_id and timestamp are added in SQL)."""
    return {
        "item_id": g.item_id,
        "prompt": g.prompt,
        "answer": g.answer,
        "shown_doc_ids": list(g.shown_doc_ids),
        "n_prompt_tokens": g.n_prompt_tokens,
        "n_tokens": g.n_tokens,
        "finish_reason": g.finish_reason,
        "token_ids": [t.token_id for t in g.tokens],
        "tokens": [t.token for t in g.tokens],
        "logprobs": [t.logprob for t in g.tokens],
        "top_logprobs": _top_logprobs_json(g.tokens),
        # NULL, not [], when unknown: the citation_decisions view then derives the labels.
        "shown_labels": list(g.shown_labels) if g.shown_labels else None,
    }


def citation_row(item_id: str, c: Citation) -> dict[str, Any]:
    """One citations row as a struct value."""
    return {
        "item_id": item_id,
        "citation_index": c.index,
        "position": c.position,
        "doc_id": c.doc_id,
        "relevant": c.relevant,
        "probability": c.probability,
    }


def _top_logprobs_json(tokens: Sequence[TokenLogprob]) -> str | None:
    """Per-step alternatives as JSON text; None when no step recorded any."""
    if not any(t.top for t in tokens):
        return None
    return json.dumps(
        [
            [{"id": a.token_id, "token": a.token, "logprob": _finite(a.logprob)} for a in t.top]
            for t in tokens
        ],
        ensure_ascii=False,
        allow_nan=False,
    )


def _finite(value: float) -> float | None:
    """JSON has no -Infinity: a token with zero probability is stored as null."""
    return value if math.isfinite(value) else None


def json_text(value: Any) -> str:
    """JSON text for provenance columns; paths and other odd values become strings."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
