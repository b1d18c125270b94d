"""What an operator sets when starting the app: flags of `python -m demo` or the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class AppSettings:
    """The app's settings; `build_app(settings)` reads nothing else."""

    db_path: Path
    read_only: bool = False  # browse only: no runs
    max_items: int | None = None  # cap on items per run started from the app (a Space's visitors)
    allowed_models: tuple[str, ...] | None = None  # None: any Hub id or local folder


def settings_from_env(db: str | None = None, read_only: bool = False) -> AppSettings:
    """Settings from flags, falling back on PATTRIEVAL_* environment variables."""
    from engine.paths import default_db_path

    cap = os.environ.get("PATTRIEVAL_MAX_ITEMS")
    allowed = os.environ.get("PATTRIEVAL_ALLOWED_MODELS")
    return AppSettings(
        db_path=Path(db) if db else default_db_path(),
        read_only=read_only or os.environ.get("PATTRIEVAL_READ_ONLY", "") in ("1", "true", "yes"),
        max_items=int(cap) if cap and cap.isdigit() and int(cap) > 0 else None,
        allowed_models=tuple(m.strip() for m in allowed.split(",") if m.strip()) if allowed else None,
    )


def without_server_paths(message: str, db_path: str | os.PathLike[str], *, dataset_path: str | None = None,
                         shown: str = "the store") -> str:
    """One line fit for any visitor: the database's path and folder, and a dataset's folder, left out."""
    if dataset_path:
        # First: the dataset may sit in the database's folder, which is replaced below.
        message = message.replace(dataset_path, Path(dataset_path).name)
    path = Path(db_path)
    # Longest first, so that the folder never replaces part of the file's own path.
    for text, replacement in ((str(path.resolve()), shown), (str(path), shown),
                              (str(path.parent.resolve()), "…"), (str(path.parent), "…")):
        if text not in ("", "."):
            message = message.replace(text, replacement)
    return message.splitlines()[0] if message.strip() else "the database cannot be read"
