"""`--model auto` and the quickstart: a real model where one can be had, the smoke model only offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.__main__ import main
from engine.generation.model_choice import CPU_MODEL, DEFAULT_MODEL, SMOKE, choose_auto_model, hub_model_available


def _cache(root: Path, *model_ids: str) -> Path:
    """A Hugging Face Hub cache holding the config.json of each model, laid out as the Hub client writes it."""
    for model_id in model_ids:
        repo = root / ("models--" + model_id.replace("/", "--"))
        commit = "0123456789abcdef0123456789abcdef01234567"
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(commit)
        snapshot = repo / "snapshots" / commit
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text("{}")
    return root


@pytest.mark.parametrize("gpu, cached, expected", [
    (False, (), SMOKE),
    (True, (), SMOKE),
    (False, (CPU_MODEL,), CPU_MODEL),
    (False, (CPU_MODEL, DEFAULT_MODEL), CPU_MODEL),
    (True, (CPU_MODEL, DEFAULT_MODEL), DEFAULT_MODEL),
    (True, (DEFAULT_MODEL,), DEFAULT_MODEL),
    (True, (CPU_MODEL,), CPU_MODEL),
])
def test_auto_picks_a_real_model_whenever_one_can_be_had(tmp_path, gpu, cached, expected):
    # The test session is offline (conftest), so only the cache can make a model available.
    choice = choose_auto_model(gpu=gpu, hub_cache=_cache(tmp_path, *cached))
    assert choice.name == expected
    if expected == SMOKE:
        assert "random text" in choice.why and CPU_MODEL in choice.why
    else:
        assert expected in choice.why


@pytest.fixture
def smoke_cache(tmp_path, tiny_llama_dir, monkeypatch):
    # The smoke model is the tiny Llama of seed 0, which the session has written already: a
    # copy in a fresh cache saves writing it again, and nothing goes to ~/.cache.
    import shutil

    from engine.generation.model_choice import SMOKE_DIR_NAME

    monkeypatch.setenv("PATTRIEVAL_CACHE", str(tmp_path / "cache"))
    shutil.copytree(tiny_llama_dir, tmp_path / "cache" / SMOKE_DIR_NAME)


def test_offline_quickstart_says_the_answers_are_random_and_what_to_run_next(smoke_cache, tmp_path, capsys):
    if hub_model_available(CPU_MODEL):
        pytest.skip(f"{CPU_MODEL} is cached here, so auto would not fall back to the smoke model")
    db = tmp_path / "q.duckdb"
    assert main(["quickstart", "--db", str(db), "--limit", "2", "--max-new-tokens", "4"]) == 0
    captured = capsys.readouterr()
    assert "smoke model" in captured.err and "random text" in captured.err
    out = captured.out
    assert "random weights: its text is random" in out
    assert main(["list", "--json", "--db", str(db)]) == 0
    [experiment] = json.loads(capsys.readouterr().out)
    assert experiment["modes"] == ["vanilla", "base", "cf"] and experiment["n_total"] == 6
    tail = out[out.index("next:"):].splitlines()
    assert tail == ["next:", f"  python -m engine list --db {db}",
                    f"  python -m engine bias --experiment {experiment['experiment_id']} --db {db}",
                    f"  python -m engine report --db {db}"]
    assert main(["bias", "--experiment", experiment["experiment_id"], "--db", str(db), "--json"]) == 0


def test_a_real_model_on_cpu_answers_a_handful_of_items_and_says_so(tiny_llama_dir, tmp_path, capsys):
    db = tmp_path / "q.duckdb"
    assert main(["quickstart", "--model", str(tiny_llama_dir), "--device", "cpu", "--db", str(db),
                 "--max-new-tokens", "2", "--modes", "vanilla"]) == 0
    captured = capsys.readouterr()
    assert "first 5 of the sample's 67 questions" in captured.err
    assert "random" not in captured.out and "bias --experiment" not in captured.out  # no base and cf run
    assert main(["list", "--json", "--db", str(db)]) == 0
    [experiment] = json.loads(capsys.readouterr().out)
    assert (experiment["n_done"], experiment["n_total"]) == (5, 5)
