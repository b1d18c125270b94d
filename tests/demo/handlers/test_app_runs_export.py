"""The Runs tab: the paged, filtered experiment table and the export, as plain functions and through
gradio_client (`/runs`, `/export`), and a store merged in from another machine showing up in `/runs`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from demo.handlers import query as query_handlers
from demo.handlers.runs import PAGE_SIZE, RUNS_COLUMNS, export_file, runs_page, runs_view, study_choices
from engine.errors import UserError
from store import RunStore, connect
from store.queries import EXPORT_COLUMNS, export_results_frame, run_metric_table
from tests.demo.handlers.test_app_sql import build_store
from tests.store.test_export_merge import add_run

METRICS = RUNS_COLUMNS.index("vanilla: P / R / F1, EM")


def rename(db: Path, experiment: str, *, model: str | None = None, dataset: str | None = None) -> None:
    """Give one experiment's runs another model or dataset path (as a store merged from elsewhere would hold)."""
    with connect(db) as conn:
        if model:
            conn.execute("UPDATE runs SET model = ? WHERE experiment_id = ?", [model, experiment])
        if dataset:
            conn.execute("UPDATE runs SET dataset = ? WHERE experiment_id = ?", [dataset, experiment])


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    db = build_store(tmp_path_factory.mktemp("secret-server-folder") / "app.duckdb")  # exp-a (pilot), exp-b (failed)
    add_run(db, "r-llama", "exp-c", "vanilla")
    rename(db, "exp-c", model="meta-llama/Llama-2-7b-chat-hf", dataset="/data/alce_asqa.jsonl")
    # Two studies, as `run --study` records them: exp-c is in both, exp-b in none.
    writer = RunStore(db, timeout_s=10)
    writer.record_study("grid-1", {"model": ["org/model", "meta-llama/Llama-2-7b-chat-hf"]}, "exp-a", 0)
    writer.record_study("grid-1", {"model": ["org/model", "meta-llama/Llama-2-7b-chat-hf"]}, "exp-c", 1)
    writer.record_study("grid-2", {"top_k": [5]}, "exp-c", 0)
    return db


# ---------------------------------------------------------------- handlers


def test_the_table_shows_each_experiment_with_status_progress_and_metrics_per_mode(store):
    view = runs_view(store, 1)
    assert (view.page, view.pages, view.total) == (1, 1, 3)
    assert view.caption == (f"experiments: page 1 of 1 (3 matching, {PAGE_SIZE} a page); click a row to open it in "
                            "the Query tab")
    rows = {row[0]: dict(zip(RUNS_COLUMNS, row, strict=True)) for row in view.rows}
    assert [row[0] for row in view.rows] == ["exp-c", "exp-b", "exp-a"]  # newest first
    a = rows["exp-a"]
    assert (a["name"], a["modes"], a["status"], a["items"], a["metadata"]) == (
        "pilot", "vanilla,base,cf", "complete", "9/9", "gender")
    assert (rows["exp-b"]["status"], rows["exp-b"]["vanilla: P / R / F1, EM"]) == ("failed", "-")
    # The same numbers as the run_metrics view (x100), per mode.
    metrics = run_metric_table(store, status=None).set_index("run_id")
    for mode, run_id in (("vanilla", "r-van"), ("base", "r-base"), ("cf", "r-cf")):
        m = metrics.loc[run_id]
        assert a[f"{mode}: P / R / F1, EM"] == (f"{100 * m.precision:.1f} / {100 * m.recall:.1f} / "
                                               f"{100 * m.f1:.1f}, {m.exact_match:.2f}")


def test_filters_by_model_dataset_metadata_and_mode(store):
    def ids(**filters):
        return [row[0] for row in runs_page(store, 1, **filters)]

    assert ids(model="LLAMA") == ["exp-c"]
    assert ids(model="org/") == ["exp-b", "exp-a"]
    assert ids(dataset="asqa") == ["exp-c"] and ids(dataset="tiny.jsonl") == ["exp-b", "exp-a"]
    assert ids(metadata="gender") == ["exp-b", "exp-a"] and ids(metadata="race") == []
    assert ids(mode="vanilla") == ["exp-c", "exp-a"] and ids(mode="cf") == ["exp-a"]
    assert ids(model="org/", mode="vanilla") == ["exp-a"]
    assert ids(model=" ", dataset="", metadata=None, mode="") == ["exp-c", "exp-b", "exp-a"]  # blank: no filter


def test_each_experiment_shows_its_studies_and_the_study_filter_keeps_a_study(store):
    studies = {row[0]: row[-1] for row in runs_page(store, 1)}
    assert RUNS_COLUMNS[-1] == "studies"  # last: /runs callers reading by position are unaffected
    assert studies == {"exp-c": "grid-1, grid-2", "exp-b": "-", "exp-a": "grid-1"}
    assert [row[0] for row in runs_page(store, 1, study="grid-1")] == ["exp-c", "exp-a"]
    assert [row[0] for row in runs_page(store, 1, study=" grid-2 ", mode="vanilla")] == ["exp-c"]
    assert [row[0] for row in runs_page(store, 1, study="grid-2", metadata="gender")] == []
    view = runs_view(store, 1, study="grid-1", page_size=1)
    assert (view.total, view.pages, [r[0] for r in view.rows]) == (2, 2, ["exp-c"])
    assert [row[0] for row in runs_page(store, 1, study="")] == ["exp-c", "exp-b", "exp-a"]  # blank: any
    with pytest.raises(UserError, match=r"^no study 'grid-3' in the store \(`python -m engine list --studies`"):
        runs_view(store, 1, study="grid-3")
    assert study_choices(store) == [("any", ""), ("grid-2 (1 experiment)", "grid-2"),
                                    ("grid-1 (2 experiments)", "grid-1")]
    assert study_choices(store.with_name("none.duckdb")) == [("any", "")]


def test_pages_are_cut_on_the_server_and_counted(store):
    pages = [runs_view(store, n, page_size=2) for n in (1, 2, 3)]
    assert [[row[0] for row in v.rows] for v in pages] == [["exp-c", "exp-b"], ["exp-a"], []]
    assert {(v.pages, v.total) for v in pages} == {(2, 3)}
    assert runs_view(store, 0, page_size=2).page == 1
    assert (runs_view(store, 1, model="LLAMA").total, runs_view(store, 1, model="nope").total) == (1, 0)
    # No match under a filter is said as such, not as an empty store.
    assert runs_view(store, 1, model="nope").caption == "No experiment matches these filters."
    assert runs_view(store, 2, page_size=1, mode="vanilla").rows[0][0] == "exp-a"


def test_an_empty_store_has_no_rows_and_is_not_created(tmp_path):
    db = tmp_path / "none.duckdb"
    view = runs_view(db, 1)
    assert (view.rows, view.pages, view.total) == ([], 1, 0) and query_handlers.experiment_choices(db) == []
    # The tab says so above its empty table, and where to start.
    assert view.caption == "**Nothing is stored yet: start a run in the Run tab (or merge a results store).**"
    with pytest.raises(UserError, match="^nothing is stored yet"):
        export_file(db, ["exp-a"], "", "csv")
    assert not db.exists()


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_writes_the_same_rows_as_the_cli(store, fmt):
    out = export_file(store, ["pilot"], "exp-b, exp-a", fmt)  # by name, and the same experiment by id: once
    assert out.name == f"pattrieval-export.{fmt}"
    same_frame(read_export(out, fmt), export_results_frame(store, ["exp-a", "exp-b"]))


def test_export_refusals_are_one_line_without_paths(store):
    with pytest.raises(UserError, match="^no experiment 'nope'$"):
        export_file(store, ["pilot"], "nope", "csv")
    with pytest.raises(UserError, match="^choose at least one experiment"):
        export_file(store, [], " , ", "csv")
    with pytest.raises(UserError, match="^unknown export format 'xlsx'"):
        export_file(store, ["pilot"], "", "xlsx")


def test_the_export_picker_names_experiments(store):
    # The picker every tab uses (demo.handlers.query): name, id and model, newest first.
    from demo.handlers.query import experiment_choices

    assert [c[1] for c in experiment_choices(store)] == ["exp-c", "exp-b", "exp-a"]
    assert experiment_choices(store)[-1][0].startswith("pilot · exp-a · ")


def read_export(path: str | Path, fmt: str) -> pd.DataFrame:
    if fmt == "parquet":
        return pd.read_parquet(path)
    back = pd.read_csv(path)
    for column in ("gold_answers", "cited", "gold"):  # list cells are JSON in a CSV
        back[column] = [json.loads(v) for v in back[column]]
    return back


def same_frame(back: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert tuple(back.columns) == EXPORT_COLUMNS and len(back) == len(expected) > 0
    for column in EXPORT_COLUMNS:
        for got, want in zip(back[column], expected[column], strict=True):
            if isinstance(want, (list, tuple)) or hasattr(got, "tolist"):
                assert list(got) == list(want), column
            elif want is None or (isinstance(want, float) and math.isnan(want)):
                assert got is None or pd.isna(got), column
            elif isinstance(want, float):
                assert math.isclose(float(got), want), column
            else:
                assert str(got) == str(want), column


# ---------------------------------------------------------------- /runs and /export through gradio_client, and merge


@pytest.fixture(scope="module")
def client(store):
    from gradio_client import Client

    from demo.jobs import JobQueue
    from demo.settings import AppSettings
    from tests.support.app_server import refuse_load, served

    with served(AppSettings(store), JobQueue(load=refuse_load)) as url:
        yield Client(url, verbose=False)


def test_runs_through_the_api_filter_and_page(client):
    table = client.predict(1, "", "", api_name="/runs")  # the three arguments scripts already send
    assert table["headers"] == RUNS_COLUMNS and [r[0] for r in table["data"]] == ["exp-c", "exp-b", "exp-a"]
    table = client.predict(1, "", "gender", "tiny", "vanilla", api_name="/runs")
    assert [r[0] for r in table["data"]] == ["exp-a"]
    assert client.predict(2, "", "", "", "", api_name="/runs")["data"] == []
    # The study filter, last: one study's experiments, each row naming its studies.
    table = client.predict(1, "", "", "", "", "grid-2", api_name="/runs")
    assert [(r[0], r[-1]) for r in table["data"]] == [("exp-c", "grid-1, grid-2")]
    with pytest.raises(Exception, match="no study 'nope' in the store"):
        client.predict(1, "", "", "", "", "nope", api_name="/runs")


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_through_the_api_matches_the_store(client, store, fmt):
    path = client.predict(["pilot"], "exp-c", fmt, api_name="/export")
    assert Path(path).name == f"pattrieval-export.{fmt}"
    same_frame(read_export(path, fmt), export_results_frame(store, ["exp-a", "exp-c"]))


def test_export_of_an_unknown_experiment_through_the_api_is_one_line(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as caught:
        client.predict([], "nope", "csv", api_name="/export")
    assert str(caught.value) == "no experiment 'nope'"


def test_a_store_merged_from_another_machine_shows_up_in_runs(client, store, tmp_path):
    from engine.__main__ import main

    other = tmp_path / "gpu-box.duckdb"
    add_run(other, "g-base", "exp-gpu", "base", name="from-the-gpu-box")
    add_run(other, "g-cf", "exp-gpu", "cf")
    rename(other, "exp-gpu", model="mistralai/Mistral-7B-Instruct-v0.2")
    assert main(["merge", "--from", str(other), "--db", str(store)]) == 0
    table = client.predict(1, "mistral", "", "", "", api_name="/runs")
    row = dict(zip(table["headers"], table["data"][0], strict=True))
    assert len(table["data"]) == 1
    assert (row["experiment"], row["name"], row["modes"], row["status"], row["items"]) == (
        "exp-gpu", "from-the-gpu-box", "base,cf", "complete", "6/6")
    path = client.predict([], "from-the-gpu-box", "parquet", api_name="/export")
    assert set(pd.read_parquet(path)["run_id"]) == {"g-base", "g-cf"}
