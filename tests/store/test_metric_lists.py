"""The SQL's lists of per-answer metrics hold exactly engine.types.ANSWER_METRICS' own.

The Python lists (compare's, the exports', Every Eval Ever's) are built from the registry; the SQL
cannot be without templating the views, so each of its lists is read here and held to the
registry: a metric added to the registry and forgotten in a view or a kept table fails with the
view's name and the metric's. A fresh store's views are store/views.sql's (apply_migrations runs
it last), and its tables are what every migration made them.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from engine.types import COMPARED_METRICS, EXPORTED_METRICS, SUMMARISED_METRICS, AnswerMetric
from store.db import connect
from store.kept_metrics import ITEM_METRICS
from store.migrations import view_statement
from tests.support.metrics_oracle import RUN_METRICS

# A run's mean and 95% interval of each summarised metric, as run_metric_wide names them.
SUMMARY_COLUMNS = tuple(f"{name}{end}" for name in SUMMARISED_METRICS for end in ("", "_ci_low", "_ci_high"))
# Each compared metric in run A, in run B and B - A, as compare_runs names them.
PAIRED_COLUMNS = tuple(f"{name}{end}" for name in COMPARED_METRICS for end in ("_a", "_b", "_diff"))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("metric_lists") / "fresh.duckdb"
    with connect(path):
        pass
    return path


def _columns(conn: duckdb.DuckDBPyConnection, query: str, params: dict[str, str] | None = None) -> list[str]:
    """The columns a query gives (an empty store's: it reads no rows)."""
    cursor = conn.execute(f"SELECT * FROM ({query}) LIMIT 0", params or {})
    return [d[0] for d in cursor.description]


def _holds(where: str, found: list[str] | tuple[str, ...], keys: set[str], wanted: tuple[str, ...]) -> None:
    """`found` less its `keys` (the columns that are no metric) is `wanted`, in its order; else a
    message naming `where` and each metric missing, extra or out of order."""
    metrics = [c for c in found if c not in keys]
    missing = [m for m in wanted if m not in metrics]
    assert not missing, f"{where} lacks {', '.join(missing)}, which engine.types.ANSWER_METRICS lists there"
    extra = [m for m in metrics if m not in wanted]
    assert not extra, f"{where} has {', '.join(extra)}, which engine.types.ANSWER_METRICS does not list there"
    assert tuple(metrics) == wanted, f"{where} orders its metrics {metrics}, the registry {list(wanted)}"


def test_query_metrics_defines_exactly_the_exported_metrics(fresh):
    with connect(fresh, read_only=True) as conn:
        found = _columns(conn, "FROM query_metrics")
    _holds("views.sql's query_metrics", found, {"run_id", "item_id", "cited", "gold"}, EXPORTED_METRICS)


def test_run_metric_summary_lists_exactly_the_summarised_metrics():
    # One {'metric': 'name', 'value': name} per metric in its unnest list: rows, not columns.
    entries = re.findall(r"\{'metric': '(\w+)', 'value': (\w+)\}", view_statement("run_metric_summary"))
    assert all(name == value for name, value in entries), f"run_metric_summary reads another's value: {entries}"
    _holds("views.sql's run_metric_summary", [name for name, _ in entries], set(), SUMMARISED_METRICS)


def test_the_run_wide_view_and_its_kept_table_hold_each_summarised_metric_with_its_interval(fresh):
    with connect(fresh, read_only=True) as conn:
        for where, relation, keys in (
                ("views.sql's run_metric_wide", "run_metric_wide", {"run_id", "n", "n_gold"}),
                ("the kept run rows (run_metric_rows, migration 013)", "run_metric_rows",
                 {"run_id", "n", "n_gold", "n_answers", "computed_utc"})):
            _holds(where, _columns(conn, f"FROM {relation}"), keys, SUMMARY_COLUMNS)


def test_compare_item_metrics_its_kept_table_and_its_kept_select_hold_exactly_the_compared_metrics(fresh):
    with connect(fresh, read_only=True) as conn:
        for where, found, keys in (
                ("views.sql's compare_item_metrics", _columns(conn, "FROM compare_item_metrics"), set()),
                ("the kept item rows (item_metric_rows, migration 023)", _columns(conn, "FROM item_metric_rows"),
                 {"computed_utc"}),
                ("store/kept_metrics.py's ITEM_METRICS", _columns(conn, ITEM_METRICS, {"run": "r"}), set())):
            _holds(where, found, {"run_id", "item_id", "cites_in_range", *keys}, COMPARED_METRICS)


def test_compare_runs_pairs_exactly_the_compared_metrics(fresh):
    with connect(fresh, read_only=True) as conn:
        found = _columns(conn, "SELECT * FROM compare_runs('a', 'b')")
    _holds("views.sql's compare_runs", found, {"item_id"}, PAIRED_COLUMNS)


def test_the_oracle_summarises_the_summarised_metrics():
    """The views are tested against tests/support/metrics_oracle.py, which is written apart from
    them on purpose: it must at least know every metric they summarise."""
    _holds("tests/support/metrics_oracle.py's RUN_METRICS", RUN_METRICS, set(), SUMMARISED_METRICS)


def test_a_list_missing_a_metric_is_named_with_it():
    with pytest.raises(AssertionError, match="compare_runs lacks answer_recall, which"):
        _holds("views.sql's compare_runs", [m for m in COMPARED_METRICS if m != "answer_recall"], set(),
               COMPARED_METRICS)
    with pytest.raises(AssertionError, match="has not_a_metric, which .* does not list there"):
        _holds("views.sql's compare_runs", [*COMPARED_METRICS, "not_a_metric"], set(), COMPARED_METRICS)


def test_a_compared_metric_without_its_words_is_refused():
    with pytest.raises(ValueError, match="the compared metric cites_first needs its words"):
        AnswerMetric("cites_first", compared=True)
    assert AnswerMetric("cites_first", exported=True).words == ""
