"""store/views.sql: a store left by the code before it, at any schema version, upgrades to exactly its views."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from store.db import connect
from store.migrations import Migration, apply_migrations, available_migrations, creates, view_statement, views_sql

OLD = Path(__file__).resolve().parents[1] / "support" / "old_migrations"
# The code before views.sql shipped stopped at migration 11; later migrations were written with
# views.sql (each applies it), and the views they add did not exist in the old code.
OLD_CODE_LAST = 11
ADDED_AFTER_OLD_CODE = {"compare_item_metrics", "citation_decisions",  # migrations 012 and 014
                        "run_metric_wide", "bias_pairs",  # 018: run_metrics' numbers, bias' pairs
                        "judgements", "judge_agreement",  # 019: a panel of judges
                        "citation_use",  # 020: cited or used
                        "run_labels",  # 025: the label pair of each run (citation_decisions reads it)
                        "rerun_floor"}  # 026: each measure's rerun floor
# Views views.sql has changed since (their upgrade is checked by the test above this one's).
CHANGED_AFTER_OLD_CODE = {"query_metrics", "bias", "run_metrics"}  # migrations 016 (citation_syntax 'paper'), 017, 018


def _old_migrations() -> list[Migration]:
    """The migrations as the code before views.sql shipped them: the files it changed from
    tests/support/old_migrations, the others as they are."""
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
    return re.findall(r"(?m)^CREATE OR REPLACE VIEW (\w+) AS\b", views_sql())


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> dict[str, str]:
    with connect(tmp_path_factory.mktemp("fresh") / "new.duckdb", read_only=True) as conn:
        return _views(conn)


def test_views_sql_defines_each_view_once_and_a_new_store_has_exactly_those(fresh):
    names = _view_names_in_views_sql()
    assert len(names) == len(set(names)) and set(fresh) == set(names)
    for migration in available_migrations():  # views and macros are views.sql's and macros.sql's alone
        assert not re.search(r"CREATE (OR REPLACE )?(VIEW|MACRO)", migration.sql), migration.name


def test_macros_sql_defines_each_macro_once_and_a_new_store_has_exactly_those(tmp_path):
    from store.migrations import macros_sql

    names = re.findall(r"(?m)^CREATE OR REPLACE MACRO (\w+)\(", macros_sql())
    table_macros = re.findall(r"(?m)^CREATE OR REPLACE MACRO (\w+)\(.*\) AS TABLE$", views_sql())
    assert len(names) == len(set(names)) and "normalize_answer" in names and "label_short_a" in names
    with connect(tmp_path / "m.duckdb", read_only=True) as conn:
        got = {name for (name,) in conn.execute(
            "SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type IN ('macro', 'table_macro') "
            "AND NOT internal AND schema_name = 'main'").fetchall()}
    assert got == set(names) | set(table_macros)


def test_a_migration_reads_the_views_of_views_sql(tmp_path):
    """007's backfill reads query_metrics as views.sql defines it now, in a store whose migrations
    never created it (no migration creates a view)."""
    path = tmp_path / "s.duckdb"
    conn = duckdb.connect(str(path))
    try:
        apply_migrations(conn, [m for m in available_migrations() if m.version < 7])
        assert not conn.execute("SELECT * FROM duckdb_views() WHERE view_name = 'query_metrics'").fetchall()
        conn.execute("INSERT INTO runs (run_id, experiment_id, config_hash, created_utc, status, model, dataset_sha, "
                     "rag_mode) VALUES ('r1', 'e', 'h1', now()::TIMESTAMP, 'complete', 'm', 's', 'base')")
        conn.execute("INSERT INTO items VALUES ('s', 'q1', 'q', ['Jay-Z'], [{'id': 'a', 'title': '', 'text': 't', "
                     "'relevant': true}, {'id': 'b', 'title': '', 'text': 't', 'relevant': false}])")
        for item, answer in (("q1", "Jay Z [1][2]"), ("q2", "nothing")):
            conn.execute("INSERT INTO generations (run_id, item_id, answer, shown_doc_ids, created_utc) "
                         "VALUES ('r1', ?, ?, ['a', 'b'], now()::TIMESTAMP)", [item, answer])
        conn.execute("INSERT INTO citations VALUES ('r1', 'q1', 0, 1, 'a', true, 0.5), ('r1', 'q1', 1, 2, 'b', false, 0.25)")
    finally:
        conn.close()
    with connect(path) as conn:  # applies 007 (its backfill) to 018
        kept = conn.execute("SELECT n_answers, precision, recall, f1, exact_match FROM run_scores").fetchall()
        live = conn.execute("SELECT count(*), avg(precision), avg(recall), avg(f1), avg(exact_match) "
                            "FROM query_metrics").fetchall()
    assert kept == live == [(2, 0.25, 0.5, 1 / 3, 0.0)]


@pytest.mark.parametrize("text", [
    # DuckDB 2.0.0's statement text starts at the CREATE (the comments above went to the statement before)
    "CREATE OR REPLACE VIEW query_metrics AS\nSELECT 1;\n\n-- the next view's comment\n",
    # 2.0.1's keeps the comments above it: pip's newest install broke every new store on this
    "-- ---- query_metrics (as of migration 016)\n--\n\n  CREATE OR REPLACE VIEW query_metrics AS\nSELECT 1;",
])
def test_a_view_is_found_in_its_statement_with_or_without_the_comments_above_it(text):
    assert creates(text, "query_metrics")
    assert not creates(text, "query")  # a name is a whole word
    assert not creates("-- CREATE OR REPLACE VIEW query_metrics AS\nSELECT 1;", "query_metrics")  # commented out


def test_every_view_and_table_macro_of_views_sql_is_found_once():
    for name in re.findall(r"(?m)^CREATE OR REPLACE (?:VIEW|MACRO) (\w+)", views_sql()):
        assert view_statement(name).lstrip().startswith(("CREATE", "--"))


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
