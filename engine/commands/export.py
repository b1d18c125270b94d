"""`python -m engine export`: the chosen experiments' per-item results as a CSV or Parquet file.

Reads only the store and never imports torch. The file is written from Python (store.export)
under a temporary name and renamed into place; an existing file is replaced only with --force.
"""

from __future__ import annotations

import argparse

from engine.types import EXPORT_FORMATS


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="per-item results of experiments as CSV or Parquet",
        description="Write one row per stored answer of the chosen experiments: run, experiment, model, "
        "dataset, metadata type, mode, labels, item, question, answer, cited and gold positions, "
        "citation precision/recall/F1, EM, SQuAD EM, token F1, citation counts and probabilities. "
        "In CSV, list cells (gold_answers, cited, gold) are JSON arrays.",
    )
    p.add_argument("--experiment", action="append", required=True, metavar="ID",
                   help="experiment id or name (see `python -m engine list`); repeat for several")
    p.add_argument("--format", choices=EXPORT_FORMATS, default=None,
                   help="csv or parquet (default: from the --out suffix)")
    p.add_argument("--out", required=True, metavar="PATH", help="file to write")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--db", default=None, help="DuckDB file (default: $PATTRIEVAL_DB or results/pattrieval.duckdb)")
    p.set_defaults(main=main)


def main(args: argparse.Namespace) -> int:
    from engine.commands.bias import db_path, unknown_experiment
    from engine.errors import UserError
    from store.export import export_results, format_from_suffix
    from store.queries import UnknownExperiment

    fmt = args.format or format_from_suffix(args.out)
    if fmt is None:
        raise UserError(f"give --format csv or parquet (the name {args.out} does not say which)")
    path = db_path(args.db)
    try:
        result = export_results(path, args.experiment, fmt, args.out, overwrite=args.force)
    except UnknownExperiment as err:
        raise UserError(unknown_experiment(path, err.reference)) from err
    print(f"wrote {result.n_rows} rows ({result.n_runs} runs of {len(result.experiment_ids)} "
          f"experiment{'s' if len(result.experiment_ids) != 1 else ''}) to {result.path} as {fmt}")
    return 0
