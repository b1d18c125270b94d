"""Append-only schema migrations: `NNN_name.sql` files in this folder, applied in version order.

Each applied file is recorded in `schema_migrations`; a file is applied once, in its own
transaction together with its record, so a crash mid-migration leaves the database as it was.
New files are picked up automatically. What a shipped file does to a store must not change:
stores that applied it keep what it did (a file's comments may be corrected; what changed after
shipping is listed in each file's header and tests/support/old_migrations).

Views and macros are not migrated: store/macros.sql and store/views.sql hold each scalar macro's
and view's current definition once, and are applied in the transaction of the last pending
shipped migration, so a store of any version ends with exactly those (a change to either
therefore ships with a new migration file, which may hold only a comment). A migration that
reads views names them on a line `-- reads views: NAME, ...`; those are created from views.sql,
after macros.sql, in its transaction before it runs, so it reads their current definitions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import duckdb

from engine.errors import UserError

_FILE_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")

_READS_VIEWS = re.compile(r"(?m)^-- reads views: (\w+(?:, \w+)*)$")

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


def available_migrations(source: Traversable | Path | None = None) -> tuple[Migration, ...]:
    """The migration files in `source` (default: this package), in version order."""
    return _shipped_migrations() if source is None else _read_migrations(source)


@cache
def _shipped_migrations() -> tuple[Migration, ...]:
    # Read once per process: every open of a store checks them twice, and the package's files do
    # not change under a running process (reading all of them cost about 1 ms an open).
    return _read_migrations(resources.files(__name__))


def _read_migrations(folder: Traversable | Path) -> tuple[Migration, ...]:
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


@cache
def views_sql() -> str:
    """The text of store/views.sql: every view's current definition (CREATE OR REPLACE VIEW)."""
    return resources.files("store").joinpath("views.sql").read_text(encoding="utf-8")


@cache
def macros_sql() -> str:
    """The text of store/macros.sql: every scalar macro's current definition (CREATE OR REPLACE MACRO)."""
    return resources.files("store").joinpath("macros.sql").read_text(encoding="utf-8")


@cache
def _statements(sql: str) -> tuple[str, ...]:
    # Split once per text: a new store's migrations that read views look up their statements,
    # and splitting views.sql costs about 10 ms each time.
    return tuple(s.query for s in duckdb.extract_statements(sql))


def view_statement(name: str) -> str:
    """views.sql's CREATE OR REPLACE statement of one view or table macro, by name."""
    found = [s for s in _statements(views_sql()) if creates(s, name)]
    if len(found) != 1:
        raise RuntimeError(f"store/views.sql defines {name!r} {len(found)} times, not once")
    return found[0]


def creates(statement: str, name: str) -> bool:
    """Whether one statement's text (as duckdb.extract_statements gives it) creates this view or macro.
    The comments above a statement: DuckDB 2.0.1 keeps them in its text, 2.0.0 gave them to the
    statement before; the CREATE is looked for after any."""
    # One whitespace character or one whole comment line a step: no two ways to read the same text
    # (nested whitespace quantifiers backtrack exponentially on every statement that is not it).
    head = rf"(?:\s|--[^\n]*\n)*CREATE OR REPLACE (?:VIEW|MACRO) {re.escape(name)}\b"
    return re.match(head, statement) is not None


def views_read_by(migration: Migration) -> tuple[str, ...]:
    """The views a migration reads, from its `-- reads views: NAME, ...` line (none without one)."""
    return tuple(name for line in _READS_VIEWS.findall(migration.sql) for name in line.split(", "))


def apply_migrations(
    conn: duckdb.DuckDBPyConnection, migrations: Sequence[Migration] | None = None
) -> tuple[int, ...]:
    """Apply every pending migration in order on a read-write connection; returns their versions.

    With the shipped migrations (the default), store/macros.sql and store/views.sql are applied
    too, in the last one's transaction; a list given by a caller (a test building an older store)
    gets neither, but for the views a migration reads (`views_read_by`).
    """
    conn.execute(_CREATE_LEDGER)
    refuse_newer_schema(conn, migrations=migrations)
    applied: list[int] = []
    pending = pending_migrations(conn, migrations)
    for migration in pending:
        conn.execute("BEGIN TRANSACTION")
        try:
            if views_read_by(migration):
                conn.execute(macros_sql())
                for view in views_read_by(migration):
                    conn.execute(view_statement(view))
            conn.execute(migration.sql)
            if migrations is None and migration is pending[-1]:
                conn.execute(macros_sql())
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
    return datetime.now(UTC).replace(tzinfo=None)
