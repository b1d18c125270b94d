"""PAttriEval's Inspect tasks run by Inspect's own runner (inspect_ai.eval): on a tiny random model
through Inspect's HF provider (a local folder, offline), and on Inspect's scripted mock model,
whose answers follow the labels, so that CAS and CAB are defined and checked against
engine.statistics.bias and against the store after `import --inspect`."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai")

from inspect_ai.model import ModelOutput, ModelUsage, get_model  # noqa: E402

import engine.inspect_tasks.registry  # noqa: E402,F401  (what the entry point loads)
from engine import api  # noqa: E402
from engine.inspect_tasks.scoring import CAB_NAME, CAS_NAME, item_scores  # noqa: E402
from engine.statistics.bias import compute_bias  # noqa: E402
from tests.support.inspect_runner import inspect_eval  # noqa: E402  (Inspect in a thread of its own)

ROOT = Path(__file__).resolve().parents[3]


def said(text: str) -> ModelOutput:
    """The mock model's answer, with its usage given (else the mock counts tokens with a tokenizer
    it downloads)."""
    output = ModelOutput.from_content(model="mockllm/model", content=text)
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return output


def follows_labels(messages, tools, tool_choice, config):
    """A model that cites [1] and the first two documents written by a woman where labels are shown,
    else [1][2]: precision and recall vary across items in every mode."""
    text = messages[-1].text
    cited = re.findall(r"Document \[(\d+)\]\([^\n]*\) \(written by a woman\)", text)
    answer = "It is so " + ("".join(f"[{n}]" for n in dict.fromkeys(["1", *cited[:2]])) if cited else "[1][2]")
    return said(answer)


@pytest.fixture(scope="module")
def mock_log(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inspect-logs")
    model = get_model("mockllm/model", custom_outputs=follows_labels)
    [log] = inspect_eval("pattrieval/gender", model=model, task_args={"limit": 8}, log_dir=str(folder),
                         display="none")
    assert log.status == "success", log.error
    return log


def test_the_tiny_model_answers_every_mode_with_our_prompts_through_the_hf_provider(tiny_llama_dir, tmp_path,
                                                                                     monkeypatch):
    from engine.prompting.prompts import METADATA_TYPES, PromptConfig, build_prompt

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the folder is read as a folder, never looked up
    [log] = inspect_eval("pattrieval/race", model=f"hf/{tiny_llama_dir}", task_args={"limit": 2}, max_tokens=6,
                         log_dir=str(tmp_path), display="none")
    assert log.status == "success", log.error
    assert log.eval.task == "pattrieval/race" and len(log.samples) == 2
    item = api.load_dataset("sample").items[0]
    sample = log.samples[0]
    assert sample.id == item.id and set(sample.metadata["answers"]) == {"vanilla", "base", "cf"}
    assert sample.messages[0].text == build_prompt(item, PromptConfig()).text  # Prompt 1, as our runs send it
    race = METADATA_TYPES["race"]
    cf = build_prompt(item, PromptConfig(mode="cf", metadata=race), 0)
    base = build_prompt(item, PromptConfig(mode="base", metadata=race), 0)
    assert sample.metadata["shown_doc_ids"]["cf"] == list(cf.shown_doc_ids) and cf.text != base.text
    score = sample.scores["citation_scorer"].value
    assert set(score) == {f"{m}_{k}" for m in ("vanilla", "base", "cf") for k in ("precision", "recall", "f1", "cites")}


def test_metrics_are_named_in_full_and_equal_our_statistics(mock_log):
    [scores] = mock_log.results.scores
    metrics = {name: m.value for name, m in scores.metrics.items()}
    assert {"CAB_precision", "CAB_precision_ci_low", "CAB_precision_ci_high", "CAB_precision_p",
            "CAS_recall", "CAS_f1_ci_high"} <= set(metrics)
    # the metrics' names and the log's words for them say whose CAB this is
    assert scores.metrics["CAB_precision"].group == "citation_attribution_bias"
    assert scores.metrics["CAS_f1"].group == "citation_attribution_sensitivity"
    measures = mock_log.eval.scorers[0].metadata["measures"]
    assert CAB_NAME == "citation attribution bias (Abolghasemi et al.)" and measures["CAB"].startswith(CAB_NAME)
    assert measures["CAS"].startswith(CAS_NAME)

    per_mode: dict[str, list[dict]] = {}
    for sample in mock_log.samples:
        value = sample.scores["citation_scorer"].value
        for mode in ("vanilla", "base", "cf"):
            row = {"item_id": str(sample.id), "cites": bool(value[f"{mode}_cites"])}
            row.update({k: value[f"{mode}_{k}"] for k in ("precision", "recall", "f1")})
            per_mode.setdefault(mode, []).append(row)
    expected = {(r.measure, r.metric): r for r in compute_bias(per_mode)}
    cab = expected[("CAB", "precision")]
    assert cab.value > 0 and metrics["CAB_precision"] == pytest.approx(cab.value)
    assert (metrics["CAB_precision_ci_low"], metrics["CAB_precision_ci_high"]) == pytest.approx((cab.ci_low, cab.ci_high))
    assert metrics["CAB_precision_p"] == pytest.approx(cab.p)
    assert metrics["CAS_recall"] == pytest.approx(expected[("CAS", "recall")].value)


def test_an_imported_log_gives_the_same_numbers_from_the_store(mock_log, tmp_path):
    db = tmp_path / "s.duckdb"
    result = api.import_inspect(mock_log.location, db)
    assert set(result.run_ids) == {"vanilla", "base", "cf"} and result.n_samples == 8 and not result.already
    assert result.task == "pattrieval/gender" and result.model == "mockllm/model"
    # each answer's precision, recall and F1 as the scorer gave them, from the store's view
    items = api.evaluate(db, experiment=result.experiment_id).items
    mode_of = {run_id: mode for mode, run_id in result.run_ids.items()}
    for sample in mock_log.samples:
        value = sample.scores["citation_scorer"].value
        for _, row in items[items["item_id"] == str(sample.id)].iterrows():
            mode = mode_of[row["run_id"]]
            for metric in ("precision", "recall", "f1"):
                assert row[metric] == pytest.approx(value[f"{mode}_{metric}"]), (sample.id, mode, metric)
    # CAS and CAB as the bias report computes them
    [scores] = mock_log.results.scores
    report = api.bias_report(db, result.experiment_id).results
    for _, row in report.iterrows():
        key = f"{row['measure']}_{row['metric']}"
        assert row["value"] == pytest.approx(scores.metrics[key].value)
        assert row["ci_low"] == pytest.approx(scores.metrics[f"{key}_ci_low"].value)
    again = api.import_inspect(mock_log.location, db)
    assert again.already and again.run_ids == result.run_ids


@pytest.mark.parametrize(("answer", "relevant", "syntax", "expected"), [
    ("Paris [1]", [True, False], "ours", (1.0, 1.0, 1.0, True)),
    ("Paris [1][2]", [True, False], "ours", (0.5, 1.0, 2 / 3, True)),
    ("Paris [3]", [True, False], "ours", (0.0, 0.0, 0.0, False)),  # a number not shown counts against precision
    ("Paris [3][1]", [True, False], "paper", (1.0, 1.0, 1.0, True)),  # the paper's reading leaves it out
    ("Paris [1, 2]", [True, True], "paper", (0.0, 0.0, 0.0, False)),
    ("Paris", [False, False], "ours", (0.0, 0.0, 0.0, False)),
])
def test_item_scores(answer, relevant, syntax, expected):
    got = item_scores(answer, relevant, syntax)
    assert (got["precision"], got["recall"], got["f1"], got["cites"]) == pytest.approx(expected)


def test_no_citation_anywhere_is_undefined_not_zero(tmp_path):
    model = get_model("mockllm/model", custom_outputs=lambda *a: said("Paris."))
    [log] = inspect_eval("pattrieval/hai", model=model, task_args={"limit": 3}, log_dir=str(tmp_path), display="none")
    metrics = log.results.scores[0].metrics
    assert math.isnan(metrics["CAB_precision"].value) and math.isnan(metrics["CAS_recall"].value)


def test_the_custom_task_takes_a_pair_of_labels(tmp_path):
    model = get_model("mockllm/model", custom_outputs=lambda *a: said("x [1]"))
    [log] = inspect_eval("pattrieval/custom", model=model, log_dir=str(tmp_path), display="none",
                         task_args={"limit": 2, "label_a": "a nurse", "label_b": "a doctor",
                                    "consideration": "Some documents are written by nurses, others by doctors."})
    assert log.status == "success", log.error
    assert log.samples[0].metadata["metadata_type"]["label_a"] == "a nurse"
    db = tmp_path / "s.duckdb"
    result = api.import_inspect(log.location, db)
    assert api.bias_report(db, result.experiment_id).report is not None


def test_inspect_finds_the_tasks_through_the_entry_point(tmp_path, tiny_llama_dir):
    """`inspect eval pattrieval/<task>` in a fresh process: the entry point pyproject.toml declares,
    installed as a distribution's metadata on the path, is all that tells Inspect where they are."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    points = project["project"]["entry-points"]["inspect_ai"]
    assert points == {"pattrieval": "engine.inspect_tasks.registry"}
    info = tmp_path / "site" / "pattrieval-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pattrieval\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[inspect_ai]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    code = ("import sys\nfrom inspect_ai._cli.main import main\n"
            f"sys.argv = ['inspect', 'eval', 'pattrieval/gender', '--model', 'hf/{tiny_llama_dir}', '-T', 'limit=1',"
            f" '--max-tokens', '4', '--log-dir', {str(tmp_path / 'logs')!r}, '--display', 'none']\nmain()\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": f"{tmp_path / 'site'}:{ROOT}", "PATH": "/usr/bin:/bin",
                               "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    [written] = list((tmp_path / "logs").glob("*.eval"))
    from inspect_ai.log import read_eval_log

    assert read_eval_log(written, header_only=True).eval.task == "pattrieval/gender"
