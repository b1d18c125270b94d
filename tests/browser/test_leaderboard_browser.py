"""The Leaderboard tab in a real browser at 1440x900: the boards of a store of three models load
when the tab opens, with tiers, CAB's interval, the rerun floor and the items, inside the window;
a model name holding markup shows as text. Screenshotted into test-artifacts/leaderboard-1440x900.png."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.test_app_browser import ARTIFACTS, WAIT_MS, grid_rows, open_app, open_tab
from tests.support.bias_store import add_experiment, add_run, biased

N = 40


@pytest.fixture(scope="module")
def app(launch_app, tmp_path_factory):
    db = tmp_path_factory.mktemp("leaderboard-browser") / "board.duckdb"
    add_experiment(db, "e-a", "org/model-a", *biased(N, 0))
    add_experiment(db, "e-b", "org/<b>model-b</b>", *biased(N, 20))
    add_experiment(db, "e-c", "org/model-c", *biased(N, 2))
    add_experiment(db, "h-a", "org/model-a", *biased(N, 8), metadata="hai")
    add_run(db, "e-a-r1-base", "e-a-r1", "base", "org/model-a", [(1,)] * 2 + [(2,)] * (N - 2), rerun_of="e-a")
    return launch_app(db)


def test_the_leaderboard_shows_tiers_intervals_floors_and_items(page, app):
    page.set_viewport_size({"width": 1440, "height": 900})
    open_app(page, app)
    panel = open_tab(page, "Leaderboard")
    grid = panel.locator("#pe-leaderboard")
    grid.get_by_role("gridcell", name="org/model-c").first.wait_for(timeout=WAIT_MS)
    rows = grid_rows(grid)
    gender = {r["model"]: r for r in rows if r["label type"] == "gender"}
    assert [r["model"] for r in rows if r["label type"] == "gender"] == [
        "org/model-a", "org/model-c", "org/<b>model-b</b>"]  # markup shown as text
    assert [gender[m]["tier"] for m in gender] == ["1", "1", "2"]
    assert gender["org/<b>model-b</b>"]["CAB [95% CI]"].startswith("+50.0 [")
    assert gender["org/model-a"]["rerun floor [95% CI]"].startswith("+5.0 [")
    assert all(r["items"] == str(N) for r in rows)
    assert any(r["label type"] == "hai" for r in rows)
    caption = panel.locator("#pe-leaderboard-caption")
    assert "citation attribution bias (Abolghasemi et al.)" in caption.inner_text()
    # Nothing sits right of the window: no page-wide horizontal scroll at 1440 px.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    # Another metric: the same boards on recall.
    panel.get_by_label("recall").check()
    panel.get_by_role("button", name="Show", exact=True).click()
    page.wait_for_timeout(500)
    grid.get_by_role("gridcell", name="org/model-c").first.wait_for(timeout=WAIT_MS)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "leaderboard-1440x900.png"), full_page=True)
    assert Path(ARTIFACTS / "leaderboard-1440x900.png").stat().st_size > 0
