"""Studies in a browser: the Runs tab's study filter and studies column, and the Bias
tab's study picker selecting a grid's experiments, whose runs' label and AttrScore shares then
show beside CAS and CAB."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.test_app_browser import BIAS_SHOW, WAIT_MS, grid_rows, open_app, open_tab

RUNS_GRID = "experiments"
LABEL_SHARES_GRID = "explanations that give a label as a reason, per run"
ATTRSCORE_GRID = "AttrScore verification of citations, per run"


@pytest.fixture(scope="module")
def app(tmp_path_factory, launch_app):
    from store import RunStore
    from tests.demo.handlers.test_app_bias import _add_beyond, build_store

    db = build_store(tmp_path_factory.mktemp("study-store") / "studies.duckdb")
    writer = RunStore(db, timeout_s=10)
    for position, experiment in enumerate(["exp-race", "exp-gender"]):
        writer.record_study("paper", {"metadata": ["race", "gender"]}, experiment, position)
    _add_beyond(db)
    return launch_app(Path(db))


def pick(panel, page, label: str, option: str) -> None:
    """Choose an option of a dropdown by its label and the option's text."""
    box = panel.get_by_label(label, exact=True)
    box.click()
    page.get_by_role("option").filter(has_text=option).first.click()


def test_the_runs_tab_filters_by_study_and_names_each_experiments_studies(page, app):
    open_app(page, app)
    panel = open_tab(page, "Runs")
    grid = panel.get_by_role("grid", name=RUNS_GRID)
    grid.get_by_role("gridcell", name="exp-hai").first.wait_for(timeout=WAIT_MS)  # every experiment at first
    pick(panel, page, "study", "paper (2 experiments)")
    panel.get_by_role("button", name="Show", exact=True).click()
    grid.get_by_role("gridcell", name="exp-hai").wait_for(state="detached", timeout=WAIT_MS)
    rows = grid_rows(grid)
    assert sorted(r["experiment"] for r in rows) == ["exp-gender", "exp-race"], rows
    assert {r["studies"] for r in rows} == {"paper"}, rows


def test_choosing_a_study_in_the_bias_tab_shows_its_experiments_and_their_shares(page, app):
    open_app(page, app)
    panel = open_tab(page, "Bias")
    pick(panel, page, "study", "paper (2 experiments)")
    # The multiselect filled with the study's experiments, as their labels (exp-gender has a name).
    for label in ("exp-race · model-y", "gender, study (exp-gender) · model-x"):
        panel.get_by_text(label, exact=False).first.wait_for(timeout=WAIT_MS)
    panel.get_by_role("button", name=BIAS_SHOW, exact=True).click()
    labels = panel.get_by_role("grid", name=LABEL_SHARES_GRID)
    labels.get_by_role("gridcell", name="exp-gender-base").first.wait_for(timeout=WAIT_MS)
    rows = grid_rows(labels)
    assert [(r["run_id"], r["explainer_model"], r["label_share"]) for r in rows] == [
        ("exp-gender-base", "judge-j", "0.500"), ("exp-gender-base", "model-x", "0.500"),
        ("exp-gender-cf", "model-x", "0.250")], rows
    (verified,) = grid_rows(panel.get_by_role("grid", name=ATTRSCORE_GRID))
    assert (verified["run_id"], verified["n_citations"], verified["unparsed_share"]) == ("exp-gender-base", "4", "0.250")
    assert "label share" in panel.inner_text() and "AttrScore shares" in panel.inner_text()
