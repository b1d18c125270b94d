"""Files the app hands a visitor (a query's CSV, an export): each in a folder of its own, so that
two visitors never overwrite each other's file, under one temporary folder pruned as it goes."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from pathlib import Path

KEEP_S = 3600.0  # Gradio copies a returned file into its own cache at once; an hour is ample


def new_download(name: str, *, root: Path | None = None, keep_s: float = KEEP_S) -> Path:
    """A path `<root>/<fresh folder>/<name>` to write a download to; folders older than keep_s go first."""
    root = root or Path(tempfile.gettempdir()) / "pattrieval-downloads"
    root.mkdir(parents=True, exist_ok=True)
    cutoff = time.time() - keep_s
    for old in root.iterdir():
        try:
            if old.is_dir() and old.stat().st_mtime < cutoff:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass  # another request pruned it meanwhile
    folder = root / uuid.uuid4().hex
    folder.mkdir()
    return folder / name
