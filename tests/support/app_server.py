"""The app served for real on a free local port, as `python -m demo` serves it, for the tests that
drive its endpoints through gradio_client. Not a test module: the tests import it."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def refuse_load(request: Any) -> Any:
    """A JobQueue's loader for apps that must never load a model."""
    pytest.fail("nothing may load")


@contextlib.contextmanager
def served(settings: Any, jobs: Any, *, shutdown_timeout: float = 10, **launch: Any) -> Iterator[str]:
    """The app of `settings` with the worker `jobs`, launched without blocking; its URL. The
    worker is shut down (waiting up to `shutdown_timeout` s) and the server closed after."""
    from demo.app import build_app

    app = build_app(settings, jobs=jobs)
    port = free_port()
    app.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **launch)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        app.jobs.shutdown(timeout=shutdown_timeout)
        app.close()
