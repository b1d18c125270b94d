"""What the `explain` and `verify` commands share: both prompt a model (by default the one that
answered) about stored answers. Their options, choosing and loading that model, and refusing in
one line, before anything is written, a prompt that does not fit its context. No store here (the
commands are the composition root): the runs come in from store.queries.explain_runs."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable

from engine.errors import UserError


def add_target_options(p: argparse.ArgumentParser) -> None:
    """--experiment or --run: the stored answers to ask about."""
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--experiment", help="every run of this experiment (id or name; see `python -m engine list`)")
    which.add_argument("--run", help="one run by id")


def add_model_options(p: argparse.ArgumentParser, *, role: str, max_new_tokens: int) -> None:
    """--model, --limit, --batch-size, --max-new-tokens, --quantize, --device, --dtype, --db."""
    p.add_argument("--model", default=None,
                   help=f"{role}: Hugging Face id, local folder or 'smoke' (default: the model that answered)")
    p.add_argument("--limit", type=int, default=None, help="only each run's first N answers (default: all)")
    p.add_argument("--batch-size", type=int, default=8, help="prompts generated together (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=max_new_tokens,
                   help=f"most tokens per {role}'s answer (default: %(default)s)")
    p.add_argument("--quantize", default="auto", choices=("auto", "4bit", "8bit", "none"),
                   help="auto = 4bit on a GPU, none on CPU (default: %(default)s)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda:N (default: %(default)s)")
    p.add_argument("--dtype", default="auto", help="auto | bfloat16 | float16 | float32 (default: %(default)s)")
    p.add_argument("--db", default=None, help="DuckDB file (default: $PATTRIEVAL_DB or results/pattrieval.duckdb)")


def check_args(args: argparse.Namespace) -> None:
    for name in ("batch_size", "max_new_tokens"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")
    if args.limit is not None and args.limit < 1:
        raise UserError("--limit must be at least 1")
    if args.model is not None and not args.model.strip():
        raise UserError("--model must not be empty")


def answered_runs(runs, path, args: argparse.Namespace, verb: str, unknown_experiment: str):
    """The runs of --experiment / --run (explain_runs' answer) that have answers, or one line.
    `unknown_experiment` is the line for an unknown --experiment."""
    if runs is None:
        if args.experiment is not None:
            raise UserError(unknown_experiment)
        raise UserError(f"no run '{args.run}' in {path} (see `python -m engine list`)")
    answered = [r for r in runs if r.n_answers]
    if not answered:
        what = f"run {args.run}" if args.run else f"experiment '{args.experiment}'"
        raise UserError(f"{what} has no answers to {verb} yet (run it first with `python -m engine run`)")
    return answered


def choose_model(model_arg: str | None, answered) -> tuple[str, str]:
    """(model to load, its name as stored): --model, else the one model that answered."""
    from engine.model_choice import SMOKE, SMOKE_LABEL, resolve_model

    models = {r.model for r in answered}
    if model_arg is None and len(models) > 1:
        raise UserError(f"the runs were answered by {len(models)} models ({', '.join(sorted(models))}); choose one with --model")
    label_arg = model_arg or next(iter(models))
    if label_arg == SMOKE_LABEL:  # the store's name for the smoke model loads as "smoke"
        label_arg = SMOKE
    return resolve_model(label_arg)


def load(model: str, args: argparse.Namespace):
    from transformers.utils import logging as hf_logging

    from engine.models import load_model

    hf_logging.disable_progress_bar()
    return load_model(model, quantize=args.quantize, device=args.device, dtype=args.dtype,
                      hf_token=os.environ.get("HF_TOKEN") or None)


def check_lengths(loaded, prompts: Iterable[tuple[str, str]], max_new_tokens: int, what: str) -> None:
    """Refuse in one line, before anything is written, a prompt that does not fit the context.
    `prompts` yields (where, prompt), `where` naming it in the message ("run R, item 'I'")."""
    from engine.models import chat_input_ids

    context = getattr(loaded, "context_length", None)
    if context is None:
        return
    warned = getattr(loaded.tokenizer, "deprecation_warnings", None)
    if isinstance(warned, dict):
        warned["sequence-length-is-longer-than-the-specified-maximum"] = True
    for where, prompt in prompts:
        n = len(chat_input_ids(loaded, prompt))
        if n + max_new_tokens > context:
            raise UserError(
                f"{where}: {what} prompt of {n:,} tokens + {max_new_tokens:,} new tokens exceeds the "
                f"model's context of {context:,}; use a smaller --max-new-tokens or --limit"
            )
