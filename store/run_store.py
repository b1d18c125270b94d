"""The DuckDB sink: persists runs, dataset items and generations, one short transaction each.

Every method opens the database, runs one transaction and closes it again (see store.db for
why), so a CLI run never holds the file while the GPU works and the app can read in between.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from engine.sink import RunSpec
from engine.types import Citation, Generation, Item, TokenLogprob
from store.db import DEFAULT_TIMEOUT_S, Database, utc_now

FINAL_STATUSES = ("complete", "failed")

# Rows travel as one list-of-structs parameter and are unnested by DuckDB: one statement per
# batch instead of one per row, which is ~20x faster than executemany for list-heavy rows.
_ITEM_ROW = (
    "STRUCT(item_id VARCHAR, question VARCHAR, answers VARCHAR[], "
    "documents STRUCT(id VARCHAR, title VARCHAR, text VARCHAR, relevant BOOLEAN)[])[]"
)
_GENERATION_ROW = (
    "STRUCT(item_id VARCHAR, prompt VARCHAR, answer VARCHAR, shown_doc_ids VARCHAR[], "
    "n_prompt_tokens INTEGER, n_tokens INTEGER, finish_reason VARCHAR, token_ids INTEGER[], "
    "tokens VARCHAR[], logprobs DOUBLE[], top_logprobs VARCHAR)[]"
)
_CITATION_ROW = (
    "STRUCT(item_id VARCHAR, citation_index INTEGER, position INTEGER, doc_id VARCHAR, "
    "relevant BOOLEAN, probability DOUBLE)[]"
)


class ResumableRun(NamedTuple):
    """The newest run with a given configuration hash."""

    run_id: str
    experiment_id: str
    status: str


class RunStore:
    """Implements engine.sink.Sink over a DuckDB file; safe to use from several processes."""

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.database = Database(Path(path), timeout_s)

    @property
    def path(self) -> Path:
        """The database file."""
        return self.database.path

    def __repr__(self) -> str:
        return f"RunStore({str(self.path)!r})"

    def put_items(self, dataset_sha: str, items: Sequence[Item]) -> None:
        """Store dataset items once per (dataset_sha, item_id); items already stored are kept."""
        with self.database.connect() as conn:
            stored = {
                row[0]
                for row in conn.execute(
                    "SELECT item_id FROM items WHERE dataset_sha = ?", [dataset_sha]
                ).fetchall()
            }
            rows = []
            for item in items:
                if item.id in stored:
                    continue
                stored.add(item.id)  # a repeated id within `items` keeps its first occurrence
                rows.append(_item_row(item))
            if rows:
                conn.execute(
                    "INSERT INTO items SELECT ?, r.item_id, r.question, r.answers, r.documents "
                    f"FROM (SELECT unnest(?::{_ITEM_ROW}) AS r)",
                    [dataset_sha, rows],
                )

    def find_resumable(self, config_hash: str) -> ResumableRun | None:
        """(run_id, experiment_id, status) of the newest run with this config hash, if any."""
        with self.database.connect(read_only=True) as conn:
            row = conn.execute(
                "SELECT run_id, experiment_id, status FROM runs WHERE config_hash = ? "
                "ORDER BY created_utc DESC, run_id DESC LIMIT 1",
                [config_hash],
            ).fetchone()
        return ResumableRun(*row) if row else None

    def start_run(self, spec: RunSpec) -> None:
        """Create the run with status 'running', or mark an existing one 'running' again."""
        with self.database.connect() as conn:
            existing = conn.execute(
                "SELECT config_hash FROM runs WHERE run_id = ?", [spec.run_id]
            ).fetchone()
            if existing is not None:
                if existing[0] != spec.config_hash:
                    raise ValueError(
                        f"run {spec.run_id} exists with another configuration hash; "
                        "resuming it would mix two configurations"
                    )
                # Provenance stays that of the first start: the items already stored came from it.
                conn.execute(
                    "UPDATE runs SET status = 'running', finished_utc = NULL WHERE run_id = ?",
                    [spec.run_id],
                )
                return
            conn.execute(
                "INSERT INTO runs (run_id, experiment_id, config_hash, created_utc, finished_utc, "
                "status, model, model_revision, quantization, dtype, device, dataset, dataset_sha, "
                "metadata_type, rag_mode, seed, prompt_version, git_sha, library_versions, "
                "config_json, n_items) "
                "VALUES (?, ?, ?, ?, NULL, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    spec.run_id,
                    spec.experiment_id,
                    spec.config_hash,
                    utc_now(),
                    spec.model,
                    spec.model_revision,
                    spec.quantization,
                    spec.dtype,
                    spec.device,
                    spec.dataset,
                    spec.dataset_sha,
                    spec.metadata_type,
                    spec.rag_mode,
                    spec.seed,
                    spec.prompt_version,
                    spec.git_sha,
                    _to_json(spec.library_versions),
                    _to_json(spec.config),
                    spec.n_items,
                ],
            )

    def done_item_ids(self, run_id: str) -> set[str]:
        """Items of this run already stored; the runner skips them on resume."""
        with self.database.connect(read_only=True) as conn:
            rows = conn.execute(
                "SELECT item_id FROM generations WHERE run_id = ?", [run_id]
            ).fetchall()
        return {row[0] for row in rows}

    def write_batch(self, run_id: str, generations: Sequence[Generation]) -> None:
        """Store one finished batch in a single transaction (all or nothing).

        Items this run already holds are skipped whole (generation and citations), so a
        resume after a crash between this commit and the runner's bookkeeping is harmless.
        """
        if not generations:
            return
        with self.database.connect() as conn:
            if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone() is None:
                raise ValueError(f"unknown run {run_id}: call start_run first")
            batch_ids = sorted({g.item_id for g in generations})
            stored = {
                row[0]
                for row in conn.execute(
                    "SELECT item_id FROM generations WHERE run_id = ? AND list_contains(?, item_id)",
                    [run_id, batch_ids],
                ).fetchall()
            }
            fresh: list[Generation] = []
            for generation in generations:
                if generation.item_id not in stored:
                    stored.add(generation.item_id)
                    fresh.append(generation)
            if not fresh:
                return
            conn.execute(
                "INSERT INTO generations SELECT ?, r.item_id, r.prompt, r.answer, r.shown_doc_ids, "
                "r.n_prompt_tokens, r.n_tokens, r.finish_reason, r.token_ids, r.tokens, r.logprobs, "
                f"r.top_logprobs::JSON, ? FROM (SELECT unnest(?::{_GENERATION_ROW}) AS r)",
                [run_id, utc_now(), [_generation_row(g) for g in fresh]],
            )
            citations = [_citation_row(g.item_id, c) for g in fresh for c in g.citations]
            if citations:
                conn.execute(
                    "INSERT INTO citations SELECT ?, r.item_id, r.citation_index, r.position, "
                    f"r.doc_id, r.relevant, r.probability FROM (SELECT unnest(?::{_CITATION_ROW}) AS r)",
                    [run_id, citations],
                )

    def finish_run(self, run_id: str, status: str) -> None:
        """Set the final status: 'complete' or 'failed'."""
        if status not in FINAL_STATUSES:
            raise ValueError(f"final status must be one of {FINAL_STATUSES}, not {status!r}")
        with self.database.connect() as conn:
            updated = conn.execute(
                "UPDATE runs SET status = ?, finished_utc = ? WHERE run_id = ?",
                [status, utc_now(), run_id],
            ).fetchone()
            if not updated or updated[0] == 0:
                raise ValueError(f"unknown run {run_id}")


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


def _generation_row(g: Generation) -> dict[str, Any]:
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
    }


def _citation_row(item_id: str, c: Citation) -> dict[str, Any]:
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


def _to_json(value: Any) -> str:
    """JSON text for provenance columns; paths and other odd values become strings."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
