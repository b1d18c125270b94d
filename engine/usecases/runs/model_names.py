"""Which models a face offers and how it reads a model's name (engine.generation.model_choice): the
paper's models and the small CPU model, the smoke model under the name a person types and the
label the store gives it, the model a first run uses, and the checks a name passes before a job
is queued. Torch-free: a face asks these before anything loads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from engine.generation import model_check
from engine.generation.model_choice import (
    CPU_MODEL,
    DEFAULT_MODEL,
    PAPER_MODELS,
    SMOKE,  # a value of this API: the name a person types; torch-free
    SMOKE_LABEL,
    hub_model_available,
    resolve_model,
)


def offered_models() -> tuple[str, ...]:
    """The real models a face offers by name: the paper's three, then the small CPU model."""
    return (*PAPER_MODELS, CPU_MODEL)


def is_smoke(model: object) -> bool:
    """True for the smoke model as the store names it, or as typed."""
    return str(model) in (SMOKE, SMOKE_LABEL)


def typed_name(stored: str) -> str:
    """The name that loads a model again, from the name the store gives it (the smoke model's label
    is not a name that loads)."""
    return SMOKE if is_smoke(stored) else stored


@dataclass(frozen=True)
class FirstModel:
    """The model a first run uses, and why: "gpu" (the paper's first model, in 4-bit), "cpu" (a
    small real instruct model), or "smoke" (no other can be had or is offered)."""

    name: str
    why: str  # gpu | cpu | smoke
    cpu_model: str  # the small real model, which a face names when it falls back to smoke


def first_model(gpu: bool, offered: Callable[[str], bool], available: Callable[[str], bool] | None = None) -> FirstModel:
    """What `--model auto` would choose, among the models `offered`: Mistral on a GPU, Qwen2.5-0.5B
    on a CPU, the smoke model where neither can be had. `available(model_id)`: whether a model can
    be loaded (default: the Hub cache or the Hub, answered within seconds)."""
    available = available or hub_model_available
    if gpu and offered(DEFAULT_MODEL) and available(DEFAULT_MODEL):
        return FirstModel(DEFAULT_MODEL, "gpu", CPU_MODEL)
    if offered(CPU_MODEL) and available(CPU_MODEL):
        return FirstModel(CPU_MODEL, "cpu", CPU_MODEL)
    return FirstModel(SMOKE, "smoke", CPU_MODEL)


def check_models_load(names: Iterable[str]) -> None:
    """Refuse in one line, within seconds, a model that cannot load here: the CLI's own check (not a
    folder, not cached, the Hub off or unreachable; with "did you mean"). Names as typed ('smoke'
    resolved)."""
    for name in names:
        model_check.check_model_name(resolve_model(name)[0])


def check_hub_ids(names: Iterable[str]) -> None:
    """Refuse a model name that is a folder here, as a request with `hub_only` refuses it when it
    loads (the smoke model, whose folder is the cache's, excepted): where the people who name
    models are strangers, a Hub id that is also a folder here is unknown like any other."""
    from engine.generation.models import unknown_model

    for name in names:
        if name != SMOKE and Path(name).exists():
            raise unknown_model(name)
