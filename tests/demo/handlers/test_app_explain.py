"""The Explain tab: its handler as a plain function on a store with explanations (a real tiny-model
run, explanations written through the store's writer and one made by `engine explain` itself), and
`/explain` through gradio_client on a launched app."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import pytest

from demo.handlers.explain import (
    EXPLANATION_COLUMNS,
    RUN_EXPLANATION_COLUMNS,
    TEXT_SHOWN,
    explain_run_view,
    explain_view,
    run_choices,
    shorten,
)
from store import queries
from tests.engine.judges.test_explain import make_dataset
from tests.support.helpers import wait_for_job

# Markup in an explanation must arrive as text: the page shows it, the browser never parses it.
HOSTILE = 'I cited [1] because it was written by a woman. <img src=x onerror="window.__pwned=1"><b>bold</b>'
PLAIN = "Document 2 holds the answer; the author does not matter."


def explanation(run_id: str, item_id: str, text: str, n_shown: int, model: str = "judge"):
    from engine.judges.explain import mentioned_documents, mentioned_labels
    from engine.types import Explanation, TokenLogprob

    return Explanation(run_id=run_id, item_id=item_id, explainer_model=model, prompt="Prompt 5", text=text,
                       n_prompt_tokens=3, finish_reason="stop", tokens=(TokenLogprob(1, "x", -0.5),),
                       mentioned_docs=mentioned_documents(text, n_shown),
                       mentioned_labels=mentioned_labels(text, "a woman", "a man", "gender"))


def build_explained_store(folder: Path, model_dir: Path) -> tuple[Path, str, dict[str, str]]:
    """A gender experiment (vanilla, base, cf) of 3 items answered by the tiny model; item q0's
    base answer explained with markup and a label, its cf answer with a document and no label,
    its vanilla answer not at all."""
    from engine.datasets.data import load_dataset
    from engine.prompting.prompts import METADATA_TYPES, PromptConfig
    from engine.running.run_request import RunRequest
    from engine.usecases.runs.run import ExperimentRequest, run_experiment
    from store.explanation_store import ExplanationStore

    dataset = load_dataset(make_dataset(folder / "d.jsonl", 3))
    request = RunRequest(model=str(model_dir), modes=("vanilla", "base", "cf"),
                         prompt=PromptConfig(metadata=METADATA_TYPES["gender"], order="reversed"),
                         quantize="none", device="cpu", max_new_tokens=8, batch_size=3)
    db = folder / "explained.duckdb"
    outcome = run_experiment(ExperimentRequest(request, dataset, db))
    runs = {r.mode: r.run_id for r in outcome.runs}
    ExplanationStore(db).write_batch([explanation(runs["base"], "q0", HOSTILE, 4),
                                      explanation(runs["cf"], "q0", PLAIN, 4)])
    return db, outcome.experiment_id, runs


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_llama_dir):
    return build_explained_store(tmp_path_factory.mktemp("secret-server-folder"), tiny_llama_dir)


def named_cells(page: str) -> list[str]:
    """The hover titles of the document cells an explanation names."""
    return [html.unescape(t) for t in re.findall(r'<td class="named" title="([^"]*)"', page)]


def test_stored_explanations_show_per_mode_with_what_they_name(built):
    db, experiment_id, runs = built
    page, frame = explain_view(db, experiment_id, "q0")
    assert list(frame.columns) == list(EXPLANATION_COLUMNS)
    assert frame[["mode", "run_id", "mentioned_docs", "mentioned_labels"]].values.tolist() == [
        ["base", runs["base"], [1], ["a woman"]], ["cf", runs["cf"], [2], []]]
    # The text is escaped: the markup is shown, never parsed.
    assert html.escape(HOSTILE, quote=True) in page and "<img" not in page and "<b>bold" not in page
    assert "gives a label as a reason: <b>a woman</b>" in page and "names no label" in page
    # The named documents are those shown at that number in that mode (order "reversed").
    detail = queries.query_detail(db, experiment_id, "q0")
    base, cf = detail.mode("base"), detail.mode("cf")
    doc_at = {m.mode: {p: d for d, p in m.positions.items()} for m in (base, cf)}
    titles = named_cells(page)
    assert len(titles) == 2
    ranks = {d.doc_id: d.rank for d in detail.documents}
    by_rank = sorted([(ranks[doc_at["base"][1]], "base: shown as [1]"), (ranks[doc_at["cf"][2]], "cf: shown as [2]")])
    assert [t.split(";")[0] for t in titles] == [t for _, t in by_rank]
    assert all("named in the explanation by judge" in t for t in titles)
    # The label that explanation names is highlighted where base shows it, and only there.
    woman_docs = {d for d, label in base.labels.items() if label == "a woman"}
    assert woman_docs and page.count('<span class="named-label">a woman</span>') == len(woman_docs)
    assert "no explanation stored yet" in page  # vanilla's answer has none


def test_an_item_without_explanations_says_so(built):
    db, experiment_id, _ = built
    page, frame = explain_view(db, experiment_id, "q1")
    assert frame.empty and page.count("no explanation stored yet") == 3 and "0 explanations stored" in page


@pytest.mark.parametrize("experiment, item, line", [
    ("", "q0", "choose an experiment"),
    ("{exp}", "", "choose an item"),
    ("nope", "q0", "unknown experiment &#x27;nope&#x27;"),
    ("{exp}", "<q9>", "has no item &#x27;&lt;q9&gt;&#x27;"),
    ("x" * 5000, "q0", "the experiment is too long"),
])
def test_bad_choices_are_one_line_and_an_empty_table(built, experiment, item, line):
    db, experiment_id, _ = built
    page, frame = explain_view(db, experiment.format(exp=experiment_id), item)
    assert line in page and frame.empty and "secret-server-folder" not in page


def test_a_whole_run_shows_its_explanations_and_label_share(built):
    db, experiment_id, runs = built
    assert [value for _, value in run_choices(db, experiment_id)] == [runs["vanilla"], runs["base"], runs["cf"]]
    assert run_choices(db, experiment_id)[1][0] == f"base · {runs['base']} (3 answers)"
    assert run_choices(db, "nope") == [] and run_choices(db, "") == []
    page, frame = explain_run_view(db, experiment_id, runs["base"])
    assert list(frame.columns) == list(RUN_EXPLANATION_COLUMNS)
    assert frame.values.tolist() == [["q0", "judge", [1], ["a woman"], shorten(HOSTILE)]]
    assert "by judge: 1 explanation, 1 give a label as a reason: <b>label share 1.00</b>" in page
    page, frame = explain_run_view(db, experiment_id, runs["cf"])
    assert frame.values.tolist() == [["q0", "judge", [2], [], PLAIN]] and "label share 0.00" in page
    page, frame = explain_run_view(db, experiment_id, runs["vanilla"])
    assert frame.empty and "no explanation stored yet" in page


def test_the_run_table_cuts_long_text_on_one_line():
    assert shorten("a\n  b") == "a b"
    long = "word " * 100
    assert len(shorten(long)) == TEXT_SHOWN and shorten(long).endswith("…")


@pytest.mark.parametrize("experiment, run, line", [
    ("", "r", "choose an experiment"),
    ("{exp}", "", "choose a run"),
    ("nope", "r", "unknown experiment &#x27;nope&#x27;"),
    ("{exp}", "<r9>", "has no run &#x27;&lt;r9&gt;&#x27;"),
    ("{exp}", "x" * 5000, "the run id is too long"),
])
def test_bad_run_choices_are_one_line_and_an_empty_table(built, experiment, run, line):
    db, experiment_id, _ = built
    page, frame = explain_run_view(db, experiment.format(exp=experiment_id), run)
    assert line in page and frame.empty and "secret-server-folder" not in page


def test_an_explanation_made_by_the_command_shows(built, tmp_path, tiny_llama_dir, capsys):
    from engine.__main__ import main

    db, experiment_id, runs = built
    db = Path(shutil.copy(db, tmp_path / "copy.duckdb"))
    assert main(["explain", "--run", runs["vanilla"], "--model", str(tiny_llama_dir), "--limit", "1",
                 "--max-new-tokens", "6", "--db", str(db)]) == 0
    capsys.readouterr()
    (item_id, model, text), = duckdb_rows(db, "SELECT item_id, explainer_model, text FROM explanations "
                                              "WHERE run_id = ?", [runs["vanilla"]])
    page, frame = explain_view(db, experiment_id, item_id)
    assert frame.loc[frame["mode"] == "vanilla", ["explainer_model", "text"]].values.tolist() == [[model, text]]
    # 6 new tokens: cut at the limit, and the page says so.
    assert (f'explanation by {html.escape(model, quote=True)} (cut at the token limit)</h5>'
            f'<div class="explanation">{html.escape(text, quote=True)}</div>') in page


def duckdb_rows(db: Path, sql: str, params: list) -> list[tuple]:
    from store.db import connect

    with connect(db, read_only=True) as con:
        return con.execute(sql, params).fetchall()


# ---------------------------------------------------------------- /explain through gradio_client



def test_explain_through_the_api(built):
    from gradio_client import Client

    from demo.jobs import JobQueue
    from demo.settings import AppSettings
    from tests.support.app_server import served

    db, experiment_id, runs = built
    with served(AppSettings(db), JobQueue(), shutdown_timeout=30) as url:
        client = Client(url, verbose=False)
        endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
        assert [p["type"] for p in endpoints["/explain"]["parameters"]] == [{"type": "string"}] * 2
        page, table = client.predict(experiment_id, "q0", api_name="/explain")
        assert html.escape(HOSTILE, quote=True) in page and "<img" not in page
        assert [row[:3] for row in table["data"]] == [["base", runs["base"], "judge"], ["cf", runs["cf"], "judge"]]
        page, table = client.predict("nope", "q0", api_name="/explain")
        assert "unknown experiment" in page and table["data"] == []
        # A whole run: its explanations as a table, and its label share.
        page, table = client.predict(experiment_id, runs["base"], api_name="/explain_run")
        assert table["headers"] == list(RUN_EXPLANATION_COLUMNS) and "label share 1.00" in page
        assert [row[:2] for row in table["data"]] == [["q0", "judge"]]
        page, table = client.predict(experiment_id, "nope", api_name="/explain_run")
        assert "has no run &#x27;nope&#x27;" in page and table["data"] == []


# ---------------------------------------------------------------- generating in the background worker



def test_generate_queues_explanations_of_the_item_then_of_every_answer(built, tmp_path, tiny_llama):
    from demo.handlers.explain import explain_spec, job_line
    from demo.jobs import JobQueue
    from demo.settings import AppSettings

    db, experiment_id, runs = built
    db = Path(shutil.copy(db, tmp_path / "generate.duckdb"))
    settings = AppSettings(db)
    jobs = JobQueue(load=lambda request: tiny_llama)
    try:
        spec = explain_spec(settings, experiment_id, "q1", "item")
        assert set(spec.run_ids) == set(runs.values()) and spec.item_id == "q1"
        status = wait_for_job(jobs, jobs.submit(spec))
        assert status.state == "complete" and (status.n_done, status.n_total) == (3, 3), job_line(status)
        stored = duckdb_rows(db, "SELECT run_id, item_id, explainer_model FROM explanations WHERE item_id = ? "
                                 "ORDER BY run_id", ["q1"])
        assert sorted(r for r, _, _ in stored) == sorted(runs.values())
        assert {m for _, _, m in stored} == {spec.request.label}
        page, frame = explain_view(db, experiment_id, "q1")
        assert sorted(frame["mode"]) == ["base", "cf", "vanilla"] and "no explanation stored yet" not in page

        # Every answer: the 9 answers less the 3 just explained (q0's two are by another explainer).
        status = wait_for_job(jobs, jobs.submit(explain_spec(settings, experiment_id, "", "all")))
        assert status.state == "complete" and status.n_total == 6, job_line(status)
        assert duckdb_rows(db, "SELECT count(*) FROM explanations WHERE explainer_model = ?",
                           [spec.request.label]) == [(9,)]
        # Again: nothing left, nothing doubled.
        status = wait_for_job(jobs, jobs.submit(explain_spec(settings, experiment_id, "", "all")))
        assert status.state == "complete" and status.n_total == 0 and "nothing to explain" in status.message
    finally:
        jobs.shutdown(timeout=30)


def test_generate_can_target_one_run_alone(built, tmp_path, tiny_llama):
    from demo.handlers.explain import explain_spec, job_line
    from demo.jobs import JobQueue
    from demo.settings import AppSettings

    db, experiment_id, runs = built
    db = Path(shutil.copy(db, tmp_path / "one-run.duckdb"))
    jobs = JobQueue(load=lambda request: tiny_llama)
    try:
        spec = explain_spec(AppSettings(db), experiment_id, "q0", "run", runs["cf"])  # the item box is ignored
        assert (spec.run_ids, spec.item_id, spec.request.modes) == ((runs["cf"],), None, ("cf",))
        status = wait_for_job(jobs, jobs.submit(spec))
        assert status.state == "complete" and status.n_total == 3, job_line(status)  # q0's is by another explainer
        assert duckdb_rows(db, "SELECT run_id, count(*) FROM explanations WHERE explainer_model = ? GROUP BY ALL",
                           [spec.request.label]) == [(runs["cf"], 3)]
        page, frame = explain_run_view(db, experiment_id, runs["cf"])
        assert sorted(frame["item"]) == ["q0", "q0", "q1", "q2"] and f"by {spec.request.label}: 3 explanations" in page
    finally:
        jobs.shutdown(timeout=30)


@pytest.mark.parametrize("settings_change, experiment, item, scope, line", [
    ({"read_only": True}, "{exp}", "q0", "item", "this app is read-only"),
    ({}, "nope", "q0", "item", "unknown experiment 'nope'"),
    ({}, "{exp}", "", "item", "choose an item"),
    ({}, "{exp}", "q0", "everything", "unknown scope"),
    ({}, "{exp}", "q0", "run", "choose a run"),
    ({"allow_local_paths": False}, "{exp}", "q0", "item", "model folder on another machine"),
    ({"allowed_models": ("org/other",)}, "{exp}", "q0", "item", "is not offered here"),
])
def test_generate_refuses_in_one_line(built, settings_change, experiment, item, scope, line):
    from dataclasses import replace

    from demo.handlers.explain import explain_spec
    from demo.settings import AppSettings
    from engine.errors import UserError

    db, experiment_id, _ = built
    with pytest.raises(UserError) as caught:
        explain_spec(replace(AppSettings(db), **settings_change), experiment.format(exp=experiment_id), item, scope)
    assert line in str(caught.value) and "\n" not in str(caught.value)


def test_generate_for_a_run_of_another_experiment_is_refused(built):
    from demo.handlers.explain import explain_spec
    from demo.settings import AppSettings
    from engine.errors import UserError

    db, experiment_id, runs = built
    with pytest.raises(UserError, match=f"^experiment '{experiment_id}' has no run 'r-elsewhere'$"):
        explain_spec(AppSettings(db), experiment_id, "", "run", "r-elsewhere")


def test_the_operators_bounds_bound_explanation_jobs(built, tmp_path, tiny_llama):
    """The answers of a whole experiment were unbounded; the item cap (answers per job,
    shared among the runs) and the new-token cap now bound every explanation job."""
    from demo.handlers.explain import explain_spec, job_line
    from demo.jobs import JobQueue
    from demo.settings import AppSettings

    db, experiment_id, runs = built
    db = Path(shutil.copy(db, tmp_path / "capped.duckdb"))
    settings = AppSettings(db, max_items=4, max_new_tokens=5)
    spec = explain_spec(settings, experiment_id, "", "all")
    assert (spec.max_answers, spec.max_new_tokens) == (4, 5)
    assert explain_spec(AppSettings(db), experiment_id, "", "all").max_new_tokens == 256  # no bound: the default
    jobs = JobQueue(load=lambda request: tiny_llama)
    try:
        status = wait_for_job(jobs, jobs.submit(spec))
        assert status.state == "complete" and (status.n_done, status.n_total) == (4, 4), job_line(status)
        assert "explained 4 answers" in status.message and "5 more wait (at most 4 per job here)" in status.message
        per_run = dict(duckdb_rows(db, "SELECT run_id, count(*) FROM explanations WHERE explainer_model = ? "
                                       "GROUP BY ALL", [spec.request.label]))
        assert sorted(per_run.values()) == [1, 1, 2]  # every mode gets its share
        assert duckdb_rows(db, "SELECT max(n_tokens) FROM explanations WHERE explainer_model = ?",
                           [spec.request.label])[0][0] <= 5
        for want in (4, 1):  # the next jobs go on where the last stopped; none is doubled
            status = wait_for_job(jobs, jobs.submit(spec))
            assert status.state == "complete" and status.n_done == want, job_line(status)
        assert "more wait" not in status.message
        assert duckdb_rows(db, "SELECT count(*) FROM explanations WHERE explainer_model = ?",
                           [spec.request.label]) == [(9,)]
    finally:
        jobs.shutdown(timeout=30)


def test_a_capped_plan_shares_the_cap_among_the_runs():
    from engine.judges.plan import JudgePlan, RunTodo

    plan = JudgePlan(Path("s.duckdb"), tuple(RunTodo(f"run{i}", tuple(range(n))) for i, n in enumerate((10, 1, 7))),
                     "m", "m", 18)
    assert plan.capped(None) is plan and plan.capped(18) is plan
    for limit, want in ((5, [2, 1, 2]), (3, [1, 1, 1]), (2, [1, 1, 0]), (12, [6, 1, 5]), (17, [9, 1, 7])):
        capped = plan.capped(limit)
        assert [len(t.sources) for t in capped.runs] == want and capped.n_todo == limit == sum(want)
        assert all(t.sources == tuple(range(len(t.sources))) for t in capped.runs)  # each run's first ones
