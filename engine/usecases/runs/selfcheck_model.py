"""`selfcheck` from plain values: read the items, load the model exactly as `run` does, run the
checks of engine.usecases.runs.selfcheck. The face (`python -m engine selfcheck`) checks its options,
prints the report and writes --json; what is loaded, and how, is decided here.

Nothing is imported at import time: torch comes with engine.usecases.runs.selfcheck, when a check runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from engine.datasets.data import load_dataset
from engine.generation.model_choice import resolve_model
from engine.paths import SAMPLE_DATASET


@dataclass(frozen=True)
class SelfcheckRequest:
    """Which model to check on which items, loaded as `run` would load it."""

    model: str = "auto"  # Hugging Face id, local folder, 'smoke' or 'auto'
    dataset: str | None = None  # None: the bundled sample
    quantize: str = "auto"
    device: str = "auto"
    dtype: str = "auto"
    answers: int = 3  # answers generated and checked
    max_new_tokens: int = 64
    batch_size: int = 8  # prompts in the timed batch; 0: no timing
    hf_token: str | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class SelfcheckOutcome:
    """The report (engine.usecases.runs.selfcheck.SelfcheckReport) and where its items came from."""

    report: Any
    dataset_source: str


def selfcheck(request: SelfcheckRequest, *, on_loading: Callable[[str], None] | None = None,
              on_step: Callable[[str], None] | None = None) -> SelfcheckOutcome:
    """Read the items (a bad dataset is one line before anything loads), load the model and run every
    check. `on_loading(label)` is told before the model loads (minutes, on a first download);
    `on_step(message)` before each step of the checks."""
    from transformers.utils import logging as hf_logging

    from engine.generation.models import load_model
    from engine.usecases.runs.selfcheck import run_selfcheck

    dataset = load_dataset(request.dataset or SAMPLE_DATASET)
    model, label = resolve_model(request.model)
    hf_logging.disable_progress_bar()  # as `run`: transformers' per-shard bars are noise here
    if on_loading is not None:
        on_loading(label)
    # The same call `run` makes (engine.running.runner.load_model_for); None lets from_pretrained read
    # $HF_TOKEN or the login cache itself.
    loaded = load_model(model, quantize=request.quantize, device=request.device, hf_token=request.hf_token or None,
                        dtype=request.dtype)
    report = run_selfcheck(loaded, dataset.items, n_answers=request.answers, max_new_tokens=request.max_new_tokens,
                           batch_size=request.batch_size, on_step=on_step)
    # "smoke (tiny random Llama)", not a cache path.
    return SelfcheckOutcome(replace(report, model_id=label), dataset.source)
