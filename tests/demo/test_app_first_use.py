"""The app as a first-time visitor meets it, without a browser: the page's own
handlers are called as Gradio calls them (found in the built Blocks by module and name).

- Nothing but tabs in gr.Tabs: a State between two tabs put "SQL" twice in the tab bar.
- Show plan names an upload by its own name, never Gradio's upload folder, on the desktop too.
- Start refuses a model that cannot load before anything is queued, with "did you mean".
- Empty Query, Bias, Explain and Compare tabs say where to start.
- The first screen's item count is the form's, and the smoke note is said once in the banner.
- An unknown run in Compare is one message in the page, not an error raised onto every output.
(tests/browser/test_first_use_browser.py looks at the same at 1440x900.)
"""

from __future__ import annotations

import time
from datetime import UTC
from pathlib import Path

import pytest

from demo.hints import NO_RUNS, PICK, hint_text, is_hint
from demo.settings import AppSettings
from engine.errors import UserError
from tests.support.app_server import refuse_load


def _app(settings: AppSettings):
    from demo.app import build_app
    from demo.jobs import JobQueue

    return build_app(settings, jobs=JobQueue(load=refuse_load))


def _fn(app, module: str, name: str):
    """The page's handler `name` defined in demo.tabs.<module>'s build()."""
    found = [f.fn for f in app.fns.values()
             if f.fn is not None and f.fn.__module__ == f"demo.tabs.{module}" and f.fn.__name__ == name]
    assert found, f"no handler {name} in demo.tabs.{module}"
    return found[0]


def one_run_store(db: Path) -> Path:
    """A store of one complete run, "first-run" (no model: written through RunStore)."""
    from engine.types import Document, Generation, Item, RunSpec
    from store import RunStore

    store = RunStore(db, timeout_s=10)
    store.put_items("sha-first", [Item("q1", "question?", ("a",), (Document("d1", "text", True),))])
    store.start_run(RunSpec("first-run", "first-exp", "hash-first", "model-x", None, "none", "float32", "cpu",
                            "data.jsonl", "sha-first", "gender", "vanilla", 0, "v1", None, {}, {}, 1))
    store.write_batch("first-run", [Generation("q1", "prompt", "a [1]", ("d1",), "stop", 3, (), ())])
    store.finish_run("first-run", "complete")
    return db


@pytest.fixture(scope="module")
def stored_db(tmp_path_factory) -> Path:
    return one_run_store(tmp_path_factory.mktemp("first-use") / "app.duckdb")


@pytest.fixture(scope="module")
def empty_app(tmp_path_factory):
    app = _app(AppSettings(tmp_path_factory.mktemp("first-use-empty") / "app.duckdb"))
    yield app
    app.jobs.shutdown(timeout=5)


def test_the_tabs_hold_nothing_but_tabs(empty_app):
    """A component directly inside gr.Tabs (the Explain tab's State) takes a place in the tab
    bar's order in the browser: opening the last tab (SQL) then showed it twice."""
    import gradio as gr

    (tab_bar,) = [c for c in empty_app.blocks.values() if isinstance(c, gr.Tabs)]  # the app has one
    children = tab_bar.children
    assert [c.label for c in children if isinstance(c, gr.Tab)] == [
        "Run", "Runs", "Compare", "Query", "Bias", "Leaderboard", "Explain", "Judges", "SQL"]
    assert [type(c).__name__ for c in children if not isinstance(c, gr.Tab)] == []


# ---------------------------------------------------------------- Show plan and Start


def test_show_plan_names_an_upload_by_its_name_on_the_desktop_too(tmp_path):
    """The dataset check said `bad.jsonl:line 2`; Show plan said `/tmp/gradio/<hash>/bad.jsonl:line 2`."""
    from gradio.utils import get_upload_folder

    from demo.handlers.grid import plan_run
    from demo.handlers.run import RunForm, validate_upload
    from engine.paths import SAMPLE_DATASET

    folder = Path(get_upload_folder()) / f"pattrieval-test-{time.monotonic_ns()}"
    folder.mkdir(parents=True)
    upload = folder / "bad.jsonl"
    upload.write_text(SAMPLE_DATASET.read_text(encoding="utf-8").splitlines()[0] + "\n{not json\n", encoding="utf-8")
    try:
        desktop = AppSettings(tmp_path / "db.duckdb")  # allow_local_paths: the desktop
        assert validate_upload(desktop, str(upload)).startswith("bad.jsonl:line 2: invalid JSON")
        with pytest.raises(UserError) as caught:
            plan_run(desktop, RunForm(dataset=str(upload), metadata="gender,race", limit=2))
        message = str(caught.value)
        assert message.startswith("bad.jsonl:line 2: invalid JSON"), message
        assert str(folder) not in message and get_upload_folder() not in message
        # A path the desktop user typed is theirs: shown as typed.
        with pytest.raises(UserError) as typed:
            plan_run(desktop, RunForm(local_path=str(upload), metadata="gender,race", limit=2))
        assert str(upload) in str(typed.value)
    finally:
        upload.unlink()
        folder.rmdir()


@pytest.mark.parametrize("model, changes", [("smok", {}), ("smok", {"metadata": "gender,race"}),
                                            ("mistralai/Mistral-7B-Instruct-v0.9", {})])
def test_start_refuses_a_model_that_cannot_load_before_queueing(tmp_path, model, changes):
    """The CLI's model check (engine.generation.model_check) at Start: one line in a second, nothing queued.
    The test suite runs with HF_HUB_OFFLINE=1 (tests/conftest.py): an uncached id cannot load."""
    from demo.handlers.grid import run_form
    from demo.handlers.run import RunForm
    from demo.jobs import JobQueue

    jobs = JobQueue(load=refuse_load)
    try:
        started = time.monotonic()
        with pytest.raises(UserError, match=f"unknown model '{model}'") as caught:
            run_form(jobs, AppSettings(tmp_path / "db.duckdb"), RunForm(model=model, limit=2, **changes))
        assert time.monotonic() - started < 5
        if model == "smok":
            assert str(caught.value).endswith("did you mean smoke?")
        assert jobs.statuses() == () and not (tmp_path / "db.duckdb").exists()
    finally:
        jobs.shutdown(timeout=5)


# ---------------------------------------------------------------- where to start


def test_the_hint_says_no_runs_then_where_to_start(tmp_path, stored_db):
    assert hint_text(tmp_path / "none.duckdb", "compare") == NO_RUNS
    assert hint_text(stored_db, "compare") == PICK["compare"]
    assert is_hint("") and is_hint(NO_RUNS) and not is_hint("**Not shown:** x")


def test_the_empty_tabs_say_where_to_start(empty_app):
    compare_choices = _fn(empty_app, "compare", "choices")
    *_, hint = compare_choices()
    assert NO_RUNS in hint  # written to the page only where it shows nothing (demo.hints.hint_guard_js)
    # Query: the page on load and when the tab opens with nothing chosen (through the hidden box, the last output).
    assert NO_RUNS in _fn(empty_app, "query", "select_tab")("")[-1]
    assert NO_RUNS in _fn(empty_app, "query", "load")(None)[-1]
    # Bias: the summary when nothing is chosen (through the hidden box, the last output).
    first_show = _fn(empty_app, "bias", "first_show")
    assert first_show("", [], "")[-1] == NO_RUNS
    # Explain: the page when nothing is prepared or chosen (the same).
    apply = _fn(empty_app, "explain", "apply")
    assert NO_RUNS in apply("", {"choices": [], "open": None})[-1]


def test_with_runs_stored_the_tabs_say_what_to_choose(stored_db):
    app = _app(AppSettings(stored_db))
    try:
        *_, hint = _fn(app, "compare", "choices")()
        assert PICK["compare"] in hint
        assert _fn(app, "bias", "first_show")("", [], "")[-1] == PICK["bias"]
        assert PICK["explain"] in _fn(app, "explain", "apply")("", {"choices": [], "open": None})[-1]
        # The only experiment opens by itself, with no hint left in the box to replace its page.
        opened = _fn(app, "explain", "apply")("", _fn(app, "explain", "prepare")(""))
        assert len(opened) == 8 and opened[0].value == "first-exp" and opened[-1] == ""
    finally:
        app.jobs.shutdown(timeout=5)


# ---------------------------------------------------------------- the first screen and its banner


def test_the_first_screen_and_the_form_under_it_agree(empty_app):
    """The panel said "5 items" above a form whose item limit read 10: the form now shows the
    first run's own values, from the same FirstRun."""

    (load,) = [f for f in empty_app.fns.values() if f.fn is not None and f.fn.__name__ == "first_screen"]
    shown = {getattr(box, "label", "") or "": value for box, value in zip(load.outputs, load.fn(), strict=True)}
    intro = next(v for v in shown.values() if isinstance(v, str) and v.startswith("**Nothing is stored yet.**"))
    limit = next((v for label, v in shown.items() if label.startswith("item limit")), "not shown")
    assert f"{limit} items in vanilla, base and cf" in intro, (limit, intro)
    assert next(v for label, v in shown.items() if label.startswith("model:")) == "smoke"  # offline (conftest)
    assert intro.count("random weights") == 1


def test_the_first_runs_banner_says_the_smoke_note_once():
    import html
    from datetime import datetime

    from demo.handlers.run import job_banner
    from demo.job_specs import JobStatus
    from demo.render import SMOKE_NOTE

    class Jobs:
        def status(self, job_id, owner=None):
            return JobStatus(job_id="job-1", state="complete", model="smoke (tiny random Llama)",
                             modes=("vanilla", "base", "cf"), queue_position=None, n_done=15, n_total=15,
                             experiment_id="e1", message="generated 15 answers in experiment e1",
                             submitted_utc=datetime.now(UTC), finished_utc=None)

    # The first run's note (demo.tabs.run's first_note) opens with the smoke note itself.
    note = f"The first run uses smoke: {SMOKE_NOTE} It is used because the Hub is not reachable."
    banner = job_banner(Jobs(), "job-1", note=note)
    assert banner.count(html.escape(SMOKE_NOTE)) == 1, banner
    assert job_banner(Jobs(), "job-1").count(html.escape(SMOKE_NOTE)) == 1  # a smoke run of one's own


# ---------------------------------------------------------------- Compare


def test_an_unknown_run_in_compare_is_one_message_in_the_page(stored_db, capsys):
    """Raised, the refusal put an "Error" pill on the summary, the table and the items (three)
    besides its toast; now the summary says it once and the other panels are emptied."""
    app = _app(AppSettings(stored_db))
    try:
        summary, table, plot, items, pairs, export = _fn(app, "compare", "show")("nope-run", "first-run", None, "",
                                                                                   False, False)
    finally:
        app.jobs.shutdown(timeout=5)
    assert 'class="pe-refusal"' in summary and "Not compared:" in summary
    assert "&#x27;nope-run&#x27;" in summary or "'nope-run' is neither a run id nor an experiment" in summary
    assert table.empty and items.empty and pairs == {}
    assert "compare: refused: 'nope-run' is neither" in capsys.readouterr().err  # one line in the log
    # A visitor's markup in the name shows as text.
    app = _app(AppSettings(stored_db))
    try:
        summary = _fn(app, "compare", "show")("<img src=x>", "first-run", None, "", False, False)[0]
    finally:
        app.jobs.shutdown(timeout=5)
    assert "<img" not in summary and "&lt;img src=x&gt;" in summary


def _guards(app, module: str, name: str) -> list:
    """The browser guards (demo.hints.show_hint_when_free) that follow the handler `name`."""
    from demo.hints import hint_guard_js

    return [f for f in app.fns.values() if f.js == hint_guard_js() and (parent := app.fns[f.trigger_after]).fn
            is not None and parent.fn.__module__ == f"demo.tabs.{module}" and parent.fn.__name__ == name]


@pytest.mark.parametrize("module, name, output, events", [("compare", "choices", "HTML", 2),
                                                          ("explain", "apply", "HTML", 2),
                                                          ("bias", "first_show", "Markdown", 1),
                                                          ("query", "select_tab", "HTML", 1), ("query", "load", "HTML", 1)])
def test_a_tabs_hint_reaches_its_output_only_through_the_browser_guard(empty_app, module, name, output, events):
    """The Explain tab's apply, the Bias tab's first_show and the Query tab's select_tab and load
    read the page or summary when the tab was clicked and wrote the hint when it held nothing or a
    hint; on a loaded server the answer came after a Show clicked (or an item opened) meanwhile and
    replaced its result (CI, in Compare and Query). Now the handler
    writes the hint into a hidden box only, and the page decides (tests/browser: the guard)."""
    import gradio as gr

    guards = _guards(empty_app, module, name)
    assert len(guards) == events, guards  # Compare and Explain: on load and on select; Bias: on select
    for guard in guards:
        carrier, shown = guard.inputs
        assert guard.outputs == [shown] and type(shown).__name__ == output
        assert isinstance(carrier, gr.Textbox) and carrier.visible == "hidden"
        handler = empty_app.fns[guard.trigger_after]
        assert handler.outputs[-1] is carrier  # the handler writes the hint there, not into `shown`
    if module == "compare":
        return
    nothing = {"bias": ("", [], ""), "query": ("",) if name == "select_tab" else (None,)}.get(
        module, ("", {"choices": [], "open": None}))
    written = _fn(empty_app, module, name)(*nothing)
    assert len(written) == len(handler.outputs) and NO_RUNS in written[-1]
    page = handler.outputs.index(shown)
    assert isinstance(written[page], type(gr.skip())), written[page]  # the output itself is left alone
