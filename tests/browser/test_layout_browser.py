"""The app as a person sees it: every tab at 1440x900 and 1024x768 fits the window
(no page-wide horizontal scroll, the Runs table's per-mode metrics inside it, long unbroken
answers wrapped), a row clicked in Runs opens Query, an unknown id in Bias empties the panels
and logs one line, and the only experiment is opened in Query, Bias and Explain.

The store holds one experiment on the smoke model's name (zero scores, so the note that says
why must show beside them) whose answers and documents hold 400-character words. Each tab is
screenshotted into test-artifacts/layout/ at both sizes, for a person to look at.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from tests.browser.test_app_browser import ARTIFACTS, WAIT_MS, grid_rows, open_app, open_tab

SIZES = ((1440, 900), (1024, 768))
TABS = ("Run", "Runs", "Compare", "Query", "Bias", "Leaderboard", "Explain", "Judges", "SQL")
EXPERIMENT = "layout-study"
ITEM = "nq-1"
LONG_WORD = "x" * 400  # an answer or document without a space: must wrap, not widen the page
SMOKE_NOTE = "The smoke model has random weights and never cites"  # demo.render.SMOKE_NOTE's start
SHOTS = ARTIFACTS / "layout"


def _items():
    from engine.types import Document, Item

    return [
        Item(f"nq-{n}", f"Question {n} {LONG_WORD if n == 1 else ''}?", ("answer",), (
            Document(f"d{n}a", f"{LONG_WORD} relevant", True, title="A"),
            Document(f"d{n}b", "Unrelated text.", False, title="B"),
        ))
        for n in (1, 2)
    ]


def _store(db: Path) -> None:
    """vanilla, base and cf of one experiment on two items, answered by "the smoke model" (its
    store label) with no citation, so every score is 0; the item nq-1 holds the long words."""
    from engine.generation.model_choice import SMOKE_LABEL
    from engine.prompting.prompts import METADATA_TYPES, PromptConfig, build_prompt
    from engine.types import Generation, RunSpec, TokenLogprob
    from store import RunStore, connect

    sha = "sha-layout"
    items = _items()
    store = RunStore(db, timeout_s=10)
    store.put_items(sha, items)
    for mode in ("vanilla", "base", "cf"):
        run_id = f"layout-{mode}"
        config = PromptConfig(mode=mode, metadata=METADATA_TYPES["gender"])
        store.start_run(RunSpec(run_id, EXPERIMENT, f"hash-{run_id}", SMOKE_LABEL, None, "none", "float32", "cpu",
                                "layout.jsonl", sha, "gender", mode, 0, "v1", None, {},
                                {"prompt": config.to_dict()}, len(items)))
        generations = []
        for item in items:
            prompt = build_prompt(item, config)
            answer = f"{LONG_WORD} no citation" if item.id == ITEM else "no citation"
            tokens = (TokenLogprob(1, answer[:20], math.log(0.5)),)
            generations.append(Generation(item.id, prompt.text, answer, prompt.shown_doc_ids, "stop", 10, tokens, ()))
        store.write_batch(run_id, generations)
        store.finish_run(run_id, "complete")
    with connect(db) as conn:
        conn.execute("UPDATE experiments SET name = ? WHERE experiment_id = ?", [EXPERIMENT, EXPERIMENT])


@pytest.fixture(scope="module")
def app(tmp_path_factory, launch_app):
    db = tmp_path_factory.mktemp("layout-store") / "app.duckdb"
    _store(db)
    return launch_app(db)


def _settle(page, timeout_s: float = 10.0) -> None:
    """Wait until the layout holds still before measuring: the page's size unchanged over half a
    second of animation frames (the Run tab's timers keep the network busy, so there is no idle
    moment to wait for; a fixed pause cost 1.5 s per tab and still guessed)."""
    still = page.evaluate(
        """async (timeoutMs) => {
            const size = () => [document.documentElement.scrollWidth, document.documentElement.scrollHeight].join();
            const start = performance.now();
            let last = size(), since = performance.now();
            while (performance.now() - start < timeoutMs) {
                await new Promise(r => requestAnimationFrame(() => setTimeout(r, 50)));
                const now = size();
                if (now !== last) { last = now; since = performance.now(); }
                else if (performance.now() - since >= 500) return true;
            }
            return false;
        }""",
        timeout_s * 1000,
    )
    assert still, f"the layout kept changing for {timeout_s} s"


def _page_width(page) -> int:
    return page.evaluate("document.documentElement.scrollWidth")


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_every_tab_fits_the_window(browser, app, width, height):
    """No tab scrolls sideways; the Runs table's last metrics column and the Query and Explain
    answers stay inside the window; the smoke note stands beside the zeros in Runs, Query, Bias."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    try:
        open_app(page, app)
        for tab in TABS:
            panel = open_tab(page, tab)
            if tab == "Query":  # the only experiment opens by itself, on its first item
                page.locator(".pe-q table.grid").wait_for(timeout=WAIT_MS)
            if tab == "Bias":  # ... and its bias is shown (a bootstrap: seconds)
                panel.get_by_role("grid", name="CAS and CAB (x100)").get_by_role("gridcell").first.wait_for(
                    timeout=WAIT_MS * 2)
            if tab == "Explain":
                page.locator(".pe-q table").filter(visible=True).first.wait_for(timeout=WAIT_MS)
            _settle(page)
            page.screenshot(path=str(SHOTS / f"{tab}-{width}x{height}.png"), full_page=True)
            assert _page_width(page) <= width, (tab, _page_width(page))
            # No table shows Gradio's placeholder header "1 | 2 | 3" (a table with no columns yet).
            for grid in panel.get_by_role("grid").filter(visible=True).all():
                heads = [h.inner_text().strip() for h in grid.get_by_role("columnheader").all()]
                assert heads[:3] != ["1", "2", "3"], (tab, heads)
            if tab == "Runs":
                grid = panel.get_by_role("grid", name="experiments")
                last = grid.get_by_role("columnheader").filter(has_text="cf: P / R / F1, EM")
                box = last.bounding_box()
                assert box is not None and box["x"] + box["width"] <= width, box
                assert grid_rows(grid)[0]["experiment"] == EXPERIMENT
                panel.get_by_text(SMOKE_NOTE).wait_for(timeout=WAIT_MS)
            if tab in ("Query", "Explain"):
                # The question, the documents grid and the answers all wrap inside the view.
                for root in page.locator(".pe-q").filter(visible=True).all():
                    assert root.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), (tab, root.inner_text()[:80])
                answers = page.locator(".pe-q .answer").filter(visible=True)
                if tab == "Query":
                    assert answers.count() == 3
                    page.locator(".pe-q .note").get_by_text(SMOKE_NOTE).wait_for(timeout=WAIT_MS)
                for i in range(answers.count()):
                    box = answers.nth(i).bounding_box()
                    assert box["x"] + box["width"] <= width, (tab, i, box)
                    # Its text wraps inside it: nothing spills past its right edge.
                    assert answers.nth(i).evaluate("e => e.scrollWidth <= e.clientWidth + 1"), (tab, i)
            if tab == "Bias":
                panel.get_by_text(SMOKE_NOTE).first.wait_for(timeout=WAIT_MS)
    finally:
        context.close()


def test_a_row_clicked_in_runs_opens_the_experiment_in_query(page, app):
    open_app(page, app)
    panel = open_tab(page, "Runs")
    grid = panel.get_by_role("grid", name="experiments")
    grid.get_by_role("gridcell").filter(has_text=EXPERIMENT).first.wait_for(timeout=WAIT_MS)
    grid.get_by_role("gridcell").filter(has_text="complete").first.click()
    page.get_by_role("tab", name="Query", selected=True).wait_for(timeout=WAIT_MS)
    page.locator(".pe-q h3").wait_for(timeout=WAIT_MS)
    query = page.get_by_role("tabpanel").filter(visible=True)
    assert EXPERIMENT in query.get_by_label("experiment (id or name)").input_value()
    assert query.get_by_label("item id").input_value() == ITEM  # the dataset's first item
    assert "experiment=" in page.url and f"item={ITEM}" in page.url  # the permalink follows


def test_the_prompt_each_mode_saw_is_shown_with_its_labels_marked(page, app):
    open_app(page, app)
    open_tab(page, "Query")
    page.locator(".pe-q table.grid").wait_for(timeout=WAIT_MS)
    summaries = page.locator(".pe-q details summary")
    assert [s.inner_text() for s in summaries.all()] == [f"the prompt {m} saw" for m in ("vanilla", "base", "cf")]
    summaries.nth(1).click()  # base
    prompt = page.locator(".pe-q details pre.prompt").nth(1)
    prompt.wait_for(timeout=WAIT_MS)
    from engine.prompting.prompts import METADATA_TYPES, PromptConfig, build_prompt

    # Exactly the text engine.prompting.prompts gave the model (stored with the answer).
    expected = build_prompt(_items()[0], PromptConfig(mode="base", metadata=METADATA_TYPES["gender"])).text
    assert prompt.inner_text() == expected
    marks = [(m.get_attribute("class"), m.inner_text()) for m in prompt.locator("mark").all()]
    # base: the relevant document carries label A (a woman), the other label B (a man).
    assert marks == [("label-a", "(written by a woman)"), ("label-b", "(written by a man)")]
    # Only one position column: every mode showed the documents in the ranked order.
    heads = [h.inner_text() for h in page.locator(".pe-q table.grid th").all()]
    assert heads.count("position") == 1 and not any(h.endswith(" position") for h in heads), heads


def test_an_unknown_id_in_bias_empties_the_panels_and_logs_one_line(page, app):
    open_app(page, app)
    panel = open_tab(page, "Bias")
    results = panel.get_by_role("grid", name="CAS and CAB (x100)")
    results.get_by_role("gridcell").first.wait_for(timeout=WAIT_MS * 2)  # the only experiment, shown
    # Clear the chosen experiment (the multiselect's "Clear" x) and type a typo instead.
    panel.locator(".token-remove.remove-all").click()
    panel.get_by_label("experiment (id or name)").fill("no-such-experiment")
    panel.get_by_role("button", name="Show bias", exact=True).click()
    line = panel.locator("p", has_text="Not shown:")
    line.wait_for(timeout=WAIT_MS)
    summary = line.inner_text()
    assert "no-such-experiment" in summary and "\n" not in summary.strip(), summary
    page.screenshot(path=str(ARTIFACTS / "layout-bias-unknown-id.png"), full_page=True)
    deadline = time.monotonic() + WAIT_MS / 1000
    while grid_rows(results):  # the previous experiment's rows go
        assert time.monotonic() < deadline, grid_rows(results)
        time.sleep(0.2)
    assert page.get_by_text(EXPERIMENT + ":").count() == 0  # nor does its summary stay
    assert panel.locator(".error").filter(visible=True).count() == 0  # no red "Error" pill on a panel (the toast
    # above the tabs says it too, and goes)
    for table in ("Table 1: attribution quality", "Table 2: attribution bias"):  # their headers, not "1 2 3"
        heads = [h.inner_text().strip() for h in panel.get_by_role("grid", name=table).get_by_role("columnheader").all()]
        assert "1" not in heads and len(heads) >= 5, (table, heads)
    log = app.log.read_text(encoding="utf-8", errors="replace")
    assert "bias: refused:" in log and "no-such-experiment" in log and "Traceback" not in log, log[-2000:]
