"""Inspect's own runner (`inspect_ai.eval`) called from a test, in a thread of its own.

Inspect's eval() starts its event loop with anyio.run, which refuses to start where a loop is
running already. A pytest worker that ran the browser tests before has one: Playwright's sync API
keeps its loop running in the main thread. A fresh thread has none, wherever the test runs.
"""

from __future__ import annotations

from typing import Any


def inspect_eval(*args: Any, **kwargs: Any) -> Any:
    """`inspect_ai.eval(*args, **kwargs)` in a new thread; its logs, or its exception."""
    from concurrent.futures import ThreadPoolExecutor

    from inspect_ai import eval as eval_

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(eval_, *args, **kwargs).result()
