"""The Query tab's navigation in a real browser: a permalink opens its view in the Query tab,
previous / next, the filter and the search move through the item list, the address bar follows,
and a hostile permalink shows as text; where `used` read the answers, each document's necessity
and use beside its citations, screenshotted at 1440x900.

The store is tests/demo/handlers/test_query_detail.py's: experiment exp-q ("hamlet-study") over hamlet, paris,
madrid and mona, in that order; hamlet and paris change citations between base and cf; with
tests/demo/handlers/test_query_use.py's document_use rows for hamlet's base and cf answers.
"""

from __future__ import annotations

import time
from urllib.parse import quote

import pytest

from tests.browser.test_app_browser import ARTIFACTS
from tests.demo.handlers.test_query_detail import db  # noqa: F401  (the module's store, built before launch)
from tests.demo.handlers.test_query_use import used_db  # noqa: F401  (the same, with document_use rows)

WAIT_MS = 30_000
Q_TITLE = ".pe-q h3"


@pytest.fixture(scope="module")
def app(launch_app, used_db):  # noqa: F811
    return launch_app(used_db)


def query_panel(page):
    panel = page.get_by_role("tabpanel").filter(visible=True)
    panel.wait_for(timeout=WAIT_MS)
    return panel


def wait_for_title(page, text: str) -> None:
    page.locator(Q_TITLE, has_text=text).wait_for(timeout=WAIT_MS)


def box_value(panel, label: str) -> str:
    # By the label's text: get_by_label would give the permalink's Copy button, which sits in its label.
    return panel.locator("label", has_text=label).locator("textarea").input_value()


def wait_for_position(panel, text: str) -> None:
    deadline = time.monotonic() + WAIT_MS / 1000
    while box_value(panel, "position") != text:
        assert time.monotonic() < deadline, box_value(panel, "position")
        time.sleep(0.1)


def test_a_permalink_opens_its_view_and_navigation_follows_the_list(page, app):
    page.goto(f"{app.url}?experiment=hamlet-study&item=paris")
    # The Query tab is selected, the view drawn, the position and the permalink shown.
    wait_for_title(page, "Capital of France?")
    assert page.get_by_role("tab", name="Query", exact=True).get_attribute("aria-selected") == "true"
    panel = query_panel(page)
    wait_for_position(panel, "item 2 of 4")
    assert box_value(panel, "permalink") == "?experiment=exp-q&item=paris"
    assert page.url.endswith("?experiment=exp-q&item=paris")  # the address bar holds the id now

    panel.get_by_role("button", name="next ▶").click()
    wait_for_title(page, "What is the capital of Spain")
    wait_for_position(panel, "item 3 of 4")
    assert page.url.endswith("?experiment=exp-q&item=madrid")

    # Only items whose citations changed between base and cf: madrid is not one, so the list's first opens.
    panel.get_by_label("citations changed between base and cf").check()
    wait_for_title(page, "Who wrote")
    wait_for_position(panel, "item 1 of 2 whose citations changed between base and cf")
    panel.get_by_role("button", name="◀ previous").click()  # wraps to the end
    wait_for_title(page, "Capital of France?")
    wait_for_position(panel, "item 2 of 2 whose citations changed between base and cf")

    # Search by item id, under the same filter; then a search that leaves nothing says so.
    panel.get_by_label("all items").check()
    wait_for_position(panel, "item 2 of 4")
    search = panel.get_by_label("search questions and item names")
    search.fill("MONA")
    search.press("Enter")
    wait_for_title(page, "Mona Lisa")
    wait_for_position(panel, "item 1 of 1 matching 'MONA'")
    search.fill("zebra")
    search.press("Enter")
    wait_for_position(panel, "no items matching 'zebra' in experiment exp-q")
    assert page.locator(".pe-q p").inner_text() == "no items matching 'zebra' in experiment exp-q"


def test_the_experiment_dropdown_lists_stored_experiments(page, app):
    page.goto(app.url)
    page.get_by_role("tab", name="Query", exact=True).click()
    panel = query_panel(page)
    panel.get_by_label("experiment (id or name)", exact=True).click()
    option = page.get_by_role("option", name="hamlet-study · exp-q · model-x")
    option.wait_for(timeout=WAIT_MS)
    option.click()
    wait_for_title(page, "Who wrote")  # choosing an experiment opens its first item
    wait_for_position(panel, "item 1 of 4")
    # The item dropdown lists the experiment's items; choosing one opens it.
    panel.get_by_label("item id", exact=True).click()
    page.get_by_role("option", name="madrid", exact=True).click()
    wait_for_title(page, "What is the capital of Spain")
    wait_for_position(panel, "item 3 of 4")
    # Typed values and Show (/query_detail): the position and the permalink follow.
    panel.get_by_label("experiment (id or name)", exact=True).fill("hamlet-study")
    panel.get_by_label("item id", exact=True).fill("mona")
    panel.get_by_role("button", name="Show", exact=True).click()
    wait_for_title(page, "Mona Lisa")
    wait_for_position(panel, "item 4 of 4")
    assert box_value(panel, "permalink") == "?experiment=exp-q&item=mona"


def test_a_hostile_permalink_shows_as_text(page, app):
    page.on("dialog", lambda dialog: dialog.dismiss())
    script = "<script>window.__pwned=1</script>"
    page.goto(f"{app.url}?experiment={quote(script)}&item={quote('<img src=x onerror=window.__pwned=2>')}")
    message = page.locator(".pe-q p")
    message.wait_for(timeout=WAIT_MS)
    assert message.inner_text() == f"unknown experiment '{script}'"
    assert page.get_by_role("tab", name="Query", exact=True).get_attribute("aria-selected") == "true"
    assert page.locator(".pe-q script").count() == 0 and page.locator(".pe-q img").count() == 0
    time.sleep(0.3)
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert box_value(query_panel(page), "permalink") == ""


def test_each_documents_use_shows_beside_its_citations(page, app):
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{app.url}?experiment=exp-q&item=hamlet")
    wait_for_title(page, "Who wrote")
    grid = page.locator(".pe-q table.grid")
    header = grid.locator("th", has_text="base used (nats)")
    assert "above 0.5 nats" in header.get_attribute("title")
    assert grid.locator("th", has_text="vanilla used").count() == 0
    # d3, cited by base but hardly needed: a word, not only a colour.
    posthoc = grid.locator("td.posthoc", has_text="post-rationalised (0.10)")
    assert posthoc.is_visible()
    assert "necessity = 0.100 nats" in posthoc.get_attribute("title")
    assert grid.locator("td.used", has_text="used (2.00)").is_visible()
    legend = page.locator(".pe-q p.legend")
    assert "post-rationalised: cited but not used" in legend.inner_text()
    grid.scroll_into_view_if_needed()
    (ARTIFACTS / "query-use").mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "query-use" / "hamlet-1440x900.png"))
