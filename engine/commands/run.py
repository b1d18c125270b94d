"""`python -m engine run`: one experiment (one run per RAG mode), stored as it goes."""

from __future__ import annotations

import argparse
import os
import sys

from engine.errors import UserError


def add_common_run_args(p: argparse.ArgumentParser) -> None:
    """Options shared by `run` and `quickstart`."""
    g = p.add_argument_group("prompt")
    g.add_argument("--metadata", default="hai", help="hai | gender | race | a NAME defined with --label-a/--label-b/--consideration")
    g.add_argument("--label-a", help="custom type: label on relevant documents in base mode")
    g.add_argument("--label-b", help="custom type: label on the other documents in base mode")
    g.add_argument("--consideration", help="custom type: the sentence added as consideration 3")
    g.add_argument("--modes", default="vanilla,base,cf", help="comma-separated subset of vanilla,base,cf")
    g.add_argument("--top-k", type=int, default=None, help="show only the first K ranked documents")
    g.add_argument("--order", default="ranked", choices=("ranked", "reversed", "random"))
    g.add_argument("--few-shot", type=int, default=0, choices=(0, 1, 2))
    g.add_argument("--xai", default="none", choices=("none", "direct", "counterfactual"))
    m = p.add_argument_group("model and generation")
    m.add_argument("--quantize", default="auto", choices=("auto", "4bit", "8bit", "none"), help="auto = 4bit on a GPU, none on CPU")
    m.add_argument("--device", default="auto", help="auto | cpu | cuda:N")
    m.add_argument("--dtype", default="auto", help="auto | bfloat16 | float16 | float32")
    m.add_argument("--hf-token", default=None, help="for gated models (default: $HF_TOKEN); never stored")
    m.add_argument("--batch-size", type=int, default=8)
    m.add_argument("--max-new-tokens", type=int, default=256)
    m.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    m.add_argument("--temperature", type=float, default=1.0, help="with --sample")
    m.add_argument("--top-p", type=float, default=1.0, help="with --sample")
    m.add_argument("--sample-top-k", type=int, default=0, help="with --sample: keep the K most likely tokens (0 = off)")
    m.add_argument("--seed", type=int, default=0, help="sampling seed and random-order seed")
    m.add_argument("--top-logprobs", type=int, default=0, help="also record the top N alternatives per token")
    s = p.add_argument_group("store")
    s.add_argument("--db", default=None, help="DuckDB file (default: $PATTRIEVAL_DB, /data/pattrieval.duckdb or results/pattrieval.duckdb)")
    s.add_argument("--limit", type=int, default=None, help="only the first N items")
    s.add_argument("--repeat", action="store_true", help="start new runs even if identical complete runs exist")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="generate cited answers for a dataset, one run per RAG mode")
    p.add_argument("--model", default="auto", help="Hugging Face id or local folder; 'smoke' = offline tiny model; 'auto' = Mistral on a GPU, else smoke")
    p.add_argument("--dataset", required=True, help=".jsonl, .json, .parquet or a datasets.save_to_disk folder")
    add_common_run_args(p)
    p.set_defaults(main=main)


def _check_numbers(args: argparse.Namespace) -> None:
    for name in ("batch_size", "max_new_tokens"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")
    if args.limit is not None and args.limit < 1:
        raise UserError("--limit must be at least 1")
    if args.sample and args.temperature <= 0:
        raise UserError("--temperature must be above 0 with --sample")
    if not 0 < args.top_p <= 1:
        raise UserError("--top-p must be in (0, 1]")
    if args.sample_top_k < 0:
        raise UserError("--sample-top-k must be 0 or more")
    if args.top_logprobs < 0:
        raise UserError("--top-logprobs must be 0 or more")


def build_request(args: argparse.Namespace, model: str, label: str):
    """A RunRequest from parsed arguments (validation raises UserError)."""
    from engine.prompts import MODES, PromptConfig, metadata_type
    from engine.runner import RunRequest

    _check_numbers(args)
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    unknown = [m for m in modes if m not in MODES]
    if not modes or unknown:
        raise UserError(f"--modes: unknown mode(s) {', '.join(unknown) or '(none given)'}; choose from vanilla,base,cf")
    if len(set(modes)) != len(modes):
        raise UserError("--modes lists a mode twice")
    meta = metadata_type(args.metadata, args.label_a, args.label_b, args.consideration)
    prompt = PromptConfig(
        mode="vanilla", metadata=meta, top_k=args.top_k, order=args.order, seed=args.seed, few_shot=args.few_shot, xai=args.xai
    )
    return RunRequest(
        model=model,
        model_label=label,
        modes=modes,
        prompt=prompt,
        quantize=args.quantize,
        device=args.device,
        dtype=args.dtype,
        max_new_tokens=args.max_new_tokens,
        do_sample=args.sample,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k_sampling=args.sample_top_k,
        seed=args.seed,
        batch_size=args.batch_size,
        top_n_logprobs=args.top_logprobs,
        repeat=args.repeat,
        hf_token=args.hf_token or os.environ.get("HF_TOKEN"),
    )


def execute(args: argparse.Namespace, dataset_path: str, model_arg: str) -> int:
    """Validate everything, then run with a progress bar and print the outcome."""
    from dataclasses import replace
    from pathlib import Path

    from tqdm import tqdm

    from engine.data import load_dataset
    from engine.model_choice import resolve_model
    from engine.paths import default_db_path
    from engine.runner import run_experiment

    # Validate all input before the first write: a bad row must leave the store untouched.
    dataset = load_dataset(dataset_path, limit=args.limit)
    request = build_request(args, model_arg, model_arg)  # bad options fail before any model work
    model, label = resolve_model(model_arg)
    request = replace(request, model=model, model_label=label)
    db_path = Path(args.db) if args.db else default_db_path()

    from store.run_store import RunStore

    sink = RunStore(db_path)
    # Our own bar is the one that matters; transformers' per-shard bars only add noise.
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    bar = tqdm(total=0, unit="item", desc=f"{label} x {len(request.modes)} mode(s)", file=sys.stderr, dynamic_ncols=True)

    def set_total(n: int) -> None:
        bar.total = n
        bar.refresh()

    try:
        outcome = run_experiment(dataset, request, sink, on_progress=bar.update, on_total=set_total)
    finally:
        bar.close()
    print(f"experiment {outcome.experiment_id}  model {label}  dataset {dataset.source} ({len(dataset.items)} items)  db {db_path}")
    for run in outcome.runs:
        print(
            f"  run {run.run_id}  {run.mode:<7}  {run.status:<16}  "
            f"generated {run.n_generated} of {run.n_items}, {run.n_with_citation} of them cite a document"
        )
    _print_metrics(db_path, [r.run_id for r in outcome.runs])
    return 0


def _print_metrics(db_path, run_ids: list[str]) -> None:
    """Citation precision/recall/F1 (x100) and exact match per run, from the run_metrics view."""
    from store.queries import run_summaries

    table = run_summaries(db_path, run_ids)
    if len(table):
        print(table.to_string(index=False))


def main(args: argparse.Namespace) -> int:
    return execute(args, args.dataset, args.model)
