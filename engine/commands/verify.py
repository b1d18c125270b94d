"""`python -m engine verify --experiment ID|--run ID`: AttrScore attribution verification.

Every (answer sentence, cited document) pair of the stored answers is judged attributable,
extrapolatory or contradictory. The work is engine.usecases.judges.verify's: as in `explain`,
everything that can fail is checked before the first write, each finished batch is then
committed on its own, and the same command again judges only the pairs the same judge model
has not judged. Here: the options, a progress bar, and what is printed.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from engine.commands.explain import Bar, add_model_options, add_target_options, build_request
from engine.usecases.judges.judge_label_bias import judge_cab
from engine.usecases.judges.judge_label_pairs import plan_label_bias, run_label_bias
from engine.usecases.judges.verify import plan_judges, run_verify, verification_shares
from engine.usecases.judges.verify_request import VerifyRequest


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify",
        help="judge whether each cited document supports its sentence (AttrScore)",
        description="Ask a judge model (AttrScore's validator instruction) whether each document an "
        "answer sentence cites supports the claim (question + sentence): attributable, extrapolatory "
        "(the document lacks the information) or contradictory. Stores each verdict, the raw output "
        "and each class's probability, and prints per run the share of each class.",
    )
    add_target_options(p)
    add_model_options(p, role="judge", max_new_tokens=16)
    p.add_argument("--judge", action="append", default=None, metavar="SPEC",
                   help="a judge, repeatable, each judging the same pairs in turn after --model's: nli:MODEL (an NLI "
                   "model: entailment -> attributable), llm:MODEL or MODEL (AttrScore's prompt), or NAME:MODEL (a judge "
                   "registered in engine/judges/registry.py, see docs/extending.md)")
    p.add_argument("--show-label", action="store_true",
                   help="the judge sees each document's label as the run's prompt showed it (stored as JUDGE+label; "
                   "base and cf runs only); on an experiment it also judges each base sentence with the label as base "
                   "and as cf showed it, and with none, then prints the judge's own CAB (base - cf share judged "
                   "attributable, only the label differing) beside its hidden-label control")
    p.set_defaults(main=main)


def main(args: argparse.Namespace) -> int:
    request = replace(build_request(VerifyRequest, args), judges=tuple(args.judge or ()), show_label=args.show_label)
    planned = plan_judges(request)  # every judge planned and its config read before any judge loads
    for one, plan in planned:
        _judge(one, plan, run_verify)
    if args.show_label:
        for one, _ in planned:
            _judge_labels(one)
        _print_judge_cabs([plan for _, plan in planned])
    return 0


def _judge_labels(request: Any) -> None:
    """Judge the base run's sentences with the label as base and as cf showed it, and with none."""
    plan = plan_label_bias(request)
    if plan is None or plan.n_todo == 0:
        return
    bar = Bar(plan.n_todo, "verdict", f"label bias of {plan.judge}")
    try:
        n = run_label_bias(plan, request, progress=bar.update, stage=bar.stage)
    finally:
        bar.close()
    left = f"; {plan.n_left_out} pairs left out, their document not shown in cf" if plan.n_left_out else ""
    print(f"  run {plan.base_run}  base     judged {n} times with the base label, the cf label or none by "
          f"{plan.judge}{left}")


def _judge(request: Any, plan: Any, run_verify: Any) -> None:
    if plan.n_todo == 0:
        for todo in plan.runs:
            print(f"  run {todo.run.run_id}  {todo.run.rag_mode:<7}  no citations left to verify by {plan.label}")
        _print_shares(plan)
        return
    bar = Bar(plan.n_todo, "citation", f"verify with {plan.label}")
    try:
        result = run_verify(plan, request, progress=bar.update, stage=bar.stage)
    finally:
        bar.close()
    for done in result.runs:
        n = done.n_done
        print(f"  run {done.run.run_id}  {done.run.rag_mode:<7}  verified {n} citation{'s' if n != 1 else ''} with {plan.label}")
    cut = getattr(result, "n_truncated", None)
    if cut is not None:
        print(f"  {plan.label}: {cut} of {result.n_done} pairs had their document cut to fit the model's input")
    _print_shares(plan)


def _print_judge_cabs(plans: list[Any]) -> None:
    for plan in plans:
        if plan.experiment_id is None:
            continue
        c = judge_cab(plan.db, plan.experiment_id, plan.label)
        if c.undefined:
            print(f"  judge CAB of {c.judge}: undefined: {c.undefined}")
        else:
            left_out = f", {c.n_unparsed} left out as unparsed" if c.n_unparsed else ""
            print(f"  judge CAB of {c.judge}: {c.cab:+.1%} (attributable {c.base_share:.0%} with the base label, "
                  f"{c.cf_share:.0%} with the cf label, on the same base sentences; {c.n_pairs} paired citations"
                  f"{left_out}, exact McNemar p = {c.p:.3g}; base gives relevant documents '{c.label_a}', "
                  f"cf '{c.label_b}')")
        h = c.hidden
        control = (f"undefined: {h.undefined}" if h.undefined else
                   f"{h.cab:+.1%} (attributable {h.base_share:.0%} and {h.cf_share:.0%}; {h.n_pairs} paired citations, "
                   f"exact McNemar p = {h.p:.3g})")
        print(f"  control, the same sentences with the label hidden both times: {control}")


def _print_shares(plan: Any) -> None:
    for run_id, model, mode, n, att, ext, con, unp in verification_shares(plan):
        print(f"  {mode:<7} run {run_id}  {model}: {n} citations, attributable {att:.0%}, extrapolatory {ext:.0%}, "
              f"contradictory {con:.0%}, unparsed {unp:.0%}")
