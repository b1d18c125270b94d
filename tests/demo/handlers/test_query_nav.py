"""The Query tab's navigation: experiment choices, the item list (search, filter), previous /
next, the permalink, hostile inputs; and the launched app's `/query_detail` and `/query_items`.

The store is tests/demo/handlers/test_query_detail.py's: experiment exp-q ("hamlet-study") over four items
written in the order hamlet, paris, madrid, mona; citations change between modes on hamlet,
paris and madrid, and between base and cf on hamlet and paris.
"""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qs, urlsplit

import pytest

from demo.handlers import query as q
from engine.errors import UserError
from tests.demo.handlers.test_query_detail import EXPERIMENT, SCRIPT, db  # noqa: F401  (db: the module's store)

ALL = ("hamlet", "paris", "madrid", "mona")


def _text(page: str) -> str:
    """The one-line message of a demo.render.message page."""
    return re.search(r"<p>(.*)</p>", page).group(1)


# ---------------------------------------------------------------- choices and the item list


def test_experiment_choices_show_name_id_and_model(db, tmp_path):
    choices = q.experiment_choices(db)
    assert sorted(choices) == [("exp-failed · model-x", "exp-failed"), ("hamlet-study · exp-q · model-x", "exp-q")]
    assert q.experiment_choices(tmp_path / "none.duckdb") == []  # nothing stored yet
    assert not (tmp_path / "none.duckdb").exists()


@pytest.mark.parametrize(
    ("search", "changed", "expected"),
    [
        ("", "all", ALL),
        (None, None, ALL),
        ("CAPITAL", "all", ("paris", "madrid")),  # question text, any case
        ("ari", "all", ("paris",)),  # the item id only ("Capital of France?" does not hold it)
        ("MADR", "all", ("madrid",)),
        ("ham", "all", ("hamlet",)),  # id and question both: listed once
        ("", "modes", ("hamlet", "paris", "madrid")),
        ("", "base_cf", ("hamlet", "paris")),
        ("capital", "base_cf", ("paris",)),
        ("%", "all", ()),  # literal text, not a pattern
        ("<script>", "all", ("hamlet",)),
    ],
)
def test_item_list_searches_questions_and_ids(db, search, changed, expected):
    listing = q.item_list(db, "hamlet-study", search, changed)
    assert listing.experiment_id == EXPERIMENT and listing.item_ids == expected
    assert q.query_items(db, EXPERIMENT, search, changed) == list(expected)


def test_the_store_searches_item_ids_too(db):
    from store import queries

    assert queries.item_ids(db, EXPERIMENT, search="ARI") == ("paris",)
    assert queries.item_ids(db, EXPERIMENT, search="ari", changed="base_cf") == ("paris",)
    assert queries.item_ids(db, EXPERIMENT, search="mad", changed="base_cf") == ()


def test_position_and_neighbours_wrap_at_the_ends(db):
    listing = q.item_list(db, EXPERIMENT)
    assert [listing.describe(i) for i in ALL] == [f"item {n} of 4" for n in range(1, 5)]
    assert listing.neighbour("paris", 1) == "madrid" and listing.neighbour("paris", -1) == "hamlet"
    assert listing.neighbour("mona", 1) == "hamlet" and listing.neighbour("hamlet", -1) == "mona"
    # Not in the list (or nothing chosen yet): next starts at the first item, previous at the last.
    assert q.neighbour(ALL, "nope", 1) == "hamlet" and q.neighbour(ALL, None, -1) == "mona"
    assert q.neighbour(ALL, None, 0) == "hamlet" and q.neighbour((), "hamlet", 1) is None
    filtered = q.item_list(db, EXPERIMENT, "capital", "modes")
    assert filtered.describe("madrid") == "item 2 of 2 matching 'capital' whose citations changed between modes"
    assert filtered.describe("mona") == "item 'mona' is not among the 2 items matching 'capital' whose citations changed between modes"
    assert filtered.neighbour("mona", 1) == "paris"


def test_an_empty_list_says_so_in_one_line(db):
    assert q.item_list(db, EXPERIMENT, "zebra").describe() == "no items matching 'zebra' in experiment exp-q"
    assert q.item_list(db, EXPERIMENT, "leonardo", "base_cf").describe() == (
        "no items matching 'leonardo' whose citations changed between base and cf in experiment exp-q")
    assert q.item_list(db, "exp-failed").describe() == "experiment exp-failed has no answered items yet"
    view = q.open_view(db, EXPERIMENT, "", "zebra")  # a search that leaves nothing to open
    assert view.position == html.unescape(_text(view.page)) == "no items matching 'zebra' in experiment exp-q"
    assert view.choices == () and view.permalink == "" and view.metrics.empty and view.item_id == ""
    # An item asked for by name is still shown; the line says the list is empty.
    named = q.open_view(db, EXPERIMENT, "hamlet", "zebra")
    assert named.position == "no items matching 'zebra' in experiment exp-q" and "Hamlet" in named.page


# ---------------------------------------------------------------- the view: open, step, permalink


def test_open_view_shows_the_item_its_position_and_permalink(db):
    view = q.open_view(db, "hamlet-study", "paris")
    assert (view.item_id, view.position, view.permalink) == ("paris", "item 2 of 4", "?experiment=exp-q&item=paris")
    assert "Capital of France?" in view.page and view.choices == ALL
    assert view.metrics["mode"].tolist() == ["vanilla", "base", "cf"]
    first = q.open_view(db, EXPERIMENT)  # no item: the list's first
    assert (first.item_id, first.position) == ("hamlet", "item 1 of 4")


def test_previous_and_next_follow_the_filtered_list(db):
    seen, item = [], "hamlet"
    for _ in range(3):
        view = q.open_view(db, EXPERIMENT, item, "", "modes", step=1)
        seen.append((view.item_id, view.position))
        item = view.item_id
    assert seen == [("paris", "item 2 of 3 whose citations changed between modes"),
                    ("madrid", "item 3 of 3 whose citations changed between modes"),
                    ("hamlet", "item 1 of 3 whose citations changed between modes")]
    back = q.open_view(db, EXPERIMENT, "hamlet", "", "base_cf", step=-1)
    assert (back.item_id, back.permalink) == ("paris", "?experiment=exp-q&item=paris")
    # An item outside the filter is still shown when asked for by name, and says so.
    mona = q.open_view(db, EXPERIMENT, "mona", "", "base_cf")
    assert "Mona Lisa" in mona.page and mona.position == "item 'mona' is not among the 2 items whose citations changed between base and cf"
    assert mona.permalink == "?experiment=exp-q&item=mona"


def test_locate_gives_what_open_view_gives_without_the_page(db):
    cases = [("hamlet-study", "paris", "", "all"), (EXPERIMENT, "mona", "", "base_cf"), (EXPERIMENT, "madrid", "capital", "modes"),
             (EXPERIMENT, "nope", "", "all"), (EXPERIMENT, "nope", "x", "modes"), ("nope", "hamlet", "", "all"),
             (EXPERIMENT, "", "", "all"), (EXPERIMENT, "hamlet", "zebra", "all"), ("x" * 2000, "", "", "all")]
    for experiment, item, search, changed in cases:
        view = q.open_view(db, experiment, item, search, changed) if item else None
        choices, line, link = q.locate(db, experiment, item, search, changed)
        if view is not None:
            assert (choices, line, link) == (view.choices, view.position, view.permalink), (experiment, item)
    assert q.locate(db, EXPERIMENT, "", "", "modes") == (("hamlet", "paris", "madrid"), "3 items whose citations changed between modes", "")


def test_permalink_round_trips_through_a_url():
    for experiment, item in [("exp-q", "hamlet"), ("my study & co", "a/b?c=d#e"), ("ü", SCRIPT)]:
        link = q.permalink(experiment, item)
        assert link.startswith("?") and " " not in link and "<" not in link and "/" not in link
        params = {k: v[0] for k, v in parse_qs(urlsplit(link).query).items()}
        assert q.view_from_params(params) == (experiment, item)
    assert q.permalink("exp-q", "") == "" == q.permalink("", "x")


def test_view_from_params():
    assert q.view_from_params({"experiment": " exp-q ", "item": " paris "}) == ("exp-q", "paris")
    assert q.view_from_params({"experiment": "exp-q"}) == ("exp-q", "")
    assert q.view_from_params({"item": "paris"}) is None
    assert q.view_from_params({"experiment": "  "}) is None
    assert q.view_from_params({}) is None and q.view_from_params(None) is None
    # An absurd value is cut just past the limit, so that open_view refuses it without echoing it.
    experiment, item = q.view_from_params({"experiment": "x" * 100_000, "item": "y" * 5000})
    assert len(experiment) == len(item) == q.MAX_INPUT_CHARS + 1


# ---------------------------------------------------------------- bad and hostile inputs


@pytest.mark.parametrize(
    ("experiment", "item", "search", "changed", "expected"),
    [
        ("nope", "hamlet", "", "all", "unknown experiment 'nope'"),
        (SCRIPT, "x", "", "all", f"unknown experiment '{SCRIPT}'"),
        (EXPERIMENT, SCRIPT, "", "all", f"experiment 'exp-q' has no item '{SCRIPT}'"),
        (EXPERIMENT, "nope", "", "all", "experiment 'exp-q' has no item 'nope'"),
        ("", "hamlet", "", "all", "choose an experiment"),
        ("x" * 5000, "hamlet", "", "all", "the experiment is too long (5,000 characters; at most 1,000)"),
        (EXPERIMENT, "y" * 1001, "", "all", "the item id is too long (1,001 characters; at most 1,000)"),
        (EXPERIMENT, "hamlet", "z" * 2000, "all", "the search text is too long (2,000 characters; at most 1,000)"),
        ("\ud800", "hamlet", "", "all", "the experiment is not valid text"),
        (EXPERIMENT, "\udfff", "", "all", "the item id is not valid text"),
        (EXPERIMENT, "hamlet", "", "<b>x</b>", "unknown filter '<b>x</b>' (choose from all, modes, base_cf)"),
        ("exp\nq", "hamlet", "", "all", "unknown experiment 'exp q'"),
    ],
)
def test_bad_inputs_give_one_escaped_line(db, experiment, item, search, changed, expected):
    view = q.open_view(db, experiment, item, search, changed)
    assert view.position == expected and "\n" not in view.position
    assert _text(view.page) == html.escape(expected) and "<script" not in view.page
    assert view.permalink == "" and view.metrics.empty and str(db.parent) not in view.page + view.position
    assert len(view.item_id) <= q.MAX_INPUT_CHARS + 1
    if "item" not in expected:  # the list itself is refused, with the same line
        with pytest.raises(UserError) as caught:
            q.item_list(db, experiment, search, changed)
        assert str(caught.value) == expected
    if not search and changed == "all":  # /query_detail (no list): one line too
        page, frame = q.query_detail(db, experiment, item)
        assert _text(page) == html.escape(expected) and frame.empty


def test_an_unreadable_store_names_no_server_path(tmp_path):
    bogus = tmp_path / "secret-folder" / "not-a-store.duckdb"
    bogus.parent.mkdir()
    bogus.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    view = q.open_view(bogus, EXPERIMENT, "hamlet")
    assert view.position.startswith("cannot open database file") and "secret-folder" not in view.position + view.page
    with pytest.raises(UserError) as caught:
        q.query_items(bogus, EXPERIMENT)
    assert "secret-folder" not in str(caught.value)


# ---------------------------------------------------------------- the launched app, through gradio_client



def test_query_endpoints_through_gradio_client(db):
    from gradio_client import Client

    from demo.jobs import JobQueue
    from demo.settings import AppSettings
    from tests.support.app_server import refuse_load, served

    with served(AppSettings(db), JobQueue(load=refuse_load)) as url:
        client = Client(url, verbose=False)
        endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
        assert [p["type"] for p in endpoints["/query_detail"]["parameters"]] == [{"type": "string"}] * 2
        assert [p["parameter_name"] for p in endpoints["/query_items"]["parameters"]] == ["experiment", "search", "changed"]
        page, metrics = client.predict("hamlet-study", "paris", api_name="/query_detail")
        assert "Capital of France?" in page and [r[0] for r in metrics["data"]] == ["vanilla", "base", "cf"]
        page, metrics = client.predict(EXPERIMENT, SCRIPT, api_name="/query_detail")
        assert "has no item &#x27;&lt;script&gt;" in page and "<script" not in page and not metrics["data"]
        assert client.predict("hamlet-study", api_name="/query_items") == list(ALL)
        assert client.predict(EXPERIMENT, "capital", "modes", api_name="/query_items") == ["paris", "madrid"]
        with pytest.raises(Exception, match="unknown experiment 'nope'"):
            client.predict("nope", api_name="/query_items")


def test_items_are_listed_in_dataset_order_not_in_the_order_answers_were_written(tmp_path):
    """The generator sorts each batch by prompt length, so answers are written out of order
    (a real smoke run wrote nq-003 first); the list follows the dataset."""
    from store import RunStore
    from tests.demo.handlers.test_query_detail import ITEMS, RUNS, SHA, _spec

    path = tmp_path / "order.duckdb"
    store = RunStore(path, timeout_s=10)
    store.put_items(SHA, ITEMS)
    run_id, gens = RUNS["vanilla"]
    store.start_run(_spec(run_id, "vanilla"))
    store.write_batch(run_id, list(reversed(gens)))  # the last item's answer first
    store.finish_run(run_id, "complete")
    assert [g.item_id for g in reversed(gens)][0] == ALL[-1]
    assert q.query_items(path, EXPERIMENT) == list(ALL)
