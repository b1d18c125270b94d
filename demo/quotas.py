"""Quotas on what a visitor's job may add to the store, checked before it is queued.

Why: at a Space's limits (512 new tokens, 5 top log-probs) an answer costs ~157 KB of store, so
a 12-configuration grid of 1,000 items wrote ~5.7 GB. The operator bounds one job and the whole
store (PATTRIEVAL_MAX_JOB_MB, PATTRIEVAL_MAX_STORE_MB; docs/operations.md); a job whose
estimate (engine.limits.estimate_answer_bytes) exceeds either is refused in one line.

Every job kind is held to the store quota: a run by its answers, Prompt 5 explanations by their
rows (estimate_explanation_bytes), and a job whose size is unknown ahead (no item bound, e.g. a
served model on the desktop) is refused only once the store is at its quota. The worker checks
again before a job starts and between its batches (`StoreGuard`, demo.job_work): a job that takes
the store past its quota stops there, what it committed kept.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from demo.settings import AppSettings
from engine.errors import UserError
from engine.limits import ANSWER_FIXED_BYTES, estimate_answer_bytes, store_quota_problem

MB = 1024 * 1024


def check_store_quota(settings: AppSettings, request: Any) -> None:
    """Refuse, in one line and before anything is queued, a job whose answers (at most: items x
    modes x configurations) would store more than the operator's quotas (engine.limits)."""
    if settings.max_job_mb is None and settings.max_store_mb is None:
        return
    grid = getattr(request, "grid", None)
    run = getattr(request, "run", request)  # a StudyRequest's shared settings, or the RunRequest
    items = run.limit if run.limit is not None else settings.max_items
    if items is None:
        # Unknown until the dataset is read (only an item bound, the form's or PATTRIEVAL_MAX_ITEMS,
        # estimates it): refused only when the store is full; the worker stops it at the quota.
        check_store_room(settings.db_path, settings.max_store_mb)
        return
    answers = items * len(run.modes) * (grid.size if grid is not None else 1)
    _check(settings, answers, estimate_answer_bytes(run.max_new_tokens, run.top_logprobs))


# What one Prompt 5 explanation row takes (store/migrations/008_explanations.sql): the prompt as
# given (the question, up to 10 documents and the answer: a few KB, rounded up) and per generated
# token its id, text and log-prob (no alternatives), as an answer's token (engine.limits).
EXPLANATION_FIXED_BYTES = 16 * 1024


def estimate_explanation_bytes(max_new_tokens: int) -> int:
    """An upper estimate of the store bytes one explanation row takes."""
    return estimate_answer_bytes(max_new_tokens) - ANSWER_FIXED_BYTES + EXPLANATION_FIXED_BYTES


def check_explain_quota(settings: AppSettings, explanations: int, max_new_tokens: int) -> None:
    """As check_store_quota, for a job of at most `explanations` Prompt 5 explanations."""
    if settings.max_job_mb is None and settings.max_store_mb is None:
        return
    _check(settings, explanations, estimate_explanation_bytes(max_new_tokens))


def store_bytes(db_path: Path | str) -> int:
    """What the store takes on disk now: its file and its write-ahead log."""
    db = Path(db_path)
    total = 0
    for path in (db, Path(f"{db}.wal")):
        try:
            total += path.stat().st_size
        except OSError:
            pass  # not written yet, or checkpointed meanwhile
    return total


def store_full_problem(db_path: Path | str, max_store_mb: int | None) -> str | None:
    """Why no job may start now, in one line (the store is at its quota), or None."""
    if max_store_mb is None:
        return None
    used = store_bytes(db_path)
    if used < max_store_mb * MB:
        return None
    return (f"the store is at its quota here ({used / MB:,.0f} MB of {max_store_mb:,} MB): no job may add to it "
            "until the operator makes room")


def check_store_room(db_path: Path | str, max_store_mb: int | None) -> None:
    """UserError (one line) when the store is at its quota."""
    problem = store_full_problem(db_path, max_store_mb)
    if problem:
        raise UserError(problem)


class StoreGuard:
    """The store quota checked while a job runs: `passed()` is true once the store holds its quota
    (the job's stop callback asks it between batches, and at each decoding step of the local
    backend, so the size is read at most every `every_s` seconds)."""

    def __init__(self, db_path: Path | str, max_store_mb: int | None, every_s: float = 0.5):
        self.db_path, self.max_store_mb, self.every_s = db_path, max_store_mb, every_s
        self.reason: str | None = None  # set once passed: the one line the job reports
        self._checked = 0.0

    def passed(self) -> bool:
        if self.reason is not None:
            return True
        if self.max_store_mb is None or time.monotonic() - self._checked < self.every_s:
            return False
        self._checked = time.monotonic()
        self.reason = store_full_problem(self.db_path, self.max_store_mb)
        return self.reason is not None


def _check(settings: AppSettings, rows: int, per_row: int) -> None:
    problem = store_quota_problem(rows, per_row, store_bytes=store_bytes(settings.db_path),
                                  max_job_bytes=settings.max_job_mb and settings.max_job_mb * MB,
                                  max_store_bytes=settings.max_store_mb and settings.max_store_mb * MB)
    if problem:
        raise UserError(problem)
