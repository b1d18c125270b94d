"""Does a real model that installs offline cite? The paper's prompt, run by the product on real weights.

For each GGUF model of scripts/gguf_models.py, each dataset and each few-shot count, one base
run (gender labels) through `run`'s own path (run_experiment: the local backend, batching, raw
log-probs), then from the store: the share of answers with a citation the parser reads, the
share citing a shown document, citation precision and recall (x100), exact match and seconds
per answer. `--llama-cpp` also asks llama.cpp itself (llama-cpp-python, the GGUF as it ships,
its chat template where the file has one) for the same prompts, and reads its answers with the
same parser.

    python scripts/real_models.py --limit 12                       # both models, sample + fictional, 0 and 2 shots
    python scripts/real_models.py --models smollm2 --limit 12 --llama-cpp

data/fictional_qa.jsonl holds made-up facts, three documents an item, so that a right answer
must come from the documents and the relevant one is not always first.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATASETS = {"sample": ROOT / "data" / "sample_nq.jsonl", "fictional": ROOT / "data" / "fictional_qa.jsonl"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="smollm2,gemma3", help="comma list of scripts/gguf_models.py's MODELS")
    parser.add_argument("--datasets", default="sample,fictional", help=f"comma list of {', '.join(DATASETS)}")
    parser.add_argument("--few-shot", default="0,2", help="comma list of few-shot counts (default 0,2)")
    parser.add_argument("--limit", type=int, default=12, help="items per dataset (default 12)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--llama-cpp", action="store_true", help="also generate with llama.cpp (llama-cpp-python)")
    return parser.parse_args(argv)


def product_row(model: str, folder: Path, dataset: Path, few_shot: int, args: argparse.Namespace, db: Path) -> dict:
    """One base run through run_experiment, measured from the store."""
    from engine.prompting.prompts import METADATA_TYPES, PromptConfig
    from engine.running.run_request import RunRequest
    from engine.usecases.run import ExperimentRequest, run_experiment
    from store.db import connect

    request = RunRequest(model=str(folder), modes=("base",), prompt=PromptConfig(metadata=METADATA_TYPES["gender"],
                         few_shot=few_shot), quantize="none", device="cpu", max_new_tokens=args.max_new_tokens,
                         limit=args.limit)
    started = time.perf_counter()
    outcome = run_experiment(ExperimentRequest(request, dataset, db))
    seconds = time.perf_counter() - started
    (run,) = outcome.runs
    with connect(db, read_only=True) as conn:
        n, marks, shown, precision, recall, em = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE n_citations > 0), "
            "count(*) FILTER (WHERE n_citations > out_of_range_citations), "
            "100 * avg(precision), 100 * avg(recall), avg(exact_match) FROM query_metrics WHERE run_id = ?",
            [run.run_id]).fetchone()
    return {"model": model, "path": "run (transformers)", "dataset": dataset.name, "few_shot": few_shot, "n": n,
            "cites": marks / n, "cites_shown": shown / n, "precision": precision, "recall": recall, "em": em,
            "s_per_answer": seconds / n}


def llama_cpp_row(model: str, gguf: Path, dataset: Path, few_shot: int, args: argparse.Namespace) -> dict:
    """The same prompts through llama.cpp, read with the product's parser (no store)."""
    from llama_cpp import Llama

    from engine.datasets.data import load_dataset
    from engine.prompting.citations import parse_citations
    from engine.prompting.prompts import METADATA_TYPES, PromptConfig, build_prompt

    llm = Llama(model_path=str(gguf), n_ctx=4096, n_threads=2, verbose=False, seed=0)
    config = PromptConfig(mode="base", metadata=METADATA_TYPES["gender"], few_shot=few_shot)
    items = load_dataset(dataset, limit=args.limit).items
    cites = shown = relevant_only = 0
    started = time.perf_counter()
    for index, item in enumerate(items):
        prompt = build_prompt(item, config, index)
        if llm.metadata.get("tokenizer.chat_template"):
            out = llm.create_chat_completion([{"role": "user", "content": prompt.text}], max_tokens=args.max_new_tokens,
                                             temperature=0.0)
            text = out["choices"][0]["message"]["content"] or ""
        else:
            text = llm.create_completion(prompt.text, max_tokens=args.max_new_tokens, temperature=0.0)["choices"][0]["text"]
        numbers = parse_citations(text)
        in_range = [n for n in numbers if 1 <= n <= len(prompt.shown_doc_ids)]
        cites += bool(numbers)
        shown += bool(in_range)
        relevant_only += bool(in_range) and all(prompt.shown_relevant[n - 1] for n in in_range)
    seconds = time.perf_counter() - started
    n = len(items)
    return {"model": model, "path": "llama.cpp", "dataset": dataset.name, "few_shot": few_shot, "n": n,
            "cites": cites / n, "cites_shown": shown / n, "only_relevant": relevant_only / n, "s_per_answer": seconds / n}


def fmt(row: dict) -> str:
    def num(key: str, spec: str) -> str:
        value = row.get(key)
        return "–" if value is None else format(value, spec)

    return (f"| {row['model']} | {row['path']} | {row['dataset']} | {row['few_shot']} | {row['n']} | "
            f"{100 * row['cites']:.0f}% | {100 * row['cites_shown']:.0f}% | {num('precision', '.1f')} | "
            f"{num('recall', '.1f')} | {num('em', '.2f')} | {num('s_per_answer', '.1f')} |")


def main(argv: list[str] | None = None) -> int:
    from tests.helpers import load_script

    args = parse_args(argv)
    gguf_models = load_script("gguf_models")
    shots = [int(x) for x in args.few_shot.split(",")]
    print("| model | path | dataset | few-shot | answers | with [n] | citing a shown document | precision | recall "
          "| EM | s / answer |\n|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            folder = gguf_models.model_folder(model)
            for name in args.datasets.split(","):
                for few_shot in shots:
                    db = Path(tmp) / f"{model}-{name}-{few_shot}.duckdb"
                    print(fmt(product_row(model, folder, DATASETS[name], few_shot, args, db)), flush=True)
                    if args.llama_cpp:
                        row = llama_cpp_row(model, gguf_models.gguf_file(model), DATASETS[name], few_shot, args)
                        print(fmt(row) + f" only relevant cited: {100 * row['only_relevant']:.0f}%", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
