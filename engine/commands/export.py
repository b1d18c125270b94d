"""`python -m engine export`: the chosen experiments' per-item results as a CSV or Parquet file, or
in the Every Eval Ever schema (--format eee: a folder of aggregate and instance-level records).

Reads only the store and never imports torch. The file is written by engine.usecases.storage.export
(store.export) under a temporary name and renamed into place; an existing file is replaced only
with --force, and a device, FIFO or socket never (renaming over it would replace the device).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.commands._options import add_db_arg
from engine.types import EXPORT_FORMATS
from engine.usecases.storage.export import ExportRequest, export, export_format


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="per-item results of experiments as CSV or Parquet",
        description="Write one row per stored answer of the chosen experiments: run, experiment, model, "
        "dataset, metadata type, mode, labels, item, question, answer, cited and gold positions, "
        "citation precision/recall/F1, EM, SQuAD EM, token F1, citation counts and probabilities. "
        "In CSV, list cells (gold_answers, cited, gold) are JSON arrays, and text that a spreadsheet would "
        "run as a formula (starting with =, +, -, @, tab or CR) gets a leading ' (Parquet keeps it raw). With --rows decisions, one row "
        "per shown document per answer instead (the citation_decisions view: position, label, relevant, "
        "repeated, cited, citation probability, whether the answer cites anything).",
    )
    p.add_argument("--experiment", action="append", required=True, metavar="ID",
                   help="experiment id or name (see `python -m engine list`); repeat for several")
    p.add_argument("--format", choices=(*EXPORT_FORMATS, "eee"), default=None,
                   help="csv or parquet (default: from the --out suffix), or eee: the Every Eval Ever schema's "
                        "aggregate and instance-level records, CAS and CAB (citation attribution bias, Abolghasemi "
                        "et al.) with intervals and tests, into the folder --out")
    p.add_argument("--out", required=True, metavar="PATH", help="file to write (eee: a folder)")
    p.add_argument("--force", action="store_true",
                   help="replace --out if it is a file (a device, pipe or socket is refused even so)")
    p.add_argument("--rows", choices=("answers", "decisions"), default="answers",
                   help="answers: one row per stored answer (default); decisions: one row per shown "
                        "document per answer")
    add_db_arg(p)
    p.set_defaults(main=main)


def main(args: argparse.Namespace) -> int:
    from engine.commands.bias import db_path

    fmt = export_format(args.format, args.out)  # before the store is looked for, as always
    if fmt == "eee":
        written = export(ExportRequest(db_path(args.db), tuple(args.experiment), Path(args.out), fmt, args.force))
        for f in written.files:
            print(f"wrote {f.n_results} results and {f.n_samples} samples of {f.experiment_id} to {f.aggregate} "
                  f"and {f.samples.name}")
        return 0
    result = export(ExportRequest(db_path(args.db), tuple(args.experiment), Path(args.out), fmt, args.force,
                                  args.rows))
    print(f"wrote {result.n_rows} {'decision ' if args.rows == 'decisions' else ''}rows ({result.n_runs} runs of {len(result.experiment_ids)} "
          f"experiment{'s' if len(result.experiment_ids) != 1 else ''}) to {result.path} as {fmt}")
    return 0
