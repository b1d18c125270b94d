"""The use-case layer (engine/usecases) and the Python API (engine.api): one explain loop with its
progress, cancel and resume; the curated surface loads nothing heavy; the in-memory evaluation
reads the store's views; the faces import no other face."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.judges.test_explain import answered, make_dataset, rows  # noqa: F401 - the module-scoped fixture

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def store(answered, tmp_path):  # noqa: F811
    db, experiment_id, runs = answered
    copy = tmp_path / "s.duckdb"
    shutil.copy(db, copy)
    return copy, experiment_id, runs


def test_import_engine_api_loads_nothing_heavy():
    code = ("import sys, engine.api as api\n"
            "print(sorted(m for m in ('torch', 'transformers', 'duckdb', 'pandas', 'numpy') if m in sys.modules))\n"
            "names = [getattr(api, n) for n in api.__all__]\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    # Importing loads nothing; even every name, resolved, loads no model library.
    assert done.stdout.split() == ["[]", "[]"], done.stderr


def test_the_api_names_resolve_and_unknown_ones_fail():
    from engine import api

    assert api.explain.__module__ == "engine.usecases.judges.explain"
    assert api.evaluate.__module__ == "engine.usecases.runs.evaluate"
    assert set(api.__all__) <= set(dir(api))
    with pytest.raises(AttributeError):
        api.no_such_name  # noqa: B018


def test_explain_progress_stop_and_resume(store, tiny_llama):
    from engine import api
    from engine.errors import RunCancelled

    db, experiment_id, runs = store
    request = api.ExplainRequest(db, runs=(runs["base"],), max_new_tokens=4, batch_size=2)
    plan = api.plan_explain(request)
    assert (plan.n_todo, plan.experiment_id, plan.run_ids) == (5, experiment_id, [runs["base"]])
    seen, stages = [], []
    with pytest.raises(RunCancelled, match="stopped after 2 explanations"):
        api.run_explain(plan, request, load=lambda model: tiny_llama, progress=seen.append,
                        stop=lambda: bool(seen), stage=stages.append)
    assert seen == [2] and stages == [f"loading {plan.label}", "explaining"]
    assert rows(db, "SELECT count(*) FROM explanations")[0][0] == 2  # the committed batch stays

    result = api.explain(request, load=lambda model: tiny_llama)
    assert (result.n_todo, result.n_done, [r.n_done for r in result.runs]) == (3, 3, [3])
    assert rows(db, "SELECT count(*) FROM explanations")[0][0] == 5
    # Nothing left: nothing loaded.
    result = api.explain(request, load=lambda model: pytest.fail("loaded a model for nothing"))
    assert (result.n_todo, result.n_done) == (0, 0)


def test_cancel_before_loading_loads_nothing(store):
    from engine import api
    from engine.errors import RunCancelled

    db, experiment_id, _ = store
    request = api.ExplainRequest(db, experiment=experiment_id)
    with pytest.raises(RunCancelled, match="cancelled before generating"):
        api.explain(request, load=lambda model: pytest.fail("loaded"), stop=lambda: True)


def test_one_line_refusals(store):
    from engine import api
    from engine.errors import UserError
    from engine.usecases.judges.judge_runs import UnknownRun

    db, _, _ = store
    with pytest.raises(UnknownRun) as caught:
        api.plan_explain(api.ExplainRequest(db, runs=("r-gone",)))
    assert caught.value.run_id == "r-gone" and "no run 'r-gone'" in str(caught.value)
    with pytest.raises(UserError, match="^no experiment 'nope' in "):
        api.plan_verify(api.VerifyRequest(db, experiment="nope"))
    with pytest.raises(UserError, match="^batch_size must be at least 1$"):  # the field's plain name
        api.plan_verify(api.VerifyRequest(db, experiment="x", batch_size=0))


def test_evaluate_reads_the_views(store):
    from engine import api
    from store.queries import bias_table, metrics_for_run

    db, experiment_id, runs = store
    ev = api.evaluate(db, experiment=experiment_id)
    assert ev.experiment_ids == (experiment_id,)
    assert sorted(ev.runs["run_id"]) == sorted(runs.values())
    assert len(ev.items) == 15
    base = ev.items[ev.items["run_id"] == runs["base"]].reset_index(drop=True)
    assert base.equals(metrics_for_run(db, runs["base"]))
    # CAS and CAB as `bias` reports them: one definition of their intervals and tests.
    report = api.bias_report(db, experiment_id).report["results"]
    assert ev.bias[["measure", "metric", "n", "direction"]].to_dict("records") == [
        {k: r[k] for k in ("measure", "metric", "n", "direction")} for r in report]
    assert len(bias_table(db, experiment_id)) == len(ev.bias)
    assert set(ev.bias["measure"]) == {"CAS", "CAB"}
    one = api.evaluate(db, run=runs["cf"])
    assert list(one.runs["run_id"]) == [runs["cf"]] and len(one.items) == 5


def _answers(dataset, cite):
    return [{"item_id": item.id, "answer": f"It is {item.answers[0]} [{cite(i)}]."} for i, item in enumerate(dataset.items)]


def test_evaluate_answers_in_memory_is_the_stored_evaluation(tmp_path):
    from engine import api
    from engine.prompting.prompts import METADATA_TYPES

    data = api.load_dataset(make_dataset(tmp_path / "d.jsonl", 6))
    answers = {"vanilla": _answers(data, lambda i: 1), "base": _answers(data, lambda i: 1 + i % 4),
               "cf": _answers(data, lambda i: 1 + (i + 1) % 4)}
    meta = METADATA_TYPES["gender"]
    in_memory = api.evaluate_answers(data, answers, metadata=meta, experiment="mine")
    stored = api.evaluate_answers(data, answers, metadata=meta, experiment="mine", db=tmp_path / "kept.duckdb")
    assert not list(tmp_path.glob("pattrieval-*"))
    assert len(in_memory.items) == 18 and set(in_memory.bias["measure"]) == {"CAS", "CAB"}
    columns = ["mode", "item_id", "precision", "recall", "f1"]

    def per_mode(ev):  # run ids differ between the two stores; modes do not
        modes = dict(zip(ev.runs["run_id"], ev.runs["rag_mode"], strict=True))
        items = ev.items.assign(mode=ev.items["run_id"].map(modes))
        return items.sort_values(["mode", "item_id"])[columns].reset_index(drop=True)

    assert per_mode(in_memory).equals(per_mode(stored))
    keep = ["measure", "metric", "value", "p", "n"]
    assert in_memory.bias[keep].equals(stored.bias[keep])
    # The bias report of the kept store says the same CAB as the view.
    report = api.bias_report(tmp_path / "kept.duckdb", "mine").report
    cab = {r["metric"]: r["value"] for r in report["results"] if r["measure"] == "CAB"}
    view = {r["metric"]: r["value"] for r in stored.bias.to_dict("records") if r["measure"] == "CAB"}
    assert cab.keys() == view.keys() and all(cab[k] == pytest.approx(view[k], abs=1e-9) for k in cab)


def test_evaluate_answers_refuses_in_one_line(tmp_path):
    from engine import api
    from engine.errors import UserError

    data = api.load_dataset(make_dataset(tmp_path / "d.jsonl", 2))
    with pytest.raises(UserError, match="^unknown mode 'other'"):
        api.evaluate_answers(data, {"other": []})
    with pytest.raises(UserError, match=r"^answers:2: unknown item_id 'q9'"):
        api.evaluate_answers(data, {"vanilla": [{"item_id": "q0", "answer": "a"}, {"item_id": "q9", "answer": "b"}]})
    with pytest.raises(UserError, match="needs --metadata"):
        api.evaluate_answers(data, {"base": _answers(data, lambda i: 1)})


def test_no_face_imports_another_face_or_the_cli_from_use_cases():
    """engine/usecases and demo/ import nothing from engine.commands (the CLI), function-local
    imports too; demo/handlers/run.py is the run pipeline's, and moves with it."""
    pattern = re.compile(r"^\s*(from|import)\s+engine\.commands\b", re.M)
    offenders = []
    for folder in ("engine/usecases", "demo"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.relative_to(ROOT).as_posix() == "demo/handlers/run.py":
                continue
            if pattern.search(path.read_text()):
                offenders.append(path.relative_to(ROOT).as_posix())
    assert offenders == []
    api = (ROOT / "engine/api.py").read_text() + "".join(p.read_text() for p in (ROOT / "engine/usecases").glob("*.py"))
    assert not re.search(r"^\s*(from|import)\s+(demo|gradio)\b", api, re.M)


def test_json_of_the_report_is_the_cli_json(store, capsys):
    from engine.__main__ import main
    from engine.usecases.bias.tables import ReportRequest, report_tables

    db, experiment_id, _ = store
    assert main(["report", "--db", str(db), "--format", "json", "--experiment", experiment_id]) == 0
    printed = json.loads(capsys.readouterr().out)
    tables = report_tables(ReportRequest(db, experiment=experiment_id))
    assert printed["table1"] == json.loads(json.dumps(tables.table1, default=str))
    assert printed.get("table2", []) == json.loads(json.dumps(tables.table2, default=str))
