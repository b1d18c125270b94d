"""Generation at 7B scale on a GPU, with random weights built from the real configs (no download).

Usage:
    python scripts/bench_gpu.py --out DIR [--runs mistral:bf16,mistral:nf4,llama3:nf4]
                                [--new-tokens 64] [--batches 1 16 64 128] [--deadline 420]
    python scripts/bench_gpu.py --dry-run --out DIR     # tiny configs on the CPU (the suite runs this)

Each model is built from its published shape with random weights, directly on the GPU, saved
with the tiny model's tokenizer (engine.generation.tiny_model), and loaded by `engine.generation.models.load_model`
as `run` loads a checkpoint; batches planned by `plan_batches` go through `LocalBackend`, the
code path of `run`, recording raw log-probs. Prompts: the sample's items as Prompt 2 (gender
labels), documents lengthened to `--prompt-tokens`; greedy; exactly `--new-tokens` per answer.
Output: bench_gpu.json, bench_gpu.md (the table for docs/figures.md) in --out; docs/gpu.md explains.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


@dataclasses.dataclass(frozen=True)
class Architecture:
    """A published model's shape (its config.json), and which tiny model lends the tokenizer."""

    name: str
    model_id: str
    tiny_arch: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int
    rope_theta: float


_LLAMA3 = dict(vocab_size=128_256, hidden_size=4096, intermediate_size=14_336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192, rope_theta=500_000.0)
ARCHITECTURES = {
    "mistral": Architecture("mistral", "mistralai/Mistral-7B-Instruct-v0.3", "mistral", vocab_size=32_768,
                            hidden_size=4096, intermediate_size=14_336, num_hidden_layers=32, num_attention_heads=32,
                            num_key_value_heads=8, max_position_embeddings=32_768, rope_theta=1_000_000.0),
    "llama3": Architecture("llama3", "meta-llama/Meta-Llama-3-8B-Instruct", "llama", **_LLAMA3),
    # OpenChat-3.6 is a Llama-3-8B fine-tune: the same shape, its own chat template.
    "openchat": Architecture("openchat", "openchat/openchat-3.6-8b-20240522", "openchat", **_LLAMA3),
}
# --dry-run: the same code on shapes a CPU runs in seconds (the real vocabularies stay out too).
_DRY = dict(vocab_size=2048, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2)
PRECISIONS = {"bf16": "none", "nf4": "4bit"}
DEFAULT_RUNS = "mistral:bf16,mistral:nf4,llama3:nf4"
DEFAULT_BATCHES = (1, 16, 64, 128)
# NQ-open's test set (3,610 questions) x the paper's 7 runs per model (DESIGN.md): the grid estimate.
PAPER_GRID_ANSWERS = 3610 * 7


def shape(arch: Architecture, dry_run: bool) -> dict:
    fields = {f.name: getattr(arch, f.name) for f in dataclasses.fields(arch)
              if f.name not in ("name", "model_id", "tiny_arch")}
    fields = {**fields, **_DRY} if dry_run else fields
    # Written out: a config read back from the tiny model keeps its own head_dim otherwise.
    return {**fields, "head_dim": fields["hidden_size"] // fields["num_attention_heads"]}


# -- the checkpoint -----------------------------------------------------------------------------

def write_tokenizer_and_config(arch: Architecture, path: Path, dry_run: bool):
    """The tiny model of `arch` written to `path` (tokenizer, generation config), and its config
    given `arch`'s shape (returned; the caller builds the weights)."""
    from transformers import AutoConfig

    from engine.generation.tiny_model import write_tiny_model

    dims = shape(arch, dry_run)
    write_tiny_model(path, arch=arch.tiny_arch, vocab_size=dims["vocab_size"])
    config = AutoConfig.from_pretrained(path)
    for key, value in dims.items():
        setattr(config, key, value)
    if isinstance(getattr(config, "rope_parameters", None), dict):
        config.rope_parameters["rope_theta"] = dims["rope_theta"]
    return config


def build_checkpoint(arch: Architecture, path: Path, device: str, dry_run: bool) -> dict:
    """Save a random-weight model of `arch`'s shape, with the tiny model's tokenizer, to `path`."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    t0 = time.perf_counter()
    config = write_tokenizer_and_config(arch, path, dry_run)
    generation_config = GenerationConfig.from_pretrained(path)
    for old in path.glob("model*.safetensors*"):
        old.unlink()
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        with torch.device(device):  # initialised where it is built: 8B parameters on a CPU take minutes
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    except Exception as err:  # noqa: BLE001 - a transformers that refuses the device context
        print(f"  building on {device} failed ({type(err).__name__}: {err}); building on the CPU", flush=True)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype).to(device)
    model.generation_config = generation_config
    n_params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(path)
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return {"stage": "build", "arch": arch.name, "parameters": n_params, "seconds": time.perf_counter() - t0}


# -- prompts ------------------------------------------------------------------------------------

def paper_shaped_prompts(tokenizer, n: int, target_tokens: int) -> list[str]:
    """n Prompt-2 texts (gender labels) from the sample's items, each document lengthened with
    words of the sample's other documents until the chat-encoded prompt has >= target_tokens."""
    from engine.datasets.data import load_dataset
    from engine.generation.models import chat_input_ids_for
    from engine.paths import SAMPLE_DATASET
    from engine.prompting.prompts import PromptConfig, build_prompt, metadata_type
    from engine.types import Item

    items = load_dataset(SAMPLE_DATASET).items
    filler = " ".join(d.text for item in items for d in item.documents).split()
    config = PromptConfig(mode="base", metadata=metadata_type("gender"))

    def lengthened(item: Item, k: int) -> str:
        docs = tuple(
            dataclasses.replace(d, text=d.text + " " + " ".join(filler[(j * 97 + s) % len(filler)] for s in range(k)))
            for j, d in enumerate(item.documents)
        )
        return build_prompt(dataclasses.replace(item, documents=docs), config).text

    prompts: list[str] = []
    for item in items:
        low, high = 0, 16
        while len(chat_input_ids_for(tokenizer, lengthened(item, high))) < target_tokens:
            low, high = high, high * 2
        while low < high:  # the fewest words per document that reach the target
            mid = (low + high) // 2
            if len(chat_input_ids_for(tokenizer, lengthened(item, mid))) >= target_tokens:
                high = mid
            else:
                low = mid + 1
        prompts.append(lengthened(item, high))
        if len(prompts) >= n:
            break
    return [prompts[i % len(prompts)] for i in range(n)]


# -- one (model, precision) ---------------------------------------------------------------------

def matmul_rate(device: str) -> float:
    """bf16 FLOP/s of a square matrix product (8192 on a GPU, 512 fp32 on a CPU), mean of 10."""
    import torch

    cuda = device.startswith("cuda")
    size, dtype = (8192, torch.bfloat16) if cuda else (512, torch.float32)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(10):
        a @ b
    _sync(device)
    return 10 * 2 * size**3 / (time.perf_counter() - t0)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _memory(device: str) -> tuple[int, int]:
    """(allocated, peak allocated since the last reset) in bytes; zeros on a CPU."""
    import torch

    if not device.startswith("cuda"):
        return 0, 0
    return torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()


def _reset_peak(device: str) -> None:
    """Peak counting from now. The allocator keeps its cache: emptying it before a timed call
    would time cudaMalloc, which `run` pays once, not per batch."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def _free(device: str) -> None:
    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def drop_kv_cache(result: Any) -> None:
    """What a call hands back and keeps is the answers, and full-vocabulary scores for the
    "scores" variant. return_dict_in_generate also hands back the KV cache (17 GB at batch 64),
    which no caller of `run` would keep: dropped before counting. Through the item, not the
    attribute: ModelOutput's __setattr__ skips None, so the dict kept the cache (the first GPU
    run of this comparison counted it)."""
    if isinstance(result, dict) and result.get("past_key_values") is not None:
        result["past_key_values"] = None


def _is_oom(err: BaseException) -> bool:
    import torch

    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower()


def matmul_parameters(model) -> int:
    """Parameters a prompt token multiplies through: all but the input embedding and the output
    layer (`generate` applies the output layer to the last position only). 4-bit layers store two
    weights per byte, so their count comes from the layer's shape, not from numel()."""
    total = 0
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if weight is None or not hasattr(module, "in_features") or name.endswith("lm_head"):
            continue
        total += int(module.in_features) * int(module.out_features)
    return total


def bench_one(arch: Architecture, precision: str, path: Path, device: str, args) -> dict:
    """Load, sweep batch sizes, and compare the log-prob variants; one JSON-ready dict."""
    import torch

    from engine.generation.generate import GenerationConfig, generate_batch, hf_generation_config, left_pad
    from engine.generation.models import chat_input_ids, load_model
    from engine.running.backends import LocalBackend, plan_batches

    deadline = args.deadline_at
    out: dict = {"stage": "bench", "arch": arch.name, "model_id": arch.model_id, "precision": precision,
                 "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu",
                 "new_tokens": args.new_tokens, "sweep": [], "logprob_cost": [], "notes": []}
    out["matmul_flops"] = rate = matmul_rate(device)
    _reset_peak(device)
    t0 = time.perf_counter()
    dtype = "bfloat16" if device.startswith("cuda") else "float32"
    loaded = load_model(str(path), quantize=PRECISIONS[precision], device=device, dtype=dtype)
    _sync(device)
    out["load_seconds"] = time.perf_counter() - t0
    out["weights_bytes"] = _memory(device)[0]
    out["matmul_parameters"] = n_params = matmul_parameters(loaded.model)
    # No stop token: every answer runs the full --new-tokens (timing needs equal work).
    loaded = dataclasses.replace(loaded, stop_token_ids=())
    request = argparse.Namespace(quantize=loaded.quantization, dtype=loaded.dtype, device=device)
    largest = max(args.batches)
    prompts = paper_shaped_prompts(loaded.tokenizer, largest, args.prompt_tokens)
    encoded = [chat_input_ids(loaded, p) for p in prompts]
    out["prompt_tokens_mean"] = sum(len(e) for e in encoded) / len(encoded)
    generate_batch(loaded, encoded[:1], GenerationConfig(max_new_tokens=4, batch_size=1))  # kernels, first calls

    last = None  # (batch, seconds) of the last size timed
    for batch in args.batches:
        left = deadline - time.time()
        if last is not None:
            # Decoding costs about the same per step at any batch; the prompt work grows with the
            # batch: assume the added prompts run at no less than a tenth of the floor's rate.
            extra_floor = (batch - last[0]) * out["prompt_tokens_mean"] * 2 * n_params / rate
            needed = 2 * (last[1] + 10 * extra_floor)
            if needed > left:
                out["notes"].append(f"batch {batch} not tried: ~{needed:.0f} s needed, {left:.0f} s left")
                break
        ids = [f"q{i}" for i in range(batch)]
        planned = plan_batches(loaded.tokenizer, [("bench", ids, prompts[:batch])], batch)
        try:
            # Untimed, the same call: the first call at a shape pays for the allocator's growth
            # and kernel selection (measured: 2-3x the steady time). A 4-token warm-up was not
            # enough: the KV cache still grew in the timed call, which then ran 1.2-1.6x the
            # steady time at batch 64 (H200, 2026-11-27; the log-prob variants' plain call).
            backend = LocalBackend(loaded, GenerationConfig(max_new_tokens=args.new_tokens, batch_size=batch), request)
            list(backend.generate(planned))
            _sync(device)
            _reset_peak(device)
            t0 = time.perf_counter()
            results = list(backend.generate(planned))
            _sync(device)
        except Exception as err:  # noqa: BLE001 - out of memory ends the sweep; anything else is reported
            if not _is_oom(err):
                raise
            del err
            _free(device)
            out["notes"].append(f"batch {batch}: out of GPU memory")
            break
        seconds = time.perf_counter() - t0
        last = (batch, seconds)
        answers = [o for r in results for o in r.outputs]
        new_tokens = sum(len(o.tokens) for o in answers)
        prompt_tokens = sum(len(e) for e in encoded[:batch])
        floor = prompt_tokens * 2 * n_params / rate
        out["sweep"].append({
            "batch": batch, "answers": len(answers), "seconds": seconds, "answers_per_s": len(answers) / seconds,
            "output_tokens_per_s": new_tokens / seconds, "prompt_tokens": prompt_tokens,
            "peak_bytes": _memory(device)[1], "floor_seconds": floor, "ratio_to_floor": seconds / floor,
            "logprobs_recorded": all(len(o.tokens) == args.new_tokens for o in answers),
        })
        print(f"  {arch.name} {precision} batch {batch}: {seconds:.2f} s, {seconds / floor:.2f}x the floor", flush=True)

    fitted = [row["batch"] for row in out["sweep"]]
    variant_batch = min(args.variant_batch, max(fitted)) if fitted else None
    if variant_batch is None or deadline - time.time() < 3 * min(r["seconds"] for r in out["sweep"]) + 5:
        out["notes"].append("log-prob variants not run: no time left")
        return out
    config = GenerationConfig(max_new_tokens=args.new_tokens, batch_size=variant_batch)
    hf_config = hf_generation_config(loaded, config)
    scores_config = copy.deepcopy(hf_config)
    scores_config.output_scores = scores_config.return_dict_in_generate = True
    input_ids, mask = left_pad(encoded[:variant_batch], loaded.pad_token_id, device)
    with torch.inference_mode():  # untimed: the sweep may not have run this shape, or ran out of memory after it
        loaded.model.generate(input_ids=input_ids, attention_mask=mask, generation_config=hf_config)
    _sync(device)
    for variant in ("plain", "ours", "scores"):
        _reset_peak(device)
        before = _memory(device)[0]
        t0 = time.perf_counter()
        result: Any
        try:
            if variant == "ours":
                result = generate_batch(loaded, encoded[:variant_batch], config)
            else:
                with torch.inference_mode():
                    result = loaded.model.generate(input_ids=input_ids, attention_mask=mask,
                                                   generation_config=scores_config if variant == "scores" else hf_config)
            _sync(device)
            seconds = time.perf_counter() - t0
            drop_kv_cache(result)
            gc.collect()  # not empty_cache: the next variant would time cudaMalloc (the others did not)
            held = _memory(device)[0] - before
            del result
        except Exception as err:  # noqa: BLE001
            if not _is_oom(err):
                raise
            out["notes"].append(f"log-prob variant {variant} at batch {variant_batch}: out of GPU memory")
            continue
        out["logprob_cost"].append({"variant": variant, "batch": variant_batch, "seconds": seconds,
                                    "peak_above_weights_bytes": _memory(device)[1] - before, "held_after_bytes": held})
    return out


# -- the parent: stages in children, results together ------------------------------------------

def _child(stage: list[str], args, deadline_at: float) -> dict:
    """Run one stage in a fresh process (its own CUDA context and allocator) until deadline_at;
    its progress lines pass through, its last line is its JSON result."""
    cmd = [sys.executable, __file__, "--_stage", *stage, "--deadline-at", str(deadline_at),
           "--new-tokens", str(args.new_tokens), "--prompt-tokens", str(args.prompt_tokens),
           "--batches", *map(str, args.batches), "--variant-batch", str(args.variant_batch)]
    if args.dry_run:
        cmd.append("--dry-run")
    try:
        # A child past its deadline finishes what it is timing: 60 s of grace before it is killed.
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=max(deadline_at - time.time(), 1) + 60,
                              check=False)
    except subprocess.TimeoutExpired as err:
        return {"stage": stage[0], "failed": f"timed out after {err.timeout:.0f} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    sys.stdout.write("".join(line + "\n" for line in proc.stdout.splitlines() if not line.startswith("{")))
    if proc.returncode or not lines:
        return {"stage": stage[0], "failed": f"exit {proc.returncode} (its error is above)"}
    return json.loads(lines[-1])


def _gb(n: float) -> str:
    return f"{n / 2**30:.1f}" if n else "n/a (CPU)"


def table(results: list[dict], new_tokens: int) -> str:
    """The markdown table for docs/figures.md."""
    lines = ["| model | precision | load s | batch | answers/s | output tok/s | peak GiB | time ÷ prompt floor |",
             "|---|---|---|---|---|---|---|---|"]
    notes, costs = [], []
    for r in results:
        if r.get("stage") != "bench" or "failed" in r:
            continue
        name = f"{r['arch']} ({r['model_id']})"
        for row in r["sweep"]:
            lines.append(f"| {name} | {r['precision']} | {r['load_seconds']:.1f} | {row['batch']} | "
                         f"{row['answers_per_s']:.2f} | {row['output_tokens_per_s']:.0f} | "
                         f"{_gb(row['peak_bytes'])} | {row['ratio_to_floor']:.2f} |")
        notes += [f"- {r['arch']} {r['precision']}: {n}" for n in r["notes"]]
        plain = next((c for c in r["logprob_cost"] if c["variant"] == "plain"), None)
        for c in r["logprob_cost"]:
            if plain and c["variant"] != "plain":
                costs.append(f"| {r['arch']} | {r['precision']} | {c['batch']} | {c['variant']} | "
                             f"{c['seconds'] / plain['seconds']:.2f} | "
                             f"{(c['peak_above_weights_bytes'] - plain['peak_above_weights_bytes']) / 2**20:+.0f} | "
                             f"{(c.get('held_after_bytes', 0) - plain.get('held_after_bytes', 0)) / 2**20:+.0f} |")
        best = max(r["sweep"], key=lambda row: row["answers_per_s"], default=None)
        if best:
            hours = PAPER_GRID_ANSWERS / best["answers_per_s"] / 3600
            notes.append(f"- {r['arch']} {r['precision']}: the paper's grid for one model ({PAPER_GRID_ANSWERS:,} "
                         f"answers: NQ-open test 3,610 items x 7 runs) at {best['answers_per_s']:.1f} answers/s "
                         f"(batch {best['batch']}): {hours:.2f} h")
    for r in results:
        if "failed" in r:
            notes.append(f"- stage {r['stage']} {r.get('arch', '')} failed: {r['failed']}")
    out = "\n".join(lines)
    if costs:
        out += ("\n\nLog-probs, against HF `generate` without them (same batch, "
                f"{new_tokens} new tokens):\n\n| model | precision | batch | variant | time ÷ plain | "
                "peak memory vs plain, MiB | held after the call vs plain, MiB |\n|---|---|---|---|---|---|---|\n" + "\n".join(costs))
    return out + ("\n\n" + "\n".join(notes) if notes else "") + "\n"


def run_all(args, save) -> list[dict]:
    """Every requested (model, precision) in order, each bench stage given an equal share of the
    time left; `save(results)` after each stage, so a run cut short still leaves its results."""
    device = "cuda:0" if not args.dry_run else "cpu"
    runs = [tuple(r.split(":")) for r in args.runs.split(",")]
    for arch, precision in runs:
        if arch not in ARCHITECTURES or precision not in PRECISIONS:
            raise SystemExit(f"--runs: unknown '{arch}:{precision}' (models: {', '.join(ARCHITECTURES)}; "
                             f"precisions: {', '.join(PRECISIONS)})")
    results: list[dict] = []
    workdir = Path(tempfile.mkdtemp(prefix="bench_gpu_", dir=args.workdir))
    try:
        built: set[str] = set()
        for n, (arch, precision) in enumerate(runs):
            if args.deadline_at - time.time() < 20:
                results.append({"stage": "bench", "arch": arch, "precision": precision,
                                "failed": "not run: the deadline passed"})
                continue
            path = workdir / arch
            if arch not in built:
                for other in built:  # one checkpoint on disk at a time (15-16 GB each)
                    shutil.rmtree(workdir / other, ignore_errors=True)
                built = {arch}
                results.append({**_child(["build", arch, str(path), device], args, args.deadline_at), "arch": arch})
                save(results)
                if "failed" in results[-1]:
                    continue
            share = (args.deadline_at - time.time()) / (len(runs) - n)
            result = _child(["bench", arch, str(path), device, precision], args, time.time() + share)
            results.append({"arch": arch, "precision": precision, **result})
            save(results)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for bench_gpu.json and .md")
    parser.add_argument("--runs", default=DEFAULT_RUNS, help=f"model:precision list (default {DEFAULT_RUNS})")
    parser.add_argument("--new-tokens", type=int, default=64, help="new tokens per answer (default 64)")
    parser.add_argument("--prompt-tokens", type=int, default=2000, help="prompt length to pad to (default 2000)")
    parser.add_argument("--batches", type=int, nargs="+", default=DEFAULT_BATCHES, help="batch sizes to try, rising")
    parser.add_argument("--variant-batch", type=int, default=64, help="batch size of the log-prob comparison")
    parser.add_argument("--deadline", type=float, default=420, help="seconds for everything (default 420)")
    parser.add_argument("--workdir", default=None, help="where checkpoints are written (default: /dev/shm if large enough)")
    parser.add_argument("--dry-run", action="store_true", help="tiny configs on the CPU, for the test suite")
    parser.add_argument("--deadline-at", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--_stage", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.deadline_at is None:
        args.deadline_at = time.time() + args.deadline
    if args._stage:  # a child: one stage, one JSON line last
        kind, arch, path, device, *precision = args._stage
        if kind == "build":
            result = build_checkpoint(ARCHITECTURES[arch], Path(path), device, args.dry_run)
        else:
            result = bench_one(ARCHITECTURES[arch], precision[0], Path(path), device, args)
        print(json.dumps(result))
        return 0
    if args.workdir is None and not args.dry_run and Path("/dev/shm").is_dir() \
            and shutil.disk_usage("/dev/shm").free > 40 * 2**30:
        args.workdir = "/dev/shm"  # 15 GB written and read back in seconds, not minutes
    if args.dry_run:
        args.batches, args.variant_batch, args.prompt_tokens = [1, 2], 2, min(args.prompt_tokens, 600)
        args.new_tokens = min(args.new_tokens, 8)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def save(results: list[dict]) -> None:
        (out / "bench_gpu.json").write_text(json.dumps(results, indent=1))
        (out / "bench_gpu.md").write_text(table(results, args.new_tokens))

    results = run_all(args, save)
    print(table(results, args.new_tokens))
    return 1 if any("failed" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
