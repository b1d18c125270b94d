"""`python -m engine report`: the paper's Tables 1 and 2 from the complete runs in the store.

Table 1: model x metadata label (of relevant / non-relevant documents; "-" for vanilla) ->
citation precision and recall (x100, 1 decimal) and EM (3 decimals).
Table 2: metadata type x model -> CAB on precision and recall (x100), * where the paired
t-test gives p < 0.05.

Where several complete runs fall on one row (say, vanilla runs of a gender and a race
experiment), the newest is shown. A dataset column appears when the runs span datasets.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
from typing import Any

TYPE_ORDER = ("gender", "race", "hai")
TYPE_NAMES = {"gender": "Gender", "race": "Race", "hai": "Human vs. LLM"}
SIGNIFICANCE = 0.05


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="the paper's Table 1 (quality, EM) and Table 2 (CAB) from the store")
    p.add_argument("--db", default=None, help="DuckDB file (default: $PATTRIEVAL_DB or results/pattrieval.duckdb)")
    p.add_argument("--format", choices=("markdown", "csv", "json"), default="markdown")
    p.add_argument("--table", choices=("1", "2", "all"), default="all", help="which table (default: both)")
    p.set_defaults(main=main)


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _value(x: Any) -> float | None:
    return None if _missing(x) else float(x)


def table1(runs: Any) -> list[dict[str, Any]]:
    """Rows of Table 1 from run_metrics rows (a DataFrame, oldest first)."""
    newest: dict[tuple, dict[str, Any]] = {}
    for rec in runs.to_dict("records"):
        rel = rec["label_relevant"] if rec["rag_mode"] != "vanilla" else None
        non = rec["label_nonrelevant"] if rec["rag_mode"] != "vanilla" else None
        if rec["rag_mode"] != "vanilla" and _missing(rel):
            rel, non = f"{rec['metadata_type'] or '?'} {rec['rag_mode']}", None
        key = (rec["model"], rec["dataset_sha"], rel or "-", non or "-")
        newest.pop(key, None)  # re-insert so the newest run also decides the row's position
        newest[key] = {
            "model": rec["model"],
            "dataset": rec["dataset"],
            "relevant": rel or "-",
            "non_relevant": non or "-",
            "precision": None if _missing(rec["precision"]) else 100 * rec["precision"],
            "recall": None if _missing(rec["recall"]) else 100 * rec["recall"],
            "em": _value(rec["exact_match"]),
            "n": int(rec["n"]),
            "run_id": rec["run_id"],
        }
    models = list(dict.fromkeys(row["model"] for row in newest.values()))
    # The paper's order: per model, the vanilla row first, then labelled rows as they came.
    return sorted(newest.values(), key=lambda r: (models.index(r["model"]), r["relevant"] != "-"))


def table2(bias: Any) -> list[dict[str, Any]]:
    """Rows of Table 2 from bias-view rows (a DataFrame, oldest first): the newest experiment wins."""
    experiments: dict[str, dict[str, Any]] = {}
    for rec in bias.to_dict("records"):
        if rec["measure"] != "CAB":
            continue
        exp = experiments.setdefault(rec["experiment_id"], {
            "metadata_type": rec["metadata_type"],
            "model": rec["model"],
            "dataset": rec["dataset"],
            "experiment_id": rec["experiment_id"],
        })
        exp[rec["metric"]] = _value(rec["value"])
        exp[f"{rec['metric']}_p"] = _value(rec["p"])
        exp["n"] = int(rec["n"])
        if rec["n"] != rec["n_a"] or rec["n"] != rec["n_b"]:
            exp["note"] = f"paired {rec['n']} of {rec['n_a']}/{rec['n_b']} items"
    newest: dict[tuple, dict[str, Any]] = {}
    for exp in experiments.values():
        key = (exp["metadata_type"], exp["model"], exp["dataset"])
        newest.pop(key, None)
        newest[key] = exp
    order = {t: i for i, t in enumerate(TYPE_ORDER)}
    models = list(dict.fromkeys(e["model"] for e in newest.values()))
    rows = sorted(newest.values(), key=lambda e: (order.get(e["metadata_type"], len(order)), str(e["metadata_type"]),
                                                   models.index(e["model"])))
    return [{k: r.get(k) for k in ("metadata_type", "model", "dataset", "precision", "precision_p", "recall",
                                   "recall_p", "n", "experiment_id", "note")} for r in rows]


def _cab(value: float | None, p: float | None) -> str:
    if value is None:
        return "-"
    star = "*" if p is not None and p < SIGNIFICANCE else ""
    return f"{value:+.1f}{star}"


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _type_name(name: str | None) -> str:
    return TYPE_NAMES.get(name or "", name or "-")


def formatted_tables(rows1: list[dict[str, Any]], rows2: list[dict[str, Any]]) -> tuple[list[list[str]], list[list[str]]]:
    """Both tables as header + rows of display strings."""
    many = len({r["dataset"] for r in rows1} | {r["dataset"] for r in rows2}) > 1
    head1 = ["Answer generator"] + (["Dataset"] if many else []) + ["Relevant", "Non-relevant", "Precision", "Recall", "EM"]
    body1 = []
    for r in rows1:
        body1.append([r["model"]] + ([r["dataset"]] if many else []) + [
            r["relevant"], r["non_relevant"], _fmt(r["precision"], ".1f"), _fmt(r["recall"], ".1f"), _fmt(r["em"], ".3f")])
    head2 = ["Metadata type", "Answer generator"] + (["Dataset"] if many else []) + ["CAB Δ Precision", "CAB Δ Recall"]
    body2 = []
    for r in rows2:
        body2.append([_type_name(r["metadata_type"]), r["model"]] + ([r["dataset"]] if many else []) + [
            _cab(r["precision"], r["precision_p"]), _cab(r["recall"], r["recall_p"])])
    return [head1] + body1, [head2] + body2


def _markdown(table: list[list[str]]) -> str:
    head, *body = table
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def render(rows1: list[dict[str, Any]], rows2: list[dict[str, Any]], fmt: str, which: str = "all") -> str:
    """The report in markdown, csv or json."""
    if fmt == "json":
        out: dict[str, Any] = {}
        if which in ("1", "all"):
            out["table1"] = rows1
        if which in ("2", "all"):
            out["table2"] = rows2
        return json.dumps(out, indent=2, ensure_ascii=False, default=str)
    t1, t2 = formatted_tables(rows1, rows2)
    if fmt == "csv":
        parts = []
        for name, table in (("1", t1), ("2", t2)):
            if which in (name, "all"):
                buf = io.StringIO()
                csv.writer(buf, lineterminator="\n").writerows(table)
                parts.append(buf.getvalue().rstrip("\n"))
        return "\n\n".join(parts)
    parts = []
    if which in ("1", "all"):
        parts.append("Table 1: attribution quality and answer correctness (complete runs; '-' = vanilla)\n\n"
                     + (_markdown(t1) if rows1 else "(no complete runs)"))
    if which in ("2", "all"):
        notes = [f"- {_type_name(r['metadata_type'])} / {r['model']}: {r['note']}" for r in rows2 if r.get("note")]
        parts.append("Table 2: attribution bias (CAB, x100; > 0 favours label A: Woman / White / Human; "
                     f"* paired t-test p < {SIGNIFICANCE})\n\n"
                     + (_markdown(t2) if rows2 else "(no experiment with complete base and cf runs)")
                     + ("\n\n" + "\n".join(notes) if notes else ""))
    return "\n\n".join(parts)


def main(args: argparse.Namespace) -> int:
    from engine.commands.bias import db_path
    from store.queries import bias_table, run_metric_table

    path = db_path(args.db)
    rows1 = table1(run_metric_table(path)) if args.table in ("1", "all") else []
    rows2 = table2(bias_table(path)) if args.table in ("2", "all") else []
    print(render(rows1, rows2, args.format, args.table))
    return 0
