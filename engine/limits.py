"""Process limits for the sandboxed children (store.sandbox's SQL, engine.load_child's datasets).

A leaf module with no project imports, so that the store may import it too.
"""

from __future__ import annotations


def limit_address_space(limit: int | None) -> None:
    """Cap this process's memory so a runaway child fails in itself, not in the app; no-op for None/0."""
    if not limit:
        return
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass  # not on this platform (Windows, some macOS): the time limit still holds
