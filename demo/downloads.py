"""Files the app hands a visitor (a query's CSV, an export): each in a folder of its own, so that
two visitors never overwrite each other's file, under one temporary folder pruned as it goes.

Bounded: a looping /export wrote a new 15 MB folder a call, ~10 GB an hour. Now
- an export is deduplicated: the same store state and request give the same file, written once
  (`bounded_download`'s key), and Gradio's own copy (its cache folders are named by the file's
  content hash) is shared too;
- what downloads hold here, in all and per visitor (client address), is bounded
  (DownloadLimits); a folder counts for KEEP_S, as long as Gradio's copy of it is kept
  (demo.app's delete_cache), and a write that would pass a bound is refused in one line;
- the disk's free space is checked before writing (shutil.disk_usage), and a file that passes
  a bound once written is deleted, never handed out half-way.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.errors import UserError

KEEP_S = 3600.0  # as long as Gradio keeps its copy (demo.app.UPLOAD_MAX_AGE_S): counted that long
MB = 1024 * 1024
DEFAULT_MIN_FREE_MB = 512  # never write a download that would leave the temp disk with less


@dataclass(frozen=True)
class DownloadLimits:
    """Bounds on what downloads hold on disk (None: no bound); AppSettings sets them."""

    total_mb: int | None = None  # all visitors together, over the last KEEP_S
    per_visitor_mb: int | None = None  # one visitor (client address, else session)
    min_free_mb: int = DEFAULT_MIN_FREE_MB


def download_root() -> Path:
    return Path(tempfile.gettempdir()) / "pattrieval-downloads"


def new_download(name: str, *, root: Path | None = None, keep_s: float = KEEP_S, owner: str | None = None,
                 limits: DownloadLimits | None = None) -> Path:
    """A path `<root>/<fresh folder>/<name>` to write a download to; folders older than keep_s go
    first. With `limits`, UserError (one line) when the disk or a bound has no room left."""
    root = _prepared(root or download_root(), keep_s)
    if limits is not None:
        _check_room(root, owner, limits)
    folder = root / f"{_owner_tag(owner)}-{uuid.uuid4().hex}"
    folder.mkdir()
    return folder / name


def bounded_download(name: str, write: Callable[[Path], object], *, key: str, owner: str | None = None,
                     limits: DownloadLimits | None = None, root: Path | None = None,
                     keep_s: float = KEEP_S) -> Path:
    """`<root>/<folder>/<name>` written by `write(path)`, or the file an earlier call with the same
    `key` wrote (unchanged inputs give the same bytes). Written aside and moved in whole; deleted
    and refused (UserError, one line) when it passes a bound."""
    root = _prepared(root or download_root(), keep_s)
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    for done in root.glob(f"*-{digest}"):
        if (done / name).is_file():
            return done / name  # the same file, whoever asked first: nothing new on disk
    if limits is not None:
        _check_room(root, owner, limits)
    scratch = root / f".partial-{uuid.uuid4().hex}"
    scratch.mkdir()
    try:
        write(scratch / name)
        if limits is not None:
            _check_room(root, owner, limits, adding=_size(scratch))
        final = root / f"{_owner_tag(owner)}-{digest}"
        try:
            scratch.rename(final)
        except OSError:  # another request wrote the same key meanwhile: theirs is as good
            shutil.rmtree(scratch, ignore_errors=True)
        return final / name
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def store_state(db_path: Path) -> str:
    """What identifies the store's content for an export's key: its file's and WAL's size and time."""
    parts = []
    for path in (Path(db_path), Path(f"{db_path}.wal")):
        try:
            st = path.stat()
            parts.append(f"{path.name}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{path.name}:-")
    return "|".join(parts)


def _prepared(root: Path, keep_s: float) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    cutoff = time.time() - keep_s
    for old in root.iterdir():
        try:
            if old.is_dir() and old.stat().st_mtime < cutoff:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass  # another request pruned it meanwhile
    return root


def _owner_tag(owner: str | None) -> str:
    """A folder-name tag for the owner: a digest, so that no address lands in a path."""
    return hashlib.sha256((owner or "operator").encode()).hexdigest()[:12]


def _size(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        try:
            total += path.stat().st_size if path.is_file() else 0
        except OSError:
            pass
    return total


def _check_room(root: Path, owner: str | None, limits: DownloadLimits, adding: int = 0) -> None:
    """UserError (one line) when the disk lacks room or a bound is reached (with `adding` bytes more)."""
    free = shutil.disk_usage(root).free
    if free - adding < limits.min_free_mb * MB:
        raise UserError("the server's temporary disk is nearly full; try again later")
    if limits.total_mb is None and limits.per_visitor_mb is None:
        return
    tag = _owner_tag(owner)
    total = mine = 0
    for folder in root.iterdir():
        if folder.is_dir() and not folder.name.startswith(".partial-"):
            size = _size(folder)
            total += size
            mine += size if folder.name.startswith(f"{tag}-") else 0
    minutes = f"{KEEP_S / 60:.0f} minutes"
    if limits.per_visitor_mb is not None and mine + adding > limits.per_visitor_mb * MB:
        raise UserError(f"your downloads of the last {minutes} hold {mine / MB:,.1f} MB (at most "
                        f"{limits.per_visitor_mb:,} MB here, this one {adding / MB:,.1f} MB); try again later")
    if limits.total_mb is not None and total + adding > limits.total_mb * MB:
        raise UserError(f"the server's downloads of the last {minutes} are at their bound "
                        f"({limits.total_mb:,} MB); try again later")


def limits_of(settings) -> DownloadLimits:
    """The operator's download bounds (demo.settings.AppSettings)."""
    return DownloadLimits(settings.max_downloads_mb, settings.max_downloads_per_visitor_mb)
