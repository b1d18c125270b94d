"""`python -m engine used --experiment ID [--mode M] | --runs ID,ID`: cited or used? Whether each
cited document was used, by leaving it out of the prompt with the answer held fixed.

The work is engine.usecases.judges.used's (each answer is stored as it finishes, and the same command
again reads only what is missing). Here: the options, the cost line, a progress bar, and what is
printed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.bounds import for_terminal, json_for_terminal
from engine.commands._options import add_db_arg
from engine.errors import UserError
from engine.types import MODES
from engine.usecases.judges.used import DEFAULT_THRESHOLD, UsedRequest, check_request, plan_used, run_used
from engine.usecases.judges.used_figures import used_figures


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "used",
        help="cited or used? each cited document's necessity, by ablation with the answer held fixed",
        description="Read each stored answer, its text held fixed, after the full prompt, after the prompt "
        "without each shown document (the others keep their numbers) and after the prompt with only the cited "
        "documents. Necessity = log P(answer | full) - log P(answer | without it); a document is used when its "
        "necessity exceeds --threshold. Prints per run the share of citations used, cited but not used "
        "(post-rationalised) and used but not cited, and for base and cf runs CAB on the cited and on the used "
        "documents. Forward passes = answers x (shown documents + 2), stated before it starts; the rows are "
        "stored as they go and a re-run resumes.",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--experiment", help="the runs of this experiment (id or name; see `python -m engine list`)")
    which.add_argument("--runs", help="run ids, comma-separated")
    p.add_argument("--mode", action="append", default=None, choices=MODES, metavar="MODE",
                   help=f"with --experiment: only this mode's runs, repeatable ({', '.join(MODES)}; default: all)")
    add_db_arg(p)
    p.add_argument("--model", default=None,
                   help="Hugging Face id or local folder of the model that answered (default: the stored one)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda:N (default: %(default)s)")
    p.add_argument("--quantize", default="auto", choices=("auto", "4bit", "8bit", "none"),
                   help="auto = 4bit on a GPU, none on CPU (default: %(default)s)")
    p.add_argument("--dtype", default="auto", help="auto | bfloat16 | float16 | float32 (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=16, help="prompt variants per forward pass (default: %(default)s)")
    p.add_argument("--limit", type=int, default=None, help="only each run's first N answers (default: all)")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                   help="necessity in nats above which a document is used (default: %(default)s: the answer at "
                   "least e^0.5 = 1.65 times less likely without it)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(main=main)


def _clean(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else float(x)


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None or math.isnan(x) else format(x, fmt)


def _share(x: float | None, undefined: str, fmt: str = ".1%") -> str:
    return f"({undefined})" if x is None or math.isnan(x) else format(x, fmt)


def _cab_dict(results: Any) -> dict[str, Any]:
    return {r.metric: {"value": _clean(r.value), "ci_low": _clean(r.ci_low), "ci_high": _clean(r.ci_high),
                       "p": _clean(r.p), "n": r.n, "verdict": r.direction} for r in results}


def as_dict(result: Any) -> dict[str, Any]:
    """The result as plain JSON values (NaN as null)."""
    cab = result.cab
    return {
        "model": result.model,
        "threshold": result.threshold,
        "runs": [{
            "run_id": r.run_id, "rag_mode": r.rag_mode, "n_answers": r.n_answers, "n_documents": r.n_documents,
            "n_citations": r.n_cited, "n_used": r.n_used, "n_cited_used": r.n_cited_used,
            "share_used": _clean(r.share_used), "share_post_rationalised": _clean(r.share_post_rationalised),
            "share_used_not_cited": _clean(r.share_used_not_cited), "mean_sufficiency": _clean(r.mean_sufficiency),
            "n_citing": r.n_citing,
            "share_used_at": {format(t, "g"): _clean(s) for t, s in r.used_share_at},
        } for r in result.runs],
        "cab": None if cab is None else {"base_run": cab.base_run, "cf_run": cab.cf_run, "n_items": cab.n_items,
                                         "on_cited": _cab_dict(cab.cited), "on_used": _cab_dict(cab.used)},
        "cab_note": result.cab_note,
        "n_measured_now": result.n_measured_now,
        "skipped": result.skipped_by_reason,
    }


def _cab_line(name: str, results: Any) -> str:
    parts = [f"{r.metric} {_num(r.value, '+.2f')} [{_num(r.ci_low, '+.2f')}, {_num(r.ci_high, '+.2f')}]"
             for r in results]
    verdict = next((r.direction for r in results if r.metric == "f1"), None) or ""
    return f"  CAB on {name}: " + ", ".join(parts) + (f"  ({verdict})" if verdict else "")


def format_text(result: Any) -> str:
    """The human-readable report."""
    lines = [f"read with {result.model}; used = necessity > {result.threshold:g} nats"]
    for r in result.runs:
        lines.append(f"run {r.run_id} ({r.rag_mode}): {r.n_answers} answers, {r.n_documents} shown documents, "
                     f"{r.n_cited} citations")
        # A share over no citations (or no used document) is undefined, and says why.
        no_cited, no_used = "undefined: no citation", "undefined: no document used"
        lines.append(f"  used {_share(r.share_used, no_cited)} of citations, post-rationalised (cited, not used) "
                     f"{_share(r.share_post_rationalised, no_cited)}, used but not cited "
                     f"{_share(r.share_used_not_cited, no_used)} of {r.n_used} used")
        lines.append("  used share by threshold: " + ", ".join(f"{t:g} nats {_share(s, no_cited)}" for t, s in r.used_share_at)
                     + f"; mean sufficiency {_share(r.mean_sufficiency, 'undefined: no answer cites a shown document', '+.3f')}"
                     + (f" nats over the {r.n_citing} answers that cite" if r.n_citing else ""))
    cab = result.cab
    if cab is None:
        lines.append(result.cab_note or "no CAB split")
    else:
        lines.append(f"CAB split, runs {cab.base_run} (base) vs {cab.cf_run} (cf), {cab.n_items} items (x100):")
        lines.append(_cab_line("cited (the label changes which are cited)", cab.cited))
        lines.append(_cab_line("used (the label changes which are used)", cab.used))
    lines.append(f"answers read now: {result.n_measured_now}")
    by_reason = result.skipped_by_reason
    if by_reason:
        lines.append(f"answers skipped: {sum(by_reason.values())}")
        lines.extend(f"  {n}: {reason}" for reason, n in sorted(by_reason.items()))
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    from engine.commands.bias import db_path
    from engine.commands.explain import Bar

    runs = tuple(r.strip() for r in (args.runs or "").split(",") if r.strip())
    if args.runs is not None and not runs:
        raise UserError("--runs needs at least one run id")
    if args.mode and args.experiment is None:
        raise UserError("--mode goes with --experiment (with --runs, name the runs)")
    request = UsedRequest(db=Path(args.db or "."), experiment=args.experiment, modes=tuple(args.mode or ()),
                          runs=runs, model=args.model, device=args.device, quantize=args.quantize, dtype=args.dtype,
                          batch_size=args.batch_size, limit=args.limit, threshold=args.threshold)
    check_request(request)  # the options first, then the store
    request = replace(request, db=db_path(args.db))
    plan = plan_used(request)
    print(for_terminal(plan.cost_line()), file=sys.stderr, flush=True)
    bar = Bar(len(plan.todo), "answer", "used")  # opens after "loading ...": when reading starts
    try:
        n_now, too_long = run_used(plan, request, progress=bar.update, stage=bar.stage)
    finally:
        bar.close()
    result = used_figures(plan, request.threshold, n_now=n_now, skipped=plan.skipped + too_long)
    if args.json:
        print(json_for_terminal(json.dumps(as_dict(result), indent=2, ensure_ascii=False)))
    else:
        print(for_terminal(format_text(result), keep_newlines=True))
    return 0
