"""Append-only schema migrations: `NNN_name.sql` files in this folder, applied in version order.

Each applied file is recorded in `schema_migrations`; a file is applied once, in its own
transaction together with its record, so a crash mid-migration leaves the database as it was.
New files are picked up automatically; never edit a file once it has shipped.

Views are not migrated: store/views.sql holds each view's current definition once, and is
applied in the transaction of the last pending shipped migration, so a store of any version
ends with exactly those views (a change to a view therefore ships with a new migration file,
which may hold only a comment).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Sequence, Union

import duckdb

from engine.errors import UserError

_FILE_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")

_CREATE_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations(
  version INTEGER PRIMARY KEY, name VARCHAR, applied_utc TIMESTAMP)
"""


class SchemaTooNew(UserError):
    """The database was migrated by a newer version of this code than the one running."""


@dataclass(frozen=True)
class Migration:
    """One migration file: its version number, name and SQL text."""

    version: int
    name: str
    sql: str


def available_migrations(source: Union[Traversable, Path, None] = None) -> tuple[Migration, ...]:
    """The migration files in `source` (default: this package), in version order."""
    folder = resources.files(__name__) if source is None else source
    found: dict[int, Migration] = {}
    for entry in folder.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE_NAME.match(entry.name)
        if match is None:
            # A misnamed file would otherwise be skipped silently and its schema never exist.
            raise RuntimeError(f"migration file {entry.name!r} is not named NNN_name.sql")
        version = int(match.group(1))
        if version in found:
            raise RuntimeError(f"two migration files share version {version:03d}")
        found[version] = Migration(version, match.group(2), entry.read_text(encoding="utf-8"))
    return tuple(found[v] for v in sorted(found))


def applied_versions(conn: duckdb.DuckDBPyConnection) -> set[int]:
    """Versions recorded in `schema_migrations`; empty for a brand-new database."""
    try:
        rows = conn.execute("SELECT version FROM schema_migrations").fetchall()
    except duckdb.CatalogException:
        return set()  # cheaper than asking duckdb_tables() on every connect
    return {row[0] for row in rows}


def refuse_newer_schema(
    conn: duckdb.DuckDBPyConnection,
    where: str = "the database",
    migrations: Sequence[Migration] | None = None,
) -> None:
    """Raise SchemaTooNew when `conn` holds a migration newer than any this code ships.

    Older code on a newer schema would misread renamed columns or apply its own migrations
    out of order, so it stops before doing anything.
    """
    newest = max(applied_versions(conn), default=0)
    candidates = available_migrations() if migrations is None else migrations
    known = max((m.version for m in candidates), default=0)
    if newest > known:
        raise SchemaTooNew(
            f"{where} has schema version {newest}; this code knows up to {known}: upgrade pattrieval"
        )


def pending_migrations(
    conn: duckdb.DuckDBPyConnection, migrations: Sequence[Migration] | None = None
) -> tuple[Migration, ...]:
    """Migrations (default: the shipped ones) that this database has not applied yet."""
    done = applied_versions(conn)
    candidates = available_migrations() if migrations is None else migrations
    return tuple(m for m in sorted(candidates, key=lambda m: m.version) if m.version not in done)


def views_sql() -> str:
    """The text of store/views.sql: every view's current definition (CREATE OR REPLACE VIEW)."""
    return resources.files("store").joinpath("views.sql").read_text(encoding="utf-8")


def apply_migrations(
    conn: duckdb.DuckDBPyConnection, migrations: Sequence[Migration] | None = None
) -> tuple[int, ...]:
    """Apply every pending migration in order on a read-write connection; returns their versions.

    With the shipped migrations (the default), store/views.sql is applied too, in the last
    one's transaction; a list given by a caller (a test building an older store) gets no views.
    """
    conn.execute(_CREATE_LEDGER)
    refuse_newer_schema(conn, migrations=migrations)
    applied: list[int] = []
    pending = pending_migrations(conn, migrations)
    for migration in pending:
        conn.execute("BEGIN TRANSACTION")
        try:
            conn.execute(migration.sql)
            if migrations is None and migration is pending[-1]:
                conn.execute(views_sql())
            conn.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                [migration.version, migration.name, _utc_now()],
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        applied.append(migration.version)
    return tuple(applied)


def _utc_now() -> datetime:
    """Now in UTC as a naive datetime, which is how TIMESTAMP columns hold UTC here."""
    return datetime.now(timezone.utc).replace(tzinfo=None)
