"""A bound on what Gradio's upload route may hold on disk, all visitors together (issue 29 §4).

Why: `/gradio_api/upload` needs no session and Gradio keeps each file an hour (demo.app's
delete_cache): 10 uploads of 40 MB took 3.1 s, so a looping client fills the disk long before the
hour is up. Gradio bounds each file (launch's max_file_size, PATTRIEVAL_MAX_UPLOAD_MB), not their
total. This ASGI middleware, on that route only, refuses an upload in one line before its body is
read when
- it has no Content-Length (the server holds a body to its declared length, so the length is
  what the upload may add): 411;
- Gradio's upload folder, with the uploads in flight and this one, would pass the bound
  (PATTRIEVAL_MAX_UPLOADS_MB): 413;
- the disk would be left with less than DEFAULT_MIN_FREE_MB (demo.downloads'): 507.

Refused, not the oldest deleted: an upload is a visitor's dataset between its upload and the Run
click (demo.handlers.run then moves it out), so deleting the oldest would let one client evict
everyone else's files. The room comes back as Gradio's cache cleaner deletes hour-old files.
The folder also holds Gradio's copies of the files the app hands out (bounded by
PATTRIEVAL_MAX_DOWNLOADS_MB): they take the same disk and count too.
"""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demo.downloads import DEFAULT_MIN_FREE_MB

MB = 1024 * 1024
UPLOAD_PATH = "/gradio_api/upload"


@dataclass(frozen=True)
class UploadLimits:
    total_mb: int | None = None  # what the upload folder may hold (None: no bound)
    min_free_mb: int = DEFAULT_MIN_FREE_MB


def upload_middleware(settings: Any) -> list:
    """The middleware list for launch(app_kwargs={"middleware": ...}) (demo.__main__)."""
    from starlette.middleware import Middleware

    return [Middleware(UploadBound, limits=UploadLimits(settings.max_uploads_mb))]


def folder_bytes(folder: Path) -> int:
    """The bytes of every file under `folder` (0 when it does not exist yet)."""
    total = 0
    for parent, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.stat(os.path.join(parent, name), follow_symlinks=False).st_size
            except OSError:
                pass  # deleted meanwhile (the cache cleaner, a run taking its upload)
    return total


def upload_problem(folder: Path, adding: int, in_flight: int, limits: UploadLimits) -> tuple[int, str] | None:
    """(status, one line) refusing an upload of `adding` bytes, or None to accept it."""
    probe = folder if folder.exists() else folder.parent
    if shutil.disk_usage(probe).free - adding < limits.min_free_mb * MB:
        return 507, "the server's disk is nearly full; try the upload again later"
    if limits.total_mb is None:
        return None
    held = folder_bytes(folder) + in_flight
    if held + adding > limits.total_mb * MB:
        return 413, (f"the server holds {held / MB:,.0f} MB of uploads, at most {limits.total_mb:,} MB here; "
                     "try again later (uploads are kept an hour)")
    return None


class UploadBound:
    """Pure ASGI middleware: refuses uploads past UploadLimits, before reading their body."""

    def __init__(self, app: Any, limits: UploadLimits):
        self.app, self.limits = app, limits
        self._lock = threading.Lock()
        self._in_flight = 0  # bytes of uploads accepted and still being received

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].rstrip("/").endswith(UPLOAD_PATH):
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"")
        if not length.isdigit():
            await _refuse(send, 411, "an upload needs a Content-Length header")
            return
        adding = int(length)
        from anyio import to_thread

        folder = Path(getattr(scope.get("app"), "uploaded_file_dir", None) or _gradio_upload_folder())
        with self._lock:  # reserved before the check: concurrent uploads each count the others
            in_flight = self._in_flight
            self._in_flight += adding
        try:
            problem = await to_thread.run_sync(upload_problem, folder, adding, in_flight, self.limits)
            if problem is not None:
                await _refuse(send, *problem)
                return
            await self.app(scope, receive, send)
        finally:
            with self._lock:
                self._in_flight -= adding


def _gradio_upload_folder() -> str:
    from gradio.utils import get_upload_folder

    return get_upload_folder()


async def _refuse(send: Any, status: int, line: str) -> None:
    body = line.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
