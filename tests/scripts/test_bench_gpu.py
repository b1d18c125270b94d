"""scripts/bench_gpu.py cannot rot between GPU sessions: its shapes are the published models'
(parameter counts to the unit, on the meta device), and its dry run goes through every stage on
the CPU (tiny shapes, the same code: build, load, sweep, log-prob variants, table)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import load_script

ROOT = Path(__file__).resolve().parents[2]
# The published checkpoints' parameter counts (their model cards / safetensors index).
PUBLISHED = {"mistral": 7_248_023_552, "llama3": 8_030_261_248, "openchat": 8_030_261_248}


@pytest.mark.parametrize("arch", sorted(PUBLISHED))
def test_the_built_shape_has_the_published_parameter_count(arch, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    bench = load_script("bench_gpu")
    config = bench.write_tokenizer_and_config(bench.ARCHITECTURES[arch], tmp_path / arch, dry_run=False)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED[arch]
    assert config.head_dim == 128 and config.num_key_value_heads == 8
    # 32 layers x (4 attention + 3 MLP matrices): what the floor counts for a prompt token.
    assert bench.matmul_parameters(model) == 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14_336)


def test_the_table_names_a_failed_stage_and_keeps_the_rest():
    bench = load_script("bench_gpu")
    results = [
        {"stage": "bench", "arch": "mistral", "model_id": "m", "precision": "bf16", "load_seconds": 1.0,
         "sweep": [{"batch": 4, "answers_per_s": 2.0, "output_tokens_per_s": 128.0, "peak_bytes": 2**31,
                    "ratio_to_floor": 3.5}], "logprob_cost": [], "notes": ["batch 16: out of GPU memory"]},
        {"stage": "bench", "arch": "llama3", "precision": "nf4", "failed": "exit 1 (its error is above)"},
    ]
    text = bench.table(results, new_tokens=64)
    assert "| mistral (m) | bf16 | 1.0 | 4 | 2.00 | 128 | 2.0 | 3.50 |" in text
    assert "- mistral bf16: batch 16: out of GPU memory" in text
    assert "stage bench llama3 failed: exit 1" in text


def test_the_scores_variant_drops_the_kv_cache_it_is_handed():
    import torch
    from transformers.generation.utils import GenerateDecoderOnlyOutput

    bench = load_script("bench_gpu")
    result = GenerateDecoderOnlyOutput(sequences=torch.zeros(1), past_key_values=[torch.zeros(4)])
    bench.drop_kv_cache(result)
    assert result["past_key_values"] is None and result.past_key_values is None
    assert all(value is None for key, value in result.items() if key == "past_key_values")
    bench.drop_kv_cache(torch.zeros(2))  # plain generate hands back a tensor: nothing to drop


def test_an_unknown_run_is_one_line_and_a_failure(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_gpu.py"), "--dry-run", "--runs",
                           "mistral:fp8", "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        "--runs: unknown 'mistral:fp8' (models: mistral, llama3, openchat; precisions: bf16, nf4)"]


@pytest.mark.slow
def test_the_dry_run_goes_through_every_stage(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_gpu.py"), "--dry-run",
                           "--runs", "mistral:bf16,llama3:nf4", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.loads((tmp_path / "bench_gpu.json").read_text())
    assert [(r["stage"], r["arch"]) for r in results] == [
        ("build", "mistral"), ("bench", "mistral"), ("build", "llama3"), ("bench", "llama3")]
    for r in (r for r in results if r["stage"] == "bench"):
        assert "failed" not in r
        assert [row["batch"] for row in r["sweep"]] == [1, 2]
        # Exactly --new-tokens per answer, each with its log-prob: end of sequence was ignored.
        assert all(row["logprobs_recorded"] and row["answers"] == row["batch"] for row in r["sweep"])
        assert [c["variant"] for c in r["logprob_cost"]] == ["plain", "ours", "scores"]
        assert r["load_seconds"] > 0 and r["matmul_flops"] > 0 and r["prompt_tokens_mean"] >= 600
    assert results[3]["precision"] == "nf4"
    table = (tmp_path / "bench_gpu.md").read_text()
    assert table.count("| mistral (mistralai/Mistral-7B-Instruct-v0.3) | bf16 |") == 2
    assert "| llama3 | nf4 | 2 | scores |" in table
