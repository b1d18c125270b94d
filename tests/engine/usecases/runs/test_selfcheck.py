"""`selfcheck`: every check passes on the tiny models of the real architectures (4-bit on CPU
included), fails on a broken template or stop set and on faulty log-probs, and the command
writes nothing unless asked, with one-line user errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from engine.__main__ import main
from engine.datasets.data import load_dataset
from engine.generation.generate import GenerationConfig, generate
from engine.generation.models import chat_input_ids, load_model
from engine.generation.tiny_model import LLAMA3_CHAT_TEMPLATE, OPENCHAT36_CHAT_TEMPLATE, write_tiny_model
from engine.paths import SAMPLE_DATASET
from engine.types import Prompt
from engine.usecases.runs.selfcheck import (
    TOLERANCE_FP32,
    TOLERANCE_HALF,
    check_bos,
    check_stop_tokens,
    compare_logprobs,
    forward_logprobs,
    run_selfcheck,
    sample_prompts,
)

# Small enough to keep each check in seconds on a loaded 2-core machine, big enough to compare
# several tokens per answer and to time a real batch.
FAST = dict(n_answers=2, max_new_tokens=4, batch_size=2)
FAST_ARGS = ["--answers", "2", "--max-new-tokens", "4", "--batch-size", "2"]


@pytest.fixture(scope="module")
def items():
    return load_dataset(SAMPLE_DATASET).items


def statuses(report) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


@pytest.mark.parametrize(
    ("fixture", "family", "stops"),
    [
        ("tiny_llama_dir", "llama-3", ("<|end_of_text|>", "<|eot_id|>")),
        ("tiny_mistral_dir", "mistral", ("</s>",)),
        ("tiny_openchat_dir", "openchat-3.6", ("<|end_of_text|>", "<|eot_id|>")),
    ],
)
def test_every_check_passes_on_the_tiny_models(request, items, fixture, family, stops):
    loaded = load_model(str(request.getfixturevalue(fixture)), quantize="none", device="cpu")
    report = run_selfcheck(loaded, items, **FAST)
    assert report.passed, report.checks
    assert report.family == family
    assert set(stops) <= set(report.stop_tokens)
    got = statuses(report)
    assert list(got) == ["load", "bos", "stop tokens", "roles", "control text", "generate", "logprobs", "greedy"]
    # Random weights never stop, so `generate` may only warn; everything else must pass outright.
    assert all(s == "PASS" for name, s in got.items() if name != "generate")
    assert got["generate"] in ("PASS", "WARN")
    assert report.tolerance == TOLERANCE_FP32
    assert report.logprobs.n_values == 2 * 4 * (1 + 5)  # answers x tokens x (chosen + top 5)
    assert report.logprobs.max_abs <= TOLERANCE_FP32.per_token
    assert [a.mode for a in report.answers] == ["vanilla", "base"]
    assert report.timing.batch_size == 2 and report.timing.n_new_tokens > 0 and report.timing.tokens_per_s > 0


def test_mistral_gets_no_system_role(tiny_mistral_dir, items):
    loaded = load_model(str(tiny_mistral_dir), quantize="none", device="cpu")
    report = run_selfcheck(loaded, items, **dict(FAST, batch_size=0))
    roles = next(c for c in report.checks if c.name == "roles")
    assert roles.status == "PASS" and "no system role and gets none" in roles.detail
    assert report.timing is None  # --batch-size 0: no timing


def test_4bit_on_cpu_passes_through_the_cli_with_the_half_precision_tolerance(tiny_llama_dir, capsys, tmp_path):
    out_json = tmp_path / "report.json"
    code = main(["selfcheck", "--model", str(tiny_llama_dir), "--quantize", "4bit", "--device", "cpu",
                 *FAST_ARGS, "--json", str(out_json)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "quantization 4bit" in out
    assert "PASS  load" in out and "Linear4bit nf4" in out
    assert "PASS  logprobs" in out and "PASS  greedy" in out
    assert "tokens/s" in out and out.rstrip().splitlines()[-1].startswith(f"report written to {out_json}")
    report = json.loads(out_json.read_text())
    assert report["passed"] is True and report["quantization"] == "4bit"
    # bitsandbytes computes 4-bit layers in bf16 even on CPU: the float32 bound would not hold.
    assert report["tolerance"]["per_token"] == TOLERANCE_HALF.per_token
    assert report["logprobs"]["max_abs"] <= TOLERANCE_HALF.per_token
    assert {c["name"]: c["status"] for c in report["checks"]}["load"] == "PASS"


def _rewrite_template(folder: Path, template: str, extra_special: str | None = None) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    if extra_special:
        tokenizer.add_special_tokens({"additional_special_tokens": [extra_special]})
    tokenizer.chat_template = template
    tokenizer.save_pretrained(folder)


@pytest.fixture(scope="module")
def second_bos_dir(tmp_path_factory):
    """The tiny Llama with a template that writes BOS again before the assistant header."""
    folder = write_tiny_model(tmp_path_factory.mktemp("second-bos"), arch="llama")
    header = "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    assert header in LLAMA3_CHAT_TEMPLATE
    _rewrite_template(folder, LLAMA3_CHAT_TEMPLATE.replace(header, "{{ bos_token }}" + header))
    return folder


def test_a_second_bos_fails_the_cli_with_exit_1(second_bos_dir, capsys):
    code = main(["selfcheck", "--model", str(second_bos_dir), "--device", "cpu", *FAST_ARGS])
    out = capsys.readouterr().out
    assert code == 1
    bos_line = next(line for line in out.splitlines() if line.strip().startswith(("PASS  bos", "FAIL  bos")))
    assert bos_line.strip().startswith("FAIL  bos") and "2 BOS token(s)" in bos_line
    assert out.rstrip().splitlines()[-1].startswith("FAIL: 1 of 8 checks failed: bos")


def test_an_end_of_turn_token_generation_does_not_stop_on_fails(tmp_path):
    # OpenChat 3.5 ends turns with <|end_of_turn|>, a token the loader's list does not know: a
    # model like it would run past its answer into the next turn.
    folder = write_tiny_model(tmp_path / "eot", arch="openchat", vocab_size=720)
    _rewrite_template(folder, OPENCHAT36_CHAT_TEMPLATE.replace("<|eot_id|>", "<|end_of_turn|>"), "<|end_of_turn|>")
    loaded = load_model(str(folder), quantize="none", device="cpu")
    check = check_stop_tokens(loaded, "openchat-3.6")
    assert check.status == "FAIL"
    assert "'<|end_of_turn|>'" in check.detail and "is not among the stop ids" in check.detail


def test_a_missing_family_stop_token_fails(tiny_llama):
    # Llama 3 ends every turn with <|eot_id|>; a stop set with only eos would never stop an answer.
    eos_only = dataclasses.replace(tiny_llama, stop_token_ids=(tiny_llama.tokenizer.eos_token_id,))
    check = check_stop_tokens(eos_only, "llama-3")
    assert check.status == "FAIL" and "'<|eot_id|>'" in check.detail
    assert check_stop_tokens(tiny_llama, "llama-3").status == "PASS"


def test_bos_check_counts_the_prompts_it_is_given(tiny_llama, items):
    prompts = [p for p, _ in sample_prompts(items, 3)]
    check = check_bos(tiny_llama, prompts)
    assert check.status == "PASS" and "each of the 3 prompts" in check.detail


@pytest.fixture(scope="module")
def greedy_answers(tiny_llama):
    # Short prompts: these tests run several forward passes, and the checks never look at length.
    prompts = [Prompt(f"q{i}", text, (), ()) for i, text in enumerate(
        ["Document [1](The Eiffel Tower was completed in 1889.) Question: when?", "Who won the Nobel Prize in 1903?"])]
    return prompts, generate(tiny_llama, [p.text for p in prompts], GenerationConfig(max_new_tokens=6, batch_size=2))


def _with_logprobs(output, values):
    tokens = tuple(dataclasses.replace(t, logprob=v) for t, v in zip(output.tokens, values, strict=True))
    return dataclasses.replace(output, tokens=tokens)


def _tempered(loaded, prompt, output, temperature: float) -> list[float]:
    ids = [t.token_id for t in output.tokens]
    raw = forward_logprobs(loaded, chat_input_ids(loaded, prompt.text), ids)
    tempered = torch.log_softmax(raw / temperature, dim=-1)  # log_softmax(logits / T): the shift cancels
    return [float(tempered[i, t]) for i, t in enumerate(ids)]


@pytest.mark.parametrize("tolerance", [TOLERANCE_FP32, TOLERANCE_HALF], ids=["fp32", "half"])
def test_the_logprob_check_catches_the_faults_it_exists_for(tiny_llama, greedy_answers, tolerance):
    prompts, outputs = greedy_answers
    ok, greedy, _ = compare_logprobs(tiny_llama, prompts, outputs, tolerance)
    assert (ok.status, greedy.status) == ("PASS", "PASS")
    values = [[t.logprob for t in o.tokens] for o in outputs]
    faults = {
        # each token given the next step's value (the recorder one step off)
        "off by one": [_with_logprobs(o, v[1:] + v[:1]) for o, v in zip(outputs, values, strict=True)],
        # the rows' values swapped (the length sort not undone)
        "other row": [_with_logprobs(o, v) for o, v in zip(outputs, reversed(values), strict=True)],
        # the values after temperature 0.6 instead of the raw ones
        "tempered": [_with_logprobs(o, _tempered(tiny_llama, p, o, 0.6))
                     for p, o in zip(prompts, outputs, strict=True)],
    }
    for name, faulty in faults.items():
        check, _, diff = compare_logprobs(tiny_llama, prompts, faulty, tolerance)
        assert check.status == "FAIL", (name, diff)
        assert "worst: item" in check.detail


@pytest.mark.parametrize("tolerance", [TOLERANCE_FP32, TOLERANCE_HALF], ids=["fp32", "half"])
def test_the_greedy_check_catches_sampling(tiny_llama, greedy_answers, tolerance):
    prompts, _ = greedy_answers
    sampled = generate(tiny_llama, [p.text for p in prompts],
                       GenerationConfig(max_new_tokens=6, batch_size=2, do_sample=True, temperature=2.0, seed=1))
    logprobs, greedy, _ = compare_logprobs(tiny_llama, prompts, sampled, tolerance)
    assert logprobs.status == "PASS"  # raw log-probs are recorded right whatever was sampled
    assert greedy.status == "FAIL" and "not the forward pass's best" in greedy.detail


def test_smoke_writes_nothing_but_its_cached_model(tmp_path, monkeypatch, capsys):
    cache, work = tmp_path / "cache", tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("PATTRIEVAL_CACHE", str(cache))
    monkeypatch.setenv("PATTRIEVAL_DB", str(tmp_path / "never.duckdb"))
    monkeypatch.chdir(work)
    code = main(["selfcheck", "--model", "smoke", *FAST_ARGS])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.startswith("selfcheck smoke (tiny random Llama)  family llama-3  quantization none")
    assert list(work.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "work"]  # no store either


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "/no/such/model-folder"], "unknown model '/no/such/model-folder'"),
        (["--answers", "0"], "--answers must be at least 1"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
        (["--batch-size", "-1"], "--batch-size must be 0"),
        (["--json", "/no/such/folder/report.json"], "the folder /no/such/folder does not exist"),
        (["--device", "cuda:7"], "device 'cuda:7' requested but"),
        (["--dataset", "/no/such/data.jsonl"], "/no/such/data.jsonl: no such file or folder"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("PATTRIEVAL_CACHE", str(tmp_path / "cache"))  # where `smoke` is written
    monkeypatch.chdir(work)
    code = main(["selfcheck", "--model", "smoke", *argv] if "--model" not in argv else ["selfcheck", *argv])
    captured = capsys.readouterr()
    assert code == 2
    lines = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], captured.err
    assert "Traceback" not in captured.err
    assert list(work.iterdir()) == []
