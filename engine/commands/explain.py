"""`python -m engine explain --experiment ID|--run ID`: Prompt 5 explanations of stored answers.

The work is engine.usecases.judges.explain's: everything that can fail is checked before the first
write (the options, the store, the runs and their answers, the model, every prompt's length),
then each finished batch is committed on its own, so kill -9 loses at most the batch in flight,
and the same command again explains only what is missing. Here: the options, a progress bar, and
what is printed.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.commands._options import add_db_arg
from engine.commands._served_options import add_server_args, server_options
from engine.usecases.judges.explain import ExplainRequest, explanation_rates, plan_explain, run_explain
from engine.usecases.judges.judge_runs import check_request


def add_target_options(p: argparse.ArgumentParser) -> None:
    """--experiment or --run: the stored answers to ask about (explain and verify)."""
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
    add_db_arg(p)

    p.add_argument("--backend", default="local", choices=("local", "server"),
                   help=f"local = load the {role} here; server = ask an OpenAI-compatible server (--base-url), "
                   "--model naming the served model (default: %(default)s)")
    add_server_args(p)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain",
        help="explain the citations of stored answers (Prompt 5)",
        description="Ask a model to explain the citations of each stored answer (Prompt 5: the "
        "question, its answer and the same documents, order and labels it saw), and store each "
        "explanation with its tokens, raw log-probs, the document numbers it mentions and whether "
        "it gives a label as a reason.",
    )
    add_target_options(p)
    add_model_options(p, role="explainer", max_new_tokens=256)
    p.set_defaults(main=main)


def build_request(kind: type, args: argparse.Namespace) -> Any:
    """The explain or verify request of the options: the options checked first, then the store
    (which must exist), as the command always refused them."""
    from engine.commands.bias import db_path

    request = kind(db=Path(args.db or "."), experiment=args.experiment, runs=(args.run,) if args.run is not None else (),
                   model=args.model, limit=args.limit, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                   quantize=args.quantize, device=args.device, dtype=args.dtype,
                   server=server_options(args, args.model or ""))
    check_request(request)
    return replace(request, db=db_path(args.db))


class Bar:
    """A tqdm bar on stderr, opened when generating starts (after the model loads)."""

    def __init__(self, total: int | None, unit: str, desc: str):
        self.total, self.unit, self.desc, self.bar = total, unit, desc, None

    def stage(self, line: str) -> None:
        if not line.startswith("loading") and self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, unit=self.unit, desc=self.desc, file=sys.stderr, dynamic_ncols=True)

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def main(args: argparse.Namespace) -> int:
    request = build_request(ExplainRequest, args)
    plan = plan_explain(request)
    if plan.n_todo == 0:
        for todo in plan.runs:
            print(f"  run {todo.run.run_id}  {todo.run.rag_mode:<7}  already explained by {plan.label}")
        _print_rates(plan)
        return 0
    bar = Bar(plan.n_todo, "item", f"explain with {plan.label}")
    try:
        result = run_explain(plan, request, progress=bar.update, stage=bar.stage)
    finally:
        bar.close()
    for done in result.runs:
        n = done.n_done
        print(f"  run {done.run.run_id}  {done.run.rag_mode:<7}  explained {n} answer{'s' if n != 1 else ''} with {plan.label}")
    _print_rates(plan)
    db = f" --db {shlex.quote(args.db)}" if args.db else ""
    print(f"see the shares beside the bias with: python -m engine bias --experiment {plan.experiment_id}{db}", file=sys.stderr)
    return 0


def _print_rates(plan: Any) -> None:
    for run_id, model, mode, n, n_label, share in explanation_rates(plan):
        print(f"  {mode:<7} run {run_id}  {model}: {n_label} of {n} explanations give a label as a reason ({share:.0%})")
