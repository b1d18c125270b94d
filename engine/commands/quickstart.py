"""`python -m engine quickstart`: the complete experiment on the bundled sample dataset.

It is the main job of the README's quick start: vanilla, base and cf runs with gender labels,
stored in the default database. Without a GPU or network it uses the offline smoke model
and says so.
"""

from __future__ import annotations

import argparse

from engine.commands.run import add_common_run_args, execute


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quickstart", help="the complete experiment on the bundled sample dataset")
    p.add_argument("--model", default="auto", help="default: Mistral-7B-Instruct-v0.3 on a GPU, else the smoke model")
    add_common_run_args(p)
    p.set_defaults(main=main, metadata="gender", max_new_tokens=None)


def main(args: argparse.Namespace) -> int:
    from engine.paths import SAMPLE_DATASET

    if args.max_new_tokens is None:
        # The smoke model's answers are noise; 48 tokens is enough to show the pipeline.
        args.max_new_tokens = 48 if args.model in ("auto", "smoke") and not _gpu() else 256
    return execute(args, str(SAMPLE_DATASET), args.model)


def _gpu() -> bool:
    import torch

    return torch.cuda.is_available()
