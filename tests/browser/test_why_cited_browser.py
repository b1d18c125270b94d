"""The Bias tab's "Why was it cited?" panel in a real browser at 1440x900: an
experiment chosen, the choice model fitted, its effects table, forest plot and suppression rates;
and a study chosen, its study model fitted (tests/engine/statistics/test_study_model.py's store).

The store is tests/engine/usecases/bias/test_why_cited.py's: simulated base and cf choices imported as answers.
"""

from __future__ import annotations

import pytest

from tests.browser.test_app_browser import ARTIFACTS, PLOTLY, WAIT_MS, grid_rows, open_app, open_tab
from tests.engine.statistics.test_study_model import stored  # noqa: F401  (the fixture)
from tests.engine.usecases.bias.test_why_cited import imported  # noqa: F401  (the fixture)

VIEWPORT = {"width": 1440, "height": 900}


@pytest.fixture(scope="module")
def app(imported, launch_app):  # noqa: F811
    return launch_app(imported[0])


def test_fit_the_choice_model_of_an_experiment(page, app, imported):  # noqa: F811
    _, experiment, _ = imported
    page.set_viewport_size(VIEWPORT)
    open_app(page, app)
    panel = open_tab(page, "Bias")
    panel.get_by_label("experiment (id or name)").fill(experiment)
    fit = panel.get_by_role("button", name="Fit the choice model", exact=True)
    fit.scroll_into_view_if_needed()
    fit.click()
    panel.get_by_text("300 answers").wait_for(timeout=WAIT_MS)
    effects = panel.get_by_role("grid", name="effects (odds ratios of being cited)")
    effects.get_by_role("gridcell", name="relevant", exact=True).wait_for(timeout=WAIT_MS)
    terms = [r["effect"] for r in grid_rows(effects)]
    assert terms[0] == "relevant" and any("a woman" in t for t in terms), terms
    panel.locator(PLOTLY).get_by_text("Why was a document cited?").wait_for(timeout=WAIT_MS)
    suppression = panel.get_by_role("grid", name="suppression: answers citing no shown document, per experiment and mode")
    assert len(grid_rows(suppression)) == 2
    panel.get_by_text("exact McNemar").wait_for(timeout=WAIT_MS)
    page.locator(PLOTLY).last.scroll_into_view_if_needed()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "why-cited.png"), full_page=False)
    # No sideways scroll at this width.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


@pytest.fixture(scope="module")
def study_app(stored, launch_app):  # noqa: F811
    return launch_app(stored[0])


def test_fit_the_study_model_of_a_chosen_study(page, study_app):
    """The study picked at the top of the tab, its study model fitted: the effects per
    configuration, their forest plot, the named Wald test and the Holm-corrected pairs."""
    from tests.browser.test_study_browser import pick

    page.set_viewport_size(VIEWPORT)
    open_app(page, study_app)
    panel = open_tab(page, "Bias")
    pick(panel, page, "study", "grid")
    fit = panel.get_by_role("button", name="Fit the study model", exact=True)
    fit.scroll_into_view_if_needed()
    fit.click()
    effects = panel.get_by_role("grid", name="label effect per configuration (odds ratio of citing label A over label B)")
    effects.get_by_role("gridcell", name="model=m2", exact=True).wait_for(timeout=WAIT_MS)
    shown = grid_rows(effects)
    assert [r["configuration"] for r in shown] == ["model=m1", "model=m2"], shown
    assert all(r["labels (A vs B)"] == "a woman vs a man" and "[" in r["odds ratio [95% CI]"] for r in shown), shown
    panel.get_by_text("Wald test").first.wait_for(timeout=WAIT_MS)
    pairs = panel.get_by_role("grid", name="pairwise differences of the label effect, Holm-corrected over 1 pair")
    assert [r["configuration b"] for r in grid_rows(pairs)] == ["model=m2"]
    panel.locator(PLOTLY).get_by_text("Label effect per configuration").wait_for(timeout=WAIT_MS)
    panel.locator(PLOTLY).last.scroll_into_view_if_needed()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "why-cited-study.png"), full_page=False)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
