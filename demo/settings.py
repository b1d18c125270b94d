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
