"""`python -m engine validate --dataset D`: check a dataset and describe it, writing nothing.

Prints the layout, the item count and the documents and relevant documents per item
(min / median / max); with --skip-invalid, also the items a run would skip. Exits 0 when the
dataset would run, 2 with the loader's one-line error otherwise. Imports neither torch nor the
store, so it is quick and safe to run anywhere.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from engine.errors import UserError
from engine.usecases.runs.validate import validate

SHOW_SKIPPED = 20  # more would bury the summary; the count is always printed


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="check a dataset and print its shape, without running or writing anything",
        description="Load and validate a dataset as `run` would, print its layout, item count, and "
        "documents and relevant documents per item (min/median/max). Writes nothing.",
    )
    p.add_argument("--dataset", required=True, help=".jsonl, .json, .parquet or a datasets.save_to_disk folder; 'sample' = the bundled sample")
    p.add_argument(
        "--skip-invalid",
        action="store_true",
        help="list invalid items (no relevant document, bad fields, ...) and describe the rest, as `run --skip-invalid` "
        "would run them (default: any invalid item is an error)",
    )
    p.add_argument(
        "--top-k",
        type=int,
        default=None,
        help="count only the first K documents of each item, as `run --top-k K` shows them (default: all)",
    )
    p.set_defaults(main=main)


def _spread(values: Sequence[int]) -> str:
    import statistics  # here, not at the top: every command's start-up builds this module's parser

    return f"min {min(values)}  median {statistics.median(values):g}  max {max(values)}"


def main(args: argparse.Namespace) -> int:
    if args.top_k is not None and args.top_k < 1:
        raise UserError("--top-k must be at least 1")
    shape = validate(args.dataset, skip_invalid=args.skip_invalid, top_k=args.top_k)
    print(f"dataset   {shape.source}")
    print(f"layout    {shape.layout}")
    print(f"items     {shape.n_items} valid (sha {shape.sha})")
    print(f"documents per item           {_spread(shape.documents)}")
    print(f"relevant documents per item  {_spread(shape.relevant)}")
    if shape.skipped:
        print(f"skipped   {len(shape.skipped)} invalid item(s):")
        for skipped in shape.skipped[:SHOW_SKIPPED]:
            print(f"  {skipped}")
        if len(shape.skipped) > SHOW_SKIPPED:
            print(f"  ... and {len(shape.skipped) - SHOW_SKIPPED} more")
    return 0
