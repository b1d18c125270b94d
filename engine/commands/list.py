"""`python -m engine list`: the experiments (or, with --runs, the runs) in the store, newest first.

Reads only the store and never imports torch. An experiment's progress is the answers stored
over the items planned, summed over its runs (3 modes x 67 items: 201).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from engine.bounds import for_terminal, json_for_terminal
from engine.commands._options import add_db_arg
from engine.errors import UserError
from engine.paths import default_db_path
from engine.usecases.runs.listing import experiments
from engine.usecases.runs.listing import studies as study_records

START_HINT = "python -m engine quickstart"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "list",
        help="experiments in the store, newest first (--runs: every run)",
        description="List the experiments in the store, newest first: id, model, dataset, metadata "
        "type, modes, status, items done out of the total and when it started (UTC).",
    )
    add_db_arg(p)
    p.add_argument("--runs", action="store_true", help="one row per run instead of per experiment")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--study", default=None, metavar="NAME",
                   help="only the experiments (or runs) of this study, in grid order (default: all)")
    p.add_argument("--studies", action="store_true",
                   help="one row per study (`run` with comma lists): name, experiments, its lists")
    p.set_defaults(main=main)


def _utc(value: Any) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M")


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat(timespec="seconds") + "Z"


def table(header: list[str], rows: list[list[str]]) -> str:
    """Left-aligned columns separated by two spaces, no trailing blanks; stored text escaped
    (a label may hold terminal escape codes or newlines, in stores older than engine.bounds)."""
    header, rows = [for_terminal(c) for c in header], [[for_terminal(c) for c in r] for r in rows]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in [header, *rows])


def experiments_text(experiments: tuple) -> str:
    """The experiment table."""
    header = ["experiment", "name", "model", "dataset", "metadata", "modes", "status", "items", "created (UTC)"]
    rows = [
        [e.experiment_id, e.name or "-", e.model, e.dataset_label, e.metadata_type or "-",
         ",".join(e.modes), e.status, f"{e.n_done}/{e.n_total}", _utc(e.created_utc)]
        for e in experiments
    ]
    return table(*_with_tokens(header, rows, experiments))


def runs_text(runs: tuple) -> str:
    """The run table."""
    header = ["run", "experiment", "mode", "model", "dataset", "metadata", "status", "items", "created (UTC)"]
    rows = [
        [r.run_id, r.experiment_id, r.mode, r.model, r.dataset_label,
         r.metadata_type or "-", r.status, f"{r.n_done}/{r.n_total}", _utc(r.created_utc)]
        for r in runs
    ]
    return table(*_with_tokens(header, rows, runs))


def _with_tokens(header: list[str], rows: list[list[str]], records: tuple) -> tuple[list[str], list[list[str]]]:
    """A last column of prompt + completion tokens when any record was served (run --backend
    server); the table as it was otherwise."""
    if all(getattr(r, "prompt_tokens", None) is None for r in records):
        return header, rows
    cells = ["-" if r.prompt_tokens is None else f"{r.prompt_tokens}+{r.completion_tokens or 0}" for r in records]
    return [*header, "tokens (prompt+completion)"], [[*row, cell] for row, cell in zip(rows, cells, strict=True)]


def as_json(records: tuple) -> str:
    """Records as a JSON list, timestamps in ISO 8601 UTC."""
    out = []
    for record in records:
        row = asdict(record)
        for key in ("created_utc", "finished_utc"):
            if key in row:
                row[key] = _iso(row[key])
        if "modes" in row:
            row["modes"] = list(row["modes"])
        out.append(row)

    return json_for_terminal(json.dumps(out, indent=2, ensure_ascii=False))


def _studies(path: Path, args: argparse.Namespace) -> int:
    studies = study_records(path)
    if args.json:
        print(as_json(studies))
        return 0
    if not studies:
        print(f"no studies in {path} yet; run one with comma lists, e.g. "
              "python -m engine run --dataset FILE --metadata gender,race --top-k 5,10")
        return 0
    rows = [[s.name, str(s.n_experiments),
             "  ".join(f"{k}={','.join('all' if v is None else str(v) for v in vs)}" for k, vs in s.axes.items()
                       if len(vs) > 1) or "-",
             _utc(s.created_utc)] for s in studies]
    print(table(["study", "experiments", "lists", "created (UTC)"], rows))
    return 0


def main(args: argparse.Namespace) -> int:
    path = Path(args.db) if args.db else default_db_path()
    if not path.exists():
        # A reader must not create the file: that would hide a typo in --db.
        raise UserError(f"no database at {path}; start one with: {START_HINT} (or give --db PATH)")

    if args.studies:
        return _studies(path, args)
    records = experiments(path, runs=args.runs, study=args.study)
    if args.json:
        print(as_json(records))
        return 0
    if not records:
        what = "runs" if args.runs else "experiments"
        print(f"no {what} in {path} yet; start one with: {START_HINT}")
        return 0
    print(runs_text(records) if args.runs else experiments_text(records))
    return 0
