"""Cited or used, in the Query tab: beside each answer's citations, every shown document's necessity
(nats) and whether it counts as used, where `python -m engine used` stored values for the run;
a citation the answer does not need reads "post-rationalised". The rows are inserted by SQL as
`used` writes them (that command needs a model: tests/engine/usecases/judges/test_used.py runs it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from store import connect
from tests.demo.handlers.test_query_detail import db  # noqa: F401  (the drill-down's store: exp-q, "hamlet-study")
from tests.support.helpers import copy_store

# (run, item, position, model, necessity, sufficiency, cited). Base answered hamlet citing [2] and
# [1] with d3, d2, d1 shown in that order; cf showed d1, d2, d3 and cited [2].
ROWS = [
    ("rb", "hamlet", 1, "model-x", 0.1, -0.2, True),  # d3: cited, hardly needed -> post-rationalised
    ("rb", "hamlet", 2, "model-x", 2.0, -0.2, True),  # d2: cited and used
    ("rb", "hamlet", 3, "model-x", 0.05, -0.2, False),  # d1: neither
    ("rb", "hamlet", 1, "other/reader", 9.0, 0.0, True),  # another reader of the same run: not shown
    ("rc", "hamlet", 1, "other/reader", 0.75, -0.1, False),  # cf, read by another model only: d1 used
    ("rc", "hamlet", 2, "other/reader", 0.25, -0.1, True),  # d2: post-rationalised
    ("rc", "hamlet", 3, "other/reader", -0.5, -0.1, False),  # d3
]


def add_use(path: Path, rows=ROWS) -> Path:
    with connect(path) as conn:
        for run_id, item_id, position, model, necessity, sufficiency, cited in rows:
            conn.execute("INSERT INTO document_use VALUES (?, ?, ?, ?, -3.0, ?, ?, ?, ?, ?, now()::TIMESTAMP)",
                         [run_id, item_id, position, model, -3.0 - necessity, -3.0 + sufficiency, necessity,
                          sufficiency, cited])
    return path


@pytest.fixture(scope="module")
def used_db(db, tmp_path_factory):  # noqa: F811
    return add_use(copy_store(db, tmp_path_factory.mktemp("query-use") / "q.duckdb"))


def _grid(page: str) -> tuple[list[str], list[list[str]]]:
    table = re.search(r'<table class="grid">(.*?)</table>', page).group(1)
    head = [re.sub(r"<[^>]+>", "", h) for h in re.findall(r"<th[^>]*>(.*?)</th>", table)]
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", table)[1:]]
    return head, rows


def test_the_page_shows_each_documents_necessity_and_use_beside_its_citation(used_db):
    from demo.handlers.query import query_detail

    page, _ = query_detail(used_db, "hamlet-study", "hamlet")
    head, rows = _grid(page)
    # A column for base and cf, which `used` read; none for vanilla, which it did not.
    assert head[-3:] == ["cf cited (p)", "base used (nats)", "cf used (nats)"]
    assert "vanilla used (nats)" not in head
    # Rows in ranked order d1, d2, d3: base showed them at 3, 2, 1; cf at 1, 2, 3.
    assert [row[-2:] for row in rows] == [
        ["not used (0.05)", "used (0.75)"],
        ["used (2.00)", "post-rationalised (0.25)"],
        ["post-rationalised (0.10)", "not used (-0.50)"],
    ]
    assert page.count('class="posthoc"') == 2 and "9.00" not in page  # base: the answering model's reading only
    assert 'title="base: cited, post-rationalised; necessity = 0.100 nats' in page
    # The rule, in the header's tooltip and in a line under the grid, with who read the answers.
    legend = re.search(r'<p class="legend">(.*?)</p>', page).group(1)
    assert "model-x, other/reader" in legend
    assert "used: necessity above 0.5 nats" in legend and "post-rationalised: cited but not used" in legend
    assert re.search(r'<th title="[^"]*above 0.5 nats[^"]*">base used \(nats\)</th>', page)


def test_nothing_extra_where_used_has_not_read_the_answers(db, used_db):  # noqa: F811
    from demo.handlers.query import query_detail

    for store, item in ((used_db, "madrid"), (db, "hamlet")):
        page, _ = query_detail(store, "hamlet-study", item)
        assert "used (nats)" not in page and 'class="legend"' not in page and "post-rationalised" not in page


def test_the_use_case_gives_one_reader_per_run_and_the_views_rule(used_db):
    from engine.usecases.runs.items import item_detail

    use = item_detail(used_db, "exp-q", "hamlet", with_use=True).use
    assert {(u.run_id, u.model) for u in use} == {("rb", "model-x"), ("rc", "other/reader")}
    by = {(u.run_id, u.position): u for u in use}
    assert by["rb", 1].post_rationalised and not by["rb", 1].used
    assert by["rb", 2].used and not by["rb", 2].post_rationalised
    assert by["rc", 1].used and not by["rc", 1].cited
    assert item_detail(used_db, "exp-q", "hamlet").use == ()  # only when asked
    # The same rule as the SQL view citation_use.
    with connect(used_db) as conn:
        view = dict(((r, p), (bool(u), bool(pr))) for r, p, u, pr in conn.execute(
            "SELECT run_id, position, used, post_rationalised FROM citation_use "
            "WHERE item_id = 'hamlet' AND (run_id, model) IN (('rb', 'model-x'), ('rc', 'other/reader'))").fetchall())
    assert view == {key: (u.used, u.post_rationalised) for key, u in by.items()}
