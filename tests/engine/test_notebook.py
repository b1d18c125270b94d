"""The Python API where notebook users are: it opens the store in a Jupyter kernel with
and without ipywidgets, its results display as the CLI prints them, and help() shows only what a
user passes. docs/python.md as a whole runs as a notebook in tests/docs/test_walkthrough.py."""

from __future__ import annotations

import inspect
import pydoc

import pytest

from tests.support.notebooks import KERNEL_CASE, run_notebook, shown, stdout

INTERNAL = {"db_arg", "session", "conn", "pending"}  # what the CLI and the app pass besides

IN_MEMORY = """\
from engine import api
from engine.paths import SAMPLE_DATASET
from store.sandbox import SandboxRequest, run

data = api.load_dataset(SAMPLE_DATASET, 3)
answers = {"vanilla": [{"item_id": item.id, "answer": f"{item.answers[0]} [1]"} for item in data.items]}
evaluation = api.evaluate_answers(data, answers, db="kept.duckdb", experiment="mine")
sql = run(SandboxRequest("kept.duckdb", "SELECT count(*) FROM runs", 10, 30.0, 30.0, "256MB", 1, 10**6, None))
print(len(evaluation.items), sql.rows, sql.error)
"""


# Without ipywidgets is the case that failed (and what a bare `pip install ipykernel` gives);
# with them (JupyterLab's usual setup) runs with the slow tests.
@pytest.mark.parametrize("ipywidgets", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["without-ipywidgets", "with-ipywidgets"])
def test_the_api_opens_the_store_in_a_jupyter_kernel(tmp_path, ipywidgets):
    outputs = run_notebook([KERNEL_CASE, IN_MEMORY, "api.evaluate_answers(data, answers)"], tmp_path,
                           ipywidgets=ipywidgets, timeout_s=120)
    # DuckDB knows it is in a kernel: without ipywidgets its bar starts off and the setting is
    # locked (what made every store call fail), with them it starts on (a widget).
    assert stdout(outputs[0]).split() == ["ipywidgets", str(ipywidgets), "progress", "bar", str(ipywidgets)]
    assert stdout(outputs[1]).split() == ["3", "((1,),)", "None"]  # a store file, and the SQL console's path
    shown_html = shown(outputs[2], "text/html")  # in memory, and displayed as a table
    assert shown_html.startswith("<p>Evaluation: 3 answers in 1 runs") and "<th>precision</th>" in shown_html


def test_help_of_the_api_shows_only_what_a_user_passes():
    from engine import api

    for name in api.__all__:
        value = getattr(api, name)
        if callable(value) and not isinstance(value, type):
            assert not INTERNAL & set(inspect.signature(value).parameters), name
    text = pydoc.render_doc(api.bias_report, renderer=pydoc.plaintext)
    assert "resamples" in text and not any(word in text for word in INTERNAL)
    assert "experiment_ids" in pydoc.render_doc(api.experiment_tables, renderer=pydoc.plaintext)


def _rows(text: str, first: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [first])
    return [line.split()[:2] for line in lines[start + 1:] if line.split()[:1] in (["CAS"], ["CAB"])]


def test_results_show_as_the_cli_prints_them(tmp_path):
    from engine import api
    from engine.running.run_request import ExperimentOutcome, RunOutcome
    from engine.types import SkippedItem

    data = api.load_dataset("sample", 2)
    answers = {"vanilla": [{"item_id": i.id, "answer": "x [1]"} for i in data.items],
               "base": [{"item_id": i.id, "answer": "x [1][2]"} for i in data.items],
               "cf": [{"item_id": i.id, "answer": "<b>x</b> [2]"} for i in data.items]}
    ev = api.evaluate_answers(data, answers, metadata=api.metadata_type("gender"), db=tmp_path / "s.duckdb",
                              experiment="mine")
    text = repr(ev)
    assert len(text.splitlines()) <= 15, text  # not three whole DataFrames
    assert text.splitlines()[0].startswith("Evaluation: 6 answers in 3 runs (experiment ")
    order = [[m, k] for m in ("CAS", "CAB") for k in ("precision", "recall", "f1")]
    assert _rows(text, "measure") == order  # the CLI's order, whatever the frame's
    header = next(line for line in text.splitlines() if line.startswith("rag_mode"))
    assert header.split() == ["rag_mode", "run_id", "n", "precision", "recall", "f1", "exact_match"]
    assert "<table>" in ev._repr_html_() and "<th>verdict</th>" in ev._repr_html_()

    report = api.bias_report(tmp_path / "s.duckdb", "mine")
    assert _rows(repr(report), "measure") == order
    frame = report.results
    assert list(zip(frame["measure"], frame["metric"], strict=True)) == [tuple(r) for r in order]
    assert len(frame) == len(report.report["results"])
    assert report._repr_html_().count("<tr>") == 7

    # An undefined measure shows "undefined" and why, never a number.
    undefined = {"measure": "CAB", "metric": "recall", "value": None, "ci_low": None, "ci_high": None, "p": None,
                 "n": 2, "direction": None, "undefined_reason": "no answer cites a <shown> document"}
    shown_report = api.BiasReport({**report.report, "results": [undefined]}, "")
    assert "undefined  -" in repr(shown_report) and "undefined: no answer cites a <shown> document" in repr(shown_report)
    assert "&lt;shown&gt;" in shown_report._repr_html_()

    outcome = ExperimentOutcome("e1", tuple(RunOutcome(f"r{m}", m, "complete", 4, 4, 3) for m in ("vanilla", "base")),
                                "smoke", None, "mine", {"vanilla": 4, "base": 4},
                                tuple(SkippedItem(f"line {i}", None, "bad") for i in range(5000)), "d.jsonl", 4)
    assert repr(outcome).splitlines() == [
        "experiment e1 'mine'  model smoke  dataset d.jsonl (4 valid items); 5000 items skipped (.skipped)",
        "mode     run       status    items  generated now  with a citation",
        "vanilla  rvanilla  complete  4      4              3",
        "base     rbase     complete  4      4              3"]
    assert outcome._repr_html_().count("<tr>") == 3
