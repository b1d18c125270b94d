"""The SQL tab: a visitor's read-only SQL through the sandbox, the schema beside it, a CSV of the result."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

EMPTY_STORE = "nothing is stored yet: start a run in the Run tab, then query it here"
SCHEMA_COLUMNS = ["table / view", "kind", "columns"]
CSV_NAME = "pattrieval-query.csv"


@dataclass(frozen=True)
class SqlOutcome:
    """What the console shows: the rows (cells as display values), a one-line status, the CSV file."""

    frame: pd.DataFrame
    status: str
    csv_path: Path


class SqlGate:
    """Admission to the SQL console: `slots` queries run at once, at most `max_waiting` wait for
    a slot, and each visitor has at most one query running or waiting.

    Why: Gradio queued every /sql call behind one slot with no bound, so four slow queries of one
    visitor made another's SELECT 1 wait 40 s. Now a visitor's second query while the first runs
    is refused at once, a full console says so at once, and a query waits for a slot at most
    `max_wait_s` (about one query's limit) before it is refused."""

    def __init__(self, slots: int = 2, max_waiting: int = 6, max_wait_s: float = 15.0):
        self.slots, self.max_waiting, self.max_wait_s = slots, max_waiting, max_wait_s
        self._lock = threading.Lock()
        self._free = threading.Semaphore(slots)
        self._visitors: dict[str, int] = {}
        self._waiting = 0

    def run(self, visitor: str, call: Callable[[], Any]) -> Any:
        """`call()` once the visitor may run a query (UserError, one line, when not)."""
        with self._lock:
            if self._visitors.get(visitor, 0) >= 1:
                raise UserError("your previous query is still running: one query at a time")
            if self._waiting >= self.max_waiting:
                raise UserError("the SQL console is busy; try again in a few seconds")
            self._visitors[visitor] = 1
            self._waiting += 1
        try:
            got = self._free.acquire(timeout=self.max_wait_s)
            with self._lock:
                self._waiting -= 1
            if not got:
                raise UserError("the SQL console is busy; try again in a few seconds")
            try:
                return call()
            finally:
                self._free.release()
        finally:
            with self._lock:
                self._visitors.pop(visitor, None)


def run_sql(db_path: Path, sql: str | None, *, max_rows: int = 1000, timeout_s: float = 10.0,
            owner: str | None = None, limits: Any = None) -> SqlOutcome:
    """Run `sql` through store.queries.run_readonly_sql; every refusal is a one-line UserError
    (the sandbox already masks server paths in rows, column names and messages). `limits`
    (demo.downloads.DownloadLimits) bound the CSV's disk, `owner`'s and everyone's."""
    from store.queries.console import run_readonly_sql

    if not Path(db_path).is_file():
        raise UserError(EMPTY_STORE)  # before the sandbox: it would report a missing file
    result = run_readonly_sql(db_path, sql or "", max_rows=max_rows, timeout_s=timeout_s)
    frame = display_rows(result.columns, result.rows)
    from demo.downloads import new_download
    from store.csv_safe import csv_frame

    out = new_download(CSV_NAME, owner=owner, limits=limits)
    csv_frame(frame).to_csv(out, index=False)  # stored text is visitors' text: no live formulas
    n = len(frame)
    cut = f", cut at {max_rows:,} rows (add a LIMIT or aggregate)" if result.truncated else ""
    status = f"{n:,} row{'' if n == 1 else 's'}{cut} in {result.elapsed_s:.2f} s"
    return SqlOutcome(frame, status, out)


def display_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A frame's cells as the console shows them (display_rows)."""
    return display_rows(tuple(map(str, frame.columns)), frame.itertuples(index=False, name=None))


def display_rows(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> pd.DataFrame:
    """The result with every cell a JSON scalar (store.queries.console.shown_cell: exact numbers as
    numbers, dates, times, intervals, UUIDs, blobs and integers past 2**53 as text, lists, structs
    and maps as JSON text) and unique column names, so that the table widget, Gradio's reply and
    the CSV file show every cell as it was returned, whatever its type."""
    import pandas as pd

    from store.queries.console import shown_cell

    seen: dict[str, int] = {}
    names = []
    for name in map(str, columns):  # SELECT 1, 1 gives two columns named "1"
        seen[name] = seen.get(name, 0) + 1
        names.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    # Object columns: a NULL among integers stays a NULL, not NaN beside 1.0, 2.0.
    cells = [[shown_cell(v) for v in row] for row in rows]
    return pd.DataFrame(cells, columns=names, dtype=object) if cells else pd.DataFrame(columns=names)


def schema_rows(db_path: Path) -> list[list[str]]:
    """The tables and views a visitor can query, one row each with its columns and their types."""
    from store.queries.console import table_columns

    if not Path(db_path).is_file():
        return []
    columns = table_columns(db_path)
    rows: dict[tuple[str, str], list[str]] = {}  # (table, kind) -> its columns
    for table, kind, column, data_type in columns.itertuples(index=False):
        rows.setdefault((table, kind), []).append(f"{column} {data_type}")
    return [[table, kind, ", ".join(cols)] for (table, kind), cols in rows.items()]


def examples() -> tuple[tuple[str, str], ...]:
    """(title, sql) of the README's example queries."""
    from store.examples import EXAMPLE_QUERIES

    return EXAMPLE_QUERIES
