"""The one read shape every query module uses, and the SQL fragments several of them share.

`fetch` opens a short read-only transaction (store.db: the same connection handling as every
access), runs one statement and maps its rows; `reading` is the same transaction for a function
that needs several statements; `fetch_frame` returns a DataFrame.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb
import numpy as np

from engine.types import MODES
from store.db import DbLike, as_database

if TYPE_CHECKING:
    import pandas as pd

T = TypeVar("T")

# Columns shown in run listings; the full record (provenance, config) comes from get_run.
RUN_COLUMNS = """
  r.run_id, r.experiment_id, r.created_utc, r.finished_utc, r.status, r.model,
  r.quantization, r.dataset, r.metadata_type, r.rag_mode, r.seed, r.prompt_version,
  r.n_items, coalesce(d.n_done, 0) AS n_done
"""
# An experiment by id, or by the name `run --experiment NAME` gave it.
RESOLVE_EXPERIMENT = (
    "SELECT experiment_id FROM runs WHERE experiment_id = $ref "
    "UNION ALL SELECT experiment_id FROM experiments WHERE name = $ref LIMIT 1"
)
DONE = "(SELECT run_id, count(*) AS n_done FROM generations GROUP BY run_id)"
# A rerun (`run --reruns`) is an experiment of its own only in the store: listings and the
# report leave it out, and `bias` shows it as its experiment's rerun floor. Its runs' config
# says which experiment it reruns (rerun.of).
def not_rerun(runs: str = "runs") -> str:
    """The condition on a runs row (`runs`: its table or alias) that it belongs to no rerun."""
    return f"json_extract_string({runs}.config_json, '$.rerun.of') IS NULL"


def run_or_experiment(experiment: str | None, run: str | None) -> tuple[str, dict[str, str]]:
    """(WHERE condition on `runs r`, its parameters) for one run by id or every run of an
    experiment (id or name): the choice `explain`, `verify` and `used` offer."""
    if (experiment is None) == (run is None):
        raise ValueError("give exactly one of experiment and run")
    if run is not None:
        return "r.run_id = $ref", {"ref": run}
    return f"r.experiment_id = ({RESOLVE_EXPERIMENT})", {"ref": experiment or ""}


def mode_order(column: str) -> str:
    """A SQL expression sorting modes in engine.types.MODES order (unknown modes last)."""
    cases = " ".join(f"WHEN '{mode}' THEN {i}" for i, mode in enumerate(MODES))
    return f"CASE {column} {cases} ELSE {len(MODES)} END"


MODE_ORDER = mode_order("r.rag_mode")


# What a reader takes: a store (path, Database, RunStore), or a request's open read connection.
Readable = DbLike | duckdb.DuckDBPyConnection


@contextmanager
def reading(db: Readable) -> Iterator[duckdb.DuckDBPyConnection]:
    """One short read-only transaction on `db` (a path, a Database or a RunStore), or the open
    connection `db` itself: a request that reads several things opens one connection and passes
    it down (each open costs 15-40 ms, more than most of the reads)."""
    if isinstance(db, duckdb.DuckDBPyConnection):
        yield db  # the caller's: it commits and closes it
        return
    with as_database(db).connect(read_only=True) as conn:
        yield conn


def fetch(db: Readable, sql: str, params: Any = None, *, into: Callable[..., T] | None = None) -> tuple:
    """Run one statement in a short read-only transaction: its rows as tuples, or each passed
    to `into` as positional arguments (a dataclass, say); mapped after the connection closed."""
    with reading(db) as conn:
        rows = conn.execute(sql, params).fetchall()
    return tuple(rows) if into is None else tuple(into(*row) for row in rows)


def fetch_frame(db: DbLike, sql: str, params: Any = None) -> pd.DataFrame:
    """Run one statement in a short read-only transaction and return a DataFrame (see frame)."""
    with reading(db) as conn:
        return frame(conn.execute(sql, params))


def marks(values: list[Any] | tuple[Any, ...]) -> str:
    """One `?` per value, for `x IN (?, ?, ...)`: a constant list DuckDB pushes into scans."""
    return ", ".join("?" * len(values))


def records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """table.to_dict("records"), the same values (a nullable column's missing ones as None), at
    a third of its time: whole columns to lists, not cell by cell (48 of `report`'s
    ~260 ms at 10M answers went to to_dict)."""
    import pandas as pd

    columns = list(table.columns)
    lists = []
    for column in columns:
        values = table[column].tolist()
        dtype = table[column].dtype
        if isinstance(dtype, pd.api.extensions.ExtensionDtype) and dtype.na_value is pd.NA:
            values = [None if v is pd.NA else v for v in values]
        lists.append(values)
    return [dict(zip(columns, row, strict=True)) for row in zip(*lists, strict=True)]


def frame(cursor: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The cursor's result as a DataFrame whose list cells are Python lists, not numpy arrays."""
    result = cursor.df()  # imports pandas
    plain_columns(result)
    return result


def plain_columns(result: pd.DataFrame) -> None:
    """Turn the object columns' cells of `result` into plain Python values, in place."""
    for column in result.columns:
        if result[column].dtype == object:
            result[column] = [plain(v) for v in result[column]]


def plain(value: Any) -> Any:
    """Numpy and pandas scalars and arrays as plain Python values (None for missing)."""
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    pd = sys.modules.get("pandas")  # pandas values exist only where pandas was loaded
    if pd is not None:
        if value is pd.NA or value is pd.NaT:
            return None
        if isinstance(value, pd.Timestamp):
            return value.to_pydatetime()
    return value


def rows_of_runs(db: DbLike, view: str, columns: str, then: str, run_ids: list[str],
                 source: str | None = None) -> tuple[tuple, ...]:
    """The rows of a per-run view (its first column run_id) for these runs, in the order of
    `run_ids`, then by `then`; the runs as constants in an IN list, which DuckDB pushes down.
    `source`: a table every row of the view comes from; while it holds no row, neither does the
    view, and the view is not read (its IN list of a whole store's runs took 13 ms at 1,000 runs)."""
    if not run_ids:
        return ()
    with reading(db) as conn:
        if source is not None and conn.execute(f"SELECT NOT EXISTS (SELECT 1 FROM {source})").fetchone() == (True,):
            return ()
        rows = conn.execute(f"SELECT {columns} FROM {view} WHERE run_id IN ({marks(run_ids)}) ORDER BY {then}",
                            list(run_ids)).fetchall()
    order = {run_id: i for i, run_id in enumerate(run_ids)}
    return tuple(sorted(rows, key=lambda r: order[r[0]]))


def run_ids_of(conn: duckdb.DuckDBPyConnection, experiment_ids: tuple[str, ...] | list[str],
               modes: tuple[str, ...] | None = None) -> list[str]:
    """The runs of these experiments (of `modes`; None: every mode), sorted by id."""
    find = "SELECT run_id FROM runs WHERE list_contains($ids, experiment_id)"
    params: dict[str, Any] = {"ids": list(experiment_ids)}
    if modes is not None:
        find += " AND list_contains($modes, rag_mode)"
        params["modes"] = list(modes)
    return [row[0] for row in conn.execute(find + " ORDER BY run_id", params).fetchall()]


def execute_over_runs(conn: duckdb.DuckDBPyConnection, sql: str, experiment_ids: tuple[str, ...] | list[str],
                      modes: tuple[str, ...] | None = None, *, run_ids: list[str] | None = None,
                      params: dict[str, Any] | None = None) -> duckdb.DuckDBPyConnection:
    """Execute `sql` with `{runs}` replaced by the runs of these experiments (run_ids_of; or
    `run_ids`, when the caller has them) as constants $run0, $run1, ... in that order, which DuckDB
    pushes into the views: a subquery there made it compute them for the whole store (11-15 s at
    1M answers). `$ids`, where the SQL names it, is the list of experiment ids; `params`, the
    statement's other parameters. No runs: NULL, so no rows."""
    runs = run_ids_of(conn, experiment_ids, modes) if run_ids is None else run_ids
    constants: dict[str, Any] = {**(params or {}), **{f"run{i}": run for i, run in enumerate(runs)}}
    if re.search(r"\$ids\b", sql):  # DuckDB refuses a named parameter the statement does not use
        constants["ids"] = list(experiment_ids)
    marks = ", ".join(f"$run{i}" for i in range(len(runs))) or "NULL"
    return conn.execute(sql.replace("{runs}", marks), constants)
