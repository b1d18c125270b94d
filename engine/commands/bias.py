"""`python -m engine bias --experiment ID`: CAS and CAB of one experiment, with intervals and CAB's test.

Reads only the store, through store.queries' functions that return tuples: pandas, which the
DataFrame queries import, would cost more than everything else this command does
(scripts/bench_bias.py). Hints about the next useful command go to stderr, so `--json` output
stays machine-readable.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from engine.bounds import for_terminal, json_for_terminal
from engine.commands._options import add_db_arg
from engine.errors import UserError
from engine.paths import default_db_path
from engine.presentation.display import interval_cell, rerun_floor_lines
from engine.presentation.formatting import format_p

# The report is engine.usecases.bias.report's; these names stay importable from here for callers.
from engine.usecases.bias.report import bias_report


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bias",
        help="CAS (vanilla vs base) and CAB (base vs cf) of one experiment",
        # argparse %-formats argument help but prints the description as it is.
        description="CAS = mean |M_vanilla - M_base|, CAB = mean (M_base - M_cf), for citation "
        "precision, recall and F1, x100, with bootstrap 95% intervals, CAB's paired test of base vs cf "
        "(sign-flip permutation test) and its verdict; undefined where no answer cites a shown document.",
    )
    p.add_argument("--experiment", required=True, help="experiment id, or the name given with `run --experiment` (see `python -m engine list`)")
    add_db_arg(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--resamples", type=int, default=None, help="bootstrap resamples, 100 to 100000 (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed, 0 or more (default 0)")
    p.set_defaults(main=main)


def db_path(arg: str | None) -> Path:
    """The --db path or the default; an existing file is required by read-only commands."""
    path = Path(arg) if arg else default_db_path()
    if not path.is_file():
        raise UserError(f"no database at {path} (give --db PATH or set PATTRIEVAL_DB)")
    return path


def main(args: argparse.Namespace) -> int:
    result = bias_report(db_path(args.db), args.experiment, resamples=args.resamples, seed=args.seed, db_arg=args.db)
    if args.json:
        # Stored labels may hold escape codes (stores older than engine.bounds): escaped here too.
        print(json_for_terminal(json.dumps(result.report, indent=2, ensure_ascii=False)))
    else:
        print(for_terminal(format_text(result.report), keep_newlines=True))
    print(for_terminal(result.hint, keep_newlines=True), file=sys.stderr)
    return 0


# What each number of the table is (docs/method.md, "CAS and CAB").
_FOOTNOTES = [
    "CAS = mean |M_vanilla - M_base| x100: a size of change, with no test of its own (hence no p; its test is "
    "against its rerun floor, below, after `run --reruns 1`). --json keeps a signed test of vanilla vs base as "
    "its p (null: vanilla and base cite alike on average), which is not a test of CAS.",
    "CAB = mean (M_base - M_cf) x100; CAB > 0 favours label A. Its p: a paired test of base vs cf (null: base and cf "
    "cite alike), the sign-flip permutation test while at most 1,000 items differ, the paired t-test above; "
    "the verdict is that p at 0.05.",
    "differ: items whose M differs between the two runs. citing: answers (of n) that cite a shown document in "
    "run a and run b; where none does, CAS and CAB are undefined.",
]


def _citing(r: dict[str, Any]) -> str:
    if r.get("n_cite_a") is None:
        return "-"
    return f"{r['n_cite_a']}/{r['n']}, {r['n_cite_b']}/{r['n']}"


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def text_columns(rows: list[list[str]], right: AbstractSet[int] = frozenset()) -> list[str]:
    """Rows of cells as lines, each column as wide as its widest cell (two spaces between)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()
        for row in rows
    ]


def format_text(report: dict[str, Any]) -> str:
    """The human-readable bias report."""
    lines = []
    meta = report["metadata_type"] or "no metadata type"
    if report["label_a"]:
        meta += f" (label A = {report['label_a']} on relevant documents in base, {report['label_b']} in cf)"
    if report.get("label_note"):
        meta += f"; {report['label_note']}"
    lines.append(f"experiment {report['experiment_id']}  model {report['model']}  dataset {report['dataset']}")
    lines.append(f"metadata: {meta}")
    lines.append("runs: " + ", ".join(f"{m} {r}" for m, r in report["runs"].items()))
    for run_id, what in report["ignored_runs"].items():
        lines.append(f"ignored: run {run_id} ({what})")
    lines.append("")
    table = [["measure", "metric", "value", "95% CI (bootstrap)", "p", "n", "differ", "citing (a, b)", "verdict"]]
    approximate = None
    for r in report["results"]:
        undefined = r.get("undefined_reason")
        note = r.get("interval_note") or ""
        if note.startswith("approximate"):
            approximate = approximate or note
        table.append([
            r["measure"], r["metric"],
            "undefined" if undefined else _num(r["value"], "+.1f" if r["measure"] == "CAB" else ".1f"),
            interval_cell(r["ci_low"], r["ci_high"], note),
            "-" if r["measure"] == "CAS" else format_p(r["p"]), str(r["n"]), str(r["n_differ"]), _citing(r),
            r["direction"] or "-",
        ])
    body = text_columns(table, right={2, 4, 5, 6})
    lines += [body[0], "-" * max(len(x) for x in body), *body[1:]]
    floors = rerun_floor_lines(report)
    if floors:
        lines += ["", *floors]
    lines.append("")
    lines += _FOOTNOTES
    if approximate:
        lines.append(f"Intervals {approximate}: the percentile bootstrap covers less than 95% of the time "
                     "where few items differ (simulated: CAB 87% at 30 items, CAS 92% at 100; docs/figures.md).")
    if report["confidence"]:
        lines.append("")
        lines.append("citation confidence (mean probability of the cited number):")
        rows = [["mode", "cited docs", "labelled", "mean p", "citations"]]
        for c in report["confidence"]:
            if not c["n_citations"]:
                prob = "-"
            elif c["mean_probability"] is None:
                prob = "n/a (no probabilities)"
            else:
                prob = f"{c['mean_probability']:.3f}"
            rows.append([c["rag_mode"], c["cited_docs"], c["label"] or "-", prob, str(c["n_citations"])])
        lines += ["  " + line for line in text_columns(rows, right={4})]
    if report.get("explanations"):
        lines.append("")
        lines.append("explanations (Prompt 5) that give a label as a reason:")
        rows = [["mode", "explainer", "label", "explanations", "share"]]
        for e in report["explanations"]:
            rows.append([e["rag_mode"], e["explainer_model"], str(e["n_mention_label"]), str(e["n_explanations"]),
                         f"{100 * e['label_share']:.1f}%"])
        lines += ["  " + line for line in text_columns(rows, right={2, 3, 4})]
    return "\n".join(lines)
