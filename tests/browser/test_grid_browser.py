"""A study grid from the Run tab in a real browser at 1440x900: comma lists in two
boxes, the plan shown before Start (one row per configuration, vanilla shared), then ONE job that
runs every configuration to the end, followed in the jobs table and the banner."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.browser.test_app_browser import (
    ARTIFACTS,
    FIRST_SCREEN,
    RUN_BATCH,
    RUN_JOBS_GRID,
    RUN_LIMIT,
    RUN_MODEL,
    RUN_START,
    RUN_TIMEOUT_S,
    WAIT_MS,
    grid_rows,
    open_app,
    open_tab,
)

VIEWPORT = {"width": 1440, "height": 900}
RUN_METADATA = "metadata type (type a new name for your own)"
RUN_XAI = "XAI variant"
RUN_MAX_NEW_TOKENS = "max new tokens"
RUN_STUDY = "study name"
PLAN_SHOW = "Show plan"
PLAN_GRID = "the grid's plan: one row per configuration, then the total"
BANNER = "#pe-job-banner"
ITEMS = 2
# 2 metadata x 2 XAI; per XAI variant gender generates vanilla, base and cf, race base and cf and
# receives a copy of gender's vanilla answers.
TO_GENERATE = 2 * (3 + 2) * ITEMS
SHARED = 2 * ITEMS


@pytest.fixture(scope="module")
def app(tmp_path_factory, launch_app):
    return launch_app(Path(tmp_path_factory.mktemp("grid-store") / "grid.duckdb"))


def type_list(panel, label: str, value: str) -> None:
    """Type a comma list into a dropdown that takes custom values, and leave it (Gradio keeps it)."""
    box = panel.get_by_label(label, exact=True)
    box.click()
    box.fill(value)
    box.press("Enter")
    box.blur()


def test_a_2x2_grid_shows_its_plan_then_runs_as_one_job_to_the_end(page, app):
    page.set_viewport_size(VIEWPORT)
    open_app(page, app)
    panel = open_tab(page, "Run")
    # The store is empty: the page's load event fills model, item limit and sizes with the first
    # run's values when it answers, seconds late under load. Typed before, the limit of 2 was
    # replaced after Show plan (the plan said 24 answers, the job ran the first run's 60); Start
    # now refuses that (tests/demo/handlers/test_app_grid_plan_shown.py), and a visitor types into a settled form.
    panel.get_by_text(FIRST_SCREEN).wait_for(timeout=WAIT_MS)
    assert panel.get_by_label(RUN_MODEL).input_value() == "smoke"
    type_list(panel, RUN_METADATA, "gender,race")
    type_list(panel, RUN_XAI, "none,counterfactual")
    panel.get_by_label(RUN_LIMIT).fill(str(ITEMS))
    panel.get_by_label(RUN_BATCH).fill("4")
    panel.get_by_label(RUN_MAX_NEW_TOKENS).fill("4")
    panel.get_by_label(RUN_STUDY).fill("browser-grid")
    # Two built-in types: the custom type's label boxes stay hidden.
    assert not panel.get_by_label("custom label A (on relevant documents in base)").is_visible()

    panel.get_by_role("button", name=PLAN_SHOW, exact=True).click()
    plan = panel.get_by_role("grid", name=PLAN_GRID)
    plan.get_by_role("gridcell", name="total").wait_for(timeout=WAIT_MS)
    rows = grid_rows(plan)
    assert [(r["metadata"], r["XAI"], r["vanilla"]) for r in rows[:4]] == [
        ("gender", "none", "its own"), ("gender", "counterfactual", "its own"),
        ("race", "none", "shared from #1"), ("race", "counterfactual", "shared from #2")], rows
    assert all(r["items"] == str(ITEMS) and r["modes"] == "vanilla, base, cf" for r in rows[:4]), rows
    assert rows[4]["answers to generate"] == str(TO_GENERATE), rows
    head = page.locator("#pe-plan").inner_text()
    assert "study browser-grid: 4 configurations (2 metadata x 2 xai)" in head, head
    plan.scroll_into_view_if_needed()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "grid-plan.png"))

    panel.get_by_role("button", name=RUN_START, exact=True).click()
    jobs = panel.get_by_role("grid", name=RUN_JOBS_GRID)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    row: dict[str, str] = {}
    while time.monotonic() < deadline:
        found = grid_rows(jobs)
        if found:
            row = found[0]
            if row["state"] in ("complete", "failed", "cancelled"):
                break
        time.sleep(0.2)
    total = TO_GENERATE + SHARED
    assert row.get("state") == "complete", row
    assert row["progress"] == f"{total}/{total}" and row["modes"] == "vanilla,base,cf", row
    assert "in study browser-grid (4 experiments)" in row["message"], row
    banner = page.locator(BANNER)
    banner.get_by_text("complete").first.wait_for(timeout=WAIT_MS)
    assert "study browser-grid" in banner.inner_text() and "Study browser-grid: choose it" in banner.inner_text()
    page.screenshot(path=str(ARTIFACTS / "grid-done.png"), full_page=True)


@pytest.fixture(scope="module")
def empty_app(tmp_path_factory, launch_app):
    """An app on a store of its own, still empty whatever the other tests ran."""
    return launch_app(Path(tmp_path_factory.mktemp("grid-changed") / "changed.duckdb"))


def test_a_box_changed_after_show_plan_is_refused_at_start_and_nothing_runs(page, empty_app):
    """Start runs the plan on screen or nothing: the limit typed after Show plan is named in one
    line, the plan on screen stays as it was, and nothing is queued."""
    page.set_viewport_size(VIEWPORT)
    open_app(page, empty_app)
    panel = open_tab(page, "Run")
    panel.get_by_text(FIRST_SCREEN).wait_for(timeout=WAIT_MS)
    type_list(panel, RUN_METADATA, "gender,race")
    panel.get_by_label(RUN_LIMIT).fill("2")
    panel.get_by_label(RUN_STUDY).fill("browser-changed")
    panel.get_by_role("button", name=PLAN_SHOW, exact=True).click()
    panel.get_by_role("grid", name=PLAN_GRID).get_by_role("gridcell", name="total").wait_for(timeout=WAIT_MS)
    panel.get_by_label(RUN_LIMIT).fill("3")
    panel.get_by_role("button", name=RUN_START, exact=True).click()
    toast = page.locator(".toast-body").filter(has_text="not started")
    toast.wait_for(timeout=WAIT_MS)
    text = " ".join(toast.inner_text().split())
    assert "the item limit is 3 in the form but 2 in the plan shown" in text, text
    assert "press Show plan" in text and "Traceback" not in text, text
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "grid-changed-refused.png"), full_page=True)
    time.sleep(1.0)  # a job queued anyway would be listed by now
    assert grid_rows(panel.get_by_role("grid", name=RUN_JOBS_GRID)) == []
    # The plan on screen stays as it was, under no red "Error" pill (the toast says it).
    assert panel.get_by_role("grid", name=PLAN_GRID).get_by_role("gridcell", name="total").is_visible()
    assert "plan: 6 runs x 2 items" in page.locator("#pe-plan").inner_text()
    assert page.locator("#pe-plan .error").filter(visible=True).count() == 0
    # ...nor on the token box, an output of Start only because Start empties it.
    assert panel.get_by_text("Error", exact=True).filter(visible=True).count() == 0
