"""Benchmark batched generation and the memory cost of recording log-probs (CPU, tiny models).

Usage: python scripts/bench_generation.py [--quick]

(a) Throughput. 32 user prompts of varied length, 64 new tokens each, greedy, with the tiny
    Llama (~700-token vocab): `engine.generation.generate.generate` with batch_size 8 and 16 against
    batch_size 1 (one prompt at a time). Both produce identical tokens; we report prompts/s,
    kept tokens/s and the speed-up. Timed after one warm-up call, best of 2.

(b) Peak memory. A tiny Llama with a 128,256-token vocabulary (Llama 3's size), batch 16,
    256 new tokens. The stop-token list is emptied so every row runs the full 256 steps.
    Variants:
      plain        model.generate, no log-probs (the floor)
      ours         engine.generation.generate.generate: raw log-prob of each chosen token
      ours top-5   the same plus the top-5 alternatives per step
      scores       model.generate(output_scores=True, return_dict_in_generate=True), what a
                   naive implementation keeps: batch x vocab floats for every step
    Each variant runs in a fresh subprocess, so no allocator state or cached tensor leaks from
    one to the next. Inside it, after the model is loaded and one short warm-up generation has
    run, the kernel's peak-RSS counter (VmHWM) is reset by writing "5" to /proc/self/clear_refs;
    after the measured call the script reads VmHWM and reports (peak - RSS at reset): the extra
    resident memory the call needed at its worst moment, which is what decides whether a run
    fits. Where clear_refs is not writable it falls back to sampling RSS every millisecond from a
    thread (psutil), and says so. Tracemalloc would miss torch's allocations, hence RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

WORDS = (
    "the Eiffel Tower was completed in 1889 for the World's Fair in Paris and Mount Everest is 8849 metres "
    "high while the river Nile flows north through eleven countries into the Mediterranean Sea"
).split()
MEMORY_VARIANTS = ("plain", "ours", "ours top-5", "scores")


def varied_prompts(n: int) -> list[str]:
    """n prompts from 3 to ~90 words, in a shuffled length order."""
    lengths = [3 + (i * 37) % 90 for i in range(n)]
    return [f"Question {i}: " + " ".join(WORDS[(i + j) % len(WORDS)] for j in range(k)) + " [1]?" for i, k in enumerate(lengths)]


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def hwm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


class PeakRss:
    """Peak RSS increase over a block: VmHWM reset when possible, else 1 ms psutil sampling."""

    def __enter__(self):
        self.method = "VmHWM reset"
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            self.method = "psutil 1ms sampling"
        self.start = rss_bytes()
        self.peak = self.start
        if self.method != "VmHWM reset":
            import psutil

            proc, self._stop = psutil.Process(), threading.Event()

            def sample():
                while not self._stop.is_set():
                    self.peak = max(self.peak, proc.memory_info().rss)
                    time.sleep(0.001)

            self._thread = threading.Thread(target=sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.method == "VmHWM reset":
            self.peak = hwm_bytes()
        else:
            self._stop.set()
            self._thread.join()
        self.increase_mb = (self.peak - self.start) / 2**20


def measure_memory_variant(model_dir: str, variant: str, batch: int, new_tokens: int) -> dict:
    """Run one variant in this (fresh) process and return its peak RSS increase."""
    import dataclasses

    import torch

    from engine.generation.generate import GenerationConfig, generate, hf_generation_config, left_pad
    from engine.generation.models import chat_input_ids, load_model

    torch.set_num_threads(2)
    loaded = dataclasses.replace(load_model(model_dir, quantize="none", device="cpu"), stop_token_ids=())
    prompts = varied_prompts(batch)
    config = GenerationConfig(max_new_tokens=new_tokens, batch_size=batch, top_n_logprobs=5 if variant == "ours top-5" else 0)
    input_ids, mask = left_pad([chat_input_ids(loaded, p) for p in prompts], loaded.pad_token_id, "cpu")

    def run(cfg: GenerationConfig):
        if variant.startswith("ours"):
            outs = generate(loaded, prompts, cfg)
            return sum(len(o.tokens) for o in outs)
        extra = dict(output_scores=True, return_dict_in_generate=True) if variant == "scores" else {}
        with torch.inference_mode():
            out = loaded.model.generate(
                input_ids=input_ids, attention_mask=mask, generation_config=hf_generation_config(loaded, cfg), **extra
            )
        sequences = out.sequences if variant == "scores" else out
        return int(sequences.shape[1] - input_ids.shape[1]) * batch

    run(dataclasses.replace(config, max_new_tokens=2))  # warm-up: lazy inits, thread pools
    t0 = time.perf_counter()
    with PeakRss() as peak:
        n_tokens = run(config)
    return {"variant": variant, "peak_mb": peak.increase_mb, "tokens": n_tokens, "seconds": time.perf_counter() - t0, "method": peak.method}


def bench_throughput(model_dir: str, n_prompts: int, new_tokens: int, batch_sizes: tuple[int, ...]) -> list[dict]:
    import torch

    from engine.generation.generate import GenerationConfig, generate
    from engine.generation.models import load_model

    torch.set_num_threads(2)
    loaded = load_model(model_dir, quantize="none", device="cpu")
    prompts = varied_prompts(n_prompts)
    rows, reference = [], None
    for batch_size in (1, *batch_sizes):
        config = GenerationConfig(max_new_tokens=new_tokens, batch_size=batch_size)
        generate(loaded, prompts[:batch_size], config)  # warm-up
        best = float("inf")
        for _ in range(2):
            t0 = time.perf_counter()
            outs = generate(loaded, prompts, config)
            best = min(best, time.perf_counter() - t0)
        ids = [[t.token_id for t in o.tokens] for o in outs]
        if reference is None:
            reference = ids
        n_tokens = sum(len(i) for i in ids)
        rows.append(
            {"batch_size": batch_size, "seconds": best, "prompts_per_s": n_prompts / best, "tokens_per_s": n_tokens / best,
             "tokens": n_tokens, "same_tokens_as_batch_1": ids == reference}
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a fast check")
    parser.add_argument("--_variant", help=argparse.SUPPRESS)
    parser.add_argument("--_model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    batch, new_tokens = (4, 32) if args.quick else (16, 256)

    if args._variant:  # child process: one memory variant
        print(json.dumps(measure_memory_variant(args._model, args._variant, batch, new_tokens)))
        return 0

    from engine.generation.tiny_model import write_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        small = str(write_tiny_model(Path(tmp) / "small", arch="llama"))
        big = str(write_tiny_model(Path(tmp) / "vocab128k", arch="llama", vocab_size=128_256))

        n_prompts, tput_tokens = (8, 16) if args.quick else (32, 64)
        rows = bench_throughput(small, n_prompts, tput_tokens, (8, 16))
        print(f"\n(a) throughput: tiny Llama, {n_prompts} prompts of varied length x {tput_tokens} new tokens, greedy, CPU")
        print(f"{'batch':>5} {'seconds':>8} {'prompts/s':>10} {'tokens/s':>9} {'speed-up':>8}  same tokens as batch 1")
        for r in rows:
            print(
                f"{r['batch_size']:>5} {r['seconds']:>8.2f} {r['prompts_per_s']:>10.2f} {r['tokens_per_s']:>9.1f} "
                f"{rows[0]['seconds'] / r['seconds']:>7.2f}x  {r['same_tokens_as_batch_1']}"
            )

        results = []
        for variant in MEMORY_VARIANTS:
            cmd = [sys.executable, __file__, "--_variant", variant, "--_model", big] + (["--quick"] if args.quick else [])
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                raise SystemExit(f"variant {variant!r} failed")
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        vocab = 128_256
        theory_mb = batch * new_tokens * vocab * 4 / 2**20
        base = results[0]["peak_mb"]
        print(f"\n(b) peak RSS increase: tiny Llama, vocab {vocab}, batch {batch}, {new_tokens} new tokens (forced), CPU")
        print(f"    method: fresh subprocess per variant, {results[0]['method']}")
        print(f"{'variant':<12} {'peak MB':>9} {'vs plain':>9} {'seconds':>8} {'tokens':>7}")
        for r in results:
            print(f"{r['variant']:<12} {r['peak_mb']:>9.1f} {r['peak_mb'] - base:>+9.1f} {r['seconds']:>8.2f} {r['tokens']:>7}")
        print(f"theory for output_scores: {batch} x {new_tokens} x {vocab} x 4 B = {theory_mb:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
