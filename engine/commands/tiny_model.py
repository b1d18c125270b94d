"""`python -m engine tiny-model DIR`: write a tiny random-weight model for tests and offline smoke runs."""

from __future__ import annotations

import argparse

from engine.usecases.runs.tiny_model import (
    ARCHS,  # light: torch only when a model is written
    TinyModelRequest,
    tiny_model,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tiny-model", help="write a tiny random-weight model of a real architecture")
    p.add_argument("dir", metavar="DIR", help="folder to write (created if missing)")
    p.add_argument("--arch", default="llama", choices=ARCHS, help="llama = Llama-3-Instruct, mistral = Mistral-7B-Instruct-v0.3, openchat = OpenChat 3.6, qwen2 = Qwen2.5-Instruct (default: llama)")
    p.add_argument("--vocab", type=int, default=None, metavar="N", help="model vocabulary size (>= the tokenizer's ~700), e.g. 128256 for a memory benchmark")
    p.add_argument("--seed", type=int, default=0, help="weight initialisation seed (default: 0)")
    p.add_argument("--merged-citations", action="store_true", help='tokenizer with "[1]".."[20]" as single tokens')
    p.set_defaults(main=main)


def main(args: argparse.Namespace) -> int:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the command's output is the folder path, nothing else
    print(tiny_model(TinyModelRequest(args.dir, args.arch, args.vocab, args.seed, args.merged_citations)))
    return 0
