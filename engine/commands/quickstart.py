"""`python -m engine quickstart`: the complete experiment on the bundled sample dataset.

It is the main job of the README's quick start: vanilla, base and cf runs with gender labels,
stored in the default database, then the commands to look at them. `--model auto` picks a real
model wherever it can (engine.generation.model_choice): Mistral-7B on a GPU, Qwen2.5-0.5B on a CPU, where
the run is cut to a handful of items so that it ends in minutes, and the random-weight smoke
model only offline, saying plainly that its answers are random text.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from engine.commands.run import add_common_run_args, execute
from engine.paths import SAMPLE_DATASET
from engine.usecases.runs.run import SMOKE, auto_model, default_max_new_tokens

# On a CPU a real model takes seconds per answer: 5 items x 3 modes end in a few minutes.
CPU_ITEMS = 5


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quickstart", help="the complete experiment on the bundled sample dataset")
    p.add_argument(
        "--model",
        default="auto",
        help="default auto: Mistral-7B-Instruct-v0.3 on a GPU, Qwen2.5-0.5B-Instruct on CPU "
        f"(first {CPU_ITEMS} items unless --limit), the offline smoke model without the Hub",
    )
    add_common_run_args(p)
    p.set_defaults(main=main, metadata="gender")


def main(args: argparse.Namespace) -> int:
    from engine.commands.run import sampling_settings

    sampling_settings(args)  # --temperature without --sample: refused before torch or the Hub is asked
    gpu = _gpu(args.device)
    model = args.model
    if model == "auto":
        choice = auto_model(gpu=gpu)
        print(f"note: {choice.why}", file=sys.stderr)
        model = choice.name
    if args.limit is None and not gpu and model != SMOKE:
        args.limit = CPU_ITEMS
        print(
            f"note: on a CPU the quickstart answers the first {CPU_ITEMS} of the sample's "
            f"{_count_items(SAMPLE_DATASET)} questions in each mode; pass --limit N for more",
            file=sys.stderr,
        )
    if args.max_new_tokens is None:
        # The smoke model's answers are noise: 48 tokens show the pipeline. A real model on a
        # CPU writes a concise answer well within 128.
        args.max_new_tokens = default_max_new_tokens({model}, cpu=not gpu)
    outcome = execute(args, str(SAMPLE_DATASET), model, hint=False)
    print(next_steps(args.db, outcome, smoke=model == SMOKE, reference=args.experiment))
    return 0


def next_steps(db: str | None, experiment, *, smoke: bool, reference: str | None = None) -> str:
    """What to run after the quickstart: the experiment by the name given with --experiment
    (`reference`), else by the id it made."""
    db_flag = f" --db {shlex.quote(db)}" if db else ""
    lines = []
    if smoke:
        lines += [
            "",
            "These answers come from the smoke model, which has random weights: its text is random",
            "and its scores mean nothing. With access to the Hugging Face Hub the quickstart uses a",
            "real model (Qwen2.5-0.5B-Instruct on a CPU, Mistral-7B-Instruct-v0.3 on a GPU).",
        ]
    lines += ["", "next:", f"  python -m engine list{db_flag}"]
    modes = experiment.modes
    if "base" in modes and ("cf" in modes or "vanilla" in modes):
        lines.append(f"  python -m engine bias --experiment {shlex.quote(reference or experiment.experiment_id)}{db_flag}")
    lines.append(f"  python -m engine report{db_flag}")
    return "\n".join(lines)


def _count_items(path) -> int:
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def _gpu(device: str) -> bool:
    """Whether the run will use a GPU: --device cuda..., or auto with one visible."""
    if device == "cpu":
        return False
    import torch

    return torch.cuda.is_available()
