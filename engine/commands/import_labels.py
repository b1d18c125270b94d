"""`python -m engine import-labels FILE --judge NAME`: a person's labels of cited documents, stored
as a judge, for `python -m engine agreement` to set the other judges against.

Thin: parse, call engine.usecases.storage.import_labels, print one line. The whole file is checked first;
the first bad row refuses it in one line naming the file and line, and nothing is written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.bounds import for_terminal
from engine.commands._options import add_db_arg
from engine.usecases.storage.import_labels import ImportLabelsRequest, import_labels


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import-labels",
        help="store a person's labels of cited documents as a judge (CSV or JSONL)",
        description="Import human labels of cited documents as a judge, to set against the model judges "
        "(`python -m engine agreement`). FILE is CSV with a header row, or JSONL (one object a line), with "
        "the fields item_id; run (a run id) or experiment (id or name) and mode (vanilla, base or cf); "
        "position (the cited document's number as the answer's prompt showed it, 1-based; the answer must "
        "cite it); and label: attributable or not_attributable (true/false, yes/no and 1/0 are read as "
        "attributable/not_attributable). The whole file is checked first, and the first bad row refuses "
        "it in one line (FILE:line N: what is wrong) with nothing written; then every label goes in at "
        "once. Importing the same file again adds nothing.",
    )
    p.add_argument("file", metavar="FILE", help="the labels: .csv, or .jsonl")
    p.add_argument("--judge", required=True, metavar="NAME", help="who labelled: a person's or a team's name, stored as a judge of kind human")
    add_db_arg(p)
    p.set_defaults(main=main)


def main(args: argparse.Namespace) -> int:
    from engine.commands.bias import db_path

    path = db_path(args.db)
    result = import_labels(ImportLabelsRequest(path, Path(args.file), args.judge))
    runs = ", ".join(result.run_ids)
    if result.already:
        print(for_terminal(f"already imported: the {result.n_labels} labels of {args.file} by judge "
                           f"'{result.judge}' are in {path}; nothing added"))
    else:
        kept = result.n_labels - result.n_added
        note = f" ({kept} stored before, kept)" if kept else ""
        print(for_terminal(f"imported {result.n_added} labels by judge '{result.judge}'{note} on run(s) {runs} "
                           f"into {path}; next: python -m engine agreement --runs {','.join(result.run_ids)}"))
    return 0
