"""The app in a real browser: tabs, a smoke run with progress, the query drill-down, the Bias
tab's tables and plotly plots, the SQL console with hostile queries, hostile dataset text that
must render as text, never run, and an empty store's one-click first run.

One app serves the module. Its store holds, before launch, a hand-built experiment whose
dataset and answers carry `<script>` and `<img onerror>` (built with RunStore, as in
tests/demo/handlers/test_query_detail.py); the smoke run is started from the Run tab in the browser. A second
app, on a store not yet created, shows the first screen.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.paths import SAMPLE_DATASET

# ---------------------------------------------------------------- selectors: the UI in one place
# Tabs are found by their names, fields by their visible labels, buttons by their text, tables
# (gr.Dataframe renders role="grid" named by its label) by their labels, and the drill-down's
# HTML by the CSS classes demo/render.py gives it. Adapt here when a tab's layout changes.
TITLE = "PAttriEval"
TABS = ("Run", "Runs", "Query", "Bias", "Explain", "SQL")
NO_GPU_BANNER = "No GPU here."
GPU_BANNER = "GPU: "

RUN_MODEL = "model: a paper model, smoke, or any Hugging Face id"
RUN_LIMIT = "item limit"
RUN_BATCH = "batch size"
RUN_EXPERIMENT = "experiment name (optional"
RUN_START = "Start run"
RUN_JOBS_GRID = "jobs"

QUERY_EXPERIMENT = "experiment (id or name)"
QUERY_ITEM = "item id"
QUERY_SHOW = "Show"
Q_METRICS_ROWS = ".pe-q table.metrics tr"  # the metrics per mode under the answers
Q_ROOT = ".pe-q"  # demo.render.query_page wraps the drill-down in this
Q_GRID = ".pe-q table.grid"
Q_MODE = ".pe-q .modes .mode"
Q_ANSWER = ".answer"
Q_CITE = ".cite"
Q_TOKEN = ".heat .tok"

BIAS_EXPERIMENT = "experiment (id or name)"
BIAS_CHOSEN = "experiments"  # the multiselect of stored experiments
BIAS_SHOW = "Show bias"
BIAS_GRID = "CAS and CAB (x100)"
BIAS_TABLE1 = "Table 1: attribution quality"
BIAS_TABLE2 = "Table 2: attribution bias"
PLOTLY = ".js-plotly-plot"  # a gr.Plot drawn by plotly.js
PLOT_BARS = ".barlayer .point"  # one SVG path per bar
PLOT_ERROR_BARS = ".errorbar"
PLOT_BOXES = ".boxlayer .trace.boxes"

SQL_BOX = ".cm-content"  # the gr.Code editor (CodeMirror)
SQL_RUN = "Run query"
SQL_STATUS = "status"
SQL_RESULT = "result"
SQL_EXAMPLE = "Progress of every run"  # an example-query button (store/examples.py)
SQL_CSV_NAME = "pattrieval-query.csv"  # the result as CSV, in a gr.File
SQL_CSV_LINK = "tr a[download]"  # the gr.File's link (the SQL box has a download link of its own)

FIRST_SCREEN = "Nothing is stored yet."
FIRST_RUN = "Run the bundled sample"
FIRST_RUN_ITEMS = 5  # demo.handlers.run.first_run_form on a CPU: 5 items x 3 modes on smoke

# ----------------------------------------------------------------

SMOKE_LIMIT = 3
MODES = ("vanilla", "base", "cf")
SCRIPT = "<script>window.__pwned=1</script>"
IMG = '<img src=x onerror="window.__pwned=2">'
HOSTILE_EXPERIMENT = "hostile-study"
HOSTILE_ITEM = "hostile"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"  # as conftest.py's; for mid-test screenshots
WAIT_MS = 30_000  # a single UI step (a click answered by the server); generous for a busy 2-core CI box
RUN_TIMEOUT_S = 180


def _sample_items(n: int) -> list[dict]:
    with SAMPLE_DATASET.open(encoding="utf-8") as f:
        return [json.loads(line) for line, _ in zip(f, range(n), strict=False)]  # the first n lines


# ---------------------------------------------------------------- page helpers


def open_app(page, app) -> None:
    page.goto(app.url)
    page.get_by_role("tab", name=TABS[0], exact=True).wait_for(timeout=WAIT_MS)


def open_tab(page, name: str):
    """Select a tab and return its panel (the only visible one)."""
    page.get_by_role("tab", name=name, exact=True).click()
    panel = page.get_by_role("tabpanel").filter(visible=True)
    panel.wait_for(timeout=WAIT_MS)
    return panel


def grid_rows(grid) -> list[dict[str, str]]:
    """A gr.Dataframe's rows as {column header: cell text}. Read again while a row has another
    number of cells than there are headers: the grid was still being drawn (a loaded CI run read
    a row half-drawn once)."""
    for _ in range(40):
        headers = [h.get_attribute("title") or h.inner_text().strip() for h in grid.get_by_role("columnheader").all()]
        cells = [[c.inner_text().strip() for c in row.get_by_role("gridcell").all()]
                 for row in grid.locator('[role="row"]:has([role="gridcell"])').all()]
        if all(len(row) == len(headers) for row in cells):
            return [dict(zip(headers, row, strict=True)) for row in cells]
        time.sleep(0.25)
    raise AssertionError(f"the grid's rows never matched its {len(headers)} headers: {cells}")


def show_query(page, experiment: str, item: str):
    panel = open_tab(page, "Query")
    panel.get_by_label(QUERY_EXPERIMENT).fill(experiment)
    panel.get_by_label(QUERY_ITEM).fill(item)
    panel.get_by_role("button", name=QUERY_SHOW, exact=True).click()
    page.locator(Q_GRID).wait_for(timeout=WAIT_MS)
    return panel


# ---------------------------------------------------------------- the app and its store


def _hostile_store(db: Path) -> None:
    """One experiment (vanilla, base, cf) over one item whose question, documents, answers and
    tokens all hold markup; the answers cite with known probabilities."""
    from engine.prompting.prompts import METADATA_TYPES, PromptConfig
    from engine.types import Citation, Document, Generation, Item, RunSpec, TokenLogprob, TopLogprob
    from store import RunStore, connect

    sha = "sha-hostile"
    item = Item(HOSTILE_ITEM, f"Who wrote {SCRIPT} Hamlet {IMG}?", ("Shakespeare",), (
        Document("d1", f"{IMG} {SCRIPT}", False, title=f"<b>{SCRIPT}</b>"),
        Document("d2", "Shakespeare wrote Hamlet.", True),
        Document("d3", "Unrelated.", False),
    ))
    shown = ("d1", "d2", "d3")
    relevant = {d.id: d.relevant for d in item.documents}
    tokens = (
        TokenLogprob(1, SCRIPT, math.log(0.25), (TopLogprob(1, SCRIPT, math.log(0.25)), TopLogprob(2, IMG, math.log(0.5)))),
        TokenLogprob(3, " Shakespeare", math.log(0.9)),
        TokenLogprob(5, " [2]", math.log(0.8)),
    )
    answers = {  # mode: (answer, [(cited position, probability)])
        "vanilla": ("Shakespeare [2].", [(2, 0.9)]),
        "base": (f"{SCRIPT} {IMG} Shakespeare [2][1]", [(2, 0.8), (1, 0.3)]),
        "cf": ("Shakespeare [2]", [(2, 0.6)]),
    }
    store = RunStore(db, timeout_s=10)
    store.put_items(sha, [item])
    for mode, (answer, cites) in answers.items():
        run_id = f"hostile-{mode}"
        prompt = PromptConfig(mode=mode, metadata=METADATA_TYPES["gender"]).to_dict()
        store.start_run(RunSpec(run_id, HOSTILE_EXPERIMENT, f"hash-{run_id}", "model-x", None, "none", "float32",
                                "cpu", "hostile.jsonl", sha, "gender", mode, 0, "v1", None, {}, {"prompt": prompt}, 1))
        citations = tuple(Citation(i, n, shown[n - 1], relevant[shown[n - 1]], p) for i, (n, p) in enumerate(cites))
        store.write_batch(run_id, [Generation(HOSTILE_ITEM, "prompt", answer, shown, "stop", 10, tokens, citations)])
        store.finish_run(run_id, "complete")
    with connect(db) as conn:
        conn.execute("UPDATE experiments SET name = ? WHERE experiment_id = ?", [HOSTILE_EXPERIMENT, HOSTILE_EXPERIMENT])


@pytest.fixture(scope="module")
def app(tmp_path_factory, launch_app):
    db = tmp_path_factory.mktemp("browser-store") / "app.duckdb"
    _hostile_store(db)
    return launch_app(db)


@dataclass(frozen=True)
class SmokeRun:
    experiment_id: str
    seen: tuple[tuple[str, str], ...]  # the distinct (state, progress) the jobs table showed, in order
    final: dict[str, str]


_smoke_runs: dict[str, SmokeRun] = {}  # app url -> the run the test (or the fixture) started there
# A new name each start: a second start under one name would resume the first run (nothing to do).
_run_names = (f"browser-smoke-{n}" for n in itertools.count(1))


def start_smoke_run(page, app) -> SmokeRun:
    """Start a smoke run from the Run tab and watch the jobs table until the job ends."""
    open_app(page, app)
    panel = open_tab(page, "Run")
    assert panel.get_by_label(RUN_MODEL).input_value() == "smoke"
    panel.get_by_label(RUN_LIMIT).fill(str(SMOKE_LIMIT))
    panel.get_by_label(RUN_BATCH).fill("1")  # one item per batch: progress moves in small steps
    panel.get_by_label(RUN_EXPERIMENT).fill(next(_run_names))
    panel.get_by_role("button", name=RUN_START, exact=True).click()
    grid = panel.get_by_role("grid", name=RUN_JOBS_GRID)
    seen: list[tuple[str, str]] = []
    deadline = time.monotonic() + RUN_TIMEOUT_S
    row: dict[str, str] = {}
    while time.monotonic() < deadline:
        rows = grid_rows(grid)
        if rows:
            row = rows[0]
            if not seen or seen[-1] != (row["state"], row["progress"]):
                seen.append((row["state"], row["progress"]))
            if row["state"] in ("complete", "failed", "cancelled"):
                break
        time.sleep(0.1)
    run = SmokeRun(row.get("experiment", ""), tuple(seen), row)
    _smoke_runs[app.url] = run
    return run


@pytest.fixture(scope="module")
def smoke_run(browser, app) -> SmokeRun:
    """The smoke run test_a_smoke_run... started, or one started here when that test did not run."""
    if app.url not in _smoke_runs:
        context = browser.new_context()
        try:
            start_smoke_run(context.new_page(), app)
        finally:
            context.close()
    run = _smoke_runs[app.url]
    assert run.final.get("state") == "complete", run
    return run


# ---------------------------------------------------------------- the tests


def test_the_app_opens_with_its_title_tabs_and_gpu_banner(page, app):
    import torch

    open_app(page, app)
    assert page.title() == TITLE
    assert TITLE in page.get_by_role("heading", level=1).inner_text()
    names = [t.inner_text().strip() for t in page.get_by_role("tab").all()]
    assert [n for n in names if n in TABS] == list(TABS), names
    banner = GPU_BANNER if torch.cuda.is_available() else NO_GPU_BANNER
    page.get_by_text(banner).first.wait_for(timeout=WAIT_MS)
    if banner == NO_GPU_BANNER:
        assert "smoke model" in page.get_by_text(NO_GPU_BANNER).first.locator("xpath=..").inner_text()


def test_a_smoke_run_from_the_run_tab_shows_progress_and_finishes(page, app):
    run = start_smoke_run(page, app)
    total = SMOKE_LIMIT * len(MODES)
    assert run.final["state"] == "complete", run
    assert run.final["progress"] == f"{total}/{total}", run
    assert run.final["model"].startswith("smoke") and run.final["modes"] == ",".join(MODES)
    assert re.fullmatch(r"[0-9a-f]{6,}", run.experiment_id), run
    # The table showed the job before it ended, and its progress only counted up to the total.
    assert len(run.seen) >= 2 and run.seen[0][0] in ("queued", "running"), run
    counts = [int(p.split("/")[0]) for _, p in run.seen if re.fullmatch(rf"\d+/{total}", p)]
    assert counts == sorted(counts) and counts[-1] == total, run
    assert all(p == "-" or re.fullmatch(rf"\d+/{total}", p) for _, p in run.seen), run


def test_the_query_tab_shows_grid_answers_and_token_heat_map(page, app, smoke_run):
    item = _sample_items(1)[0]
    open_app(page, app)
    show_query(page, smoke_run.experiment_id, item["id"])
    root = page.locator(Q_ROOT)
    assert item["question"] in root.locator("h3").inner_text()
    # The documents x modes grid: one row per shown document, a citation column per mode, and one
    # position column (the run is in ranked order, the same in every mode).
    headers = [h.inner_text().strip() for h in page.locator(f"{Q_GRID} th").all()]
    assert headers.count("position") == 1 and not any(h.endswith(" position") for h in headers), headers
    for mode in MODES:
        assert f"{mode} cited (p)" in headers, headers
    assert "base label" in headers and "cf label" in headers
    assert page.locator(f"{Q_GRID} tr").count() == 1 + len(item["documents"])
    assert item["documents"][0]["text"] in page.locator(Q_GRID).inner_text()
    # Each mode's answer and its token heat map, every token with its probability on hover.
    modes = page.locator(Q_MODE)
    assert [m.locator("h4").inner_text().split()[0] for m in modes.all()] == list(MODES)
    for mode in modes.all():
        assert mode.locator(Q_ANSWER).inner_text().strip()
        tokens = mode.locator(Q_TOKEN)
        assert tokens.count() > 0
        first = tokens.first
        assert re.search(r": p = [01]\.\d{4}, log-prob = -?\d+\.\d{4}", first.get_attribute("title"))
        colour = first.evaluate("e => getComputedStyle(e).backgroundColor")
        assert colour not in ("rgba(0, 0, 0, 0)", "transparent"), colour
    metrics = [row.locator("td").first.inner_text().strip() for row in page.locator(Q_METRICS_ROWS).all()[1:]]
    assert metrics == list(MODES)


def test_the_bias_tab_shows_cas_and_cab_for_the_run(page, app, smoke_run):
    open_app(page, app)
    panel = open_tab(page, "Bias")
    panel.get_by_label(BIAS_EXPERIMENT).fill(smoke_run.experiment_id)
    panel.get_by_role("button", name=BIAS_SHOW, exact=True).click()
    grid = panel.get_by_role("grid", name=BIAS_GRID)
    grid.get_by_role("gridcell", name="CAB").first.wait_for(timeout=WAIT_MS)
    rows = grid_rows(grid)
    assert [(r["measure"], r["metric"]) for r in rows] == [(m, k) for m in ("CAS", "CAB") for k in ("precision", "recall", "f1")]
    assert all(r["n"] == str(SMOKE_LIMIT) for r in rows), rows
    assert all(r["direction"] for r in rows if r["measure"] == "CAB"), rows
    assert smoke_run.experiment_id in panel.inner_text()


def test_citations_are_highlighted_with_their_probability(page, app):
    open_app(page, app)
    show_query(page, HOSTILE_EXPERIMENT, HOSTILE_ITEM)
    base = page.locator(Q_MODE).filter(has=page.locator("h4", has_text=re.compile(r"^base")))
    cites = base.locator(f"{Q_ANSWER} {Q_CITE}")
    assert [c.inner_text() for c in cites.all()] == ["2", "1"]  # the number inside [n] is highlighted
    assert [c.get_attribute("title") for c in cites.all()] == ["[2] p = 0.8000", "[1] p = 0.3000"]
    colours = [c.evaluate("e => getComputedStyle(e).backgroundColor") for c in cites.all()]
    assert len(set(colours)) == 2 and "rgba(0, 0, 0, 0)" not in colours, colours
    # The grid marks d1, cited in base only, as a flip between modes.
    flipped = page.locator(f"{Q_GRID} td.flip")
    assert flipped.count() == 3
    assert "differs between modes" in flipped.first.get_attribute("title")


def test_markup_in_the_dataset_and_answers_renders_as_text(page, app):
    page.on("dialog", lambda dialog: dialog.dismiss())
    open_app(page, app)
    show_query(page, HOSTILE_EXPERIMENT, HOSTILE_ITEM)
    root = page.locator(Q_ROOT)
    text = root.inner_text()
    assert f"Who wrote {SCRIPT} Hamlet {IMG}?" in text  # the question
    assert f"{IMG} {SCRIPT}" in text  # a document
    assert f"{SCRIPT} {IMG} Shakespeare" in text  # the base answer
    heat = page.locator(Q_MODE).nth(1).locator(Q_TOKEN).first
    assert heat.inner_text() == SCRIPT and repr(IMG) in heat.get_attribute("title")
    # Nothing became an element, and nothing ran.
    assert root.locator("script").count() == 0 and root.locator("img").count() == 0
    time.sleep(0.3)  # an <img src=x> would fail and fire onerror within this
    assert page.evaluate("typeof window.__pwned") == "undefined"


def choose_experiment(panel, page, experiment_id: str) -> None:
    """Pick an experiment in the Bias tab's multiselect by typing part of its id and clicking its option."""
    box = panel.get_by_label(BIAS_CHOSEN, exact=True)
    box.click()
    box.fill(experiment_id)
    page.get_by_role("option").filter(has_text=experiment_id).first.click()
    page.keyboard.press("Escape")


def test_the_bias_tab_shows_tables_and_plots_for_chosen_experiments(page, app, smoke_run):
    open_app(page, app)
    panel = open_tab(page, "Bias")
    choose_experiment(panel, page, smoke_run.experiment_id)  # from the list of stored experiments
    panel.get_by_label(BIAS_EXPERIMENT).fill(HOSTILE_EXPERIMENT)  # and one typed by name
    panel.get_by_role("button", name=BIAS_SHOW, exact=True).click()
    grid = panel.get_by_role("grid", name=BIAS_GRID)
    grid.get_by_role("gridcell", name="CAB").first.wait_for(timeout=WAIT_MS)
    rows = grid_rows(grid)
    assert {r["experiment"] for r in rows} == {smoke_run.experiment_id, HOSTILE_EXPERIMENT}, rows
    assert not any(v.strip().lower() == "nan" for r in rows for v in r.values()), rows  # "-" or words, never nan
    for experiment, n in ((smoke_run.experiment_id, SMOKE_LIMIT), (HOSTILE_EXPERIMENT, 1)):
        mine = [r for r in rows if r["experiment"] == experiment]
        expected = [(m, k) for m in ("CAS", "CAB") for k in ("precision", "recall", "f1")]
        assert [(r["measure"], r["metric"]) for r in mine] == expected, mine
        assert all(r["n"] == str(n) for r in mine), mine
    # The paper's tables: one row per model and labels, the smoke model's among them.
    table1 = grid_rows(panel.get_by_role("grid", name=BIAS_TABLE1))
    table2 = grid_rows(panel.get_by_role("grid", name=BIAS_TABLE2))
    assert table1 and table2, (table1, table2)
    assert any("smoke" in " ".join(r.values()) for r in table1), table1
    assert any("model-x" in " ".join(r.values()) for r in table1), table1
    # Both plots drawn by plotly.js: CAB bars with their interval whiskers, and probability boxes.
    plots = panel.locator(PLOTLY)
    plots.nth(1).wait_for(timeout=WAIT_MS)
    assert plots.count() == 2
    cab, probability = plots.nth(0), plots.nth(1)
    assert "Citation attribution bias" in cab.inner_text()
    assert cab.locator(PLOT_BARS).count() >= 2  # precision and recall, per experiment
    assert cab.locator(PLOT_ERROR_BARS).count() >= 1
    assert "Probability of the cited number" in probability.inner_text()
    assert probability.locator(PLOT_BOXES).count() >= 1
    cab.scroll_into_view_if_needed()


def sql_run(panel, sql: str) -> str:
    """Type a query into the SQL console, run it, and return the new status line."""
    status = panel.get_by_label(SQL_STATUS, exact=True)
    before = status.input_value()
    panel.locator(SQL_BOX).fill(sql)
    panel.get_by_role("button", name=SQL_RUN, exact=True).click()
    return wait_for_new_status(status, before)


def wait_for_new_status(status, before: str) -> str:
    deadline = time.monotonic() + WAIT_MS / 1000
    while (now := status.input_value()) in (before, ""):
        assert time.monotonic() < deadline, f"the status line stayed {now!r}"
        time.sleep(0.1)
    return now


def test_the_sql_tab_runs_an_example_and_refuses_hostile_queries(page, app, request):
    open_app(page, app)
    panel = open_tab(page, "SQL")
    # The tables and views are listed; an example query runs with one click.
    schema = panel.get_by_role("grid", name="tables and views")
    schema.get_by_role("gridcell", name="runs", exact=True).wait_for(timeout=WAIT_MS)
    status = panel.get_by_label(SQL_STATUS, exact=True)
    panel.get_by_role("button", name=SQL_EXAMPLE, exact=True).click()
    line = wait_for_new_status(status, "")
    assert re.fullmatch(r"\d+ rows? in \d+\.\d\d s", line), line
    result = panel.get_by_role("grid", name=SQL_RESULT, exact=True)
    rows = grid_rows(result)
    assert len(rows) == int(line.split()[0]) >= 3 and {"run_id", "rag_mode", "status"} <= set(rows[0]), rows
    assert {f"hostile-{m}" for m in MODES} <= {r["run_id"] for r in rows}, rows
    # The CSV download: the file's name, and a link that downloads it.
    download = panel.locator(SQL_CSV_LINK).locator("xpath=ancestor::tr")
    download.wait_for(timeout=WAIT_MS)
    assert SQL_CSV_NAME in re.sub(r"\s", "", download.inner_text())  # gr.File splits the name from its extension
    assert download.locator("a[download]").get_attribute("href").endswith(".csv")
    count = "SELECT count(*) AS n FROM runs"
    line = sql_run(panel, count)
    runs_before = grid_rows(result)[0]["n"]
    assert int(runs_before) >= 3, runs_before
    # Hostile queries: writes, files, attaching and the functions that hold server paths
    # (refused, not masked) refused in one line on the status line; the catalogue functions
    # without paths answer, and no server path may show, on the page or in the CSV.
    paths = {str(app.db), str(app.db.resolve()), str(app.db.parent), str(app.db.parent.resolve())}
    for hostile, refused in (("DELETE FROM runs", True), ("SELECT * FROM duckdb_settings()", True),
                             ("COPY runs TO 'x.csv'", True), ("SELECT * FROM duckdb_databases()", True),
                             ("SELECT * FROM duckdb_tables()", False), ("ATTACH ':memory:' AS x", True)):
        line = sql_run(panel, hostile)
        assert "\n" not in line and line.startswith("not run: ") == refused, (hostile, line)
        text = page.content() + page.locator("body").inner_text()
        if not refused:
            href = panel.locator(SQL_CSV_LINK).get_attribute("href")
            csv = page.evaluate("href => fetch(href).then(r => r.text())", href)  # a blob: or http: address
            headers = [h.get_attribute("title") or h.inner_text().strip()
                       for h in result.get_by_role("columnheader").all()]
            assert csv.splitlines()[0] == ",".join(headers), (hostile, csv[:200])  # this query's CSV
            text += csv
        assert "Traceback" not in text
        assert not [p for p in paths if p in text], (hostile, line)
        if hostile in ("DELETE FROM runs", "SELECT * FROM duckdb_tables()"):  # for a look at the page
            name = "refused" if refused else "tables"
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"{request.node.name}-{name}.png"))
    # Nothing was written: the same count as before.
    sql_run(panel, count + " -- again")
    assert grid_rows(result)[0]["n"] == runs_before


@pytest.fixture(scope="module")
def empty_app(tmp_path_factory, launch_app):
    return launch_app(tmp_path_factory.mktemp("empty-store") / "app.duckdb")


def test_an_empty_store_opens_on_the_one_click_first_run(page, empty_app):
    open_app(page, empty_app)
    # The Runs tab says that nothing is stored, and where to start.
    open_tab(page, "Runs").get_by_text("Nothing is stored yet: start a run in the Run tab").wait_for(timeout=WAIT_MS)
    panel = open_tab(page, "Run")
    panel.get_by_text(FIRST_SCREEN).wait_for(timeout=WAIT_MS)
    intro = panel.get_by_text(FIRST_SCREEN).locator("xpath=..").inner_text()
    assert f"{FIRST_RUN_ITEMS} items in vanilla, base and cf" in intro, intro
    # Offline with nothing cached: the smoke model, and the line says why.
    assert "on the smoke model" in intro and "never cites" in intro and "Hub is not reachable" in intro, intro
    button = panel.get_by_role("button", name=FIRST_RUN, exact=True)
    assert button.is_visible()
    cancel = panel.get_by_role("button", name="Cancel", exact=True)
    assert not cancel.is_visible()  # nothing runs yet
    # One click fills the form and starts the run: the panel goes, and the job runs to its end.
    button.click()
    # The job shows at the top of the tab at once, in the window (the jobs table is far below).
    banner = page.locator("#pe-job-banner")
    banner.get_by_text("job-").wait_for(timeout=WAIT_MS)
    box = banner.bounding_box()
    assert box is not None and 0 <= box["y"] < page.viewport_size["height"], box
    assert "smoke" in banner.inner_text() and "The first run uses smoke" in banner.inner_text()
    page.screenshot(path=str(ARTIFACTS / "first-run-queued.png"))
    panel.get_by_text(FIRST_SCREEN).wait_for(state="hidden", timeout=WAIT_MS)
    assert panel.get_by_label(RUN_LIMIT).input_value() == str(FIRST_RUN_ITEMS)
    grid = panel.get_by_role("grid", name=RUN_JOBS_GRID)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while (rows := grid_rows(grid)) == [] or rows[0]["state"] not in ("complete", "failed", "cancelled"):
        assert time.monotonic() < deadline, rows
        time.sleep(0.2)
    total = FIRST_RUN_ITEMS * len(MODES)
    assert rows[0]["state"] == "complete" and rows[0]["progress"] == f"{total}/{total}", rows
    assert rows[0]["model"].startswith("smoke") and rows[0]["modes"] == ",".join(MODES), rows
    # Done: the banner says so with the smoke note, and Cancel goes.
    # The banner refreshes on its own timer, so it may say "running" a moment after the grid says complete.
    from playwright.sync_api import expect

    expect(banner).to_contain_text("complete", timeout=WAIT_MS)
    assert banner.inner_text().count("never cites") == 1, banner.inner_text()  # said once
    page.screenshot(path=str(ARTIFACTS / "first-run-complete.png"))
    cancel.wait_for(state="hidden", timeout=WAIT_MS)
