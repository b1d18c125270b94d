"""The Judges tab in a real browser at 1440x900: the hint before anything is chosen,
an experiment's agreement matrix, a person's labels uploaded and imported (the matrix then has
three judges), the disagreements of a pair, and a clicked disagreement opening its item in the
Query tab. The store is tests/support/judged_store.py's (two model judges on 12 answers).
Screenshots go to test-artifacts/judges-*.png.
"""

from __future__ import annotations

import pytest

from demo.hints import PICK
from tests.browser.test_app_browser import ARTIFACTS, WAIT_MS, grid_rows, open_app, open_tab

VIEWPORT = {"width": 1440, "height": 900}
MATRIX = "agreement matrix (Cohen's κ [95% CI] · agree · n)"


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    from tests.support.judged_store import build

    db = tmp_path_factory.mktemp("judges-browser") / "j.duckdb"
    return db, build(db)


@pytest.fixture(scope="module")
def app(judged, launch_app):
    return launch_app(judged[0])


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"judges-{name}.png"), full_page=False)


def test_the_matrix_an_import_and_a_disagreement_opened_in_query(page, app, judged, tmp_path):
    from tests.support.judged_store import LLM, NLI, cited

    _, info = judged
    page.set_viewport_size(VIEWPORT)
    open_app(page, app)
    panel = open_tab(page, "Judges")
    panel.get_by_text(PICK["judges"], exact=True).wait_for(timeout=WAIT_MS)
    shot(page, "hint")

    # An experiment by name: the two model judges' matrix.
    panel.get_by_label("experiment (id or name)").fill("pilot")
    panel.get_by_role("button", name="Show agreement", exact=True).click()
    panel.get_by_text("Panel of 2 judges").wait_for(timeout=WAIT_MS)
    matrix = panel.get_by_role("grid", name=MATRIX)
    matrix.get_by_role("gridcell", name=LLM, exact=True).first.wait_for(timeout=WAIT_MS)
    rows = {r["judge"]: r for r in grid_rows(matrix)}
    assert set(rows) == {LLM, NLI} and rows[LLM][LLM] == "—", rows
    assert rows[LLM][NLI].startswith("κ ") and " · agree " in rows[LLM][NLI] and rows[LLM][NLI] == rows[NLI][LLM]
    # The disagreements follow the matrix in a child of their own; a visitor has one task at a time,
    # so an import clicked while they are still listed is refused (PENDING), as a user would see.
    panel.get_by_text("cited documents where").wait_for(timeout=WAIT_MS)

    # A person's labels, uploaded and imported: a third judge in the matrix.
    lines = ["item_id,experiment,mode,position,label"]
    for i, item in enumerate(info["items"][:4]):
        lines += [f"{item},pilot,vanilla,{p},{'attributable' if (i + p) % 2 else 'not_attributable'}" for p in cited(i)]
    labels = tmp_path / "ann.csv"
    labels.write_text("\n".join(lines) + "\n")
    panel.get_by_text("Import people's labels (CSV or JSONL)").click()
    panel.locator("#pe-labels-file input[type=file]").set_input_files(str(labels))
    panel.get_by_label("judge (who labelled: a person or a team)").fill("ann")
    panel.get_by_role("button", name="Import labels", exact=True).click()
    page.get_by_text("ann.csv: 12 of 12 labels stored as judge 'ann'").first.wait_for(timeout=WAIT_MS)
    panel.get_by_text("Panel of 3 judges").wait_for(timeout=WAIT_MS)
    matrix.get_by_role("gridcell", name="ann", exact=True).first.wait_for(timeout=WAIT_MS)
    panel.get_by_role("grid", name="against human labels (Wilson 95% intervals)").get_by_role(
        "gridcell", name=LLM, exact=True).first.wait_for(timeout=WAIT_MS)
    page.evaluate("window.scrollTo(0, 0)")
    shot(page, "matrix")

    # The pair that disagrees most, its disagreements listed with each verdict and the document.
    table = panel.get_by_role("grid", name="disagreements")
    table.scroll_into_view_if_needed()
    table.get_by_role("gridcell", name=info["run"], exact=True).first.wait_for(timeout=WAIT_MS)
    # The import re-lists the disagreements of the pair that now disagrees most, after the matrix:
    # the rows are read once that listing shows, not the one from before the import.
    from demo.handlers.judges import agreement_view

    a, b = agreement_view(judged[0], "pilot", None).pairs[0][0].split(" vs ")
    panel.get_by_text(f"cited documents where {a} and {b} disagree").wait_for(timeout=WAIT_MS)
    first = grid_rows(table)[0]
    verdicts = [v for k, v in first.items() if k.startswith(("A: ", "B: "))]
    assert sorted(verdicts) == ["attributable", "not attributable"], first
    assert first["document"] and first["run"] == info["run"], first
    panel.get_by_text("cited documents where").wait_for(timeout=WAIT_MS)
    shot(page, "disagreements")

    # A click opens the item in the Query tab (the experiment's own view, no side-by-side).
    table.get_by_role("gridcell", name=first["item_id"], exact=True).first.click()
    page.wait_for_function("() => [...document.querySelectorAll('[role=tab]')].some("
                           "t => t.innerText.trim() === 'Query' && t.getAttribute('aria-selected') === 'true')",
                           timeout=WAIT_MS)
    query = page.get_by_role("tabpanel").filter(visible=True)
    query.get_by_label("item id").wait_for(timeout=WAIT_MS)
    page.wait_for_function(f"() => [...document.querySelectorAll('input')].some(i => i.value === {first['item_id']!r})",
                           timeout=WAIT_MS)
    assert query.get_by_label("experiment (id or name)").input_value().startswith("pilot")
    assert query.get_by_label("item id").input_value() == first["item_id"]
    assert not page.get_by_text("Two compared runs side by side").is_visible()
    page.evaluate("window.scrollTo(0, 0)")
    shot(page, "query")
