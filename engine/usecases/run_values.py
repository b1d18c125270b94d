"""One run request from plain values, for every face: the CLI's options and the app's form both
become RunValues, and build_run_request checks them and builds the engine's RunRequest.

A value out of bounds is a FieldError naming its field by RunValues' names (which are `run`'s
options' names with underscores), so that each face words it in its own vocabulary: the CLI as
`--top-k`, the app as its form's label. What stays with a face is its own policy: the app's
operator bounds, the CLI's defaults (engine.commands.run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.generation.batching import BATCHINGS, INVARIANT, SORTED  # torch-free; the faces read the names here
from engine.prompting.citations import CITATION_SYNTAXES  # light: re, math and engine.types
from engine.types import MODES

if TYPE_CHECKING:
    from engine.running.run_request import RunRequest


@dataclass(frozen=True)
class RunValues:
    """What a run asks for, as plain values (a field's name is `run`'s option's, --top-k: top_k)."""

    model: str
    modes: tuple[str, ...] = MODES  # any order; the request keeps the display order
    metadata: str = "hai"  # a built-in type, or the name of one defined by the next four
    label_a: str | None = None
    label_b: str | None = None
    consideration: str | None = None
    extra_label: tuple[str, ...] = ()  # a custom type's further labels: many-valued
    top_k: int | None = None
    order: str = "ranked"
    few_shot: int = 0
    xai: str = "none"
    relevant_at: str = "ranked"
    repetition: str = "none"
    label_scope: str = "all"
    quantize: str = "auto"
    device: str = "auto"
    dtype: str = "auto"
    max_new_tokens: int = 256
    sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    sample_top_k: int = 0
    seed: int = 0
    batch_size: int = 8
    top_logprobs: int = 0
    threads: int | None = None
    batching: str = SORTED  # engine.generation.batching: length-sorted or batch-invariant
    reruns: int = 0  # reruns of each mode after the experiment's own runs: the rerun floor
    repeat: bool = False
    experiment: str | None = None
    limit: int | None = None
    skip_invalid: bool = False
    citation_syntax: str = "ours"
    model_label: str | None = None  # None: the use case resolves `model` ('auto', 'smoke') and names it
    hf_token: str | None = field(default=None, repr=False, compare=False)


def build_run_request(values: RunValues) -> RunRequest:
    """The RunRequest for `values`, every value checked first (FieldError, one line)."""
    from engine.errors import FieldError
    from engine.prompting.prompts import PromptConfig, metadata_type
    from engine.running.run_request import RunRequest
    from engine.types import QUANTIZATIONS
    from engine.usecases.run import check_settings

    check_settings(batch_size=values.batch_size, max_new_tokens=values.max_new_tokens, limit=values.limit,
                   temperature=values.temperature, sample=values.sample, top_p=values.top_p,
                   sample_top_k=values.sample_top_k, top_logprobs=values.top_logprobs,
                   threads=values.threads, seed=values.seed, experiment=values.experiment, reruns=values.reruns)
    if values.quantize not in QUANTIZATIONS:
        raise FieldError("quantize", "{quantize}: unknown value '{value}' (choose from {choices})",
                         value=values.quantize, choices=", ".join(QUANTIZATIONS))
    if values.citation_syntax not in CITATION_SYNTAXES:
        raise FieldError("citation_syntax", "{citation_syntax}: unknown value '{value}' (choose from {choices})",
                         value=values.citation_syntax, choices=", ".join(CITATION_SYNTAXES))
    if values.batching not in BATCHINGS:
        raise FieldError("batching", "{batching}: unknown value '{value}' (choose from {choices})",
                         value=values.batching, choices=", ".join(BATCHINGS))
    modes = tuple(m.strip() for m in values.modes if m.strip())
    unknown = [m for m in modes if m not in MODES]
    if not modes or unknown:
        raise FieldError("modes", "{modes}: unknown mode(s) {unknown}; choose from {choices}",
                         unknown=", ".join(unknown) or "(none given)", choices=",".join(MODES))
    if len(set(modes)) != len(modes):
        raise FieldError("modes", "{modes} lists a mode twice")
    meta = metadata_type(values.metadata, values.label_a, values.label_b, values.consideration, values.extra_label)
    # RunValues holds plain strings; PromptConfig checks them against its Literals (FieldError).
    prompt = PromptConfig(mode="vanilla", metadata=meta, top_k=values.top_k, order=values.order,  # type: ignore[arg-type]
                          seed=values.seed, few_shot=values.few_shot, xai=values.xai,  # type: ignore[arg-type]
                          relevant_at=values.relevant_at, repetition=values.repetition,  # type: ignore[arg-type]
                          label_scope=values.label_scope)  # type: ignore[arg-type]
    return RunRequest(
        model=values.model,
        model_label=values.model_label,
        modes=tuple(m for m in MODES if m in modes),  # display order, whatever order was given
        prompt=prompt,
        quantize=values.quantize,
        device=values.device,
        dtype=values.dtype,
        max_new_tokens=values.max_new_tokens,
        sample=values.sample,
        temperature=values.temperature,
        top_p=values.top_p,
        sample_top_k=values.sample_top_k,
        seed=values.seed,
        batch_size=values.batch_size,
        top_logprobs=values.top_logprobs,
        repeat=values.repeat,
        experiment=values.experiment,
        limit=values.limit,
        skip_invalid=values.skip_invalid,
        citation_syntax=values.citation_syntax,
        threads=values.threads,
        batch_invariant=values.batching == INVARIANT,
        reruns=values.reruns,
        hf_token=values.hf_token,
    )
