"""Values derived from an experiment's runs, kept in the store (table derived_values, migration 013).

The app's Bias tab computes, per experiment, a bootstrap over every item of three runs and the
bias view's t-tests: about 2 s at 1M answers on a loaded 2-core machine, for a result that only
changes when the experiment's runs do. A value is kept with the experiment's *signature*: the
schema version, every run row of the experiment, and for the runs the value can read (the
complete ones) the count and an order-free hash of their generations and citations. A later
request uses the kept value only while the signature it computes now is the same, so a run
added, resumed (more answers), merged in, or replaced, or a migration that redefines a view,
makes the value unused and it is computed again. Hashing is cheap: DuckDB prunes the scans to
the runs' row groups (about 10 ms for three runs of 10,000 answers in a 1M store).

Readers look values up in their own read transaction; writers keep them afterwards in a short
write transaction of their own (`keep`), and give up quietly when the store is busy or read-only.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from store.db import utc_now

log = logging.getLogger(__name__)

# Seconds a request waits to keep its values: the value is computed already, keeping it is a bonus.
KEEP_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Derived:
    """One value to keep: what it is, for which experiment and request, and its signature."""

    kind: str
    experiment_id: str
    key: str
    signature: str
    value_json: str


def experiment_signature(conn: duckdb.DuckDBPyConnection, experiment_id: str) -> str:
    """What every value derived from the experiment's runs depends on, as a hex digest."""
    version = (conn.execute("SELECT max(version) FROM schema_migrations").fetchone() or (None,))[0]
    runs = conn.execute(
        "SELECT run_id, status, created_utc, finished_utc, rag_mode, model, quantization, dataset, dataset_sha, "
        "metadata_type, config_json, n_items FROM runs WHERE experiment_id = ? ORDER BY run_id",
        [experiment_id],
    ).fetchall()
    content = run_contents(conn, [r[0] for r in runs if r[1] == "complete"])
    return hashlib.sha256(repr((version, runs, sorted(content.items()))).encode()).hexdigest()


def run_contents(conn: duckdb.DuckDBPyConnection, run_ids: list[str]) -> dict[str, str]:
    """Per run (those with answers), the count and an order-free hash of its generations and of its
    citations, as one string: it changes whenever a row of either is added, removed or rewritten,
    by any writer (SQL typed by hand included). Used by experiment_signature and to tell whether
    rows kept from a run (store.kept_metrics' item_metric_rows) are still its rows."""
    if not run_ids:
        return {}
    marks = ", ".join("?" * len(run_ids))
    # bit_xor of per-row hashes: the same for the same rows in any order (rows are unique by
    # key). A generation written again gets a new created_utc (the writer stamps each row), so
    # its key, time and length stand for its content at a third of the cost of hashing the text.
    # One `IN (?, ...)` list: DuckDB prunes both scans to the runs' row groups.
    rows = conn.execute(
        f"SELECT g.run_id, g.n, g.h, c.n, c.h FROM "
        f"(SELECT run_id, count(*) AS n, bit_xor(hash(item_id, created_utc, n_tokens)) AS h FROM generations "
        f" WHERE run_id IN ({marks}) GROUP BY run_id) g LEFT JOIN "
        f"(SELECT run_id, count(*) AS n, bit_xor(hash(item_id, citation_index, position, relevant, probability)) AS h "
        f" FROM citations WHERE run_id IN ({marks}) GROUP BY run_id) c USING (run_id)",
        run_ids + run_ids).fetchall()
    return {run_id: f"{n}:{h}:{cn or 0}:{ch or 0}" for run_id, n, h, cn, ch in rows}


def lookup(conn: duckdb.DuckDBPyConnection, kind: str, experiment_id: str, key: str, signature: str) -> Any | None:
    """The kept value (decoded JSON) when its signature is `signature`; None otherwise."""
    row = conn.execute(
        "SELECT value_json FROM derived_values WHERE kind = ? AND experiment_id = ? AND key = ? AND signature = ?",
        [kind, experiment_id, key, signature],
    ).fetchone()
    return None if row is None else json.loads(row[0])


def keep(path: str | Path, values: list[Derived]) -> bool:
    """Write (or replace) the values in one short transaction; False when the store could not
    take them now (busy, read-only, full): they are computed again next time."""
    if not values:
        return True
    from store.db import connect

    try:
        with connect(path, timeout_s=KEEP_TIMEOUT_S) as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO derived_values VALUES (?, ?, ?, ?, ?, ?)",
                [(v.kind, v.experiment_id, v.key, v.signature, v.value_json, utc_now()) for v in values],
            )
    except Exception as err:  # a cache write must never fail the request that computed the value
        log.info("derived values not kept in %s: %s", path, err)
        return False
    return True
