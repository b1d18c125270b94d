"""What a run asks for, and how it ends: the request, its identity (run_config), how it decodes
(generation_config) and loads (load_model_for), and the outcome of one experiment.

Plain values shared by the planner (engine.running.planner), the runner (engine.running.runner), the backends
and the use cases (engine.usecases), so that each imports them from here, one way.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from html import escape
from pathlib import Path
from typing import Literal

from engine.bounds import MAX_MODEL_CHARS, MAX_NAME_CHARS, check_name
from engine.errors import FieldError, UserError
from engine.generation.threads import (
    MAX_THREADS,  # torch-free at import
    resolve_threads,
)
from engine.prompting.citations import check_citation_syntax
from engine.prompting.prompts import PROMPT_VERSION, PromptConfig
from engine.types import MODES, Mode, Quantize, SkippedItem

MAX_SEED = 2**31 - 1  # runs.seed is a 32-bit INTEGER column
MAX_TOP_LOGPROBS = 20  # as hosted APIs allow; each step keeps batch x N values per token
MAX_RERUNS = 10  # each rerun repeats every answer of the experiment's modes
# The whole-number settings' bounds (least, most; None: unbounded), checked where a request is made
# and stated by the run options' help (engine.usecases.runs.run_options).
SETTING_BOUNDS: dict[str, tuple[int, int | None]] = {
    "batch_size": (1, None), "max_new_tokens": (1, None), "limit": (1, None), "sample_top_k": (0, None),
    "top_logprobs": (0, MAX_TOP_LOGPROBS), "threads": (1, MAX_THREADS), "seed": (0, MAX_SEED),
    "reruns": (0, MAX_RERUNS),
}


@dataclass(frozen=True)
class Rerun:
    """What makes a run a rerun: the experiment whose runs it repeats, and which rerun it is (k from
    1). Part of the rerun's identity, so that each rerun of each experiment is a run of its own."""

    of: str  # the experiment id
    k: int

    def sampling_seed(self, seed: int) -> int:
        """The k-th rerun's sampling seed: another seed than the first run's, fixed by (seed, k)."""
        return (seed + self.k * 1_000_003) % 2**31


@dataclass(frozen=True)
class RunRequest:
    """What the user asked for; `hf_token` is used to load the model and never recorded."""

    model: str  # what to load: a Hub id or a local folder
    modes: tuple[Mode, ...]
    prompt: PromptConfig  # its mode is replaced per run
    # "server": a served run (engine.usecases.served), loaded by the server, not by us.
    quantize: Quantize | Literal["server"] = "auto"
    device: str = "auto"
    dtype: str = "auto"
    max_new_tokens: int = 256
    sample: bool = False  # sample instead of greedy decoding
    temperature: float = 1.0
    top_p: float = 1.0
    sample_top_k: int = 0
    seed: int = 0
    batch_size: int = 8
    top_logprobs: int = 0
    repeat: bool = False  # a new experiment even when an identical one exists
    experiment: str | None = None  # a name (or id) to create or join
    limit: int | None = None  # cover only the first N items of the dataset
    skip_invalid: bool = False  # skip items whose prompt does not fit instead of refusing
    model_label: str | None = None  # how the store names the model, when not `model` itself
    # torch intra-op threads every generating process computes with (engine.generation.threads); None:
    # torch's default in this process. Recorded with the runs, never hashed.
    threads: int | None = None
    # Batch-invariant generation (engine.generation.batching): an answer does not depend on the rest
    # of its batch, at a cost in time (docs/figures.md), so it is asked for. Recorded with the runs
    # ("batching"), never hashed.
    batch_invariant: bool = False
    # After the experiment's own runs, this many reruns of each mode (engine.usecases.runs.run), each an
    # experiment of its own marked as a rerun of this one (`rerun`): the rerun floor of `bias`.
    reruns: int = 0
    rerun: Rerun | None = None  # set on the requests that generate a rerun, never by a user
    hf_token: str | None = field(default=None, repr=False, compare=False)
    # False: without hf_token, load with no token at all, not the environment's HF_TOKEN (a
    # Space's visitor loading a model outside the operator's allowlist).
    environment_token: bool = field(default=True, repr=False, compare=False)
    # A Space's visitors name Hub ids only: a name that happens to be a folder on the server
    # loads nothing and gets the unknown-model line, so that no name reveals what exists there.
    hub_only: bool = False
    # How the answers' citations are read and scored (engine.prompting.citations): "ours", or "paper" for
    # the seed library's reading. Part of the runs' identity when not the default.
    citation_syntax: str = "ours"

    def __post_init__(self) -> None:
        # Every request is checked where it is made, once, whichever face made it: a notebook cannot
        # store what the CLI and the app refuse, and no later step checks again.

        check_settings(self)
        check_citation_syntax(self.citation_syntax)

        # A folder of the operator's own (a home folder in Cyrillic, the smoke model's cache) is a
        # path, not a name chosen to pass for another: only a Hub id keeps to the look-alike rule.
        folder = not self.hub_only and _is_folder(self.model)
        check_name(self.model, "the model name", MAX_MODEL_CHARS, one_script=not folder)
        if self.model_label is not None:
            check_name(self.model_label, "the model label", MAX_MODEL_CHARS,
                       one_script=not (folder and self.model_label == self.model))

    @property
    def label(self) -> str:
        return self.model_label or self.model


@dataclass(frozen=True)
class RunOutcome:
    """How one mode's run ended in this invocation."""

    run_id: str
    mode: Mode
    status: str  # complete | already complete
    n_items: int
    n_generated: int  # generated in this invocation (resume skips stored items)
    n_with_citation: int


@dataclass(frozen=True)
class ExperimentOutcome:
    experiment_id: str
    runs: tuple[RunOutcome, ...]
    model: str
    quantization: str | None
    experiment_name: str | None = None
    # Items per mode over the whole experiment (runs of other modes stored earlier included).
    mode_items: dict[Mode, int | None] = field(default_factory=dict)
    skipped: tuple[SkippedItem, ...] = ()  # invalid items and prompts too long, left out
    dataset: str | None = None  # the dataset as the store names it (its source)
    n_dataset_items: int | None = None  # its valid items, whatever the runs' limit
    reruns: tuple[ExperimentOutcome, ...] = ()  # the reruns the request asked for (RunRequest.reruns)

    @property
    def modes(self) -> tuple[Mode, ...]:
        """The modes the experiment holds, in display order."""
        return tuple(m for m in MODES if m in self.mode_items)

    # A notebook shows what `run` prints of it (runs, items, skipped), not every skipped item.
    def _lines(self) -> tuple[str, list[list[str]]]:
        name = f" '{self.experiment_name}'" if self.experiment_name and self.experiment_name != self.experiment_id else ""
        items = f" ({self.n_dataset_items} valid items)" if self.n_dataset_items is not None else ""
        skipped = f"; {len(self.skipped)} items skipped (.skipped)" if self.skipped else ""
        title = f"experiment {self.experiment_id}{name}  model {self.model}  dataset {self.dataset}{items}{skipped}"
        rows = [[r.mode, r.run_id, r.status, str(r.n_items), str(r.n_generated), str(r.n_with_citation)]
                for r in self.runs]
        return title, rows

    def __repr__(self) -> str:
        title, rows = self._lines()
        table = [list(_OUTCOME_HEADER), *rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(_OUTCOME_HEADER))]
        lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table)
        return "\n".join([title, *lines])

    def _repr_html_(self) -> str:
        title, rows = self._lines()
        head = "".join(f"<th>{escape(h)}</th>" for h in _OUTCOME_HEADER)
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
        return f"<p>{escape(title)}</p><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_OUTCOME_HEADER = ("mode", "run", "status", "items", "generated now", "with a citation")


def run_config(request: RunRequest, mode: Mode) -> dict:
    """The identity of one mode's run (no token, no batch size, device or item count)."""
    config = {
        "prompt": replace(request.prompt, mode=mode).to_dict(),
        "prompt_version": PROMPT_VERSION,
        # The keys are the names stored runs were hashed under (the decoder's), not the options'.
        "generation": {
            "max_new_tokens": request.max_new_tokens,
            "do_sample": request.sample,
            "temperature": request.temperature if request.sample else None,
            "top_p": request.top_p if request.sample else None,
            "top_k": request.sample_top_k if request.sample else None,
            "seed": request.seed,
            "top_n_logprobs": request.top_logprobs,
        },
        "quantize": request.quantize,
    }
    if request.rerun is not None:
        # Only on reruns: every other run keeps its identity. The rerun's sampling seed is recorded
        # here because generation.seed stays the experiment's (its random document order uses it).
        config["rerun"] = {"of": request.rerun.of, "k": request.rerun.k,
                           "sampling_seed": request.rerun.sampling_seed(request.seed) if request.sample else None}
    if request.citation_syntax != "ours":
        # Only when set, so that the default's identity (and every stored run's hash) is unchanged;
        # store/views.sql query_metrics reads it.
        config["citation_syntax"] = request.citation_syntax
    return config


def check_settings(request: RunRequest) -> None:
    """Refuse out-of-range settings in one line: a FieldError naming the field by its run option's
    name (engine.usecases.runs.run_options), for each face to word as its own."""

    def bounded(name: str) -> None:
        value = getattr(request, name)
        least, most = SETTING_BOUNDS[name]
        if value is None and name in ("limit", "threads"):  # None: all items, torch's default
            return
        if most is not None and not least <= value <= most:
            raise FieldError(name, f"{{{name}}} must be between {{least}} and {{most}}, not {{value}}", least=least,
                             most=most, value=value)
        if most is None and value < least:
            raise FieldError(name, f"{{{name}}} must be at least {least}" if least else f"{{{name}}} must be 0 or more")

    for name in ("batch_size", "max_new_tokens", "limit"):
        bounded(name)
    if not math.isfinite(request.temperature) or (request.sample and request.temperature <= 0):
        raise FieldError("temperature", "{temperature} must be a finite number above 0, not {value}",
                         value=request.temperature)
    if not 0 < request.top_p <= 1:  # also false for nan
        raise FieldError("top_p", "{top_p} must be in (0, 1], not {value}", value=request.top_p)
    bounded("sample_top_k")
    if not request.sample:
        # Greedy decoding ignores them: a value other than the default was meant to sample, and a
        # run that silently did not would be stored as greedy under the user's nose.
        sampling_values: tuple[tuple[str, float, float], ...] = (
            ("temperature", request.temperature, 1.0), ("top_p", request.top_p, 1.0),
            ("sample_top_k", request.sample_top_k, 0))
        for name, given, default in sampling_values:
            if given != default:
                raise FieldError(name, f"{{{name}}} {{value:g}} needs {{sample}}: decoding is greedy "
                                 f"without it and would ignore {{{name}}}", value=given)
    for name in ("top_logprobs", "threads", "seed", "reruns"):
        bounded(name)
    if request.experiment is not None:
        _check_experiment_name(request.experiment)


def _check_experiment_name(experiment: str) -> None:
    if (not experiment.strip() or experiment != experiment.strip() or not experiment.isprintable()
            or len(experiment) > MAX_NAME_CHARS):
        raise FieldError("experiment", "{experiment} must be 1 to {most} printable characters without "
                         "leading or trailing spaces", most=MAX_NAME_CHARS)
    try:
        check_name(experiment, "")  # look-alike letters (engine.bounds); its line starts after `what`
    except UserError as err:
        raise FieldError("experiment", "{experiment} {problem}", problem=str(err).strip()) from None


def generation_config(request: RunRequest):
    """How a request decodes (engine.generation.generate.GenerationConfig), with the thread count it computes with."""
    from engine.generation.generate import GenerationConfig

    return GenerationConfig(
        max_new_tokens=request.max_new_tokens,
        do_sample=request.sample,
        temperature=request.temperature,
        top_p=request.top_p,
        top_k_sampling=request.sample_top_k,
        seed=request.rerun.sampling_seed(request.seed) if request.rerun is not None else request.seed,
        batch_size=request.batch_size,
        top_n_logprobs=request.top_logprobs,
        batch_invariant=request.batch_invariant,
        # Resolved here, in the driver, so every Ray actor computes with the driver's count.
        threads=resolve_threads(request.threads),
    )


def load_model_for(request: RunRequest):
    """The model a request names, loaded as it asks (device, quantization, dtype, token)."""
    from engine.generation.models import load_model, unknown_model

    if request.hub_only and Path(request.model).exists():
        raise unknown_model(request.model)
    return load_model(
        request.model,
        quantize=request.quantize,
        device=request.device,
        hf_token=request.hf_token,
        dtype=request.dtype,
        environment_token=request.environment_token,
    )


def _is_folder(model: str) -> bool:
    """Whether `model` names a folder on this machine."""
    try:
        return os.path.isdir(os.path.expanduser(model))
    except (OSError, ValueError):  # a name too long for a path, a NUL
        return False
