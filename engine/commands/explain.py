"""`python -m engine explain --experiment ID|--run ID`: Prompt 5 explanations of stored answers.

Everything that can fail is checked before the first write: the options, the store, the runs
and their answers, the model, and every prompt's length. Each finished batch is then committed
on its own, so kill -9 loses at most the batch in flight, and the same command again explains
only what is missing (items explained by the same explainer model are skipped).
"""

from __future__ import annotations

import argparse
import shlex
import sys

from engine.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain",
        help="explain the citations of stored answers (Prompt 5)",
        description="Ask a model to explain the citations of each stored answer (Prompt 5: the "
        "question, its answer and the same documents, order and labels it saw), and store each "
        "explanation with its tokens, raw log-probs, the document numbers it mentions and whether "
        "it gives a label as a reason.",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--experiment", help="every run of this experiment (id or name; see `python -m engine list`)")
    which.add_argument("--run", help="one run by id")
    p.add_argument(
        "--model", default=None,
        help="explainer: Hugging Face id, local folder or 'smoke' (default: the model that answered)",
    )
    p.add_argument("--limit", type=int, default=None, help="only each run's first N answers (default: all)")
    p.add_argument("--batch-size", type=int, default=8, help="prompts generated together (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="most tokens per explanation (default: %(default)s)")
    p.add_argument("--quantize", default="auto", choices=("auto", "4bit", "8bit", "none"),
                   help="auto = 4bit on a GPU, none on CPU (default: %(default)s)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda:N (default: %(default)s)")
    p.add_argument("--dtype", default="auto", help="auto | bfloat16 | float16 | float32 (default: %(default)s)")
    p.add_argument("--db", default=None, help="DuckDB file (default: $PATTRIEVAL_DB or results/pattrieval.duckdb)")
    p.set_defaults(main=main)


def _check_args(args: argparse.Namespace) -> None:
    for name in ("batch_size", "max_new_tokens"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")
    if args.limit is not None and args.limit < 1:
        raise UserError("--limit must be at least 1")
    if args.model is not None and not args.model.strip():
        raise UserError("--model must not be empty")


def main(args: argparse.Namespace) -> int:
    import os

    from engine.commands.bias import db_path, unknown_experiment
    from engine.model_choice import SMOKE, SMOKE_LABEL, resolve_model
    from store.queries import explain_runs, explain_sources

    _check_args(args)
    path = db_path(args.db)
    runs = explain_runs(path, experiment=args.experiment, run=args.run)
    if runs is None:
        if args.experiment is not None:
            raise UserError(unknown_experiment(path, args.experiment))
        raise UserError(f"no run '{args.run}' in {path} (see `python -m engine list`)")
    answered = [r for r in runs if r.n_answers]
    if not answered:
        what = f"run {args.run}" if args.run else f"experiment '{args.experiment}'"
        raise UserError(f"{what} has no answers to explain yet (run it first with `python -m engine run`)")
    models = {r.model for r in answered}
    if args.model is None and len(models) > 1:
        raise UserError(f"the runs were answered by {len(models)} models ({', '.join(sorted(models))}); choose one with --model")
    label_arg = args.model or next(iter(models))
    if label_arg == SMOKE_LABEL:  # the store's name for the smoke model loads as "smoke"
        label_arg = SMOKE
    model, label = resolve_model(label_arg)

    todo = [(run, explain_sources(path, run, label, args.limit)) for run in answered]
    n_todo = sum(len(s) for _, s in todo)
    if n_todo == 0:
        for run in answered:
            print(f"  run {run.run_id}  {run.rag_mode:<7}  already explained by {label}")
        _print_rates(path, [r.run_id for r in answered])
        return 0

    from transformers.utils import logging as hf_logging

    from engine.explain import explain_prompt
    from engine.generate import GenerationConfig
    from engine.models import chat_input_ids, load_model

    hf_logging.disable_progress_bar()
    loaded = load_model(model, quantize=args.quantize, device=args.device, dtype=args.dtype,
                        hf_token=os.environ.get("HF_TOKEN") or None)
    _check_lengths(loaded, todo, args.max_new_tokens, chat_input_ids, explain_prompt)

    from tqdm import tqdm

    from engine.explain import explain_batches
    from store.explanation_store import ExplanationStore

    store = ExplanationStore(path)
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    bar = tqdm(total=n_todo, unit="item", desc=f"explain with {label}", file=sys.stderr, dynamic_ncols=True)
    try:
        for run, sources in todo:
            done = 0
            if sources:
                for n in explain_batches(loaded, run, sources, label, config, store.write_batch):
                    done += n
                    bar.update(n)
            print(f"  run {run.run_id}  {run.rag_mode:<7}  explained {done} answer{'s' if done != 1 else ''} with {label}")
    finally:
        bar.close()
    _print_rates(path, [r.run_id for r in answered])
    experiment = answered[0].experiment_id
    db = f" --db {shlex.quote(args.db)}" if args.db else ""
    print(f"see the shares beside the bias with: python -m engine bias --experiment {experiment}{db}", file=sys.stderr)
    return 0


def _check_lengths(loaded, todo, max_new_tokens: int, chat_input_ids, explain_prompt) -> None:
    """Refuse in one line, before anything is written, a prompt that does not fit the context."""
    context = getattr(loaded, "context_length", None)
    if context is None:
        return
    warned = getattr(loaded.tokenizer, "deprecation_warnings", None)
    if isinstance(warned, dict):
        warned["sequence-length-is-longer-than-the-specified-maximum"] = True
    for run, sources in todo:
        for source in sources:
            n = len(chat_input_ids(loaded, explain_prompt(source)))
            if n + max_new_tokens > context:
                raise UserError(
                    f"run {run.run_id}, item '{source.item.id}': explanation prompt of {n:,} tokens + "
                    f"{max_new_tokens:,} new tokens exceeds the model's context of {context:,}; "
                    "use a smaller --max-new-tokens or --limit"
                )


def _print_rates(path, run_ids: list[str]) -> None:
    from store.queries import explanation_rates

    for run_id, model, mode, n, n_label, share in explanation_rates(path, run_ids):
        print(f"  {mode:<7} run {run_id}  {model}: {n_label} of {n} explanations give a label as a reason ({share:.0%})")
