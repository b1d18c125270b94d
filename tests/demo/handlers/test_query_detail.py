"""The query drill-down: store.queries.query_detail / item_ids, demo.render and the handler."""

from __future__ import annotations

import html
import math
import re
from pathlib import Path

import pytest

from engine.prompting.prompts import METADATA_TYPES, PromptConfig
from engine.types import Citation, Document, Generation, Item, RunSpec, TokenLogprob, TopLogprob
from store import RunStore, connect, queries

SHA = "sha-q"
SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
EXPERIMENT = "exp-q"

ITEMS = [
    Item("hamlet", f"Who wrote {SCRIPT} Hamlet?", ("Shakespeare",), (
        Document("d1", IMG, False, title="<b>T</b>"),
        Document("d2", "Shakespeare wrote Hamlet.", True),
        Document("d3", "Unrelated.", False),
    )),
    Item("paris", "Capital of France?", ("Paris",), (Document("p1", "Paris.", True), Document("p2", "Lyon.", False))),
    Item("madrid", "What is the capital of Spain", ("Madrid",), (Document("m1", "Madrid.", True), Document("m2", "Rome.", False))),
    Item("mona", "Who painted the Mona Lisa?", ("Leonardo",), (Document("l1", "Leonardo.", True), Document("l2", "Other.", False))),
]
BY_ID = {item.id: item for item in ITEMS}


def _gen(item_id: str, answer: str, shown: tuple[str, ...], cites: list[tuple[int, float | None]],
         tokens: tuple[TokenLogprob, ...] = ()) -> Generation:
    relevant = {d.id: d.relevant for d in BY_ID[item_id].documents}
    citations = tuple(
        Citation(i, n, shown[n - 1] if n <= len(shown) else None,
                 relevant[shown[n - 1]] if n <= len(shown) else None, p)
        for i, (n, p) in enumerate(cites)
    )
    return Generation(item_id, "prompt", answer, shown, "stop", 10, tokens, citations)


BASE_TOKENS = (
    TokenLogprob(1, SCRIPT, math.log(0.25), (TopLogprob(1, SCRIPT, math.log(0.25)), TopLogprob(2, IMG, math.log(0.5)))),
    TokenLogprob(3, " Shakespeare", math.log(0.9), (TopLogprob(3, " Shakespeare", math.log(0.9)), TopLogprob(4, " Marlowe", float("-inf")))),
    TokenLogprob(5, " [2]", math.log(0.8), ()),
)
VANILLA_TOKENS = (TokenLogprob(3, "Shakespeare", math.log(0.7)), TokenLogprob(5, " [2]", math.log(0.9)))

RUNS = {
    # mode: run_id, generations (written in this order: hamlet, paris, madrid, mona)
    "vanilla": ("rv", [
        _gen("hamlet", "Shakespeare [2].", ("d3", "d2", "d1"), [(2, 0.9)], VANILLA_TOKENS),
        _gen("paris", "Paris [1]", ("p1", "p2"), [(1, 0.8)]),
        _gen("madrid", "Madrid [2]", ("m1", "m2"), [(2, 0.4)]),
        _gen("mona", "Leonardo [1]", ("l1", "l2"), [(1, 0.9)]),
    ]),
    "base": ("rb", [
        _gen("hamlet", f"{SCRIPT} Shakespeare [2][1]", ("d3", "d2", "d1"), [(2, 0.8), (1, 0.3)], BASE_TOKENS),
        _gen("paris", "Paris [1]", ("p1", "p2"), [(1, 0.7)]),
        _gen("madrid", "Madrid [1]", ("m1", "m2"), [(1, 0.6)]),
        _gen("mona", "Leonardo [1][5]", ("l1", "l2"), [(1, 0.9), (5, None)]),
    ]),
    "cf": ("rc", [
        _gen("hamlet", "Shakespeare [2]", ("d1", "d2", "d3"), [(2, 0.6)]),
        _gen("paris", "Lyon [2]", ("p1", "p2"), [(2, 0.05)]),
        _gen("madrid", "Madrid [1]", ("m1", "m2"), [(1, 0.5)]),
        _gen("mona", "Leonardo [1]", ("l1", "l2"), [(1, 0.95)]),
    ]),
}


def _spec(run_id: str, mode: str, experiment: str = EXPERIMENT) -> RunSpec:
    prompt = PromptConfig(mode=mode, metadata=METADATA_TYPES["gender"]).to_dict()
    return RunSpec(run_id, experiment, f"hash-{run_id}", "model-x", None, "none", "float32", "cpu",
                   "/srv/secret/data.jsonl", SHA, "gender", mode, 0, "v1", None, {}, {"prompt": prompt}, 4)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("query") / "q.duckdb"
    store = RunStore(path, timeout_s=10)
    store.put_items(SHA, ITEMS)
    for mode, (run_id, gens) in RUNS.items():
        store.start_run(_spec(run_id, mode))
        store.write_batch(run_id, gens)
        if mode != "cf":  # cf is still running: shown all the same
            store.finish_run(run_id, "complete")
    # A failed run is never shown: its experiment has nothing to drill into.
    store.start_run(_spec("rf", "base", "exp-failed"))
    store.write_batch("rf", RUNS["base"][1][:1])
    store.finish_run("rf", "failed")
    with connect(path) as conn:
        conn.execute("UPDATE experiments SET name = 'hamlet-study' WHERE experiment_id = ?", [EXPERIMENT])
    return path


# ---------------------------------------------------------------- the store


def test_query_detail_reads_one_item_across_modes(db):
    detail = queries.query_detail(db, "hamlet-study", "hamlet")
    assert detail.experiment_id == EXPERIMENT and detail.item_id == "hamlet"
    assert detail.question == f"Who wrote {SCRIPT} Hamlet?" and detail.gold_answers == ("Shakespeare",)
    assert [(d.rank, d.doc_id, d.relevant) for d in detail.documents] == [(1, "d1", False), (2, "d2", True), (3, "d3", False)]
    assert [(m.mode, m.run_id, m.status) for m in detail.modes] == [
        ("vanilla", "rv", "complete"), ("base", "rb", "complete"), ("cf", "rc", "running")]
    vanilla, base, cf = detail.modes
    assert vanilla.positions == {"d3": 1, "d2": 2, "d1": 3} == base.positions
    assert cf.positions == {"d1": 1, "d2": 2, "d3": 3}
    # Relevant documents carry label A in base and label B in cf (engine.prompting.prompts._label).
    assert vanilla.labels == {}
    assert base.labels == {"d1": "a man", "d2": "a woman", "d3": "a man"}
    assert cf.labels == {"d1": "a woman", "d2": "a man", "d3": "a woman"}
    assert (base.label_a, base.label_b) == ("a woman", "a man")
    assert base.answer == f"{SCRIPT} Shakespeare [2][1]"
    assert [(c.position, c.doc_id, c.relevant) for c in base.citations] == [(2, "d2", True), (1, "d3", False)]
    assert base.cited_doc_ids == {"d2", "d3"} and cf.cited_doc_ids == {"d2"}
    assert base.citation_probability("d3") == pytest.approx(0.3) and base.citation_probability("d1") is None
    assert base.metrics == queries.ModeMetrics(0.5, 1.0, pytest.approx(2 / 3), 1.0)
    assert vanilla.metrics == queries.ModeMetrics(1.0, 1.0, 1.0, 1.0)
    assert [(t.step, t.token) for t in base.tokens] == [(0, SCRIPT), (1, " Shakespeare"), (2, " [2]")]
    assert base.tokens[0].logprob == pytest.approx(math.log(0.25))
    assert [(a.token, a.logprob) for a in base.tokens[1].top] == [(" Shakespeare", pytest.approx(math.log(0.9))), (" Marlowe", None)]
    assert base.tokens[2].top == () and vanilla.tokens[0].top == () and cf.tokens == ()


def test_query_detail_prompt_labels_match_the_engine(db):
    # The labels the drill-down shows are the ones the prompt wrote after each document.
    from engine.prompting.prompts import build_prompt

    detail = queries.query_detail(db, EXPERIMENT, "hamlet")
    for mode in ("base", "cf"):
        prompt = build_prompt(BY_ID["hamlet"], PromptConfig(mode=mode, metadata=METADATA_TYPES["gender"]))
        shown = dict(re.findall(r"Document \[(\d+)\]\(.*?\) \(written by (.*?)\)", prompt.text))
        labels = detail.mode(mode).labels
        assert {doc: shown[str(n)] for n, doc in enumerate(prompt.shown_doc_ids, start=1)} == labels


def test_query_detail_unknown_is_none(db):
    assert queries.query_detail(db, "nope", "hamlet") is None
    assert queries.query_detail(db, EXPERIMENT, "nope") is None
    assert queries.query_detail(db, "exp-failed", "hamlet") is None


def test_item_ids_in_written_order_with_filters(db):
    assert queries.item_ids(db, EXPERIMENT) == ("hamlet", "paris", "madrid", "mona")
    assert queries.item_ids(db, "hamlet-study", search="CAPITAL") == ("paris", "madrid")
    assert queries.item_ids(db, EXPERIMENT, search="capital of f") == ("paris",)
    assert queries.item_ids(db, EXPERIMENT, search="<script>") == ("hamlet",)
    assert queries.item_ids(db, EXPERIMENT, search="%") == ()  # literal text, not a pattern
    # mona: base also cites [5] (not shown): no document, so its cited set is unchanged.
    assert queries.item_ids(db, EXPERIMENT, changed="modes") == ("hamlet", "paris", "madrid")
    assert queries.item_ids(db, EXPERIMENT, changed="base_cf") == ("hamlet", "paris")
    assert queries.item_ids(db, EXPERIMENT, search="capital", changed="base_cf") == ("paris",)
    assert queries.item_ids(db, "nope") is None
    assert queries.item_ids(db, "exp-failed") == ()


def test_item_ids_refuses_an_unknown_filter(db):
    from engine.errors import UserError

    with pytest.raises(UserError, match="unknown filter 'x'"):
        queries.item_ids(db, EXPERIMENT, changed="x")


# ---------------------------------------------------------------- rendering


def _detail(db, item="hamlet"):
    return queries.query_detail(db, EXPERIMENT, item)


def _rows(table_html: str) -> list[list[str]]:
    """Cells (inner HTML) of each body row."""
    rows = re.findall(r"<tr>(.*?)</tr>", table_html)[1:]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows]


def test_grid_positions_labels_and_flips(db):
    from demo import render

    grid = render.documents_grid(_detail(db))
    head = re.findall(r"<th>(.*?)</th>", grid)
    assert head == ["#", "document", "relevant", "vanilla position", "base position", "cf position",
                    "base label", "cf label", "vanilla cited (p)", "base cited (p)", "cf cited (p)"]
    rows = _rows(grid)
    assert [row[:1] + row[2:8] + row[8:] for row in rows] == [
        ["1", "no", "3", "3", "1", "a man", "a woman", "–", "–", "–"],
        ["2", "yes", "2", "2", "2", "a woman", "a man", "cited (0.90)", "cited (0.80)", "cited (0.60)"],
        ["3", "no", "1", "1", "3", "a man", "a woman", "–", "cited (0.30)", "–"],
    ]
    # d3 is cited in base only: its three citation cells stand out, and no other cell does.
    cells = re.findall(r"<td([^>]*)>", grid)
    flips = [attrs for attrs in cells if "flip" in attrs]
    assert len(flips) == 3 and all("differs between modes" in attrs for attrs in flips)
    d3_row = re.findall(r"<tr>(.*?)</tr>", grid)[3]
    assert d3_row.count('class="flip"') == 2 and d3_row.count('class="cited flip"') == 1
    assert 'title="base: cited, p = 0.3000; the citation differs between modes"' in d3_row


def test_grid_of_an_item_whose_citations_never_change(db):
    from demo import render

    grid = render.documents_grid(_detail(db, "mona"))
    assert "flip" not in grid.replace(".flip", "")
    # Every mode showed the documents in the same order: one position column, not three copies.
    head = re.findall(r"<th>(.*?)</th>", grid)
    assert head == ["#", "document", "relevant", "position", "base label", "cf label", "vanilla cited (p)",
                    "base cited (p)", "cf cited (p)"]
    assert _rows(grid)[0][6:] == ["cited (0.90)", "cited (0.90)", "cited (0.95)"]


def test_answer_citations_are_coloured_by_probability(db):
    from demo import render

    base = _detail(db).mode("base")
    answer = render.answer_html(base)
    cites = re.findall(r'<span class="cite" style="background:([^"]+)" title="([^"]+)">(.*?)</span>', answer)
    assert cites == [
        (render.probability_colour(0.8), "[2] p = 0.8000", "2"),
        (render.probability_colour(0.3), "[1] p = 0.3000", "1"),
    ]
    assert render.probability_colour(0.8) != render.probability_colour(0.3)
    # An out-of-range mark without a probability is highlighted grey, "p unknown".
    mona = render.answer_html(_detail(db, "mona").mode("base"))
    assert 'title="[5] p unknown"' in mona and render.probability_colour(None) in mona
    assert render.answer_html(base).endswith("]</div>")


def test_token_heat_map_with_top_alternatives(db):
    from demo import render

    detail = _detail(db)
    heat = render.token_heatmap(detail.mode("base"))
    spans = re.findall(r'<span class="tok" style="background:([^"]+)" title="([^"]*)">(.*?)</span>', heat)
    assert [html.unescape(text) for _, _, text in spans] == [SCRIPT, " Shakespeare", " [2]"]
    assert [colour for colour, _, _ in spans] == [render.probability_colour(p) for p in (0.25, 0.9, 0.8)]
    first = html.unescape(spans[0][1]).split("\n")
    assert first == [f"{SCRIPT!r}: p = 0.2500, log-prob = -1.3863", f"  {SCRIPT!r}: p = 0.2500", f"  {IMG!r}: p = 0.5000"]
    assert html.unescape(spans[1][1]).endswith("' Marlowe': p = 0.0000")
    assert "\n" not in html.unescape(spans[2][1])  # no alternatives recorded at that step
    vanilla = render.token_heatmap(detail.mode("vanilla"))
    assert vanilla.count('class="tok"') == 2 and "&#x27;Shakespeare&#x27;: p = 0.7000" in vanilla
    assert "no tokens recorded" in render.token_heatmap(detail.mode("cf"))


def test_metrics_table(db):
    from demo import render

    rows = _rows(render.metrics_table(_detail(db)))
    assert rows == [["vanilla", "1.000", "1.000", "1.000", "1.000"], ["base", "0.500", "1.000", "0.667", "1.000"],
                    ["cf", "1.000", "1.000", "1.000", "1.000"]]


def test_page_escapes_every_piece_of_text(db):
    from demo import render

    page = render.query_page(_detail(db))
    for raw in (SCRIPT, IMG, "<b>T</b>", "<script", "<img", "onerror=alert(1)>"):
        assert raw not in page
    assert html.escape(SCRIPT) in page  # the question, the answer and the token as text
    assert page.count(html.escape(SCRIPT)) >= 3
    assert html.escape(IMG) in page  # the document
    assert "&lt;b&gt;T&lt;/b&gt;" in page  # the title
    # Only this module's own tags remain.
    tags = set(re.findall(r"<([a-z0-9]+)", page))
    # (details, summary, pre and mark: the prompt each mode saw, with its labels marked)
    assert tags <= {"style", "div", "h3", "h4", "h5", "small", "p", "table", "tr", "th", "td", "b", "span",
                    "details", "summary", "pre", "mark"}


def test_the_prompt_each_mode_saw_is_shown_escaped_with_its_labels_marked():
    from demo import render
    from engine.prompting.prompts import METADATA_TYPES, PromptConfig, build_prompt
    from engine.types import Document, Item
    from store.queries import ModeDetail

    item = Item("q", f"Who wrote {SCRIPT}?", ("x",), (
        Document("d1", "A man wrote (written by a woman) here.", True),  # quotes the label's words mid-line
        Document("d2", IMG, False),
    ))
    gender = METADATA_TYPES["gender"]
    for mode, relevant_label in (("base", "a woman"), ("cf", "a man")):
        text = build_prompt(item, PromptConfig(mode=mode, metadata=gender)).text  # the runner's own text
        detail = ModeDetail(mode=mode, run_id="r", status="complete", label_a=gender.label_a, label_b=gender.label_b,
                            labels={}, positions={}, answer=None, finish_reason=None, citations=(), tokens=(),
                            metrics=None, prompt=text)
        shown = render.prompt_html(detail)
        assert SCRIPT not in shown and IMG not in shown and html.escape(SCRIPT) in shown
        marks = re.findall(r'<mark class="(label-[ab])"[^>]*>\(written by ([^)<]*)\)</mark>', shown)
        # One mark per document, at its line's end; the quoted words inside d1's text are not one.
        assert marks == [("label-a" if relevant_label == gender.label_a else "label-b", relevant_label),
                         ("label-b" if relevant_label == gender.label_a else "label-a",
                          gender.label_b if relevant_label == gender.label_a else gender.label_a)]
        # Unmarked and unescaped, the page holds exactly the prompt the model was given.
        assert html.unescape(re.sub(r"<[^>]+>", "", shown)) == text


# ---------------------------------------------------------------- the handler


def test_handler_returns_page_and_metrics(db):
    from demo.handlers.query import query_detail

    page, frame = query_detail(db, " hamlet-study ", "hamlet")
    assert 'class="grid"' in page and SCRIPT not in page
    assert list(frame.columns) == ["mode", "run_id", "precision", "recall", "f1", "exact_match"]
    assert frame.values.tolist() == [["vanilla", "rv", 1.0, 1.0, 1.0, 1.0], ["base", "rb", 0.5, 1.0, pytest.approx(2 / 3), 1.0],
                                     ["cf", "rc", 1.0, 1.0, 1.0, 1.0]]


@pytest.mark.parametrize(
    ("experiment", "item", "expected"),
    [
        ("nope", "hamlet", "unknown experiment &#x27;nope&#x27;"),
        (EXPERIMENT, "nope", "experiment &#x27;exp-q&#x27; has no item &#x27;nope&#x27;"),
        ("exp-failed", "hamlet", "experiment &#x27;exp-failed&#x27; has no item &#x27;hamlet&#x27;"),
        (SCRIPT, "x", "unknown experiment &#x27;&lt;script&gt;alert(1)&lt;/script&gt;&#x27;"),
        ("", "hamlet", "choose an experiment"),
        (EXPERIMENT, " ", "choose an item"),
    ],
)
def test_handler_messages(db, experiment, item, expected):
    from demo.handlers.query import query_detail

    page, frame = query_detail(db, experiment, item)
    text = re.search(r"<p>(.*)</p>", page).group(1)
    assert text == expected and frame.empty
    assert str(db.parent) not in page and "<script>" not in page


def test_handler_message_never_names_the_server_path(tmp_path):
    from demo.handlers.query import query_detail

    bogus = tmp_path / "not-a-store.duckdb"
    bogus.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    page, frame = query_detail(bogus, EXPERIMENT, "hamlet")
    text = re.search(r"<p>(.*)</p>", page).group(1)
    assert text.startswith("cannot open database file") and str(tmp_path) not in page and frame.empty


# ---------------------------------------------------------------- migration 005


def test_query_metrics_005_equals_002_on_edge_cases(tmp_path):
    """005 rewrites query_metrics for filter pushdown; 002's definition must give the same rows."""
    source = (Path(__file__).resolve().parents[2] / "support" / "old_migrations" / "002_metrics_views.sql").read_text()
    old = re.search(r"CREATE OR REPLACE VIEW query_metrics AS\n(.*?\nFROM scored;)", source, re.S).group(1)
    path = tmp_path / "edge.duckdb"
    with connect(path) as conn:
        conn.execute(f"CREATE VIEW query_metrics_002 AS {old}")
        conn.execute("INSERT INTO runs (run_id, experiment_id, config_hash, created_utc, status, model, dataset_sha, rag_mode) "
                     "VALUES ('r1', 'e', 'h1', now()::TIMESTAMP, 'complete', 'm', 's', 'base'), "
                     "('r2', 'e2', 'h2', now()::TIMESTAMP, 'complete', 'm', 's', 'cf')")
        conn.execute("""INSERT INTO items VALUES
          ('s', 'dup', 'q', ['x'], [{'id': 'a', 'title': '', 'text': 't', 'relevant': false},
                                    {'id': 'a', 'title': '', 'text': 't', 'relevant': true},
                                    {'id': 'b', 'title': '', 'text': 't', 'relevant': NULL},
                                    {'id': 'c', 'title': '', 'text': 't', 'relevant': true}]),
          ('s', 'none', 'q', ['...'], [{'id': 'a', 'title': '', 'text': 't', 'relevant': false}]),
          ('other', 'dup', 'q', ['x'], [{'id': 'b', 'title': '', 'text': 't', 'relevant': true}])""")
        rows = [  # item, shown ids, answer
            ("dup", ["b", "a", "zz", "c", "a"], "x [1][2][7]"),
            ("none", ["a"], "nothing"),
            ("missing", ["a", "b"], "[1]"),  # no items row at all
            ("empty", [], "[1]"),
        ]
        for run in ("r1", "r2"):
            for item, shown, answer in rows:
                conn.execute("INSERT INTO generations (run_id, item_id, answer, shown_doc_ids, created_utc) "
                             "VALUES (?, ?, ?, ?, now()::TIMESTAMP)", [run, item, answer, shown])
            conn.execute("INSERT INTO citations VALUES (?, 'dup', 0, 1, 'b', NULL, 0.5), (?, 'dup', 1, 2, 'a', true, 0.25), "
                         "(?, 'dup', 2, 7, NULL, NULL, NULL), (?, 'missing', 0, 1, 'a', NULL, 0.9), "
                         "(?, 'empty', 0, 1, NULL, NULL, 0.1)", [run] * 5)
    with connect(path, read_only=True) as conn:
        new = conn.execute("SELECT * FROM query_metrics ORDER BY run_id, item_id").fetchall()
        before = conn.execute("SELECT * FROM query_metrics_002 ORDER BY run_id, item_id").fetchall()
        one = conn.execute("SELECT * FROM query_metrics WHERE run_id IN (SELECT unnest(['r2'])) AND item_id = 'dup'").fetchall()
    assert len(new) == 8 and new == before
    assert [r for r in new if r[0] == "r2" and r[1] == "dup"] == one
    dup = dict(zip(("run_id", "item_id", "cited", "gold"), one[0][:4], strict=True))
    assert dup["gold"] == [2, 4, 5] and dup["cited"] == [1, 2, 7]
