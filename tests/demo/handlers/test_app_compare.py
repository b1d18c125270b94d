"""The Compare tab without a browser: the handlers (the page's table, plot, items, the
side-by-side drill-down, the export, the Runs tab's ticks, the SQL tab's compare_runs example
through the sandbox) and `/compare`, `/compare_item`, `/compare_export` through gradio_client.

The store is tests/engine/usecases/compare/test_compare.py's: experiments e1 and e2 (three modes each; e2's base misses 4
items), identical runs same-1 and same-2, a running run, a disjoint one and one on another dataset.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from demo import render
from demo.handlers import compare as h
from engine.errors import UserError
from engine.statistics import compare_stats as cs
from engine.usecases.compare.compare import CompareRequest, Margins, compare
from tests.engine.usecases.compare.test_compare import build_store


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    return build_store(tmp_path_factory.mktemp("app-compare") / "c.duckdb")


@pytest.fixture(scope="module")
def two_runs(db):
    return compare(CompareRequest("e1-base", "e2-base"), db)


# ---------------------------------------------------------------- choosing A and B, the request


def test_the_pickers_list_experiments_then_runs(db):
    choices = h.side_choices(db)
    values = [v for _, v in choices]
    assert {"e1", "e2", "s1"} <= set(values) and {"e1-base", "e2-cf", "running"} <= set(values)
    first_run = next(i for i, (label, _) in enumerate(choices) if label.startswith("run "))
    assert all(label.startswith("experiment ") for label, _ in choices[:first_run])
    label = dict((v, lbl) for lbl, v in choices)["e1-base"]
    assert "e1:base" in label and "model-x" in label and "complete" in label
    assert h.side_choices(db.parent / "none.duckdb") == []


def test_the_request_from_the_page(db):
    req = h.request_from(" e1:base ", "e2", ["f1", "exact_match"], 2, True)
    assert (req.a, req.b, req.metrics, req.margins, req.pair_by_id) == (
        "e1:base", "e2", ("f1", "exact_match"), Margins(2.0), True)
    assert h.request_from("a", "b", "f1, recall").metrics == ("f1", "recall")  # an API caller's text
    assert h.request_from("a", "b", None, "").margins is None
    assert h.request_from("a", "b", None, 0).margins is None  # an API caller's blank number
    # A margin per metric, as the CLI's --margin reads it.
    assert h.request_from("a", "b", None, " precision=5, n_citations=0.2 ").margins == Margins(
        None, (("precision", 5.0), ("n_citations", 0.2)))
    for args, message in ((("", "b"), "choose A and B"), (("a", "b", []), "tick at least one metric"),
                          (("a", "b", None, "two"), "is not NAME=NUMBER or a number"),
                          (("a", "b", None, "f2=3"), "margin for unknown metric 'f2'")):
        with pytest.raises(UserError, match=message):
            h.request_from(*args)


@pytest.mark.parametrize("a, b, message", [
    ("nope", "e1", "'nope' is neither a run id nor an experiment"),
    ("e1-base", "disjoint", "nothing to pair"),
    ("e1-base", "other-data", 'use different datasets .* a tick in "pair by id" pairs them anyway'),
    ("e1-base", "e2-base", None),
])
def test_refusals_are_one_line_in_the_pages_words(db, a, b, message):
    if message is None:
        with pytest.raises(UserError, match="the equivalence margin must be a positive number"):
            h.run_compare(db, a, b, ["f1"], -1.0)
        return
    with pytest.raises(UserError, match=message) as caught:
        h.run_compare(db, a, b, ["f1"])
    assert "\n" not in str(caught.value) and "--pair-by-id" not in str(caught.value)
    assert "python -m" not in str(caught.value)
    with pytest.raises(UserError, match="nothing is stored yet"):
        h.run_compare(db.parent / "none.duckdb", "x", "y")


def test_pair_by_id_pairs_another_dataset(db):
    view = h.compare_view(db, "e1-base", "other-data", ["f1"], None, True)
    assert "paired by id although the datasets differ" in view.summary
    assert "20 items paired; 20 only in A, 0 only in B" in view.summary


# ---------------------------------------------------------------- the page


def test_the_table_is_the_use_cases_numbers(db, two_runs):
    view = h.compare_view(db, "e1-base", "e2-base")
    assert list(view.table.columns) == h.TABLE_COLUMNS
    expected = two_runs.table()
    assert len(view.table) == len(expected) == 9
    for shown, (_, want) in zip(view.table.itertuples(index=False), expected.iterrows(), strict=True):
        assert (shown.comparison, shown.metric, shown.n, shown.test) == (want.comparison, want.label, want.n, want.test)
        assert shown.verdict.startswith(want.verdict)
        if want.min_detectable_undefined:  # says why, never 0
            assert shown[11] == "undefined" and want.min_detectable_undefined in shown.verdict
        assert shown[3] == f"{want.mean_a:.1f}" and shown[5] == f"{want['diff']:+.1f}"
        interval = f"[{want.ci_low:+.1f}, {want.ci_high:+.1f}]"
        assert shown[6] == interval + ("*" if want.ci_approximate else "") + (" exact" if want.ci_method == cs.CI_EXACT
                                                                               else "")
        assert shown.p == h.format_p(want.p) and shown[9] == h.format_p(want.p_holm)
    assert set(view.table["test"]) == {"paired permutation", "exact McNemar"}
    assert view.pairs == {"base": ("e1-base", "e2-base")}
    json.dumps(view.result)
    assert view.result["runs"][0]["pairing"] == {"n_paired": 36, "only_a": 4, "only_b": 0, "pair_by_id": False}


def test_the_summary_says_pairing_and_flips(db, two_runs):
    view = h.compare_view(db, "e1-base", "e2-base")
    (r,) = two_runs.runs
    assert "36 items paired; 4 only in A, 0 only in B" in view.summary
    e, c = r.em_flips, r.citation_flips
    assert f"{e.right_to_wrong} right → wrong, {e.wrong_to_right} wrong → right (of {e.n} items" in view.summary
    assert (f"cited in A only {c.a_only_relevant} relevant / {c.a_only_nonrelevant} not; in B only "
            f"{c.b_only_relevant} relevant / {c.b_only_nonrelevant} not") in view.summary


def test_a_running_run_is_noted(db):
    view = h.compare_view(db, "running", "e1-base", ["f1"])
    assert "run running is running (12 of 40 items stored); compared on the items stored so far" in view.summary


def test_the_items_that_differ_most_come_first(db, two_runs):
    view = h.compare_view(db, "e1-base", "e2-base")
    items = view.items
    assert list(items.columns[:6]) == ["comparison", "item_id", "F1 A", "F1 B", "Δ F1", "Δ precision"]
    assert len(items) == h.TOP_ITEMS
    diffs = list(items["Δ F1"].abs())
    assert diffs == sorted(diffs, reverse=True)
    want = two_runs.runs[0].items.head(h.TOP_ITEMS)
    assert list(items["item_id"]) == list(want["item_id"])
    assert list(items["Δ F1"]) == pytest.approx(list(want["f1_diff"].round(1)))
    assert h.clicked_item(view.pairs, list(items.iloc[2])) == ("e1-base", "e2-base", items.iloc[2]["item_id"])
    assert h.clicked_item({}, ["base", "q1"]) is None and h.clicked_item(view.pairs, []) is None


def test_the_plot_shows_each_difference_with_its_interval(db):
    view = h.compare_view(db, "same-1", "same-2", ["f1", "exact_match"], "20")
    want = compare(CompareRequest("same-1", "same-2", ("f1", "exact_match"), Margins(20.0)), db).table()
    # Identical runs: F1 has no spread, so no equivalence; exact match's 0 of 40
    # discordant pairs bound B - A within +-11 points (exact): equivalent within 20.
    assert list(view.table["verdict"]) == [
        "no significant difference; equivalence undefined: every paired difference is equal; detectable "
        "difference undefined: every paired difference is equal",
        f"equivalent within 20 (TOST within ±20: Holm p {h.format_p(want['tost_p_holm'][1])}); detectable "
        "difference undefined: no discordant pair (every paired difference is 0)"]
    assert list(view.table["95% CI"])[0] == "undefined" and list(view.table["min. detectable"]) == ["undefined"] * 2
    traces = view.figure.data
    assert [t.name for t in traces] == ["equivalent", "no significant difference / inconclusive",
                                        "equivalence margin ±M"]
    assert list(traces[0].x) == [0.0] and list(traces[0].y) == ["base: exact match (paper)"]
    assert list(traces[2].x) == [-20, 20, -20, 20]
    two = h.compare_view(db, "e1", "e2", ["f1"])
    rows = {y: (x, hi, lo) for t in two.figure.data for y, x, hi, lo in zip(t.y, t.x, t.error_x.array,
                                                                            t.error_x.arrayminus, strict=True)}
    table = compare(CompareRequest("e1", "e2", ("f1",)), db).table()
    for r in table.itertuples(index=False):
        x, hi, lo = rows[f"{r.comparison}: {r.label}"]
        assert (x, x + hi, x - lo) == pytest.approx((r.diff, r.ci_high, r.ci_low))
    assert {"vanilla: citation F1", "CAB: CAB citation F1", "CAS: CAS citation F1"} <= set(rows)


def test_stored_text_is_escaped_in_the_summary_and_the_drill_down(db):
    page = h.pair_page(db, "<img src=x onerror=alert(1)>", "e2-base", "q1")
    assert "<img" not in page and "&lt;img src=x" in page
    page = h.pair_page(db, "e1-base", "e2-base", "<b>q1</b>")
    assert "<b>q1</b>" not in page and "neither run has item" in page


# ---------------------------------------------------------------- one item, both runs side by side


def test_the_drill_down_shows_both_runs_side_by_side(db):
    page = h.pair_page(db, "e1-base", "e2-cf", "q5")
    assert "question 5" in page and "A: run e1-base" in page and "B: run e2-cf" in page
    for head in ("A position", "B position", "A label", "B label", "A cited (p)", "B cited (p)"):
        assert f"<th>{head}</th>" in page
    assert page.count('class="answer"') == 2
    assert "<th>run</th>" in page  # the metrics of both runs
    html, experiment = h.pair_view(db, "e1-base", "e2-cf", "q5")
    assert html == page and experiment == "e1"
    assert h.pair_view(db, "nope", "e2-cf", "q5")[1] == ""


def test_the_drill_down_says_which_run_lacks_the_item(db):
    page = h.pair_page(db, "e1-base", "e2-base", "q39")  # e2's base holds only q0..q35
    assert "B: run e2-base: its experiment holds no item" not in page  # e2's other modes hold it
    assert page.count('class="answer"') == 2
    assert "(no answer stored yet)" in page
    assert "choose two runs and an item" in h.pair_page(db, "", "e2-base", "q1")
    assert "unknown run &#x27;e1&#x27;" in h.pair_page(db, "e1", "e2-base", "q1")  # an experiment is not a run


def test_flipped_citations_are_marked(db):
    from store.db import connect
    from store.queries.compare import read_paired, resolve_side

    runs = (resolve_side(db, "e1-base").runs["base"], resolve_side(db, "e2-base").runs["base"])
    paired = read_paired(db, runs)
    with connect(db, read_only=True) as conn:
        cited = [dict(conn.execute("SELECT item_id, list(DISTINCT doc_id) FROM citations WHERE run_id = ? "
                                   "AND doc_id IS NOT NULL GROUP BY item_id", [run]).fetchall())
                 for run in ("e1-base", "e2-base")]
    item = next(i for i in paired.item_ids if set(cited[0].get(i, [])) != set(cited[1].get(i, [])))
    page = h.pair_page(db, "e1-base", "e2-base", item)
    assert 'class="cited flip"' in page or 'class="flip"' in page


# ---------------------------------------------------------------- export, ticks, SQL


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_the_export_holds_every_item_of_every_pair(db, fmt):
    path = h.export_items(db, "e1", "e2", ["f1", "exact_match"], None, False, fmt)
    assert path.name == f"pattrieval-compare.{fmt}"
    got = pd.read_csv(path) if fmt == "csv" else pd.read_parquet(path)
    want = compare(CompareRequest("e1", "e2", ("f1", "exact_match")), db).items()
    assert list(got.columns) == list(want.columns) and len(got) == len(want) == 40 + 36 + 40
    assert got["f1_diff"].tolist() == pytest.approx(want["f1_diff"].tolist(), nan_ok=True)
    with pytest.raises(UserError, match="format"):
        h.export_items(db, "e1", "e2", None, None, False, "xlsx")


def test_the_runs_tabs_ticks():
    frame = pd.DataFrame([["e2", "-", "vanilla,base,cf"], ["e1", "pilot", "base"]],
                         columns=["experiment", "name", "modes"])
    assert h.tick_choices(frame) == [("e2 · vanilla,base,cf", "e2"), ("pilot (e1) · base", "e1")]
    assert h.tick_choices(None) == [] and h.tick_choices(pd.DataFrame(columns=["experiment"])) == []
    assert h.two_ticked(["e2", "e1"]) == ("e2", "e1")
    for ticked in ([], ["e1"], ["e1", "e2", "s1"], ["e1", "e1"]):
        with pytest.raises(UserError, match="tick exactly two experiments"):
            h.two_ticked(ticked)


def test_the_sql_example_runs_compare_runs_through_the_sandbox(db, two_runs):
    from demo.handlers.sql import run_sql

    sql = h.sql_example(db)
    assert "FROM compare_runs('same-1', 'same-2')" in sql  # complete, one dataset and mode, most answers
    outcome = run_sql(db, sql.replace("'same-1', 'same-2'", "'e1-base', 'e2-base'"))
    items = two_runs.runs[0].items.set_index("item_id")
    assert len(outcome.frame) == 20
    for row in outcome.frame.itertuples(index=False):
        assert row.f1_diff == pytest.approx(round(items.loc[row.item_id, "f1_diff"], 1), abs=0.051)
    # The view too, and placeholders where the store holds no pair.
    outcome = run_sql(db, "SELECT count(*) AS n FROM compare_item_metrics WHERE run_id = 'e2-base'")
    assert outcome.frame["n"].tolist() == [36]
    assert "compare_runs('RUN_A', 'RUN_B')" in h.sql_example(db.parent / "none.duckdb")


# ---------------------------------------------------------------- through gradio_client


@pytest.fixture(scope="module")
def client(db):
    from gradio_client import Client

    from demo.jobs import JobQueue
    from demo.settings import AppSettings
    from tests.support.app_server import refuse_load, served

    with served(AppSettings(db), JobQueue(load=refuse_load)) as url:
        yield Client(url, verbose=False)


def test_compare_through_the_api(client, two_runs):
    got = client.predict("e1-base", "e2-base", ["f1", "exact_match"], None, False, api_name="/compare")
    (run,) = got["runs"]
    assert (run["run_a"]["run_id"], run["run_b"]["run_id"]) == ("e1-base", "e2-base")
    want = {m.metric: m for m in two_runs.runs[0].metrics}
    for m in run["metrics"]:
        assert m["diff"] == pytest.approx(want[m["metric"]].diff) and m["test"] == want[m["metric"]].test
    assert len(run["items"]) == h.TOP_ITEMS
    page = client.predict("e1-base", "e2-base", run["items"][0]["item_id"], api_name="/compare_item")
    assert "A: run e1-base" in page and "B: run e2-base" in page
    path = client.predict("e1-base", "e2-base", ["f1"], None, False, "csv", api_name="/compare_export")
    assert len(pd.read_csv(path)) == 36


def test_a_refusal_through_the_api_is_one_line(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as caught:
        client.predict("e1-base", "disjoint", ["f1"], None, False, api_name="/compare")
    assert "nothing to pair" in str(caught.value) and "\n" not in str(caught.value)


def test_render_of_a_pair_with_hostile_text():
    from store.queries import ModeDetail, QueryDetail, QueryDocument

    evil = "<script>alert(1)</script>"
    mode = ModeDetail(mode="base", run_id=evil, status="complete", label_a=evil, label_b="B", labels={"d": evil},
                      positions={"d": 1}, answer=f"{evil} [1]", finish_reason="stop", citations=(), tokens=(),
                      metrics=None, prompt=evil, model=evil)
    detail = QueryDetail("e", "i", evil, (evil,), (QueryDocument(1, "d", evil, evil, True),), (mode,))
    page = render.pair_page("i", [(f"A: run {evil}", evil, detail, mode), ("B: run x", "x", detail, mode)])
    assert "<script>" not in page and "&lt;script&gt;" in page
