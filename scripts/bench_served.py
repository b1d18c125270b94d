"""Answers per second of an OpenAI-compatible server at several concurrency levels.

Runs the sample dataset's vanilla prompts (the prompts a `run` sends) through the served backend
(engine.running.backend_server) at each `--concurrency` level, and prints answers/s and completion
tokens/s side by side, as ratios to the first level, and whether every level gave the same
answers (greedy decoding should).

    # a server already running:
    python scripts/bench_served.py --base-url http://127.0.0.1:8000/v1 --model NAME
    # or let the script start llama.cpp's server with SmolLM2-135M-Instruct (requirements-server.txt):
    python scripts/bench_served.py --smollm2 --limit 16 --top-k 2 --max-new-tokens 32

On a GPU with vLLM (pip install vllm; one H100 serves an 8B model in bf16, or 4-bit AWQ/GPTQ
checkpoints with --quantization):
    vllm serve meta-llama/Meta-Llama-3-8B-Instruct --port 8000 --max-logprobs 20 \\
        --generation-config vllm --seed 0
    python scripts/bench_served.py --base-url http://127.0.0.1:8000/v1 \\
        --model meta-llama/Meta-Llama-3-8B-Instruct --concurrency 1 8 32 64
    # several GPUs: add --tensor-parallel-size N to `vllm serve`; several servers behind one
    # load balancer are one --base-url.

`--generation-config vllm` keeps vLLM from applying the checkpoint's sampling defaults;
`--max-logprobs` bounds `top_logprobs` (default 20). vLLM batches concurrent requests
continuously, so answers/s grows with concurrency until the GPU is full. llama-cpp-python's
server answers one request at a time (its ratios stay near 1.0); llama.cpp's own C++
`llama-server --parallel N` batches N slots.

A key, when the server needs one: OPENAI_API_KEY, or the variable named with --api-key-env.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

from engine.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", help="the server's API root, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--model", help="the model name the server serves")
    parser.add_argument("--smollm2", action="store_true", help="start llama.cpp's server with SmolLM2-135M-Instruct here")
    parser.add_argument("--tokenizer", help="a local tokenizer: use the completions endpoint with our chat template")
    parser.add_argument("--dataset", default=str(ROOT / "data" / "sample_nq.jsonl"))
    parser.add_argument("--limit", type=int, default=None, help="the first N items")
    parser.add_argument("--top-k", type=int, default=None, help="documents shown per prompt (default: all)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--top-logprobs", type=int, default=5)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--api-key-env", default=None)
    args = parser.parse_args(argv)
    if not args.smollm2 and not (args.base_url and args.model):
        parser.error("give --base-url and --model, or --smollm2")
    return args


def prompts(args) -> tuple[list[str], list[str]]:
    from engine.datasets.data import load_dataset
    from engine.prompting.prompts import PromptConfig, build_prompt

    items = load_dataset(args.dataset, limit=args.limit).items
    built = [build_prompt(item, PromptConfig(top_k=args.top_k), index) for index, item in enumerate(items)]
    return [p.item_id for p in built], [p.text for p in built]


def measure(args, base_url: str, model: str, tokenizer, level: int, ids, texts) -> dict:
    from engine.generation.generate import GenerationConfig
    from engine.running.backend_server import ServerBackend
    from engine.running.backends import plan_batches
    from engine.running.served_request import ServerSettings

    config = GenerationConfig(max_new_tokens=args.max_new_tokens, top_n_logprobs=args.top_logprobs, batch_size=8)
    settings = ServerSettings(base_url, model, endpoint="completions" if tokenizer is not None else "chat",
                              concurrency=level, api_key_env=args.api_key_env)
    backend = ServerBackend(settings, config, tokenizer=tokenizer).start()
    batches = plan_batches(backend.tokenizer, [("bench", ids, texts)], config.batch_size)
    started = time.perf_counter()
    results = list(backend.generate(batches))
    seconds = time.perf_counter() - started
    answers = {item: out.text for batch, r in zip(batches, results, strict=True)
               for item, out in zip(batch.item_ids, r.outputs, strict=True)}
    return {"level": level, "seconds": seconds, "answers": answers, "n": len(answers),
            "completion_tokens": backend.info.completion_tokens}


@contextlib.contextmanager
def server(args):
    if not args.smollm2:
        yield args.base_url, args.model
        return
    import os

    from tests.support.served_server import API_KEY, llama_server

    os.environ["PATTRIEVAL_BENCH_KEY"] = API_KEY
    args.api_key_env = "PATTRIEVAL_BENCH_KEY"
    with tempfile.TemporaryDirectory() as tmp, llama_server(Path(tmp)) as running:
        print(f"llama.cpp server with SmolLM2-135M-Instruct answered after {running.start_s:.1f} s")
        yield running.base_url, running.model


def main(argv=None) -> int:
    args = parse_args(argv)

    ids, texts = prompts(args)
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    try:
        with server(args) as (base_url, model):
            rows = [measure(args, base_url, model, tokenizer, level, ids, texts) for level in args.concurrency]
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    first = rows[0]
    base_rate = first["n"] / first["seconds"]
    print(f"{len(ids)} prompts, max {args.max_new_tokens} new tokens, top-{args.top_logprobs} log-probs")
    print(f"{'concurrency':>11} {'seconds':>8} {'answers/s':>10} {'tokens/s':>9} {'ratio':>6}  same answers")
    for row in rows:
        rate = row["n"] / row["seconds"]
        same = "yes" if row["answers"] == first["answers"] else "NO"
        print(f"{row['level']:>11} {row['seconds']:>8.2f} {rate:>10.3f} "
              f"{row['completion_tokens'] / row['seconds']:>9.1f} {rate / base_rate:>6.2f}  {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
