"""What a first-time visitor saw.

On an empty store: the tab bar names each tab once after the SQL tab was opened (it showed
"SQL" twice); the Compare, Query, Bias and Explain tabs say where to start; the form under the
first screen shows the first run's item limit; `smok` + Enter in the model box stays `smok` (it
became `smoke`) and Start refuses it in one line with "did you mean smoke?", queueing nothing.
On a store of one run: an unknown run in Compare is one message, not three red "Error" pills.
Screenshots go to test-artifacts/first-use/ for a person to look at.
"""

from __future__ import annotations

import re

import pytest

from demo.hints import NO_RUNS, PICK
from tests.browser.test_app_browser import ARTIFACTS, FIRST_SCREEN, RUN_LIMIT, RUN_MODEL, WAIT_MS, open_app, open_tab
from tests.demo.test_app_first_use import one_run_store

SIZE = {"width": 1440, "height": 900}
TABS = ("Run", "Runs", "Compare", "Query", "Bias", "Leaderboard", "Explain", "Judges", "SQL")
SHOTS = ARTIFACTS / "first-use"
COMPARE_A = "A (run, experiment or EXP:mode)"
COMPARE_B = "B (run, experiment or EXP:mode)"


@pytest.fixture(scope="module")
def empty_app(tmp_path_factory, launch_app):
    return launch_app(tmp_path_factory.mktemp("first-use-empty") / "app.duckdb")


@pytest.fixture(scope="module")
def stored_app(tmp_path_factory, launch_app):
    return launch_app(one_run_store(tmp_path_factory.mktemp("first-use-stored") / "app.duckdb"))


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def _tab_names(page) -> list[str]:
    return [t.inner_text().strip() for t in page.get_by_role("tab").all()]


def test_the_empty_tabs_say_where_to_start_and_the_tab_bar_names_each_once(page, empty_app):
    page.set_viewport_size(SIZE)
    open_app(page, empty_app)
    open_tab(page, "SQL")
    open_tab(page, "Run")
    page.wait_for_timeout(500)
    _shot(page, "tab-bar-after-sql")
    assert _tab_names(page) == list(TABS)
    for tab in ("Compare", "Query", "Bias", "Explain", "Judges"):
        open_tab(page, tab).get_by_text(NO_RUNS, exact=True).wait_for(timeout=WAIT_MS)
        _shot(page, f"empty-{tab.lower()}")


def test_the_first_screen_and_the_form_say_the_same_item_count(page, empty_app):
    page.set_viewport_size(SIZE)
    open_app(page, empty_app)
    panel = open_tab(page, "Run")
    panel.get_by_text(FIRST_SCREEN).wait_for(timeout=WAIT_MS)
    intro = panel.get_by_text(FIRST_SCREEN).locator("xpath=..").inner_text()
    count = re.search(r"(\d+) items in vanilla", intro).group(1)
    limit = panel.get_by_label(RUN_LIMIT)
    # The first screen's values arrive with the page's load event.
    page.wait_for_function("([el, want]) => el.value === want", arg=[limit.element_handle(), count], timeout=WAIT_MS)
    _shot(page, "first-screen")


def test_enter_in_the_model_box_keeps_the_typed_name_and_start_refuses_it(page, empty_app):
    page.set_viewport_size(SIZE)
    open_app(page, empty_app)
    panel = open_tab(page, "Run")
    # The first screen fills the form with its run's values at load: typed before, a name is replaced.
    panel.get_by_text(FIRST_SCREEN).wait_for(timeout=WAIT_MS)
    box = panel.get_by_label(RUN_MODEL)
    box.click()
    box.fill("")
    box.press_sequentially("smok", delay=30)
    box.press("Enter")
    page.wait_for_timeout(500)
    assert box.input_value() == "smok"
    panel.get_by_role("button", name="Start run", exact=True).click()
    toast = page.locator(".toast-body").filter(has_text="unknown model 'smok'")
    toast.wait_for(timeout=WAIT_MS)
    assert "did you mean smoke?" in toast.inner_text()
    _shot(page, "smok-refused")
    # Nothing queued. The banner's timer ticks, and on a loaded server Gradio's status for a pending
    # tick ("0.1s", "processing | 0.3/0.2s") can appear at any moment: the banner's own words, with
    # that status taken out, must be empty.
    page.wait_for_timeout(1000)
    banner = page.locator("#pe-job-banner").inner_text()
    assert re.sub(r"processing|[\d.]+(/[\d.]+)?s\b|[|\s]", "", banner) == "", banner
    # A choice picked with the arrow keys is still taken by Enter.
    box.click()
    box.fill("")
    box.press_sequentially("smo", delay=30)
    box.press("ArrowDown")
    box.press("Enter")
    page.wait_for_timeout(500)
    assert box.input_value() == "smoke"


def test_an_unknown_run_in_compare_is_one_message(page, stored_app):
    page.set_viewport_size(SIZE)
    open_app(page, stored_app)
    panel = open_tab(page, "Compare")
    panel.get_by_text(PICK["compare"], exact=True).wait_for(timeout=WAIT_MS)  # the tab has settled
    for label, value in ((COMPARE_A, "nope-run"), (COMPARE_B, "first-run")):
        box = panel.get_by_label(label)
        box.fill(value)
        box.press("Escape")
    page.mouse.click(5, 5)  # close the lists
    panel.get_by_role("button", name="Compare", exact=True).click()
    refusal = panel.locator(".pe-refusal")
    refusal.wait_for(timeout=WAIT_MS)
    assert "'nope-run' is neither a run id nor an experiment" in refusal.inner_text()
    page.wait_for_timeout(500)
    _shot(page, "compare-unknown-run")
    assert page.get_by_text("Error", exact=True).count() == 0  # no pill, no toast


def test_a_late_hint_replaces_only_nothing_or_a_hint(page, empty_app):
    """The guard a tab's hint passes in the browser (demo.hints.hint_guard_js), run in Chromium:
    a hint that arrives after a refusal or a result leaves it (CI saw a refusal replaced)."""
    from demo.hints import hint_guard_js, hint_html

    open_app(page, empty_app)
    hint = hint_html(empty_app.db, "compare")
    guard = f"([hint, shown]) => ({hint_guard_js()})(hint, shown)"
    for shown, kept in (("", False), (None, False), (hint, False), (PICK["bias"], False), (NO_RUNS, False),
                        ('<div class="pe-refusal">Not compared</div>', True), ("**bias** table", True)):
        assert page.evaluate(guard, [hint, shown]) == (shown if kept else hint), shown
    assert page.evaluate(guard, ["", ""]) == ""  # no hint yet: nothing written


def test_a_late_bias_hint_replaces_only_nothing_or_a_hint_in_its_markdown(page, empty_app):
    """The Bias tab's summary is Markdown: its hint is the plain text (no marked paragraph), and
    the guard knows it by the text itself; a refusal or a shown summary stays (demo.tabs.bias)."""
    from demo.hints import hint_guard_js, hint_text

    open_app(page, empty_app)
    hint = hint_text(empty_app.db, "bias")
    assert hint == NO_RUNS
    guard = f"([hint, shown]) => ({hint_guard_js()})(hint, shown)"
    for shown, kept in (("", False), (None, False), (NO_RUNS, False), (PICK["bias"], False),
                        (f"\n{PICK['bias']}  ", False),
                        ("**Not shown:** 'nope' is not a stored experiment", True),
                        ("**gender pilot** (e1): 12 items, modes vanilla, base, cf", True),
                        (f"{PICK['bias']} **and more**", True)):
        assert page.evaluate(guard, [hint, shown]) == (shown if kept else hint), shown
    # In the tab itself: the hint arrives through the guard, and a refusal shown then stays when
    # the tab is opened again (its select event answers with no hint over a refusal).
    panel = open_tab(page, "Bias")
    panel.get_by_text(NO_RUNS, exact=True).wait_for(timeout=WAIT_MS)
    panel.get_by_label("experiment (id or name)").fill("nope")
    panel.get_by_role("button", name="Show bias", exact=True).click()
    panel.get_by_text("Not shown:").wait_for(timeout=WAIT_MS)
    open_tab(page, "Explain").get_by_text(NO_RUNS, exact=True).wait_for(timeout=WAIT_MS)
    open_tab(page, "Bias")
    page.wait_for_timeout(1000)
    assert panel.get_by_text("Not shown:").is_visible() and panel.get_by_text(NO_RUNS, exact=True).count() == 0
