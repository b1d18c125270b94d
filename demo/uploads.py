"""Bounds on what Gradio's upload route may hold on disk, all visitors together and each visitor,
and file inputs that take uploads only.

Why: `/gradio_api/upload` needs no session and Gradio keeps each file an hour (demo.app's
delete_cache): 10 uploads of 40 MB took 3.1 s, so a looping client fills the disk long before the
hour is up. Gradio bounds each file (launch's max_file_size, PATTRIEVAL_MAX_UPLOAD_MB), not their
total. This ASGI middleware, on that route only, refuses an upload in one line before its body is
read when
- it has no Content-Length (the server holds a body to its declared length, so the length is
  what the upload may add): 411;
- the visitor's uploads still held in the folder (by client address, demo.visitors), with its
  uploads in flight and this one, would pass its share (PATTRIEVAL_MAX_UPLOADS_PER_VISITOR_MB):
  413. Without it one client filled the shared bound and everyone else got 413 for up to an hour;
- Gradio's upload folder, with the uploads in flight and this one, would pass the bound
  (PATTRIEVAL_MAX_UPLOADS_MB): 413;
- the disk would be left with less than DEFAULT_MIN_FREE_MB (demo.downloads'): 507.

Refused, not the oldest deleted: an upload is a visitor's dataset between its upload and the Run
click (demo.handlers.run then moves it out), so deleting the oldest would let one client evict
everyone else's files. The room comes back as Gradio's cache cleaner deletes hour-old files.
The folder also holds Gradio's copies of the files the app hands out (bounded by
PATTRIEVAL_MAX_DOWNLOADS_MB): they take the same disk and count too.

A file input also takes a file reference whose path is an http URL, which Gradio downloads
whole, into memory, before any handler sees it (+1.3 GB of the app's memory for 600 MB),
past every bound above. `take_uploads_only` refuses such a reference in one line before any
request is made: a visitor's files come through the upload route.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demo.downloads import DEFAULT_MIN_FREE_MB
from demo.toasts import error

MB = 1024 * 1024
UPLOAD_PATH = "/gradio_api/upload"


# How long an accepted upload counts against its visitor before its files are looked for: Gradio
# moves a file into place in a background task after answering.
SETTLE_S = 60.0
URL_REFUSED = "a file must be uploaded here, not given as a link"


@dataclass(frozen=True)
class UploadLimits:
    total_mb: int | None = None  # what the upload folder may hold (None: no bound)
    per_visitor_mb: int | None = None  # what one visitor's uploads may hold there (None: no bound)
    min_free_mb: int = DEFAULT_MIN_FREE_MB


@dataclass(frozen=True)
class HeldUpload:
    """One accepted upload of a visitor: its declared bytes and the files Gradio answered with."""

    accepted_at: float  # time.monotonic()
    size: int
    paths: tuple[str, ...]

    def still_held(self, now: float) -> bool:
        # A visitor's upload stops counting once its files are gone: taken by a run, or deleted
        # by Gradio's cache cleaner an hour later.
        return now - self.accepted_at < SETTLE_S or any(os.path.exists(path) for path in self.paths)


def upload_middleware(settings: Any) -> list:
    """The middleware list for launch(app_kwargs={"middleware": ...}) (demo.__main__)."""
    from starlette.middleware import Middleware

    from demo.visitors import scope_client_key

    limits = UploadLimits(settings.max_uploads_mb, settings.max_uploads_per_visitor_mb)
    return [Middleware(UploadBound, limits=limits, visitor=lambda scope: scope_client_key(scope, settings))]


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


def upload_problem(folder: Path, adding: int, in_flight: int, limits: UploadLimits,
                   visitor_held: int | None = None) -> tuple[int, str] | None:
    """(status, one line) refusing an upload of `adding` bytes, or None to accept it;
    `visitor_held`: what this visitor's uploads hold and have in flight (None: no visitor known)."""
    probe = folder if folder.exists() else folder.parent
    if shutil.disk_usage(probe).free - adding < limits.min_free_mb * MB:
        return 507, "the server's disk is nearly full; try the upload again later"
    if limits.per_visitor_mb is not None and visitor_held is not None \
            and visitor_held + adding > limits.per_visitor_mb * MB:
        return 413, (f"your uploads here hold {visitor_held / MB:,.0f} MB, at most {limits.per_visitor_mb:,} MB "
                     "per visitor; run or wait before uploading more (uploads are kept an hour)")
    if limits.total_mb is None:
        return None
    held = folder_bytes(folder) + in_flight
    if held + adding > limits.total_mb * MB:
        return 413, (f"the server holds {held / MB:,.0f} MB of uploads, at most {limits.total_mb:,} MB here; "
                     "try again later (uploads are kept an hour)")
    return None


class UploadBound:
    """Pure ASGI middleware: refuses uploads past UploadLimits, before reading their body.
    `visitor(scope)` names whom an upload counts for (None: nobody's share is bounded)."""

    def __init__(self, app: Any, limits: UploadLimits, visitor: Callable[[dict], str | None] = lambda scope: None):
        self.app, self.limits, self.visitor = app, limits, visitor
        self._lock = threading.Lock()
        self._in_flight = 0  # bytes of uploads accepted and still being received
        self._visitor_in_flight: dict[str, int] = {}
        self._held: dict[str, list[HeldUpload]] = {}  # accepted uploads, by visitor

    def _held_bytes(self, key: str) -> int:
        """What `key`'s accepted uploads still hold; forgets those gone. Looks at the disk outside
        the lock, which the event loop takes too."""
        with self._lock:
            uploads = list(self._held.get(key, []))
        now = time.monotonic()
        gone = [upload for upload in uploads if not upload.still_held(now)]
        with self._lock:
            kept = [upload for upload in self._held.get(key, []) if upload not in gone]
            if kept:
                self._held[key] = kept
            else:
                self._held.pop(key, None)
            return sum(upload.size for upload in kept)

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
        key = self.visitor(scope) if self.limits.per_visitor_mb is not None else None
        with self._lock:  # reserved before the check: concurrent uploads each count the others
            in_flight = self._in_flight
            self._in_flight += adding
            visitor_in_flight = self._visitor_in_flight.get(key, 0) if key is not None else 0
            if key is not None:
                self._visitor_in_flight[key] = visitor_in_flight + adding
        try:
            visitor_held = None if key is None else await to_thread.run_sync(self._held_bytes, key) + visitor_in_flight
            problem = await to_thread.run_sync(upload_problem, folder, adding, in_flight, self.limits, visitor_held)
            if problem is not None:
                await _refuse(send, *problem)
                return
            if key is None:
                await self.app(scope, receive, send)
                return
            answer = _Answer(send)
            await self.app(scope, receive, answer.send)
            paths = answer.paths()
            if paths:
                with self._lock:
                    self._held.setdefault(key, []).append(HeldUpload(time.monotonic(), adding, paths))
        finally:
            with self._lock:
                self._in_flight -= adding
                if key is not None:
                    left = self._visitor_in_flight.get(key, 0) - adding
                    if left > 0:
                        self._visitor_in_flight[key] = left
                    else:
                        self._visitor_in_flight.pop(key, None)


class _Answer:
    """Passes an upload's answer on, keeping what it needs to learn the files Gradio stored: the
    status and a bounded copy of the body (a JSON list of paths)."""

    LIMIT = 1024 * 1024

    def __init__(self, send: Any):
        self._send, self.status, self.body, self.complete = send, 0, bytearray(), False

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            self.status = message.get("status", 0)
        elif message["type"] == "http.response.body":
            if len(self.body) < self.LIMIT:
                self.body += message.get("body", b"")[: self.LIMIT - len(self.body)]
            self.complete = not message.get("more_body", False)
        await self._send(message)

    def paths(self) -> tuple[str, ...]:
        if self.status != 200 or not self.complete:
            return ()
        try:
            answer = json.loads(bytes(self.body))
        except ValueError:
            return ()
        return tuple(item for item in answer if isinstance(item, str)) if isinstance(answer, list) else ()


def take_uploads_only(app: Any) -> None:
    """Every component of the Blocks `app` refuses, in one line and before any request is made, a
    file reference whose path is a URL (Gradio would download it whole): files come as uploads."""
    from gradio_client.utils import is_http_url_like

    for block in getattr(app, "blocks", {}).values():
        move = getattr(block, "async_move_resource_to_block_cache", None)
        if move is None:
            continue

        async def uploaded_only(url_or_file_path: Any, _move: Any = move) -> Any:
            if isinstance(url_or_file_path, str) and is_http_url_like(url_or_file_path):
                raise error(URL_REFUSED)
            return await _move(url_or_file_path)

        block.async_move_resource_to_block_cache = uploaded_only  # this app's blocks only, not the class


def _gradio_upload_folder() -> str:
    from gradio.utils import get_upload_folder

    return get_upload_folder()


async def _refuse(send: Any, status: int, line: str) -> None:
    body = line.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
