"""`python -m engine selfcheck --model M`: prove the real generation path on your own model.

Loads the model exactly as `run` does (same options, same loader: 4-bit on a GPU by default),
runs the checks of engine.usecases.runs.selfcheck on a few items of the bundled sample, times one batch and
prints PASS/FAIL per check. Exit 0 when no check fails, 1 when one does, 2 for a user error
(one line). Writes nothing: no store, no file, unless --json PATH asks for the report.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.commands.run import add_loading_args
from engine.errors import UserError
from engine.usecases.runs.selfcheck_model import SelfcheckRequest, selfcheck

ANSWER_CHARS = 100  # of each answer shown; the report is about the checks, not the answers


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "selfcheck",
        help="check a model on this machine: chat template, stop tokens, log-probs, speed",
        description="Load a model exactly as `run` would (4-bit on a GPU by default), check its chat "
        "template (one BOS, stop tokens, no system role), generate a few answers on the sample through "
        "the real generator, compare the recorded log-probs with a plain forward pass, time a batch, and "
        "print PASS/FAIL per check. Exit 0 when every check passes, 1 when one fails. Writes nothing "
        "unless --json is given.",
    )
    p.add_argument(
        "--model", default="auto",
        help="Hugging Face id or local folder; 'smoke' = offline tiny model; 'auto' = what `run` "
        "picks here (default: %(default)s)",
    )
    m = p.add_argument_group("loading (as `run`)")
    add_loading_args(m)
    c = p.add_argument_group("check")
    c.add_argument("--dataset", default=None, help="items to prompt with (default: sample, the bundled sample)")
    c.add_argument("--answers", type=int, default=3, metavar="N", help="answers generated and checked (default: %(default)s)")
    c.add_argument("--max-new-tokens", type=int, default=64, metavar="N", help="most tokens per answer (default: %(default)s)")
    c.add_argument(
        "--batch-size", type=int, default=8, metavar="N",
        help="prompts in the timed batch, as `run --batch-size`; 0 = no timing (default: %(default)s)",
    )
    c.add_argument("--json", default=None, metavar="PATH", help="also write the report as JSON to PATH (default: none)")
    p.set_defaults(main=main)


def _check_args(args: argparse.Namespace) -> None:
    if args.answers < 1:
        raise UserError("--answers must be at least 1")
    if args.max_new_tokens < 1:
        raise UserError("--max-new-tokens must be at least 1")
    if args.batch_size < 0:
        raise UserError("--batch-size must be 0 (no timing) or more")
    if args.json is not None:
        # Before the model loads: minutes of loading should not end in "no such folder".
        path = Path(args.json)
        if path.is_dir():
            raise UserError(f"--json {path}: is a folder; give a file name")
        if not path.parent.is_dir():
            raise UserError(f"--json {path}: the folder {path.parent} does not exist")


def _shown(text: str) -> str:
    """Model text on one line, cut, with control characters escaped (a terminal would obey them)."""
    flat = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text.replace("\n", " "))
    return flat if len(flat) <= ANSWER_CHARS else flat[: ANSWER_CHARS - 3] + "..."


def print_report(report, dataset_source: str) -> None:
    """The report as a person reads it: the model, one line per check, answers, timing, verdict."""
    revision = f"@{report.revision[:12]}" if report.revision else ""
    print(f"selfcheck {report.model_id}{revision}  family {report.family}  quantization {report.quantization}  "
          f"dtype {report.dtype}  device {report.device}")
    width = max(len(c.name) for c in report.checks)
    for check in report.checks:
        print(f"  {check.status:<4}  {check.name:<{width}}  {check.detail}")
    print(f"answers (greedy, from {dataset_source}):")
    for a in report.answers:
        print(f"  {a.item_id} {a.mode:<7} {a.finish_reason:<6} {a.n_tokens:>3} tokens  {_shown(a.text)!s}")
    if report.timing is not None:
        t = report.timing
        print(f"timing: one batch of {t.batch_size} prompts ({t.n_prompt_tokens} prompt tokens), up to {t.max_new_tokens} "
              f"new tokens each: {t.n_new_tokens} tokens in {t.seconds:.2f} s = {t.tokens_per_s:.1f} tokens/s")
    print(f"log-prob tolerance: {report.tolerance.why}")
    failed = [c.name for c in report.checks if c.status == "FAIL"]
    warned = [c.name for c in report.checks if c.status == "WARN"]
    note = f" ({len(warned)} WARN to look at: {', '.join(warned)})" if warned else ""
    if failed:
        print(f"FAIL: {len(failed)} of {len(report.checks)} checks failed: {', '.join(failed)}{note}")
    else:
        print(f"PASS: all {len(report.checks) - len(warned)} checks passed{note}")


def main(args: argparse.Namespace) -> int:
    _check_args(args)

    from engine.commands.run import HF_TOKEN_WARNING

    if args.hf_token:
        print(HF_TOKEN_WARNING, file=sys.stderr)
    request = SelfcheckRequest(args.model, args.dataset, args.quantize, args.device, args.dtype, args.answers,
                               args.max_new_tokens, args.batch_size, args.hf_token)
    outcome = selfcheck(request, on_loading=lambda label: print(f"loading {label} ...", file=sys.stderr),
                        on_step=lambda message: print(f"{message} ...", file=sys.stderr))
    report = outcome.report
    print_report(report, outcome.dataset_source)
    if args.json is not None:
        try:
            Path(args.json).write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
        except OSError as err:
            raise UserError(f"--json {args.json}: {err.strerror or err}") from None
        print(f"report written to {args.json}")
    return 0 if report.passed else 1
