"""The writer of AttrScore verifications (`python -m engine verify`): one transaction per batch.

Like store.explanation_store: every call opens the database, runs one short transaction and
closes it, so a kill -9 loses at most the batch in flight. Rows already stored (same run, item,
sentence, document and judge) are kept, never overwritten.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import UserError, quoted
from engine.types import LabelVerdict, Verification
from store.db import DEFAULT_TIMEOUT_S, Database, utc_now


@dataclass(frozen=True)
class JudgeRow:
    """What a judge is (migration 019's `judges`): written with its first batch, never replaced."""

    judge: str  # verifications.judge_model
    kind: str  # llm | nli
    model_id: str
    mapping: str  # nli: its labels -> classes (JSON); llm: the prompt's name
    provenance: str  # JSON

_ROW = (
    "STRUCT(item_id VARCHAR, sentence_index INTEGER, position INTEGER, doc_id VARCHAR, prompt VARCHAR, "
    "raw_output VARCHAR, class VARCHAR, p_attributable DOUBLE, p_extrapolatory DOUBLE, p_contradictory DOUBLE)[]"
)


class VerificationStore:
    """Writes verifications to a DuckDB store that already holds the runs they judge."""

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.database = Database(Path(path), timeout_s)

    def write_batch(self, verifications: Sequence[Verification], judge: JudgeRow | None = None) -> int:
        """Store one finished batch in a single transaction, with the `judges` row of its judge
        when given (kept as first written); returns the rows added."""
        if not verifications:
            return 0
        added = 0
        with self.database.connect() as conn:
            now = utc_now()
            if judge is not None:
                _add_judge(conn, judge, now)
            by_key: dict[tuple[str, str], list[Verification]] = {}
            for v in verifications:
                by_key.setdefault((v.run_id, v.judge_model), []).append(v)
            for (run_id, model), rows in by_key.items():
                before = _count(conn, run_id, model)
                conn.execute(
                    "INSERT INTO verifications SELECT ?, r.item_id, r.sentence_index, r.position, ?, r.doc_id, "
                    "r.prompt, r.raw_output, r.class, r.p_attributable, r.p_extrapolatory, r.p_contradictory, ? "
                    f"FROM (SELECT unnest(?::{_ROW}) AS r) ON CONFLICT DO NOTHING",
                    [run_id, model, now, [_row(v) for v in rows]],
                )
                added += _count(conn, run_id, model) - before
        return added

    def write_label_verdicts(self, verdicts: Sequence[LabelVerdict], judge: JudgeRow | None = None) -> int:
        """Store one finished batch of the judge's label-bias verdicts (migration 027) in a single
        transaction, with the judge's `judges` row as write_batch does; returns the rows added.
        A verdict already stored under its key is kept."""
        if not verdicts:
            return 0
        with self.database.connect() as conn:
            now = utc_now()
            if judge is not None:
                _add_judge(conn, judge, now)
            before = conn.execute("SELECT count(*) FROM judge_label_verdicts").fetchone()[0]
            conn.execute(
                "INSERT INTO judge_label_verdicts SELECT r.run_id, r.item_id, r.sentence_index, r.position, "
                "r.judge_model, r.label_from, r.label IS NOT NULL, r.cf_run, r.doc_id, r.label, r.prompt, "
                "r.raw_output, r.class, r.p_attributable, r.p_extrapolatory, r.p_contradictory, ? "
                f"FROM (SELECT unnest(?::{_LABEL_ROW}) AS r) ON CONFLICT DO NOTHING",
                [now, [{**_row(v.verification), "run_id": v.verification.run_id,
                        "judge_model": v.verification.judge_model, "cf_run": v.cf_run, "label_from": v.label_from,
                        "label": v.label} for v in verdicts]],
            )
            return conn.execute("SELECT count(*) FROM judge_label_verdicts").fetchone()[0] - before


_LABEL_ROW = _ROW.replace("STRUCT(", "STRUCT(run_id VARCHAR, judge_model VARCHAR, cf_run VARCHAR, label_from VARCHAR, "
                          "label VARCHAR, ", 1)


def _add_judge(conn, judge: JudgeRow, now: Any) -> None:
    """The judge's row, unless the store has it; UserError (the batch not written) when the store
    has that name as another kind of judge: a model's verdicts never go under a person's name."""
    conn.execute("INSERT INTO judges VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                 [judge.judge, judge.kind, judge.model_id, judge.mapping, judge.provenance, now])
    kind = conn.execute("SELECT kind FROM judges WHERE judge = ?", [judge.judge]).fetchone()[0]
    if kind != judge.kind:
        raise UserError(taken_judge(judge.judge, kind, judge.kind))


def taken_judge(judge: str, stored: str, kind: str) -> str:
    """Why a `kind` judge may not write under `judge`, which the store has as a `stored` judge."""
    whose = " (a person's imported labels)" if stored == "human" else ""
    return (f"judge '{quoted(judge)}' is {'an' if stored[0] in 'aeiou' else 'a'} {stored} judge in this store{whose}: "
            f"the {kind} judge's verdicts cannot go under its name")


def _count(conn, run_id: str, model: str) -> int:
    return conn.execute(
        "SELECT count(*) FROM verifications WHERE run_id = ? AND judge_model = ?", [run_id, model]
    ).fetchone()[0]


def _row(v: Verification) -> dict[str, Any]:
    return {
        "item_id": v.item_id, "sentence_index": v.sentence_index, "position": v.position, "doc_id": v.doc_id,
        "prompt": v.prompt, "raw_output": v.raw_output, "class": v.label,
        "p_attributable": v.p_attributable, "p_extrapolatory": v.p_extrapolatory, "p_contradictory": v.p_contradictory,
    }
