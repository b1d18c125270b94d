"""Merge the complete runs of another store into this one: `python -m engine merge` and engine.api.
All SQL is store.merge's (one transaction on the target, the source opened read-only)."""

from __future__ import annotations

import os
from pathlib import Path

from engine.paths import default_db_path
from engine.usecases.bias.kept import after_merge


def merge(target: Path | None, source: str | os.PathLike[str]):
    """Copy `source`'s complete runs into `target` (None: the default store); store.merge.MergeResult
    says what was copied and what was left out, MergeRefused (nothing written) a clash."""
    from store.merge import merge_stores

    path = Path(target) if target else default_db_path()
    result = merge_stores(path, source)
    after_merge(path, result.merged)  # the Bias page's values of the experiments merged into
    return result
