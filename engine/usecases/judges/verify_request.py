"""What `verify` is asked (engine.usecases.judges.verify): which answers' citations, and which judges.
A module of its own so that verify's parts (verify_nli, judge_label_pairs) take it typed without
importing verify, which calls them."""

from __future__ import annotations

from dataclasses import dataclass

from engine.usecases.judges.judge_runs import JudgeRequest


@dataclass(frozen=True)
class VerifyRequest(JudgeRequest):
    """Which answers' citations to judge, and by which judge (default: the model that answered)."""

    # More judges (engine.usecases.judges.verify_nli): "nli:MODEL", "llm:MODEL" or "MODEL" (AttrScore's),
    # "NAME:MODEL" (a claim judge registered in engine.judges.registry), judged one after another
    # on the same pairs after `model`'s; plan_verify plans one (see judge_requests).
    judges: tuple[str, ...] = ()
    # The judge sees the label each document had in the run's prompt; stored as "<judge>+label".
    show_label: bool = False
