"""store/views.sql: a store left by the code before it, at any schema version, upgrades to exactly its views."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from store.db import connect
from store.migrations import Migration, apply_migrations, available_migrations, views_sql

OLD = Path(__file__).resolve().parent / "old_migrations"
# The code before views.sql shipped stopped at migration 11; later migrations were written with
# views.sql (each applies it), and the views they add did not exist in the old code.
OLD_CODE_LAST = 11
ADDED_AFTER_OLD_CODE = {"compare_item_metrics", "citation_decisions"}  # migrations 012 and 014
# Views views.sql has changed since (their upgrade is checked by the test above this one's).
CHANGED_AFTER_OLD_CODE = {"query_metrics", "bias"}  # migrations 016 (citation_syntax 'paper'), 017 (bias)


def _old_migrations() -> list[Migration]:
    """The migrations as the code before views.sql shipped them: the files it changed from
    tests/old_migrations, the others as they are."""
    old = {int(p.name[:3]): p.read_text(encoding="utf-8") for p in OLD.glob("*.sql")}
    return [Migration(m.version, m.name, old.get(m.version, m.sql)) for m in available_migrations()
            if m.version <= OLD_CODE_LAST]


def _views(conn) -> dict[str, str]:
    """Each view's SQL as DuckDB prints it back, with EXCLUDE lists sorted (it prints a set)."""
    rows = conn.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal AND schema_name = 'main'").fetchall()
    return {name: _EXCLUDE.sub(lambda m: f"EXCLUDE ({', '.join(sorted(m.group(1).split(', ')))})", sql)
            for name, sql in rows}


_EXCLUDE = re.compile(r"EXCLUDE \(([^()]*)\)")


def _view_names_in_views_sql() -> list[str]:
    return re.findall(r"(?m)^CREATE OR REPLACE VIEW (\w+) AS$", views_sql())


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> dict[str, str]:
    with connect(tmp_path_factory.mktemp("fresh") / "new.duckdb", read_only=True) as conn:
        return _views(conn)


def test_views_sql_defines_each_view_once_and_a_new_store_has_exactly_those(fresh):
    names = _view_names_in_views_sql()
    assert len(names) == len(set(names)) and set(fresh) == set(names)
    for migration in available_migrations():
        if migration.version > 5:  # 002 and 005 keep their old texts: 007 reads query_metrics
            assert "CREATE VIEW" not in migration.sql and "REPLACE VIEW" not in migration.sql, migration.name


@pytest.mark.parametrize("version", range(0, OLD_CODE_LAST + 1))
def test_a_store_of_the_old_code_at_any_version_upgrades_to_the_views_of_views_sql(tmp_path, version, fresh):
    path = tmp_path / f"v{version}.duckdb"
    conn = duckdb.connect(str(path))
    try:
        apply_migrations(conn, [m for m in _old_migrations() if m.version <= version])
    finally:
        conn.close()
    with connect(path) as conn:  # today's code: applies what is pending, then views.sql
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == max(
            m.version for m in available_migrations())
        assert _views(conn) == fresh
        for view in fresh:
            conn.execute(f"SELECT * FROM {view} LIMIT 0")


def test_the_old_code_at_its_newest_version_had_these_views_already(tmp_path, fresh):
    """A store the old code left at its newest version had views.sql's views, but for those added since."""
    conn = duckdb.connect(str(tmp_path / "old.duckdb"))
    try:
        apply_migrations(conn, _old_migrations())
        assert ({k: v for k, v in _views(conn).items() if k not in CHANGED_AFTER_OLD_CODE}
                == {k: v for k, v in fresh.items() if k not in ADDED_AFTER_OLD_CODE | CHANGED_AFTER_OLD_CODE})
    finally:
        conn.close()


def test_a_change_in_views_sql_reaches_a_store_with_its_next_migration(tmp_path, monkeypatch):
    import store.migrations as migrations

    path = tmp_path / "s.duckdb"
    with connect(path):
        pass
    changed = views_sql().replace("CREATE OR REPLACE VIEW tokens AS\nSELECT\n  run_id,",
                                  "CREATE OR REPLACE VIEW tokens AS\nSELECT\n  run_id, 'marked' AS mark,")
    assert changed != views_sql()
    next_version = max(m.version for m in available_migrations()) + 1
    shipped = available_migrations()
    monkeypatch.setattr(migrations, "views_sql", lambda: changed)
    monkeypatch.setattr(migrations, "available_migrations",
                        lambda source=None: (*shipped, Migration(next_version, "tokens_mark", "-- tokens: a mark\n")))
    with connect(path, read_only=True) as conn:
        assert conn.execute("SELECT mark FROM tokens LIMIT 0").description[0][0] == "mark"
