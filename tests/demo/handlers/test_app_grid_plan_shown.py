"""Start runs the plan on screen or nothing (demo.handlers.grid.check_plan_shown), driven through
Gradio's own event processing (Blocks.process_api, session State included) as a page drives it,
without a browser.

The race it pins down (tests/browser/test_grid_browser.py, once under load): on an empty store the
page's load event (first_screen) fills model, item limit and sizes with the first run's values
when it answers, seconds late on a loaded server. It answered after the visitor had typed an item
limit of 2 and pressed Show plan: the plan said 2 items (24 answers), Start read the box again and
the job ran the first run's 5 items (60 answers).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from demo.handlers import grid as grid_handlers
from demo.handlers.run import FIRST_RUN_LIMIT_CPU, RunForm
from demo.settings import AppSettings
from tests.support.app_server import refuse_load

GRID = {"metadata type": "gender,race", "XAI variant": "none,counterfactual", "item limit": 2, "batch size": 4,
        "max new tokens": 4, "study name": "plan-shown"}


class Page:
    """One visitor's page: the boxes' values as the browser holds them, and the session's State."""

    def __init__(self, app: Any) -> None:
        from gradio.state_holder import SessionState

        self.app = app
        self.state = SessionState(app)
        self.values: dict[int, Any] = {}

    def fn(self, name: str, api_name: str | None = None):
        (found,) = [f for f in self.app.fns.values() if f.name == name and (api_name is None or f.api_name == api_name)]
        return found

    def type(self, boxes: dict[str, Any]) -> None:
        """The visitor types into the boxes of these labels (a label's start names it)."""
        run_inputs = self.fn("start", "run_batch").inputs
        for label, value in boxes.items():
            (box,) = [c for c in run_inputs if str(getattr(c, "label", "") or "").startswith(label)]
            self.values[box._id] = value

    def value(self, label: str) -> Any:
        (box,) = [c for c in self.fn("start", "run_batch").inputs if str(getattr(c, "label", "") or "").startswith(label)]
        return self.values.get(box._id, box.value)

    def fire(self, name: str, api_name: str | None = None) -> None:
        """The event's handler with the boxes' current values; its outputs land in the page."""
        import gradio as gr

        block_fn = self.fn(name, api_name)
        inputs = [None if isinstance(c, gr.State) else self.values.get(c._id, c.value) for c in block_fn.inputs]
        # In a thread of its own: a test before this one in the same worker may have left an
        # event loop running in this thread (asyncio.run refuses to nest).
        with ThreadPoolExecutor(max_workers=1) as pool:
            out = pool.submit(asyncio.run, self.app.process_api(block_fn, inputs, state=self.state,
                                                                session_hash="visitor")).result()
        for box, value in zip(block_fn.outputs, out["data"], strict=True):
            if isinstance(box, gr.State):
                continue
            if isinstance(value, dict) and value.get("__type__") == "update":
                if "value" not in value:
                    continue
                value = value["value"]
            self.values[box._id] = value

    def start(self, between=None) -> None:
        """Start: the plan step, then (on its success) the step that queues; `between` runs between
        the two, as a late event may."""
        self.fire("plan_before_start")
        if between:
            between()
        self.fire("start", "run_batch")


@pytest.fixture
def page(tmp_path, monkeypatch):
    from demo.app import build_app
    from demo.jobs import JobQueue

    queued: list[RunForm] = []

    def run_form(jobs, settings, form, visitor=None, *, client=None):
        queued.append(form)
        return f"job-{len(queued)}"

    monkeypatch.setattr(grid_handlers, "run_form", run_form)
    app = build_app(AppSettings(tmp_path / "app.duckdb"), jobs=JobQueue(load=refuse_load))
    try:
        page = Page(app)
        page.queued = queued  # type: ignore[attr-defined]
        yield page
    finally:
        app.jobs.shutdown(timeout=5)


def test_a_late_first_screen_after_show_plan_does_not_run_another_plan(page):
    page.type(GRID)
    page.fire("plan", "plan_run")
    plan_rows = page.values[page.fn("plan", "plan_run").outputs[1]._id]["data"]
    assert [r[9] for r in plan_rows] == [2] * 5, plan_rows  # the items column: 2 per configuration
    # The empty store's load event answers now, late, and fills the form with the first run's values.
    page.fire("first_screen")
    assert page.value("item limit") == FIRST_RUN_LIMIT_CPU
    with pytest.raises(Exception, match="not started: the item limit is 5 in the form but 2 in the plan shown "
                                        r"\(and 2 more boxes\); press Show plan"):
        page.start()
    assert page.queued == []  # nothing ran that the plan did not show
    # Shown again, the plan is the form's, and Start runs exactly it.
    page.fire("plan", "plan_run")
    page.start()
    (ran,) = page.queued
    assert (ran.limit, ran.batch_size, ran.max_new_tokens, ran.metadata, ran.xai) == (
        FIRST_RUN_LIMIT_CPU, 8, 48, "gender,race", "none,counterfactual")


def test_a_box_changed_between_starts_two_steps_is_refused(page):
    page.type(GRID)
    with pytest.raises(Exception, match="not started: the item limit is 5 in the form but 2 in the plan shown;"):
        page.start(between=lambda: page.type({"item limit": 5}))
    assert page.queued == []
    page.type({"item limit": 2})
    page.start()
    assert [f.limit for f in page.queued] == [2]


def test_start_without_show_plan_and_a_single_run_start_as_before(page):
    page.type(GRID)
    page.start()  # a grid: Start shows its plan, then runs it
    page.type({"metadata type": "gender", "XAI variant": "none", "study name": ""})
    page.start()  # a single run: no plan, nothing to hold it to
    assert [(f.metadata, f.limit) for f in page.queued] == [("gender,race", 2), ("gender", 2)]


def test_the_refusal_names_a_box_by_its_label_and_never_a_dataset_path():
    shown = grid_handlers.planned_form(RunForm(metadata="gender,race", limit=2, hf_token="hf_secret"))
    grid_handlers.check_plan_shown(shown, RunForm(metadata="gender,race", limit=2, hf_token="hf_other"))
    grid_handlers.check_plan_shown(None, RunForm(limit=7))
    from engine.errors import UserError

    with pytest.raises(UserError, match=r"^not started: the cut-off k is '3,5' in the form but all in the plan shown;"):
        grid_handlers.check_plan_shown(shown, RunForm(metadata="gender,race", limit=2, top_k="3,5"))
    with pytest.raises(UserError, match=r"^not started: the dataset is not the plan's;") as err:
        grid_handlers.check_plan_shown(shown, RunForm(metadata="gender,race", limit=2, dataset="/srv/up/x.jsonl"))
    assert "/srv" not in str(err.value)
