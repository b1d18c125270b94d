"""What an operator sets when starting the app: flags of `python -m demo` or the environment.

"A Space" here means any app that strangers reach: Hugging Face sets SPACE_ID in every Space,
and `--share` opens a public link. There a visitor may never name a server path (a dataset
file, a model folder): only the bundled sample, an uploaded file or a Hub id. On the desktop
(`allow_local_paths`) a local path works too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_UPLOAD_MB = 50  # a 10-document dataset of 50 MB holds ~10,000 items: plenty for a visitor
DEFAULT_RESULTS_FILE = "pattrieval.duckdb"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class AppSettings:
    """The app's settings; `build_app(settings)` reads nothing else."""

    db_path: Path
    read_only: bool = False  # browse only: no runs
    max_items: int | None = None  # cap on items per run started from the app (a Space's visitors)
    allowed_models: tuple[str, ...] | None = None  # None: any Hub id or local folder
    max_upload_mb: int = DEFAULT_MAX_UPLOAD_MB  # dataset uploads larger than this are refused
    # A dataset path typed in, and a local model folder, are accepted only when this is on (the
    # desktop); `settings_from_env` turns it off on a Space and with --share.
    allow_local_paths: bool = True
    results_repo: str | None = None  # a Hub dataset repo whose results store is merged at start
    results_file: str = DEFAULT_RESULTS_FILE  # that store's file name inside the repo

    @property
    def max_upload_bytes(self) -> int:
        """The upload limit in bytes, as Gradio's launch(max_file_size=...) takes it."""
        return self.max_upload_mb * 1024 * 1024


def settings_from_env(db: str | None = None, read_only: bool = False, *, share: bool = False,
                      local_paths: bool | None = None) -> AppSettings:
    """Settings from flags, falling back on PATTRIEVAL_* environment variables (UserError if malformed)."""
    from engine.errors import UserError
    from engine.paths import default_db_path

    cap = os.environ.get("PATTRIEVAL_MAX_ITEMS")
    allowed = os.environ.get("PATTRIEVAL_ALLOWED_MODELS")
    upload = os.environ.get("PATTRIEVAL_MAX_UPLOAD_MB", "").strip()
    if upload and not (upload.isdigit() and int(upload) > 0):
        raise UserError(f"PATTRIEVAL_MAX_UPLOAD_MB must be a whole number of megabytes above 0, not '{upload}'")
    if local_paths is None:
        local_paths = _flag("PATTRIEVAL_LOCAL_PATHS")
    if local_paths is None:
        local_paths = not os.environ.get("SPACE_ID") and not share
    return AppSettings(
        db_path=Path(db) if db else default_db_path(),
        read_only=read_only or os.environ.get("PATTRIEVAL_READ_ONLY", "") in ("1", "true", "yes"),
        max_items=int(cap) if cap and cap.isdigit() and int(cap) > 0 else None,
        allowed_models=tuple(m.strip() for m in allowed.split(",") if m.strip()) if allowed else None,
        max_upload_mb=int(upload) if upload else DEFAULT_MAX_UPLOAD_MB,
        allow_local_paths=bool(local_paths),
        results_repo=os.environ.get("PATTRIEVAL_RESULTS_REPO", "").strip() or None,
        results_file=os.environ.get("PATTRIEVAL_RESULTS_FILE", "").strip() or DEFAULT_RESULTS_FILE,
    )


def _flag(name: str) -> bool | None:
    """An on/off environment variable; None when unset (UserError when it is neither)."""
    from engine.errors import UserError

    value = os.environ.get(name, "").strip().lower()
    if not value:
        return None
    if value in _TRUE + _FALSE:
        return value in _TRUE
    raise UserError(f"{name} must be 1 or 0, not '{value}'")


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
