"""What `verify` is asked (engine.usecases.judges.verify): which answers' citations, and which judges.
A module of its own so that verify's parts (verify_nli, judge_label_pairs) take it typed without
importing verify, which calls them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.usecases.served import ServerOptions


@dataclass(frozen=True)
class VerifyRequest:
    """Which answers' citations to judge, and by which judge (default: the model that answered)."""

    db: Path
    experiment: str | None = None  # id or name; or else `runs`
    runs: tuple[str, ...] = ()
    model: str | None = None  # Hugging Face id, local folder or 'smoke'; None: the model that answered
    label: str | None = None  # the judge's name as stored, when `model` is already resolved
    limit: int | None = None  # only each run's first N answers
    batch_size: int = 8
    max_new_tokens: int = 16
    quantize: str = "auto"
    device: str = "auto"
    dtype: str = "auto"
    # An OpenAI-compatible server judges (engine.usecases.served); its model "" = the one that answered.
    server: ServerOptions | None = None
    # More judges (engine.usecases.judges.verify_nli): "nli:MODEL", "llm:MODEL" or "MODEL" (AttrScore's),
    # "NAME:MODEL" (a claim judge registered in engine.judges.registry), judged one after another
    # on the same pairs after `model`'s; plan_verify plans one (see judge_requests).
    judges: tuple[str, ...] = ()
    # The judge sees the label each document had in the run's prompt; stored as "<judge>+label".
    show_label: bool = False
