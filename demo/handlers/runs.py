"""The Runs tab: the stored experiments, filtered and paged on the server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

PAGE_SIZE = 50


def runs_page(db_path: Path, page: int = 1, *, model: str | None = None, metadata: str | None = None,
              page_size: int = PAGE_SIZE) -> list[list[Any]]:
    """One page of experiments, newest first, as table rows; an empty store gives no rows."""
    from store.queries import experiment_listing

    if page < 1:
        page = 1
    if not Path(db_path).is_file():
        return []  # nothing stored yet: the Run tab offers a first run
    listing = [
        e for e in experiment_listing(db_path)
        if (model is None or model.lower() in e.model.lower())
        and (metadata is None or (e.metadata_type or "") == metadata)
    ]
    start = (page - 1) * page_size
    return [
        [e.experiment_id, e.name or "-", e.model, e.dataset_label, e.metadata_type or "-", ",".join(e.modes), e.status,
         f"{e.n_done}/{e.n_total}", e.created_utc.strftime("%Y-%m-%d %H:%M") if e.created_utc else "-"]
        for e in listing[start:start + page_size]
    ]
