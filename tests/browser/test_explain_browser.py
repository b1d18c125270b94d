"""The Explain tab in a browser: a stored explanation beside its answer, the documents and label it
names highlighted, and markup in the explanation shown as text (nothing parsed, nothing run)."""

from __future__ import annotations

import time

import pytest

from tests.browser.test_app_browser import WAIT_MS, open_app, open_tab
from tests.demo.handlers.test_app_explain import HOSTILE, PLAIN, build_explained_store

E_ROOT = ".pe-q"  # demo.explain_render.explain_page wraps the view in this
E_MODE = ".pe-q .modes .mode"
E_EXPLANATION = ".explanation"
E_NAMED_CELL = ".pe-q table.grid td.named"
E_NAMED_LABEL = ".pe-q table.grid .named-label"


@pytest.fixture(scope="module")
def app(tmp_path_factory, launch_app, tiny_llama_dir):
    db, experiment_id, runs = build_explained_store(tmp_path_factory.mktemp("explain-store"), tiny_llama_dir)
    return launch_app(db), experiment_id


def test_a_stored_explanation_shows_with_its_highlights_and_markup_as_text(page, app):
    launched, experiment_id = app
    page.on("dialog", lambda dialog: dialog.dismiss())
    open_app(page, launched)
    panel = open_tab(page, "Explain")
    panel.get_by_label("experiment (id or name)").fill(experiment_id)
    panel.get_by_label("item id").fill("q0")
    panel.get_by_role("button", name="Show", exact=True).click()
    page.locator(f"{E_MODE} {E_EXPLANATION}").first.wait_for(timeout=WAIT_MS)

    modes = page.locator(E_MODE)
    assert [modes.nth(i).locator("h4").inner_text().split()[0] for i in range(modes.count())] == ["vanilla", "base", "cf"]
    # Each explanation sits in its mode's column, under the answer, as the text it is.
    assert "no explanation stored yet" in modes.nth(0).inner_text()
    assert modes.nth(1).locator(E_EXPLANATION).inner_text() == HOSTILE
    assert modes.nth(2).locator(E_EXPLANATION).inner_text() == PLAIN
    assert "gives a label as a reason: a woman" in modes.nth(1).inner_text()
    assert "names documents [2]" in modes.nth(2).inner_text() and "names no label" in modes.nth(2).inner_text()
    # The documents each explanation names, and the label base's explanation gives, are highlighted.
    named = page.locator(E_NAMED_CELL)
    assert named.count() == 2
    texts = sorted(named.nth(i).inner_text() for i in range(2))
    assert texts[0].startswith("[1]") and texts[1].startswith("[2]") and all("named" in t for t in texts)
    assert page.locator(E_NAMED_LABEL).count() >= 1
    assert all(t == "a woman" for t in page.locator(E_NAMED_LABEL).all_inner_texts())
    background = page.locator(E_NAMED_CELL).first.evaluate("e => getComputedStyle(e).backgroundColor")
    assert background == "rgb(255, 244, 194)"  # .named in demo.explain_render
    # The markup in the explanation became no element, and nothing ran.
    root = page.locator(E_ROOT)
    assert root.locator("img").count() == 0 and root.locator(".explanation b").count() == 0
    time.sleep(0.3)  # an <img src=x> would fail and fire onerror within this
    assert page.evaluate("typeof window.__pwned") == "undefined"


def test_a_whole_run_shows_as_a_table_with_its_label_share(page, app):
    from store.queries import explain_runs

    launched, experiment_id = app
    base = next(r.run_id for r in explain_runs(launched.db, experiment=experiment_id) if r.rag_mode == "base")
    open_app(page, launched)
    panel = open_tab(page, "Explain")
    panel.get_by_label("experiment (id or name)").fill(experiment_id)
    panel.get_by_label("run of the experiment").fill(base)
    panel.get_by_role("button", name="Show run", exact=True).click()
    page.get_by_text("label share 1.00").wait_for(timeout=WAIT_MS)
    table = panel.get_by_label("the run's explanations", exact=False)
    assert "q0" in table.inner_text() and "a woman" in table.inner_text()
    assert page.locator(f"{E_ROOT} img").count() == 0


def test_generate_explains_the_item_in_the_background_and_shows_it(page, app):
    launched, experiment_id = app
    open_app(page, launched)
    panel = open_tab(page, "Explain")
    panel.get_by_label("experiment (id or name)").fill(experiment_id)
    panel.get_by_label("item id").fill("q2")
    panel.get_by_role("button", name="Show", exact=True).click()
    page.get_by_text("0 explanations stored").wait_for(timeout=WAIT_MS)
    panel.get_by_role("button", name="Generate explanations", exact=True).click()
    status = panel.get_by_label("explanation job")
    page.wait_for_function("(el) => / complete /.test(el.value)", arg=status.element_handle(), timeout=120_000)
    assert "3 of 3" in status.input_value()
    page.get_by_text("3 explanations stored").wait_for(timeout=WAIT_MS)
    modes = page.locator(E_MODE)
    assert all(modes.nth(i).locator(E_EXPLANATION).count() == 1 for i in range(3))
