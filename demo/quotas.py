"""Quotas on what a visitor's job may add to the store, checked before it is queued (issue 29 §5).

Why: at a Space's limits (512 new tokens, 5 top log-probs) an answer costs ~157 KB of store, so
a 12-configuration grid of 1,000 items wrote ~5.7 GB. The operator bounds one job and the whole
store (PATTRIEVAL_MAX_JOB_MB, PATTRIEVAL_MAX_STORE_MB; docs/operations.md); a job whose
estimate (engine.limits.estimate_answer_bytes) exceeds either is refused in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from demo.settings import AppSettings
from engine.errors import UserError
from engine.limits import estimate_answer_bytes, store_quota_problem


def check_store_quota(settings: AppSettings, request: Any) -> None:
    """Refuse, in one line and before anything is queued, a job whose answers (at most: items x
    modes x configurations) would store more than the operator's quotas (engine.limits)."""
    if settings.max_job_mb is None and settings.max_store_mb is None:
        return
    grid = getattr(request, "grid", None)
    run = getattr(request, "run", request)  # a StudyRequest's shared settings, or the RunRequest
    items = run.limit if run.limit is not None else settings.max_items
    if items is None:
        return  # unknown until the dataset is read: only an item bound (the form's, PATTRIEVAL_MAX_ITEMS) estimates it
    answers = items * len(run.modes) * (grid.size if grid is not None else 1)
    db = Path(settings.db_path)
    used = sum(p.stat().st_size for p in (db, Path(f"{db}.wal")) if p.is_file())
    mb = 1024 * 1024
    problem = store_quota_problem(answers, estimate_answer_bytes(run.max_new_tokens, run.top_n_logprobs),
                                  store_bytes=used, max_job_bytes=settings.max_job_mb and settings.max_job_mb * mb,
                                  max_store_bytes=settings.max_store_mb and settings.max_store_mb * mb)
    if problem:
        raise UserError(problem)
