"""Study grids: comma lists on `run` expand to the cross product of configurations.

`run --model a,b --metadata gender,race --top-k 5,10` is a study of 2 x 2 x 2 = 8
configurations. Each configuration is its own experiment, found or created exactly as a
single `run` would (engine.running.experiment: the key of model, dataset content and settings), so a
grid resumes by running the same command again. The study itself only groups the experiments
(tables `studies` and `study_experiments`, migration 009).

The vanilla prompt carries no label, so vanilla does not depend on the metadata type: within
one model and configuration the first metadata type's experiment generates the vanilla run and
the others receive a copy of its answers (engine.running.runner.execute_plan, `copy_from`). The paper's
grid per model is then 1 vanilla + 3 x 2 labelled runs generated = 7, not 9. The study use case
(engine.usecases.study.study) runs a grid.

Everything here is pure: parsing and expanding lists, naming a study.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from engine.bounds import MAX_NAME_CHARS, check_name
from engine.errors import FieldError, UserError
from engine.prompting.prompts import METADATA_TYPES
from engine.types import FEW_SHOT_COUNTS, LABEL_SCOPES, ORDERS, RELEVANT_ATS, REPETITIONS, XAI_VARIANTS

# The options that take comma lists, in the order the grid is expanded (outermost first).
AXES = ("model", "metadata", "top_k", "order", "few_shot", "xai", "relevant_at", "repetition", "label_scope")
# The battery's axes (docs/method.md, "Battery") and their single default values: a study keeps
# them out of its stored axes while they are at these, as studies made before they existed.
BATTERY_AXES: dict[str, tuple] = {"relevant_at": ("ranked",), "repetition": ("none",), "label_scope": ("all",)}
MAX_STUDY_NAME = MAX_NAME_CHARS  # engine.bounds: one bound for every name


def _option(axis: str) -> str:
    return "--" + axis.replace("_", "-")


def _top_k(text: str) -> int | None:
    if text == "all":
        return None
    try:
        k = int(text)
    except ValueError:
        raise FieldError("top_k", "{top_k}: '{text}' is not a whole number (or 'all')", text=text) from None
    if k < 1:
        raise FieldError("top_k", "{top_k} must be at least 1, not {value}", value=k)
    return k


def _few_shot(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise FieldError("few_shot", "{few_shot}: '{text}' is not a whole number", text=text) from None
    if n not in FEW_SHOT_COUNTS:
        raise FieldError("few_shot", "{few_shot} must be between {least} and {most}, not {value}",
                         least=min(FEW_SHOT_COUNTS), most=max(FEW_SHOT_COUNTS), value=n)
    return n


def _choice(axis: str, choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise FieldError(axis, f"{{{axis}}}: unknown value '{{text}}'; choose from {{choices}}", text=text,
                             choices=",".join(choices))
        return text
    return parse


def _text(text: str) -> str:
    return text


_PARSERS: dict[str, Callable[[str], object]] = {
    "model": _text,
    "metadata": _text,
    "top_k": _top_k,
    "order": _choice("order", ORDERS),
    "few_shot": _few_shot,
    "xai": _choice("xai", XAI_VARIANTS),
    "relevant_at": _choice("relevant_at", RELEVANT_ATS),
    "repetition": _choice("repetition", REPETITIONS),
    "label_scope": _choice("label_scope", LABEL_SCOPES),
}


def parse_list(axis: str, value: object) -> tuple:
    """One option's values: a comma list ('5,10'), a single value, or None (top-k: all).

    Refused in one line (a FieldError named by the axis): an empty entry, a duplicate, an
    unknown value, k < 1.
    """
    if value is None or isinstance(value, int):
        return (value,)
    parts = [p.strip() for p in str(value).split(",")]
    if any(not p for p in parts):
        raise FieldError(axis, f"{{{axis}}}: empty entry in '{{value}}'", value=value)
    parsed = [_PARSERS[axis](p) for p in parts]
    seen: set = set()
    for text, v in zip(parts, parsed, strict=True):
        if v in seen:
            raise FieldError(axis, f"{{{axis}}} lists '{{text}}' twice", text=text)
        seen.add(v)
    return tuple(parsed)


@dataclass(frozen=True)
class Grid:
    """The lists of a `run` command; `configurations` is their cross product."""

    model: tuple[str, ...]
    metadata: tuple[str, ...]
    top_k: tuple[int | None, ...]
    order: tuple[str, ...]
    few_shot: tuple[int, ...]
    xai: tuple[str, ...]
    relevant_at: tuple[str, ...] = BATTERY_AXES["relevant_at"]
    repetition: tuple[str, ...] = BATTERY_AXES["repetition"]
    label_scope: tuple[str, ...] = BATTERY_AXES["label_scope"]

    @property
    def size(self) -> int:
        n = 1
        for axis in AXES:
            n *= len(getattr(self, axis))
        return n

    @property
    def is_single(self) -> bool:
        return self.size == 1

    def axes(self) -> dict[str, list]:
        """The lists as stored with the study (the battery's only where not at their defaults)."""
        return {axis: list(getattr(self, axis)) for axis in AXES
                if axis not in BATTERY_AXES or getattr(self, axis) != BATTERY_AXES[axis]}

    def configurations(self) -> list[dict]:
        """Every configuration, models outermost, then metadata, top-k, order, few-shot, xai,
        relevant-at, repetition, label scope."""
        lists = [getattr(self, axis) for axis in AXES]
        return [dict(zip(AXES, values, strict=True)) for values in itertools.product(*lists)]


def check_metadata_list(grid: Grid, args: argparse.Namespace | None = None) -> None:
    """At most one custom type in a list: --label-a/--label-b/--consideration define one type."""
    custom = [m for m in grid.metadata if m not in METADATA_TYPES]
    if len(custom) > 1:
        raise FieldError("metadata", "{metadata} lists {n} custom types ({names}); "
                         "{label_a}/{label_b}/{consideration} define only one", n=len(custom), names=", ".join(custom))


def battery_text(configuration: dict, lead: str = "") -> str:
    """A configuration's battery settings that are not at their defaults ('relevant-at first,
    repetition distractor'), after `lead`; empty when all are."""
    changed = [f"{_option(a)[2:]} {configuration[a]}" for a, (default,) in BATTERY_AXES.items()
               if configuration.get(a, default) != default]
    return lead + ", ".join(changed) if changed else ""


def check_study_name(name: str) -> None:
    if not name.strip() or name != name.strip() or not name.isprintable() or len(name) > MAX_STUDY_NAME:
        raise FieldError("study", "{study} must be 1 to {most} printable characters without leading or trailing "
                         "spaces", most=MAX_STUDY_NAME)

    try:
        check_name(name, "")  # look-alike letters: a second "pilot" beside the real one
    except UserError as err:
        raise FieldError("study", "{study} {problem}", problem=str(err).strip()) from None


def generated_study_name(experiment_keys: list[str]) -> str:
    """A name for an unnamed grid: the same command (same experiments) gets the same name, so
    running it again resumes the same study."""
    digest = hashlib.sha256("\n".join(experiment_keys).encode()).hexdigest()[:10]
    return f"study-{digest}"


def plan_line(n_runs: int, n_items: int, n_generations: int, n_todo: int, n_copied: int) -> str:
    """'plan: 28 runs x 50 items = 1,400 generations; 300 to generate, 100 copied' (one line)."""
    rest = "nothing left to do" if not (n_todo or n_copied) else (
        f"{n_todo:,} to generate" + (f", {n_copied:,} vanilla answer{'s' if n_copied != 1 else ''} shared (copied)" if n_copied else "")
    )
    return f"plan: {n_runs} runs x {n_items:,} items = {n_generations:,} generations; {rest}"
