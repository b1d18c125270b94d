"""`python -m engine verify --experiment ID|--run ID`: AttrScore attribution verification.

Every (answer sentence, cited document) pair of the stored answers is judged attributable,
extrapolatory or contradictory. The work is engine.usecases.verify's: as in `explain`,
everything that can fail is checked before the first write, each finished batch is then
committed on its own, and the same command again judges only the pairs the same judge model
has not judged. Here: the options, a progress bar, and what is printed.
"""

from __future__ import annotations

import argparse
from typing import Any

from engine.commands.explain import Bar, add_model_options, add_target_options, build_request


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
    p.set_defaults(main=main)


def main(args: argparse.Namespace) -> int:
    from engine.usecases.verify import VerifyRequest, plan_verify, run_verify

    request = build_request(VerifyRequest, args)
    plan = plan_verify(request)
    if plan.n_todo == 0:
        for todo in plan.runs:
            print(f"  run {todo.run.run_id}  {todo.run.rag_mode:<7}  no citations left to verify by {plan.label}")
        _print_shares(plan)
        return 0
    bar = Bar(plan.n_todo, "citation", f"verify with {plan.label}")
    try:
        result = run_verify(plan, request, progress=bar.update, stage=bar.stage)
    finally:
        bar.close()
    for done in result.runs:
        n = done.n_done
        print(f"  run {done.run.run_id}  {done.run.rag_mode:<7}  verified {n} citation{'s' if n != 1 else ''} with {plan.label}")
    _print_shares(plan)
    return 0


def _print_shares(plan: Any) -> None:
    from engine.usecases.verify import verification_shares

    for run_id, model, mode, n, att, ext, con, unp in verification_shares(plan):
        print(f"  {mode:<7} run {run_id}  {model}: {n} citations, attributable {att:.0%}, extrapolatory {ext:.0%}, "
              f"contradictory {con:.0%}, unparsed {unp:.0%}")
