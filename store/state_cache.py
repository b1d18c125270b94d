"""Values computed from a store, kept while the store is unchanged.

The app asks for the same experiment's bias report and tables again and again (every visitor of
the Bias tab), and at 10,000 items per run they take about half a second to compute
(scripts/bench_app.py). A value is kept with the store's fingerprint taken before reading, and
only when the fingerprint is the same again after computing, so a write that lands meanwhile is
never hidden; any later write changes the fingerprint and the next request recomputes.
"""

from __future__ import annotations

import copy
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def store_fingerprint(path: str | os.PathLike[str]) -> tuple:
    """What changes whenever the store's content does: identity, size and change times of the
    database file and of its write-ahead log. DuckDB appends every commit to the log (it grows,
    or appears), and a checkpoint rewrites the file and removes the log, so no write leaves all
    of them as they were."""
    path = Path(path)
    parts: list[tuple[int, int, int, int, int] | None] = []  # None: the file is not there
    for file in (path, path.with_name(path.name + ".wal")):
        try:
            st = os.stat(file)
        except FileNotFoundError:
            parts.append(None)
        else:
            parts.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(parts)


class StoreStateCache:
    """A few values per (store, key), each valid for the store state it was computed from.

    Callers get their own deep copy, so no one can change what the next caller sees; errors are
    not kept.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._values: OrderedDict[tuple, tuple[tuple, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: str | os.PathLike[str], key: Hashable, compute: Callable[[], T]) -> T:
        """The value for `key` on the store at `path`: kept, or computed by `compute()` now."""
        full_key = (os.path.realpath(path), key)
        before = store_fingerprint(path)
        with self._lock:
            hit = self._values.get(full_key)
            if hit is not None and hit[0] == before:
                self._values.move_to_end(full_key)
                return copy.deepcopy(hit[1])
        value = compute()
        if store_fingerprint(path) == before:
            with self._lock:
                self._values[full_key] = (before, copy.deepcopy(value))
                self._values.move_to_end(full_key)
                while len(self._values) > self._size:
                    self._values.popitem(last=False)
        return value

    def clear(self) -> None:
        """Forget every value (scripts/bench_app.py times uncached calls with it)."""
        with self._lock:
            self._values.clear()
