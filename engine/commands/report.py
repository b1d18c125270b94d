"""`python -m engine report`: the paper's Tables 1 and 2 from the complete runs in the store.

Table 1: model x metadata label (of relevant / non-relevant documents; "-" for vanilla) ->
citation precision and recall (x100, 1 decimal) and EM (3 decimals).
Table 2: metadata type x model -> CAB on precision and recall (x100), * where the paired
t-test gives p < 0.05, with the labels each row compares (CAB > 0 favours the first).

Where several complete runs fall on one row (say, vanilla runs of a gender and a race
experiment), the newest is shown. Datasets are named by file name and content hash prefix
("sample_nq.jsonl (3f2a9c1d)"), never by the path as typed; a dataset column appears when the
runs span datasets. --experiment, --model and --dataset narrow the runs. Hints about the next
useful command go to stderr, so csv and json output stay machine-readable.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any

# The paper's Table 2 names and order of the built-in types (engine.prompts.METADATA_TYPES);
# custom types follow under their own names.
TYPE_NAMES = {"gender": "Gender", "race": "Race", "hai": "Human vs. LLM"}
TYPE_ORDER = tuple(TYPE_NAMES)
SIGNIFICANCE = 0.05


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="the paper's Table 1 (quality, EM) and Table 2 (CAB) from the store")
    p.add_argument("--db", default=None, help="DuckDB file (default: $PATTRIEVAL_DB or results/pattrieval.duckdb)")
    p.add_argument("--format", choices=("markdown", "csv", "json"), default="markdown", help="output format (default: markdown)")
    p.add_argument("--table", choices=("1", "2", "all"), default="all", help="which table (default: both)")
    p.add_argument("--experiment", default=None, help="only the runs of this experiment, by id or name (see `python -m engine list`)")
    p.add_argument("--model", default=None, help="only runs of this model (as the tables name it)")
    p.add_argument("--dataset", default=None,
                   help="only runs on this dataset: its file name (e.g. sample_nq.jsonl) or content hash prefix")
    p.add_argument("--study", default=None, metavar="NAME",
                   help="only the experiments of this study (`run --study NAME`; `list --studies` names them)")
    p.add_argument("--layout", choices=("paper", "xai"), default="paper",
                   help="paper: Tables 1 and 2; xai: the self-interpretation tables, one block per XAI "
                   "variant and few-shot count with cut-off x order rows (default: %(default)s)")
    p.set_defaults(main=main)


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _value(x: Any) -> float | None:
    return None if _missing(x) else float(x)


def _dataset(rec: dict[str, Any]) -> str:
    return rec.get("dataset_label") or rec.get("dataset") or "-"


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
            "dataset": _dataset(rec),
            "dataset_sha": rec["dataset_sha"],
            "relevant": rel or "-",
            "non_relevant": non or "-",
            "precision": None if _missing(rec["precision"]) else 100 * rec["precision"],
            "recall": None if _missing(rec["recall"]) else 100 * rec["recall"],
            "em": _value(rec["exact_match"]),
            "n": int(rec["n"]),
            "run_id": rec["run_id"],
            "experiment_id": rec["experiment_id"],
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
            "label_a": None if _missing(rec.get("label_a")) else rec.get("label_a"),
            "label_b": None if _missing(rec.get("label_b")) else rec.get("label_b"),
            "model": rec["model"],
            "dataset": _dataset(rec),
            "dataset_sha": rec.get("dataset_sha"),
            "experiment_id": rec["experiment_id"],
        })
        exp[rec["metric"]] = _value(rec["value"])
        exp[f"{rec['metric']}_p"] = _value(rec["p"])
        exp["n"] = int(rec["n"])
        if rec["n"] != rec["n_a"] or rec["n"] != rec["n_b"]:
            exp["note"] = f"paired {rec['n']} of {rec['n_a']}/{rec['n_b']} items"
    newest: dict[tuple, dict[str, Any]] = {}
    for exp in experiments.values():
        key = (exp["metadata_type"], exp["label_a"], exp["label_b"], exp["model"], exp["dataset_sha"] or exp["dataset"])
        newest.pop(key, None)
        newest[key] = exp
    order = {t: i for i, t in enumerate(TYPE_ORDER)}
    models = list(dict.fromkeys(e["model"] for e in newest.values()))
    rows = sorted(newest.values(), key=lambda e: (order.get(e["metadata_type"], len(order)), str(e["metadata_type"]),
                                                   models.index(e["model"])))
    return [{k: r.get(k) for k in ("metadata_type", "label_a", "label_b", "model", "dataset", "dataset_sha", "precision",
                                   "precision_p", "recall", "recall_p", "n", "experiment_id", "note")} for r in rows]


def experiment_tables(path: Path, experiment_ids: list[str] | tuple[str, ...]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows of Tables 1 and 2 for these experiments (ids), as `report --experiment` gives them for one.

    Read run by run (store.queries.table1_runs / report_bias_rows), so that a few experiments
    cost the same in a store of a million answers as alone (the app's Bias tab).
    """
    from store.queries import report_bias_rows, table1_runs

    return table1(table1_runs(path, experiment_ids)), table2(report_bias_rows(path, experiment_ids))


def _cab(value: float | None, p: float | None) -> str:
    if value is None:
        return "-"
    star = "*" if p is not None and p < SIGNIFICANCE else ""
    return f"{value:+.1f}{star}"


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _type_name(name: str | None) -> str:
    return TYPE_NAMES.get(name or "", name or "-")


def _labels(row: dict[str, Any]) -> str:
    if row.get("label_a") and row.get("label_b"):
        return f"{row['label_a']} vs {row['label_b']}"
    return "label A vs label B"


def _many_datasets(rows1: list[dict[str, Any]], rows2: list[dict[str, Any]]) -> bool:
    return len({r["dataset_sha"] or r["dataset"] for r in rows1 + rows2}) > 1


def single_dataset(rows1: list[dict[str, Any]], rows2: list[dict[str, Any]]) -> str | None:
    """The one dataset all rows share (the tables then have no dataset column), else None."""
    datasets = {r["dataset"] for r in rows1 + rows2}
    return datasets.pop() if len(datasets) == 1 and not _many_datasets(rows1, rows2) else None


def formatted_tables(rows1: list[dict[str, Any]], rows2: list[dict[str, Any]]) -> tuple[list[list[str]], list[list[str]]]:
    """Both tables as header + rows of display strings."""
    many = _many_datasets(rows1, rows2)
    head1 = ["Answer generator"] + (["Dataset"] if many else []) + ["Relevant", "Non-relevant", "Precision", "Recall", "EM"]
    body1 = []
    for r in rows1:
        body1.append([r["model"]] + ([r["dataset"]] if many else []) + [
            r["relevant"], r["non_relevant"], _fmt(r["precision"], ".1f"), _fmt(r["recall"], ".1f"), _fmt(r["em"], ".3f")])
    head2 = ["Metadata type", "Labels (A vs B)", "Answer generator"] + (["Dataset"] if many else []) + [
        "CAB Δ Precision", "CAB Δ Recall"]
    body2 = []
    for r in rows2:
        body2.append([_type_name(r["metadata_type"]), _labels(r), r["model"]] + ([r["dataset"]] if many else []) + [
            _cab(r["precision"], r["precision_p"]), _cab(r["recall"], r["recall_p"])])
    return [head1] + body1, [head2] + body2


def _markdown(table: list[list[str]]) -> str:
    head, *body = table
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def render(rows1: list[dict[str, Any]], rows2: list[dict[str, Any]], fmt: str, which: str = "all",
           verification: list[dict[str, Any]] | None = None,
           explanations: list[dict[str, Any]] | None = None) -> str:
    """The report in markdown, csv or json; `verification` (verification_rows) adds the AttrScore
    shares after the tables and `explanations` (explanation_rows) the share of explanations that
    give a label as a reason, each only when given and not empty."""
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
        notes = [f"- {_type_name(r['metadata_type'])} / {r['model']}: {r['note']}" for r in rows2 if r.get("note")]
        parts.append("Table 2: attribution bias (CAB, x100; > 0 favours label A, the first of each row's labels; "
                     f"* paired t-test p < {SIGNIFICANCE})\n\n"
                     + (_markdown(t2) if rows2 else "(no experiment with complete base and cf runs)")
                     + ("\n\n" + "\n".join(notes) if notes else ""))
    if t3 is not None:
        parts.append("Attribution verification (AttrScore): share of cited (sentence, document) pairs per class, "
                     "x100 (`python -m engine verify`)\n\n" + _markdown(t3))
    if t4 is not None:
        parts.append("Explanations (Prompt 5) that give a label as a reason, per run and explainer (share x100): does the "
                     "model admit the label mattered, and does that differ between base and cf? "
                     "(`python -m engine explain`)\n\n" + _markdown(t4))
    return "\n\n".join(parts)


VERIFICATION_CLASSES = ("attributable", "extrapolatory", "contradictory", "unparsed")


def verification_rows(path: Path, runs: Any) -> list[dict[str, Any]]:
    """Per complete run shown and judge model: the verification_shares row; empty without any."""
    from store.queries import verification_shares

    if runs.empty:
        return []
    meta = {r["run_id"]: r for r in runs.to_dict("records")}
    out = []
    for run_id, judge, mode, n, *shares in verification_shares(path, list(meta)):
        rec = meta[run_id]
        out.append({"run_id": run_id, "model": rec.get("model"), "metadata_type": rec.get("metadata_type"),
                    "rag_mode": mode, "judge_model": judge, "n_citations": int(n),
                    **{f"{c}_share": float(v) for c, v in zip(VERIFICATION_CLASSES, shares)}})
    return out


def verification_table(rows: list[dict[str, Any]]) -> list[list[str]]:
    table = [["Model", "Type", "Mode", "Run", "Judge", "Citations", *(c.capitalize() for c in VERIFICATION_CLASSES)]]
    for r in rows:
        table.append([str(r["model"]), _type_name(r["metadata_type"]) if r["rag_mode"] != "vanilla" else "-",
                      r["rag_mode"], r["run_id"], str(r["judge_model"]), str(r["n_citations"]),
                      *(_fmt(100 * r[f"{c}_share"], ".1f") for c in VERIFICATION_CLASSES)])
    return table


def explanation_rows(path: Path, runs: Any) -> list[dict[str, Any]]:
    """Per complete run shown and explainer model: the explanation_rates row; empty without any."""
    from store.queries import explanation_rates

    if runs.empty:
        return []
    meta = {r["run_id"]: r for r in runs.to_dict("records")}
    return [
        {"run_id": run_id, "model": meta[run_id].get("model"), "metadata_type": meta[run_id].get("metadata_type"),
         "rag_mode": mode, "explainer_model": explainer, "n_explanations": int(n),
         "n_mention_label": int(n_label), "label_share": float(share)}
        for run_id, explainer, mode, n, n_label, share in explanation_rates(path, list(meta))
    ]


def explanation_table(rows: list[dict[str, Any]]) -> list[list[str]]:
    table = [["Model", "Type", "Mode", "Run", "Explainer", "Explanations", "Label given", "Share"]]
    for r in rows:
        # A vanilla run shows no label, but its explanations are read for the type's label words
        # all the same: the rate at which they occur unprompted, to compare base and cf with.
        table.append([str(r["model"]), _type_name(r["metadata_type"]),
                      r["rag_mode"], r["run_id"], str(r["explainer_model"]), str(r["n_explanations"]),
                      str(r["n_mention_label"]), _fmt(100 * r["label_share"], ".1f")])
    return table


def dataset_matches(wanted: str, name: Any, sha: Any) -> bool:
    """Whether --dataset WANTED names a dataset: its file name, or a prefix of its content hash."""
    wanted = wanted.strip()
    if isinstance(name, str) and name and name in (wanted, Path(wanted).name):
        return True
    prefix = wanted.lower()
    return len(prefix) >= 4 and all(c in "0123456789abcdef" for c in prefix) and str(sha or "").startswith(prefix)


def _narrow(frame: Any, args: argparse.Namespace) -> Any:
    """The rows of a run_metrics or bias frame that pass --experiment, --model and --dataset."""
    if frame.empty:
        return frame
    keep = [True] * len(frame)
    for i, rec in enumerate(frame.to_dict("records")):
        if args.experiment is not None and rec["experiment_id"] != args.experiment:
            keep[i] = False
        elif args.model is not None and rec["model"] != args.model:
            keep[i] = False
        elif args.dataset is not None and not dataset_matches(args.dataset, rec.get("dataset_name"), rec.get("dataset_sha")):
            keep[i] = False
    return frame[keep]


def _check_filters(path: Path, all_runs: Any, args: argparse.Namespace) -> None:
    """UserError, naming what there is, when a filter matches no complete run (or no run at all)."""
    from engine.commands.bias import unknown_experiment
    from engine.errors import UserError

    if args.experiment is not None and not (all_runs["experiment_id"] == args.experiment).any():
        raise UserError(unknown_experiment(path, args.experiment))
    records = [r for r in all_runs.to_dict("records") if r["status"] == "complete"]
    if args.model is not None and not any(r["model"] == args.model for r in records):
        known = ", ".join(sorted({str(r["model"]) for r in records})) or "none"
        raise UserError(f"no complete run of model '{args.model}' in {path} (models with complete runs: {known})")
    if args.dataset is not None and not any(dataset_matches(args.dataset, r["dataset_name"], r["dataset_sha"]) for r in records):
        known = ", ".join(sorted({str(r["dataset_label"]) for r in records})) or "none"
        raise UserError(f"no complete run on dataset '{args.dataset}' in {path} (datasets with complete runs: {known})")


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


def _study_experiments(path: Path, study: str | None) -> list[str] | None:
    """The experiment ids of --study, or None without it; an unknown study is refused in one line."""
    if study is None:
        return None
    from engine.errors import UserError
    from store.queries import study_experiment_ids, study_listing

    ids = study_experiment_ids(path, study)
    if ids is None:
        known = ", ".join(s.name for s in study_listing(path)[:5]) or "none yet (run with comma lists or --study)"
        raise UserError(f"no study '{study}' in {path}; studies: {known}")
    return ids


def _safe(text: str, fmt: str) -> str:
    """The report with stored text's escape codes escaped: JSON stays valid JSON."""
    from engine.bounds import for_terminal, json_for_terminal

    return json_for_terminal(text) if fmt == "json" else for_terminal(text, keep_newlines=True)


def _cells(value: Any, fmt: str) -> Any:
    """Stored text in rows escaped for a terminal cell by cell (a stored newline must not forge a
    row); JSON keeps the text as stored, `_safe` escapes it in the JSON itself."""
    from engine.bounds import for_terminal

    if fmt == "json":
        return value
    if isinstance(value, str):
        return for_terminal(value)
    if isinstance(value, dict):
        return {k: _cells(v, fmt) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cells(v, fmt) for v in value)
    return value


def main(args: argparse.Namespace) -> int:
    from engine.bounds import for_terminal
    from engine.commands.bias import db_path
    from store.queries import bias_table, resolve_experiment, run_metric_table

    path = db_path(args.db)
    if args.experiment is not None:
        # A `run --experiment` name works as well as the id; an unknown one is refused below.
        args.experiment = resolve_experiment(path, args.experiment) or args.experiment
    all_runs = run_metric_table(path, status=None)
    _check_filters(path, all_runs, args)
    runs = _narrow(all_runs[all_runs["status"] == "complete"], args)
    study = _study_experiments(path, args.study)
    if study is not None:
        runs = runs[runs["experiment_id"].isin(study)]
    if args.layout == "xai":
        from store.queries import run_prompt_settings

        settings = run_prompt_settings(path, runs["run_id"].tolist()).to_dict("records")
        blocks = _cells(xai_blocks(runs.to_dict("records"), settings), args.format)
        print(_safe(render_xai(blocks, args.format), args.format))
        return 0
    rows1 = table1(runs) if args.table in ("1", "all") else []
    bias = _narrow(bias_table(path, args.experiment), args)
    if study is not None and not bias.empty:
        bias = bias[bias["experiment_id"].isin(study)]
    rows2 = table2(bias) if args.table in ("2", "all") else []
    # Only where `python -m engine verify` stored some, and only in the full report: the output is
    # otherwise what it was before verification existed.
    verification = verification_rows(path, runs) if args.table == "all" else []
    explanations = explanation_rows(path, runs) if args.table == "all" else []
    # Stored labels and names may hold escape codes (stores older than engine.bounds): escaped.
    rows1, rows2, verification, explanations = _cells([rows1, rows2, verification, explanations], args.format)
    print(_safe(render(rows1, rows2, args.format, args.table, verification, explanations), args.format))
    hint = _hint(runs, rows2, args)
    if hint:
        print(for_terminal(hint), file=sys.stderr)
    return 0


# ---------------------------------------------------------------- --layout xai
# The self-interpretation study's tables (Garigliotti's Tables 2 to 4): one block per model, XAI
# variant and few-shot count (and dataset, when the runs span several); in each block one row
# per cut-off x order x condition (vanilla, or metadata type and mode) with answer recall,
# citation precision, citation recall and citation F1 (x100). In markdown the best value of each
# column in a block is bold. A vanilla run copied from another (a study's shared vanilla, config
# `shared_from`) is shown once, as the run it was copied from.

from engine.types import MODES, ORDERS, XAI_VARIANTS  # noqa: E402 - light, no torch


XAI_METRICS = (("answer_recall", "answer recall"), ("precision", "citation precision"),
           ("recall", "citation recall"), ("f1", "citation F1"))


def _int_or_none(x: Any) -> int | None:
    value = _value(x)
    return None if value is None else int(value)


def xai_blocks(runs: list[dict[str, Any]], settings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Blocks from run_metrics records (complete runs) and run_prompt_settings records."""
    by_run = {s["run_id"]: s for s in settings}
    present = {r["run_id"] for r in runs}
    many_datasets = len({r.get("dataset_sha") for r in runs}) > 1
    blocks: dict[tuple, dict[str, Any]] = {}
    for rec in runs:
        s = by_run.get(rec["run_id"], {})
        shared = s.get("shared_from")
        if isinstance(shared, str) and shared in present:
            continue  # the same answers as its source, which is shown
        xai, few_shot = s.get("xai") or "none", _int_or_none(s.get("few_shot")) or 0
        dataset = rec.get("dataset_label") if many_datasets else None
        key = (rec["model"], dataset, xai, few_shot)
        block = blocks.setdefault(key, {"model": rec["model"], "dataset": dataset, "xai": xai,
                                        "few_shot": few_shot, "rows": []})
        mode = rec["rag_mode"]
        condition = "vanilla" if mode == "vanilla" else f"{rec.get('metadata_type') or '?'} {mode}"
        row = {"top_k": _int_or_none(s.get("top_k")), "order": s.get("order") or "ranked", "condition": condition,
               "mode": mode, "n": _int_or_none(rec.get("n")) or 0, "run_id": rec["run_id"],
               "experiment_id": rec["experiment_id"]}
        for column, _ in XAI_METRICS:
            value = _value(rec.get(column))
            row[column] = None if value is None else value * 100
        block["rows"].append(row)

    def row_order(row: dict[str, Any]) -> tuple:
        k = row["top_k"]
        return (k is None, k or 0, ORDERS.index(row["order"]) if row["order"] in ORDERS else len(ORDERS),
                MODES.index(row["mode"]) if row["mode"] in MODES else len(MODES), row["condition"])

    def block_order(item: tuple) -> tuple:
        (model, dataset, xai, few_shot), _ = item
        return (str(model), str(dataset), XAI_VARIANTS.index(xai) if xai in XAI_VARIANTS else len(XAI_VARIANTS), few_shot)

    out = []
    for _, block in sorted(blocks.items(), key=block_order):
        block["rows"].sort(key=row_order)
        block["best"] = {
            column: max((r[column] for r in block["rows"] if r[column] is not None), default=None)
            for column, _ in XAI_METRICS
        }
        out.append(block)
    return out


def _xai_title(block: dict[str, Any]) -> str:
    shots = f"{block['few_shot']}-shot"
    where = f", {block['dataset']}" if block["dataset"] else ""
    return f"XAI {block['xai']}, {shots}: {block['model']}{where}"


def _xai_cells(row: dict[str, Any]) -> list[str]:
    return ["all" if row["top_k"] is None else str(row["top_k"]), row["order"], row["condition"].replace("|", "\\|")]


XAI_HEADER = ["cut-off", "order", "condition"] + [name for _, name in XAI_METRICS] + ["n"]


def render_xai(blocks: list[dict[str, Any]], fmt: str) -> str:
    """The blocks in markdown (best per column in bold), csv (one table, block columns first) or json."""
    if fmt == "json":
        return json.dumps({"blocks": blocks}, indent=2, ensure_ascii=False, default=str)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["model", "dataset", "xai", "few_shot"] + XAI_HEADER)
        for b in blocks:
            for r in b["rows"]:
                writer.writerow([b["model"], b["dataset"] or "", b["xai"], b["few_shot"]] + _xai_cells(r)
                                + ["" if r[c] is None else f"{r[c]:.1f}" for c, _ in XAI_METRICS] + [r["n"]])
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
