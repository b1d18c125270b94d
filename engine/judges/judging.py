"""What every judge of stored answers shares about its model (engine.judges.plan's loop, the use
cases engine.usecases.judges.explain, .verify, .propensity): a judge prompts a model (by default the one
that answered) about them. Choosing and loading that model, and refusing in one line, before
anything is written, a prompt that does not fit its context. No store here: the runs come in
from store.queries.explain_runs, through engine.usecases.judges.judge_runs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from engine.errors import UserError
from engine.generation.model_choice import SMOKE, SMOKE_LABEL, resolve_model

if TYPE_CHECKING:  # torch loads with the judge, not with this module
    from engine.generation.models import LoadedModel


def choose_model(model_arg: str | None, answered) -> tuple[str, str]:
    """(model to load, its name as stored): --model, else the one model that answered."""
    models = {r.model for r in answered}
    if model_arg is None and len(models) > 1:
        raise UserError(f"the runs were answered by {len(models)} models ({', '.join(sorted(models))}); choose one with --model")
    label_arg = model_arg or next(iter(models))
    if label_arg == SMOKE_LABEL:  # the store's name for the smoke model loads as "smoke"
        label_arg = SMOKE
    return resolve_model(label_arg)


def load_model_quietly(model: str, *, quantize: str, device: str, dtype: str, hf_token: str | None) -> LoadedModel:
    """The judging model, loaded as `run` loads one, without the Hub's progress bars."""
    from transformers.utils import logging as hf_logging

    from engine.generation.models import load_model

    hf_logging.disable_progress_bar()
    return load_model(model, quantize=quantize, device=device, dtype=dtype, hf_token=hf_token)


def check_lengths(loaded, prompts: Iterable[tuple[str, str]], max_new_tokens: int, what: str) -> None:
    """Refuse in one line, before anything is written, a prompt that does not fit the context.
    `prompts` yields (where, prompt), `where` naming it in the message ("run R, item 'I'")."""
    from engine.generation.models import chat_input_ids

    context = getattr(loaded, "context_length", None)
    if context is None:
        return
    warned = getattr(loaded.tokenizer, "deprecation_warnings", None)
    if isinstance(warned, dict):
        warned["sequence-length-is-longer-than-the-specified-maximum"] = True
    for where, prompt in prompts:
        n = len(chat_input_ids(loaded, prompt))
        if n + max_new_tokens > context:
            raise UserError(
                f"{where}: {what} prompt of {n:,} tokens + {max_new_tokens:,} new tokens exceeds the "
                f"model's context of {context:,}; use a smaller --max-new-tokens or --limit"
            )
