"""`python -m engine propensity --experiment ID`: propensity CAB, the label bias read from the
probabilities of citing each document with the vanilla answer's text held fixed.

The work is engine.usecases.judges.propensity's (each batch of items is stored as it finishes, and the
same command again probes only what is missing). Here: the options, a progress bar, and what is
printed.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.bounds import for_terminal, json_for_terminal
from engine.commands._options import add_db_arg
from engine.usecases.judges.propensity import PropensityRequest, check_request, propensity


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "propensity",
        help="label bias as a shift of citation probability (propensity CAB)",
        description="Read each item's vanilla answer under the base and the cf prompt and, at each "
        "citation mark, score how likely the model is to cite every shown document ('[1]', '[2]', ...). "
        "Propensity CAB = mean over items of (mass on relevant documents under base - under cf) x 100, "
        "with a bootstrap 95% interval and a paired t-test. Nothing is generated; the probabilities "
        "are stored as they go and a re-run resumes.",
    )
    p.add_argument("--experiment", required=True, help="experiment id or name (see `python -m engine list`)")
    add_db_arg(p)
    p.add_argument("--model", default=None,
                   help="Hugging Face id or local folder of the model that answered (default: the stored one)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda:N (default: %(default)s)")
    p.add_argument("--quantize", default="auto", choices=("auto", "4bit", "8bit", "none"),
                   help="auto = 4bit on a GPU, none on CPU (default: %(default)s)")
    p.add_argument("--dtype", default="auto", help="auto | bfloat16 | float16 | float32 (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=16,
                   help="(citation site, document) rows per forward pass (default: %(default)s)")
    p.add_argument("--limit", type=int, default=None, help="only the first N vanilla answers (default: all)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(main=main)


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def as_dict(result: Any) -> dict[str, Any]:
    """The result as plain JSON values (NaN as null)."""
    def clean(x: float | None) -> float | None:
        return None if x is None or math.isnan(x) else float(x)

    cab = result.cab
    return {
        "experiment_id": result.experiment_id,
        "probe_model": result.probe_model,
        "propensity_cab": None if cab is None else {
            "value": clean(cab.mean), "ci_low": clean(cab.ci_low), "ci_high": clean(cab.ci_high),
            "t": clean(cab.t), "p": clean(cab.p), "n": cab.n},
        "mean_mass": {m: clean(v) for m, v in result.mean_mass.items()},
        "n_items": len(result.items),
        "n_probed_now": result.n_probed_now,
        "skipped": result.skipped_by_reason,
    }


def format_text(result: Any) -> str:
    """The human-readable report."""
    cab = result.cab
    lines = [f"experiment {result.experiment_id}, probed with {result.probe_model}"]
    if cab is None:
        lines.append("propensity CAB: - (no item could be probed)")
    else:
        lines.append(f"propensity CAB: {_num(cab.mean, '+.2f')}  95% CI [{_num(cab.ci_low, '+.2f')}, "
                     f"{_num(cab.ci_high, '+.2f')}]  t = {_num(cab.t, '.3f')}  p = {_num(cab.p, '.4g')}  n = {cab.n}")
    lines.append(f"mean mass on relevant documents: base {_num(result.mean_mass['base'], '.4f')}, "
                 f"cf {_num(result.mean_mass['cf'], '.4f')}")
    lines.append(f"items probed: {len(result.items)} ({result.n_probed_now} in this run, the others stored before)")
    by_reason = result.skipped_by_reason
    lines.append(f"items skipped: {sum(by_reason.values())}")
    lines.extend(f"  {n}: {reason}" for reason, n in sorted(by_reason.items()))
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    from engine.commands.bias import db_path
    from engine.commands.explain import Bar

    request = PropensityRequest(db=Path(args.db or "."), experiment=args.experiment, model=args.model,
                                device=args.device, quantize=args.quantize, dtype=args.dtype,
                                batch_size=args.batch_size, limit=args.limit)
    check_request(request)  # the options first, then the store
    request = replace(request, db=db_path(args.db))
    bar = Bar(None, "item", "propensity")  # opens after "loading ...": when probing starts
    try:
        result = propensity(request, progress=bar.update, stage=bar.stage)
    finally:
        bar.close()
    if args.json:
        print(json_for_terminal(json.dumps(as_dict(result), indent=2, ensure_ascii=False)))
    else:
        print(for_terminal(format_text(result), keep_newlines=True))
    return 0
