"""What all uploads together may hold on disk (PATTRIEVAL_MAX_UPLOADS_MB, demo.uploads).

`/gradio_api/upload` needs no session and Gradio keeps each file an hour; the app is launched as
`python -m demo` serves it, with its upload folder in the test's folder, and uploaded to over real
HTTP from fresh clients (httpx, gradio_client), as a looping stranger would."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import pytest

from demo.uploads import UploadLimits, folder_bytes, upload_problem
from tests.support.helpers import served_app

ROOT = Path(__file__).resolve().parents[2]
KB, MB = 1024, 1024 * 1024


@pytest.fixture
def app(tmp_path):
    """`python -m demo` with a 1 MB bound on uploads; (url, its upload folder)."""
    uploads = tmp_path / "gradio"
    with served_app(tmp_path / "app.duckdb", env=dict(GRADIO_TEMP_DIR=str(uploads), PATTRIEVAL_MAX_UPLOADS_MB="1")) as (url, _):
        yield url, uploads


def _upload(url: str, n: int, size: int = 300 * KB) -> httpx.Response:
    """One upload from a fresh client (no cookie, no session): `size` bytes of its own content."""
    content = f"{n:08d}".encode() * (size // 8)
    with httpx.Client(timeout=30) as client:
        return client.post(f"{url}gradio_api/upload", files={"files": (f"data-{n}.jsonl", content)})


def test_uploads_past_the_total_bound_are_refused_in_one_line(app, tmp_path):
    url, uploads = app
    accepted = [_upload(url, n) for n in range(3)]  # 0.9 MB: within 1 MB
    assert [r.status_code for r in accepted] == [200, 200, 200], [r.text for r in accepted]
    # Before: every upload was kept (an hour), whatever the folder held.
    started = time.monotonic()
    refused = [_upload(url, n) for n in range(3, 23)]  # 20 more, each from a fresh client
    elapsed = time.monotonic() - started
    assert {r.status_code for r in refused} == {413}
    line = refused[0].text
    assert line.startswith("the server holds 1 MB of uploads, at most 1 MB here; try again later"), line
    assert "\n" not in line and str(tmp_path) not in line
    assert folder_bytes(uploads) <= 1 * MB
    print(f"20 refused uploads of 300 KB in {elapsed:.2f} s")
    # gradio_client, a new session: refused too, nothing written.
    from gradio_client import Client, handle_file

    extra = tmp_path / "extra.jsonl"
    extra.write_bytes(b"y" * 300 * KB)
    with pytest.raises(Exception, match="413|at most 1 MB"):
        Client(url, verbose=False).predict(handle_file(str(extra)), None, api_name="/validate_dataset")
    assert folder_bytes(uploads) <= 1 * MB
    # A body of no declared length cannot be bounded before it is read: refused.
    chunked = httpx.post(f"{url}gradio_api/upload", content=iter([b"--x\r\n"]),
                         headers={"content-type": "multipart/form-data; boundary=x"}, timeout=30)
    assert (chunked.status_code, chunked.text) == (411, "an upload needs a Content-Length header")


def test_an_upload_that_would_leave_the_disk_nearly_full_is_refused(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    assert upload_problem(tmp_path, 100 * KB, 0, UploadLimits(min_free_mb=0)) is None
    status, line = upload_problem(tmp_path, 100 * KB, 0, UploadLimits(min_free_mb=free // MB + 1))
    assert (status, line) == (507, "the server's disk is nearly full; try the upload again later")
