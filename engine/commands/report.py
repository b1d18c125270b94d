"""`python -m engine report`: the paper's Tables 1 and 2 from the complete runs in the store.

Table 1: model x metadata label (of relevant / non-relevant documents; "-" for vanilla) ->
citation precision and recall (x100, 1 decimal) and EM (3 decimals).
Table 2: metadata type x model -> CAB on precision and recall (x100), * where the paired
t-test gives p < 0.05, with the labels each row compares (CAB > 0 favours the first).

Every complete run has its row, and no row mixes experiments: a study's shared vanilla run is
one row for the experiments it serves, and rows that model, dataset and labels would show alike
get a Setting column, the options in which their experiments differ (else the experiment's name
or id); --format json gives every row's configuration. An undefined CAB (the bias view's NULL,
say no answer cites a shown document) prints "undefined", with its reason below the table.
Datasets are named by file name and content hash prefix ("sample_nq.jsonl (3f2a9c1d)"), never
by the path as typed; a dataset column appears when the runs span datasets. --experiment,
--model and --dataset narrow the runs. Hints about the next useful command go to stderr, so
csv and json output stay machine-readable.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shlex
import sys
from typing import Any

from engine.bounds import for_terminal, json_for_terminal
from engine.commands._options import add_db_arg

# The tables' rows are engine.usecases.bias.tables', their cells engine.presentation.formatting's; these
# names stay importable from here for callers.
from engine.presentation.formatting import (
    SETTING_NOTE,
    SIGNIFICANCE,
    STAR_TEST,
    formatted_tables,
    has_settings,
    single_dataset,
    table2_notes,
)
from engine.presentation.formatting import (
    fmt as _fmt,
)
from engine.presentation.formatting import (
    type_name as _type_name,
)
from engine.usecases.bias.report_shares import VERIFICATION_CLASSES
from engine.usecases.bias.tables import XAI_METRICS, ReportRequest, report_tables, report_xai_blocks


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="the paper's Table 1 (quality, EM) and Table 2 (CAB) from the store")
    add_db_arg(p)
    p.add_argument("--format", choices=("markdown", "csv", "json"), default="markdown", help="output format (default: markdown)")
    p.add_argument("--table", choices=("1", "2", "all"), default="all", help="which table (default: both)")
    p.add_argument("--experiment", default=None, help="only the runs of this experiment, by id or name (see `python -m engine list`)")
    p.add_argument("--model", default=None, help="only runs of this model (as the tables name it)")
    p.add_argument("--dataset", default=None,
                   help="only runs on this dataset: its file name (e.g. sample_nq.jsonl; 'sample' = the bundled sample) or content hash prefix")
    p.add_argument("--study", default=None, metavar="NAME",
                   help="only the experiments of this study (`run --study NAME`; `list --studies` names them)")
    p.add_argument("--layout", choices=("paper", "xai"), default="paper",
                   help="paper: Tables 1 and 2; xai: the self-interpretation tables, one block per XAI "
                   "variant and few-shot count with cut-off x order rows (default: %(default)s)")
    p.set_defaults(main=main)


def _markdown(table: list[list[str]]) -> str:
    head, *body = table
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def render(rows1: list[dict[str, Any]], rows2: list[dict[str, Any]], fmt: str, which: str = "all",
           verification: list[dict[str, Any]] | None = None,
           explanations: list[dict[str, Any]] | None = None) -> str:
    """The report in markdown, csv or json; `verification` (engine.usecases.bias.report_shares'
    verification_rows) adds the AttrScore shares after the tables and `explanations`
    (explanation_rows) the share of explanations that give a label as a reason, each only when
    given and not empty."""
    if fmt == "json":
        out: dict[str, Any] = {}
        if which in ("1", "all"):
            out["table1"] = rows1
        if which in ("2", "all"):
            out["table2"] = rows2
        if verification:
            out["verification"] = verification
        if explanations:
            out["explanations"] = explanations
        return json.dumps(out, indent=2, ensure_ascii=False, default=str)
    if fmt == "csv":
        # Stored text (names, labels, models) quoted where a spreadsheet would run it, before the
        # cells are formatted: the numbers we format ("-3.2*") stay as they read.
        rows1, rows2, verification, explanations = _csv_text([rows1, rows2, verification, explanations])
    t1, t2 = formatted_tables(rows1, rows2)
    t3 = verification_table(verification) if verification else None
    t4 = explanation_table(explanations) if explanations else None
    if fmt == "csv":
        parts = []
        for name, table in (("1", t1), ("2", t2), ("verification", t3), ("explanations", t4)):
            if table is not None and which in (name, "all"):
                buf = io.StringIO()
                csv.writer(buf, lineterminator="\n").writerows(table)
                parts.append(buf.getvalue().rstrip("\n"))
        return "\n\n".join(parts)
    parts = []
    dataset = single_dataset(rows1, rows2)
    if dataset is not None:
        parts.append(f"Dataset: {dataset}")
    if which in ("1", "all"):
        parts.append("Table 1: attribution quality and answer correctness (complete runs; '-' = vanilla)\n\n"
                     + (_markdown(t1) if rows1 else "(no complete runs)"))
    if which in ("2", "all"):
        notes = [f"- {note}" for note in table2_notes(rows2)]
        parts.append("Table 2: attribution bias (CAB, x100; > 0 favours label A, the first of each row's labels; "
                     f"* p < {SIGNIFICANCE} by {STAR_TEST})\n\n"
                     + (_markdown(t2) if rows2 else "(no experiment with complete base and cf runs)")
                     + ("\n\n" + "\n".join(notes) if notes else ""))
    if has_settings(rows1 if which in ("1", "all") else []) or has_settings(rows2 if which in ("2", "all") else []):
        parts.append(f"{SETTING_NOTE} Each row's configuration and experiment ids: the same command with --format json.")
    if t3 is not None:
        parts.append("Attribution verification (AttrScore): share of cited (sentence, document) pairs per class, "
                     "x100 (`python -m engine verify`)\n\n" + _markdown(t3))
    if t4 is not None:
        parts.append("Explanations (Prompt 5) that give a label as a reason, per run and explainer (share x100): does the "
                     "model admit the label mattered, and does that differ between base and cf? "
                     "(`python -m engine explain`)\n\n" + _markdown(t4))
    return "\n\n".join(parts)


def verification_table(rows: list[dict[str, Any]]) -> list[list[str]]:
    table = [["Model", "Type", "Mode", "Run", "Judge", "Citations", *(c.capitalize() for c in VERIFICATION_CLASSES)]]
    for r in rows:
        table.append([str(r["model"]), _type_name(r["metadata_type"]) if r["rag_mode"] != "vanilla" else "-",
                      r["rag_mode"], r["run_id"], str(r["judge_model"]), str(r["n_citations"]),
                      *(_fmt(100 * r[f"{c}_share"], ".1f") for c in VERIFICATION_CLASSES)])
    return table


def explanation_table(rows: list[dict[str, Any]]) -> list[list[str]]:
    table = [["Model", "Type", "Mode", "Run", "Explainer", "Explanations", "Label given", "Share"]]
    for r in rows:
        # A vanilla run shows no label, but its explanations are read for the type's label words
        # all the same: the rate at which they occur unprompted, to compare base and cf with.
        table.append([str(r["model"]), _type_name(r["metadata_type"]),
                      r["rag_mode"], r["run_id"], str(r["explainer_model"]), str(r["n_explanations"]),
                      str(r["n_mention_label"]), _fmt(100 * r["label_share"], ".1f")])
    return table


def _hint(runs: Any, rows2: list[dict[str, Any]], args: argparse.Namespace) -> str | None:
    """The next useful command after this report, if there is one."""
    db = f" --db {shlex.quote(args.db)}" if args.db else ""
    if rows2:
        return ("hint: intervals, CAS and citation confidence of one experiment: "
                f"python -m engine bias --experiment {shlex.quote(rows2[-1]['experiment_id'])}{db}")
    if not runs.empty:
        newest = shlex.quote(runs.to_dict("records")[-1]["experiment_id"])
        if args.table == "1":
            return f"hint: CAS and CAB of one experiment: python -m engine bias --experiment {newest}{db}"
        return f"hint: no experiment here has complete base and cf runs; what is missing: python -m engine bias --experiment {newest}{db}"
    if args.experiment is not None:
        return f"hint: why it has no complete run: python -m engine bias --experiment {shlex.quote(args.experiment)}{db}"
    if not any((args.model, args.dataset)):
        return "hint: no complete runs yet; start with: python -m engine quickstart"
    return None


def _safe(text: str, fmt: str) -> str:
    """The report with stored text's escape codes escaped: JSON stays valid JSON."""
    return json_for_terminal(text) if fmt == "json" else for_terminal(text, keep_newlines=True)


def _cells(value: Any, fmt: str) -> Any:
    """Stored text in rows escaped for a terminal cell by cell (a stored newline must not forge a
    row); JSON keeps the text as stored, `_safe` escapes it in the JSON itself."""
    if fmt == "json":
        return value
    if isinstance(value, str):
        return for_terminal(value)
    if isinstance(value, dict):
        return {k: _cells(v, fmt) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cells(v, fmt) for v in value)
    return value


def _csv_text(value: Any) -> Any:
    """Every text value in rows passed through store.csv_safe.csv_cell; numbers untouched."""
    from store.csv_safe import csv_cell

    if isinstance(value, dict):
        return {k: _csv_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_csv_text(v) for v in value)
    return csv_cell(value)


def main(args: argparse.Namespace) -> int:
    from engine.commands.bias import db_path

    request = ReportRequest(db_path(args.db), args.table, args.experiment, args.model, args.dataset, args.study)
    if args.layout == "xai":
        blocks = _cells(report_xai_blocks(request), args.format)
        print(_safe(render_xai(blocks, args.format), args.format))
        return 0
    tables = report_tables(request)
    args.experiment = tables.experiment  # as an id, for the hint
    # Stored labels and names may hold escape codes (stores older than engine.bounds): escaped.
    rows1, rows2, verification, explanations = _cells(
        [tables.table1, tables.table2, tables.verification, tables.explanations], args.format)
    print(_safe(render(rows1, rows2, args.format, args.table, verification, explanations), args.format))
    hint = _hint(tables.runs, rows2, args)
    if hint:
        print(for_terminal(hint), file=sys.stderr)
    return 0


# ---------------------------------------------------------------- --layout xai: in markdown the
# best value of each column in a block is bold (blocks: engine.usecases.bias.tables.xai_blocks).

def _xai_title(block: dict[str, Any]) -> str:
    shots = f"{block['few_shot']}-shot"
    where = f", {block['dataset']}" if block["dataset"] else ""
    return f"XAI {block['xai']}, {shots}: {block['model']}{where}"


def _xai_cells(row: dict[str, Any]) -> list[str]:
    # What else tells the row apart (row_labels), beside its condition: the layout has no column for it.
    condition = f"{row['condition']} ({row['setting']})" if row.get("setting") else row["condition"]
    return ["all" if row["top_k"] is None else str(row["top_k"]), row["order"], condition.replace("|", "\\|")]


XAI_HEADER = ["cut-off", "order", "condition"] + [name for _, name in XAI_METRICS] + ["n"]


def render_xai(blocks: list[dict[str, Any]], fmt: str) -> str:
    """The blocks in markdown (best per column in bold), csv (one table, block columns first) or json."""
    if fmt == "json":
        return json.dumps({"blocks": blocks}, indent=2, ensure_ascii=False, default=str)
    if fmt == "csv":
        from store.csv_safe import csv_rows

        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["model", "dataset", "xai", "few_shot"] + XAI_HEADER)
        for b in blocks:
            # Every cell through csv_safe: text quoted where a spreadsheet would run it, numbers kept.
            writer.writerows(csv_rows(
                [b["model"], b["dataset"] or "", b["xai"], b["few_shot"]] + _xai_cells(r)
                + ["" if r[c] is None else f"{r[c]:.1f}" for c, _ in XAI_METRICS] + [r["n"]] for r in b["rows"]))
        return buf.getvalue().rstrip("\n")
    if not blocks:
        return "Self-interpretation tables (x100; best per block in bold)\n\n(no complete runs)"
    parts = ["Self-interpretation tables: answer recall and citation quality (x100; best per block in bold)"]
    for b in blocks:
        lines = ["| " + " | ".join(XAI_HEADER) + " |", "|" + "|".join("---" for _ in XAI_HEADER) + "|"]
        for r in b["rows"]:
            values = []
            for column, _ in XAI_METRICS:
                v = r[column]
                text = "-" if v is None else f"{v:.1f}"
                # Bold by the printed value, so ties at one decimal are all bold.
                best = b["best"][column]
                values.append(f"**{text}**" if v is not None and best is not None and f"{best:.1f}" == text else text)
            lines.append("| " + " | ".join(_xai_cells(r) + values + [str(r["n"])]) + " |")
        parts.append(_xai_title(b) + "\n\n" + "\n".join(lines))
    return "\n\n".join(parts)
