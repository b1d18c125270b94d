"""The Compare tab in a real browser at 1440x900: two runs compared, the per-metric
table and the plot of the differences, an item clicked in the items table opening the Query tab
with both runs side by side.

The store is tests/engine/usecases/compare/test_compare.py's: experiments e1 and e2 (three modes each), e2's base
missing 4 of the 40 items.
"""

from __future__ import annotations

import pytest

from tests.browser.test_app_browser import ARTIFACTS, PLOTLY, WAIT_MS, grid_rows, open_app, open_tab

VIEWPORT = {"width": 1440, "height": 900}
TABLE = "per metric (B − A)"
ITEMS = "items"


@pytest.fixture(scope="module")
def app(tmp_path_factory, launch_app):
    from tests.engine.usecases.compare.test_compare import build_store

    return launch_app(build_store(tmp_path_factory.mktemp("compare-browser") / "c.duckdb"))


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"compare-{name}.png"), full_page=False)


def test_compare_two_runs_then_open_an_item_side_by_side(page, app):
    page.set_viewport_size(VIEWPORT)
    open_app(page, app)
    # The Runs tab: two experiments ticked, in that order, compared mode by mode in the Compare tab.
    runs = open_tab(page, "Runs")
    for experiment in ("e1", "e2"):
        box = runs.get_by_label(f"{experiment} · vanilla,base,cf", exact=True)
        box.wait_for(timeout=WAIT_MS)
        box.check()
    runs.get_by_role("button", name="Compare", exact=True).click()
    page.get_by_text("A e1 (experiment) · B e2 (experiment)").wait_for(timeout=WAIT_MS)
    assert page.get_by_role("tab", name="Compare", exact=True).get_attribute("aria-selected") == "true"
    panel = page.get_by_role("tabpanel").filter(visible=True)
    panel.get_by_text("CAB of B against A's: 36 items paired").wait_for(timeout=WAIT_MS)
    panel.locator(PLOTLY).get_by_text("CAB: CAB citation F1").wait_for(timeout=WAIT_MS)
    shot(page, "experiments")

    # Two runs, typed in.
    panel.get_by_label("A (run, experiment or EXP:mode)").fill("e1-base")
    panel.get_by_label("B (run, experiment or EXP:mode)").fill("e2-base")
    panel.get_by_role("button", name="Compare", exact=True).click()

    # The pairing, the table (one row per metric, with its test and verdict) and the plot.
    panel.get_by_text("36 items paired; 4 only in A, 0 only in B").wait_for(timeout=WAIT_MS)
    table = panel.get_by_role("grid", name=TABLE)
    table.get_by_role("gridcell", name="citation F1").first.wait_for(timeout=WAIT_MS)
    rows = {r["metric"]: r for r in grid_rows(table)}
    assert len(rows) == 9, rows
    f1 = rows["citation F1"]
    assert (f1["comparison"], f1["n"], f1["test"], f1["verdict"]) == ("base", "36", "paired permutation",
                                                                      "different"), f1
    assert f1["95% CI"].startswith("[-") and f1["Holm p"], f1
    assert rows["exact match (paper)"]["test"] == "exact McNemar"
    plot = panel.locator(PLOTLY)
    plot.wait_for(timeout=WAIT_MS)
    assert "Difference B − A per metric" in plot.inner_text()
    assert plot.locator(".errorbar").count() >= 1 and plot.locator(".scatterlayer .point").count() == 9
    shot(page, "table")
    plot.scroll_into_view_if_needed()
    shot(page, "plot")

    # The items that differ most, largest |F1 difference| first; a click opens the Query tab.
    items = panel.get_by_role("grid", name=ITEMS)
    items.scroll_into_view_if_needed()
    first = grid_rows(items)[0]
    assert first["comparison"] == "base" and abs(float(first["Δ F1"])) == 100.0, first
    shot(page, "items")
    items.get_by_role("gridcell", name=first["item_id"], exact=True).first.click()

    page.get_by_text("Two compared runs side by side").wait_for(timeout=WAIT_MS)
    assert page.get_by_role("tab", name="Query", exact=True).get_attribute("aria-selected") == "true"
    pair = page.locator(".pe-q table.pair")
    pair.wait_for(timeout=WAIT_MS)
    headers = [h.inner_text().strip() for h in pair.locator("th").all()]
    assert {"A position", "B position", "A cited (p)", "B cited (p)"} <= set(headers), headers
    query = page.get_by_role("tabpanel").filter(visible=True)
    assert "A: run e1-base" in query.inner_text() and "B: run e2-base" in query.inner_text()
    assert query.locator(".pe-q .answer").count() >= 2
    # Below it, run A's experiment on that item in the tab's own view.
    assert query.get_by_label("experiment (id or name)").input_value().startswith("e1 ")  # its label
    assert query.get_by_label("item id").input_value() == first["item_id"]
    page.evaluate("window.scrollTo(0, 0)")
    shot(page, "side-by-side")
    # A step in the Query tab's own view closes the side-by-side view (it is of one item).
    query.get_by_role("button", name="next ▶").click()
    page.get_by_text("Two compared runs side by side").wait_for(state="hidden", timeout=WAIT_MS)
