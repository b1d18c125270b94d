"""`python -m engine bias --experiment ID`: CAS and CAB of one experiment, with tests and intervals.

Reads only the store. Its SQL is a plain SELECT from the views of migration 002 and stays in
this module rather than store/queries.py because that module imports pandas, which alone
takes longer than everything else this command does (scripts/bench_bias.py).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

MODE_ORDER = ("vanilla", "base", "cf")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bias",
        help="CAS (vanilla vs base) and CAB (base vs cf) of one experiment",
        description="CAS = mean |M_vanilla - M_base|, CAB = mean (M_base - M_cf), for citation "
        "precision, recall and F1, x100, with t-test p values and bootstrap 95%% intervals.",
    )
    p.add_argument("--experiment", required=True, help="experiment id (see `python -m engine report`)")
    p.add_argument("--db", default=None, help="DuckDB file (default: $PATTRIEVAL_DB or results/pattrieval.duckdb)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--resamples", type=int, default=None, help="bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.set_defaults(main=main)


def db_path(arg: str | None) -> Path:
    """The --db path or the default; an existing file is required by read-only commands."""
    from engine.errors import UserError
    from engine.paths import default_db_path

    path = Path(arg) if arg else default_db_path()
    if not path.is_file():
        raise UserError(f"no database at {path} (give --db PATH or set PATTRIEVAL_DB)")
    return path


def load_experiment(path: Path, experiment_id: str) -> dict[str, Any]:
    """Runs, per-item metrics and citation confidence of one experiment, newest complete run per mode."""
    from engine.errors import UserError
    from store.db import connect

    with connect(path, read_only=True) as conn:
        runs = conn.execute(
            "SELECT run_id, rag_mode, status, model, metadata_type, config_json, dataset "
            "FROM runs WHERE experiment_id = ? ORDER BY created_utc, run_id",
            [experiment_id],
        ).fetchall()
        if not runs:
            raise UserError(f"no experiment '{experiment_id}' in {path}")
        chosen: dict[str, tuple] = {}
        unfinished: dict[str, tuple] = {}
        for run in runs:  # oldest first, so the newest complete run of a mode wins
            (chosen if run[2] == "complete" else unfinished)[run[1]] = run
        if not chosen:
            states = ", ".join(f"{r[1]} run {r[0]} is {r[2]}" for r in runs)
            raise UserError(f"experiment '{experiment_id}' has no complete run ({states})")
        ids = [r[0] for r in chosen.values()]
        rows = conn.execute(
            # IN (subquery) lets DuckDB push the filter into the view; list_contains does not.
            "SELECT run_id, item_id, precision, recall, f1 FROM query_metrics "
            "WHERE run_id IN (SELECT unnest(?))",
            [ids],
        ).fetchall()
        confidence = conn.execute(
            "SELECT rag_mode, cited_docs, label, mean_probability, n_with_probability, n_citations "
            "FROM citation_confidence WHERE run_id IN (SELECT unnest(?)) "
            "ORDER BY CASE rag_mode WHEN 'vanilla' THEN 0 WHEN 'base' THEN 1 ELSE 2 END, cited_docs DESC",
            [ids],
        ).fetchall()
    return {"runs": chosen, "unfinished": unfinished, "rows": rows, "confidence": confidence}


def main(args: argparse.Namespace) -> int:
    import numpy as np

    from engine.bias import MetricTable, compute_bias, labels_for
    from engine.stats import DEFAULT_RESAMPLES

    from engine.errors import UserError

    if args.resamples is not None and args.resamples < 100:
        raise UserError(f"--resamples must be at least 100, not {args.resamples}")
    path = db_path(args.db)
    data = load_experiment(path, args.experiment)
    runs = data["runs"]
    by_run: dict[str, list[tuple]] = {run_id: [] for run_id, *_ in runs.values()}
    for row in data["rows"]:
        by_run[row[0]].append(row)
    tables = {}
    for mode, run in runs.items():
        rows = by_run[run[0]]
        tables[mode] = MetricTable(
            tuple(r[1] for r in rows),
            np.array([r[2:5] for r in rows], dtype=float).reshape(len(rows), 3),
        )
    reference = runs.get("base") or runs.get("cf") or next(iter(runs.values()))
    config = json.loads(reference[5]) if reference[5] else {}
    labels = labels_for(reference[4], config)
    results = compute_bias(
        tables,
        labels,
        run_ids={mode: run[0] for mode, run in runs.items()},
        n_resamples=args.resamples or DEFAULT_RESAMPLES,
        seed=args.seed,
    )
    report = {
        "experiment_id": args.experiment,
        "model": reference[3],
        "dataset": reference[6],
        "metadata_type": reference[4],
        "label_a": labels.a if labels else None,
        "label_b": labels.b if labels else None,
        "runs": {mode: runs[mode][0] for mode in MODE_ORDER if mode in runs},
        "ignored_runs": {r[0]: f"{r[1]}, {r[2]}" for r in data["unfinished"].values()},
        "results": [_finite_dict(r.__dict__) for r in results],
        "confidence": [
            _finite_dict(dict(zip(("rag_mode", "cited_docs", "label", "mean_probability", "n_with_probability", "n_citations"), c)))
            for c in data["confidence"]
        ],
        "bootstrap": {"method": "percentile", "resamples": args.resamples or DEFAULT_RESAMPLES, "seed": args.seed},
    }
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        print(format_text(report))
    return 0


def _finite_dict(d: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN or Infinity: undefined statistics become null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def format_p(p: float | None) -> str:
    """A p value as people read it."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def format_text(report: dict[str, Any]) -> str:
    """The human-readable bias report."""
    lines = []
    meta = report["metadata_type"] or "no metadata type"
    if report["label_a"]:
        meta += f" (label A = {report['label_a']} on relevant documents in base, {report['label_b']} in cf)"
    lines.append(f"experiment {report['experiment_id']}  model {report['model']}  {meta}")
    lines.append("runs: " + ", ".join(f"{m} {r}" for m, r in report["runs"].items()))
    for run_id, what in report["ignored_runs"].items():
        lines.append(f"ignored: run {run_id} ({what})")
    lines.append("")
    header = f"{'measure':<8}{'metric':<11}{'value':>8}  {'95% CI (bootstrap)':<20}{'t':>8}{'p':>9}{'n':>7}  direction"
    lines.append(header)
    lines.append("-" * len(header))
    for r in report["results"]:
        value = _num(r["value"], "+.1f" if r["measure"] == "CAB" else ".1f")
        ci = f"[{_num(r['ci_low'], '.1f')}, {_num(r['ci_high'], '.1f')}]"
        t = _num(r["t"], ".2f") if r["t"] is not None else ("-" if r["p"] is None else "inf")
        lines.append(
            f"{r['measure']:<8}{r['metric']:<11}{value:>8}  {ci:<20}{t:>8}{format_p(r['p']):>9}{r['n']:>7}  "
            f"{r['direction'] or '-'}"
        )
    lines.append("")
    lines.append("CAS = mean |M_vanilla - M_base| x100; p: one-sample t-test of the absolute differences against 0.")
    lines.append("CAB = mean (M_base - M_cf) x100; p: paired t-test. CAB > 0 favours label A.")
    if report["confidence"]:
        lines.append("")
        lines.append("citation confidence (mean probability of the cited number):")
        for c in report["confidence"]:
            label = f" labelled {c['label']}" if c["label"] else ""
            prob = "n/a (no probabilities)" if c["mean_probability"] is None else f"{c['mean_probability']:.3f}"
            lines.append(
                f"  {c['rag_mode']:<8}{c['cited_docs'] + ' docs' + label:<34}{prob}  ({c['n_citations']} citations)"
            )
    return "\n".join(lines)
