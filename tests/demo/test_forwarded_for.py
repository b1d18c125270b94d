"""Per-client bounds behind an appending proxy, and file inputs that take uploads only.

A Space's proxy appends the address it saw to X-Forwarded-For and keeps whatever the visitor sent
before it, so the first address is the visitor's to choose: keyed on it, one client forging a new
address per session queued 21 jobs. The app is launched for real behind a real appending proxy
(tests/support/forwarding_proxy.py) and driven over HTTP by a client forging the header."""

from __future__ import annotations

import http.server
import threading
import time
from types import SimpleNamespace

import httpx
import pytest

from demo.jobs import JobQueue
from demo.settings import AppSettings, settings_from_env
from demo.uploads import SETTLE_S, URL_REFUSED, HeldUpload, folder_bytes
from demo.visitors import client_key, forwarded_address
from tests.support.app_server import served
from tests.support.forwarding_proxy import appending_proxy, rewritten_head
from tests.support.helpers import served_app

KB, MB = 1024, 1024 * 1024
SPACE = dict(operator_view=False, trust_forwarded_for=True)


@pytest.mark.parametrize("lines, hops, visitor", [
    (["203.0.113.7"], 1, "203.0.113.7"),
    (["1.2.3.4, 203.0.113.7"], 1, "203.0.113.7"),  # a forged first address, the proxy's last
    (["1.2.3.4", "203.0.113.7"], 1, "203.0.113.7"),  # the proxy added a line of its own
    (["1.2.3.4, 5.6.7.8, 203.0.113.7, 10.16.0.2"], 2, "203.0.113.7"),  # two trusted proxies
    (["203.0.113.7, 10.16.0.2"], 3, "203.0.113.7"),  # fewer than the trusted hops: all theirs
    ([" , "], 1, None),
    ([], 1, None),
])
def test_the_visitor_is_the_address_the_trusted_proxy_appended(lines, hops, visitor):
    assert forwarded_address(lines, hops) == visitor


def test_a_request_is_keyed_by_the_appended_address_where_the_header_is_trusted(tmp_path, monkeypatch):
    def request(forwarded, host="10.16.0.2"):
        return SimpleNamespace(session_hash="s", headers={"x-forwarded-for": forwarded}, client=SimpleNamespace(host=host))

    space = AppSettings(tmp_path / "x.duckdb", **SPACE)
    assert client_key(request("1.2.3.4, 203.0.113.7"), space) == "client:203.0.113.7"
    two = AppSettings(tmp_path / "x.duckdb", trusted_proxy_hops=2, **SPACE)
    assert client_key(request("1.2.3.4, 203.0.113.7, 10.0.0.9"), two) == "client:203.0.113.7"
    # Where the header is not trusted, the socket's peer counts, whatever the header says.
    direct = AppSettings(tmp_path / "x.duckdb", operator_view=False)
    assert client_key(request("1.2.3.4", host="198.51.100.4"), direct) == "client:198.51.100.4"
    for name in ("PATTRIEVAL_TRUSTED_PROXY_HOPS", "PATTRIEVAL_TRUST_FORWARDED_FOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPACE_ID", "someone/pattrieval")
    assert settings_from_env(str(tmp_path / "x.duckdb")).trusted_proxy_hops == 1
    monkeypatch.setenv("PATTRIEVAL_TRUSTED_PROXY_HOPS", "2")
    assert settings_from_env(str(tmp_path / "x.duckdb")).trusted_proxy_hops == 2
    # The test's proxy appends as a Space's does: the client's lines joined, its address last.
    head = rewritten_head(b"GET / HTTP/1.1\r\nX-Forwarded-For: 1.2.3.4\r\nx-forwarded-for: 5.6.7.8", "127.0.0.1")
    assert b"X-Forwarded-For: 1.2.3.4, 5.6.7.8, 127.0.0.1\r\n" in head


class _Held:
    """A job loader that holds every load until released (the queue is what this test fills)."""

    def __init__(self):
        self.gate = threading.Event()

    def __call__(self, req):
        self.gate.wait(60)
        raise RuntimeError("not loaded in this test")


@pytest.mark.slow  # an app behind the proxy, three gradio_client sessions (~15 s cold)
def test_a_client_forging_x_forwarded_for_cannot_escape_its_job_cap_behind_an_appending_proxy(tmp_path, capsys):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    held = _Held()
    settings = AppSettings(tmp_path / "app.duckdb", max_jobs_per_visitor=3, max_jobs_per_client=2, max_queued_jobs=20,
                           **SPACE)
    form = ("smoke", None, "gender", "", "", "", ["vanilla"], "none", 2, 4, 2)
    try:
        with served(settings, JobQueue(load=held), shutdown_timeout=30) as url, \
                appending_proxy(httpx.URL(url).port) as proxy:
            queued, refused = 0, []
            for n in range(3):  # a new session per forged address
                forger = Client(proxy, verbose=False, headers={"X-Forwarded-For": f"198.51.100.{n}"})
                try:
                    forger.predict(*form, f"forged{n}", "", api_name="/run_batch")
                    queued += 1
                except AppError as err:
                    refused.append(str(err))
            # Before: keyed on the forged first address, each session was a new client (3 of 3).
            assert queued == 2, refused
            assert refused and "your address already has 2 jobs queued or running" in refused[0]
            held.gate.set()
    finally:
        held.gate.set()
    capsys.readouterr()  # the held loader's failures go to the server's log


@pytest.fixture
def proxied_app(tmp_path):
    """`python -m demo` as a Space runs it (the header trusted), uploads bounded at 2 MB in all
    and 1 MB per visitor, behind the appending proxy; (the proxy's URL, the upload folder)."""
    uploads = tmp_path / "gradio"
    env = dict(SPACE_ID="someone/pattrieval", GRADIO_TEMP_DIR=str(uploads), PATTRIEVAL_MAX_UPLOADS_MB="2",
               PATTRIEVAL_MAX_UPLOADS_PER_VISITOR_MB="1")
    with served_app(tmp_path / "app.duckdb", env=env) as (url, _), appending_proxy(httpx.URL(url).port) as proxy:
        yield proxy, uploads


def _upload(proxy: str, n: int, *, source: str = "127.0.0.1", forged: str | None = None) -> httpx.Response:
    """One 300 KB upload from a fresh client connecting from `source`, forging the header if asked."""
    headers = {"X-Forwarded-For": forged} if forged else {}
    with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=30) as client:
        return client.post(f"{proxy}gradio_api/upload", headers=headers,
                           files={"files": (f"data-{n}.jsonl", f"{n:08d}".encode() * (300 * KB // 8))})


@pytest.mark.slow  # `python -m demo` behind the proxy (~15 s to start)
def test_one_visitor_cannot_fill_the_upload_bound_for_everyone_even_forging_its_address(proxied_app):
    proxy, uploads = proxied_app
    hog = [_upload(proxy, n, forged=f"198.51.100.{n}") for n in range(3)]  # 0.9 MB: its share
    assert [r.status_code for r in hog] == [200, 200, 200], [r.text for r in hog]
    more = [_upload(proxy, n, forged=f"198.51.100.{n}") for n in range(3, 6)]
    # Before: no share per visitor, and a forged address was a new visitor: all three accepted,
    # the shared 2 MB filled, and the next visitor refused.
    assert {r.status_code for r in more} == {413}
    line = more[0].text
    assert line.startswith("your uploads here hold 1 MB, at most 1 MB per visitor;"), line
    assert "\n" not in line
    other = [_upload(proxy, n, source="127.0.0.2") for n in range(6, 9)]  # another visitor's address
    assert [r.status_code for r in other] == [200, 200, 200], [r.text for r in other]
    assert folder_bytes(uploads) <= 2 * MB


def test_an_upload_stops_counting_against_its_visitor_once_its_files_are_gone(tmp_path):
    kept = tmp_path / "kept.jsonl"
    kept.write_text("{}")
    assert HeldUpload(0.0, 10, (str(tmp_path / "gone.jsonl"),)).still_held(now=1.0)  # Gradio still moving it
    assert not HeldUpload(0.0, 10, (str(tmp_path / "gone.jsonl"),)).still_held(now=SETTLE_S + 1)
    assert HeldUpload(0.0, 10, (str(kept),)).still_held(now=SETTLE_S + 1)


@pytest.mark.slow  # an app launched in-process (~17 s cold)
def test_a_file_input_given_a_link_is_refused_before_anything_is_downloaded(tmp_path, monkeypatch, capfd):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    asked = []

    class Body(http.server.BaseHTTPRequestHandler):
        """Stands for any web server: Gradio reaches the link's host through it (HTTP_PROXY)."""

        def do_GET(self):
            asked.append(self.path)
            body = b'{"id": "1"}\n' * 100_000
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Body)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    # Gradio fetches a huggingface.co link without its address check, through the environment's
    # proxy: here the local server above, so that the link resolves without a network.
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{web.server_address[1]}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    link = {"path": "http://huggingface.co/datasets/x/big.jsonl", "meta": {"_type": "gradio.FileData"},
            "orig_name": "big.jsonl"}
    try:
        with served(AppSettings(tmp_path / "app.duckdb", **SPACE), JobQueue(load=lambda r: None)) as url:
            started = time.monotonic()
            with pytest.raises(AppError) as refused:
                Client(url, verbose=False).predict(link, 5, api_name="/validate_dataset")
            elapsed = time.monotonic() - started
    finally:
        web.shutdown()
        web.server_close()
    # Before: Gradio downloaded the whole body (600 MB: +1.3 GB of the app's memory), past the
    # upload bounds, and the handler saw the file.
    assert str(refused.value) == URL_REFUSED
    assert asked == []
    assert folder_bytes(tmp_path / "gradio") == 0
    assert "Traceback" not in capfd.readouterr().err
    assert elapsed < 10
