"""One experiment: a dataset x a prompt configuration x RAG modes -> runs streamed to a sink.

Each mode is one run, and the runs of one configuration share an experiment. The work goes in
phases, so that nothing is written until everything that can fail has been checked:

1. `plan_experiment` (read-only): find the experiment (by `--experiment NAME`, else the newest
   with the same key: model, dataset content and every setting except the mode), refuse an
   incompatible one with the reason, and work out per mode what is already stored;
2. the caller loads the model, only when there is something to generate;
3. `check_prompt_lengths`: every prompt to generate, counted through the chat template, plus
   `max_new_tokens` must fit the model's context (refused, or skipped with skip_invalid);
4. `execute_plan`: create the experiment, runs and items in one transaction, then generate,
   committing every finished batch, so a crash loses at most the batch in flight.

A run is identified by a hash of everything that determines its output (model, dataset
content, prompt and generation settings), so re-running the same command resumes the
unfinished run and generates only the items it lacks.

Items and `limit`: the dataset's identity is its full content (all valid items), whatever
`limit` asks for, and a run covers a prefix of it: the first `limit` items, or all. Asking
for more items later (a larger limit, or none) extends the same runs; asking for fewer never
shrinks a run (it is then already complete).
"""

from __future__ import annotations

import functools
import platform
import subprocess
import uuid
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from engine.citations import citation_probabilities, parse_citation_marks
from engine.data import Dataset
from engine.errors import UserError
from engine.experiment import (
    config_hash,
    experiment_key,
    experiment_settings,
    incompatibility,
    run_in_progress,
)
from engine.prompts import PROMPT_VERSION, PromptConfig, build_prompt
from engine.backends import Backend, LocalBackend, PlannedBatch, Provenance, plan_batches
from engine.sink import ExperimentSpec, RunSpec, Sink, StoredRun
from engine.types import MODES, Citation, Generation, GenerationOutput, Item, Mode, Prompt, Quantize, SkippedItem
from engine.write_loop import OpenRun, RunCancelled, write_loop  # noqa: F401 - RunCancelled is part of this API


@dataclass(frozen=True)
class RunRequest:
    """What the user asked for; `hf_token` is used to load the model and never recorded."""

    model: str  # what to load: a Hub id or a local folder
    modes: tuple[Mode, ...]
    prompt: PromptConfig  # its mode is replaced per run
    quantize: Quantize = "auto"
    device: str = "auto"
    dtype: str = "auto"
    max_new_tokens: int = 256
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    top_k_sampling: int = 0
    seed: int = 0
    batch_size: int = 8
    top_n_logprobs: int = 0
    repeat: bool = False  # a new experiment even when an identical one exists
    experiment: str | None = None  # a name (or id) to create or join
    limit: int | None = None  # cover only the first N items of the dataset
    skip_invalid: bool = False  # skip items whose prompt does not fit instead of refusing
    model_label: str | None = None  # how the store names the model, when not `model` itself
    hf_token: str | None = field(default=None, repr=False, compare=False)

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

    @property
    def modes(self) -> tuple[Mode, ...]:
        """The modes the experiment holds, in display order."""
        return tuple(m for m in MODES if m in self.mode_items)


def run_config(request: RunRequest, mode: str) -> dict:
    """The identity of one mode's run (no token, no batch size, device or item count)."""
    return {
        "prompt": replace(request.prompt, mode=mode).to_dict(),
        "prompt_version": PROMPT_VERSION,
        "generation": {
            "max_new_tokens": request.max_new_tokens,
            "do_sample": request.do_sample,
            "temperature": request.temperature if request.do_sample else None,
            "top_p": request.top_p if request.do_sample else None,
            "top_k": request.top_k_sampling if request.do_sample else None,
            "seed": request.seed,
            "top_n_logprobs": request.top_n_logprobs,
        },
        "quantize": request.quantize,
    }


def make_generation(item: Item, prompt: Prompt, output: GenerationOutput) -> Generation:
    """A stored generation: the output plus its citations resolved against the shown order."""
    marks = parse_citation_marks(output.text)
    probabilities = citation_probabilities(output) if output.tokens else [None] * len(marks)
    relevant = {d.id: d.relevant for d in item.documents}
    citations = []
    for index, (mark, probability) in enumerate(zip(marks, probabilities)):
        shown = 1 <= mark.number <= len(prompt.shown_doc_ids)
        doc_id = prompt.shown_doc_ids[mark.number - 1] if shown else None
        citations.append(
            Citation(index, mark.number, doc_id, relevant[doc_id] if doc_id else None, probability)
        )
    return Generation(
        item_id=item.id,
        prompt=prompt.text,
        answer=output.text,
        shown_doc_ids=prompt.shown_doc_ids,
        finish_reason=output.finish_reason,
        n_prompt_tokens=output.n_prompt_tokens,
        tokens=output.tokens,
        citations=tuple(citations),
    )


@functools.lru_cache(maxsize=1)
def _library_versions() -> tuple[tuple[str, str], ...]:
    return tuple(_collect_library_versions().items())


def library_versions() -> dict[str, str]:
    """Versions of what shapes the numbers, for provenance (read once per process)."""
    return dict(_library_versions())


def _collect_library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in ("torch", "transformers", "accelerate", "bitsandbytes", "tokenizers", "duckdb"):
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            pass
    return versions


@functools.lru_cache(maxsize=1)
def git_sha() -> str | None:
    """The commit of this checkout, when it is one."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _new_id() -> str:
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class PlannedRun:
    """One mode's run as planned: new or resumed, the items it covers and those still to do."""

    mode: Mode
    run_id: str
    config_hash: str
    config: dict  # identity (hashed)
    resumes: StoredRun | None  # None: a new run
    limit: int | None  # covers the first `limit` dataset items (None: all)
    items: tuple[Item, ...]  # the items it covers, prompts too long left out
    todo: tuple[Item, ...]  # of those, the ones not stored yet
    skipped: tuple[SkippedItem, ...] = ()  # prompts too long for the model's context

    @property
    def needs_claim(self) -> bool:
        """Whether this invocation must create, resume or finish the run."""
        return bool(self.todo) or self.resumes is None or self.resumes.status != "complete"


@dataclass(frozen=True)
class ExperimentPlan:
    """What a run command will do, worked out before anything is loaded or written."""

    dataset: Dataset
    request: RunRequest
    spec: ExperimentSpec
    experiment_id: str
    experiment_name: str | None
    runs: tuple[PlannedRun, ...]
    stored_items: dict[Mode, int | None]  # item counts of the experiment's runs of other modes

    @property
    def n_todo(self) -> int:
        """Generations to do over all runs."""
        return sum(len(r.todo) for r in self.runs)

    @property
    def nothing_to_do(self) -> bool:
        """Every requested run exists, is complete and covers the requested items."""
        return not any(r.needs_claim for r in self.runs)

    @property
    def skipped(self) -> tuple[SkippedItem, ...]:
        """Items left out: invalid in the dataset, or with a prompt too long (once each)."""
        seen: dict[str | None, SkippedItem] = {}
        for run in self.runs:
            for s in run.skipped:
                seen.setdefault(s.item_id, s)
        return tuple(self.dataset.skipped) + tuple(seen.values())


def _grown_limit(existing: StoredRun | None, requested: int | None) -> int | None:
    """A run's item prefix only grows: the larger of what it had and what is asked (None = all)."""
    if existing is None:
        return requested
    had = existing.config.get("limit")
    if had is None or requested is None:
        return None
    return max(int(had), requested)


def plan_experiment(dataset: Dataset, request: RunRequest, sink: Sink) -> ExperimentPlan:
    """Resolve the experiment and what each mode's run must still do; reads only."""
    if not request.modes:
        raise UserError("no modes to run")
    # Every mode this configuration can have, requested or not: an older experiment is found
    # by any of its runs.
    possible = MODES if request.prompt.metadata is not None else ("vanilla",)
    configs = {mode: run_config(request, mode) for mode in dict.fromkeys(possible + request.modes)}
    hashes = {mode: config_hash(request.label, dataset.sha, config) for mode, config in configs.items()}
    settings = experiment_settings(configs[request.modes[0]])
    spec = ExperimentSpec(
        key=experiment_key(request.label, dataset.sha, settings),
        name=request.experiment,
        new=request.repeat,
        model=request.label,
        dataset=dataset.source,
        dataset_sha=dataset.sha,
        settings=settings,
        run_hashes=tuple(hashes.values()),
    )
    stored = sink.find_experiment(spec)
    if stored is not None:
        if request.repeat:
            raise UserError(
                f"experiment '{stored.label}' already exists and --repeat starts a new one: "
                "give --experiment a new name"
            )
        reason = incompatibility(stored, spec, hashes)
        if reason:
            raise UserError(reason)

    runs = []
    for mode in request.modes:
        existing = stored.run_for(mode) if stored else None
        if existing is not None and existing.owner:
            raise UserError(run_in_progress(existing, stored))
        limit = _grown_limit(existing, request.limit)
        # Prompt-length verdicts depend only on what the hash covers, so they still hold.
        too_long = {s["item_id"]: s for s in existing.config.get("skipped_prompts", [])} if existing else {}
        prefix = dataset.items if limit is None else dataset.items[:limit]
        items = tuple(it for it in prefix if it.id not in too_long)
        done = sink.done_item_ids(existing.run_id) if existing else set()
        runs.append(
            PlannedRun(
                mode=mode,
                run_id=existing.run_id if existing else _new_id(),
                config_hash=hashes[mode],
                config=configs[mode],
                resumes=existing,
                limit=limit,
                items=items,
                todo=tuple(it for it in items if it.id not in done),
                skipped=tuple(
                    SkippedItem(s["where"], s["item_id"], s["reason"])
                    for it in prefix
                    if (s := too_long.get(it.id))
                ),
            )
        )
    others = {r.rag_mode: r.n_items for r in stored.runs if r.rag_mode not in request.modes} if stored else {}
    return ExperimentPlan(
        dataset=dataset,
        request=request,
        spec=spec,
        experiment_id=stored.experiment_id if stored else _new_id(),
        experiment_name=stored.name if stored else request.experiment,
        runs=tuple(runs),
        stored_items=others,
    )


def check_prompt_lengths(plan: ExperimentPlan, loaded) -> ExperimentPlan:
    """Refuse (or, with skip_invalid, leave out) items whose prompt + max_new_tokens exceeds
    the model's context; never truncate.

    An item is measured by its longest prompt over the labelled modes (base and cf carry the
    labels; vanilla is shorter), so every mode of an experiment keeps the same items and the
    paired bias measures compare like with like.
    """
    from engine.models import chat_input_ids

    context = getattr(loaded, "context_length", None)
    request = plan.request
    if context is None:
        return plan
    pending: dict[str, Item] = {}
    for run in plan.runs:
        for item in run.todo:
            pending.setdefault(item.id, item)
    warned = getattr(loaded.tokenizer, "deprecation_warnings", None)
    if isinstance(warned, dict):
        # Over-long prompts are measured and refused here; the tokenizer's own warning about
        # them would only break the one-line error.
        warned["sequence-length-is-longer-than-the-specified-maximum"] = True
    measured = ("base", "cf") if request.prompt.metadata is not None else ("vanilla",)
    configs = [replace(request.prompt, mode=mode) for mode in measured]
    # No token covers more characters than the longest one in the vocabulary, so a text of more
    # than context x that many characters is too long without tokenizing it (a 10 MB question
    # would otherwise take half a minute to count).
    longest = _longest_token_chars(loaded.tokenizer)
    too_long: dict[str, str] = {}  # item id -> "110,903" or "more than 36,000"
    for item in plan.dataset.items:  # dataset order, so the first named is the first in the file
        if item.id not in pending:
            continue
        texts = [build_prompt(item, c).text for c in configs]
        bound = max(len(t) for t in texts) // longest
        if bound > context:
            too_long[item.id] = f"more than {bound:,}"
            continue
        n = max(len(chat_input_ids(loaded, text)) for text in texts)
        if n + request.max_new_tokens > context:
            too_long[item.id] = f"{n:,}"
    if not too_long:
        return plan

    def reason(n: str) -> str:
        return (
            f"prompt of {n} tokens + {request.max_new_tokens:,} new tokens exceeds the "
            f"model's context of {context:,}"
        )

    first_id, first_n = next(iter(too_long.items()))
    if not request.skip_invalid:
        affected = f"{len(too_long):,} item{'s' if len(too_long) != 1 else ''} affected"
        raise UserError(f"item '{first_id}': {reason(first_n)}; {affected}; use --top-k or --skip-invalid")
    position = {item.id: n for n, item in enumerate(plan.dataset.items, start=1)}
    skipped = {i: SkippedItem(f"item {position[i]}", i, reason(n)) for i, n in too_long.items()}
    runs = tuple(
        replace(
            run,
            items=tuple(it for it in run.items if it.id not in too_long),
            todo=tuple(it for it in run.todo if it.id not in too_long),
            skipped=run.skipped + tuple(skipped[it.id] for it in run.items if it.id in too_long),
        )
        for run in plan.runs
    )
    if not any(run.items for run in runs):
        raise UserError(
            f"no item's prompt fits the model's context of {context:,} with {request.max_new_tokens:,} "
            f"new tokens (first: item '{first_id}', {first_n} tokens); use --top-k"
        )
    return replace(plan, runs=runs)


def _longest_token_chars(tokenizer) -> int:
    """Characters in the vocabulary's longest token: an upper bound on what one token covers."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return max((len(t) for t in tokens if t), default=1) or 1


def _run_spec(plan: ExperimentPlan, run: PlannedRun, provenance: Provenance | None,
              shared_from: str | None = None) -> RunSpec:
    request, dataset = plan.request, plan.dataset
    previous = run.resumes.config if run.resumes else {}
    config = {
        **previous,
        **run.config,
        "limit": run.limit,
        "skipped_items": [asdict(s) for s in dataset.skipped],
        "skipped_prompts": [asdict(s) for s in run.skipped],
    }
    if shared_from is not None:
        # Recorded, never hashed: its answers are copied from that run (a study's shared vanilla).
        config["shared_from"] = shared_from
    if provenance is not None:
        # Recorded, never hashed: they were removed, so they cannot have shaped the output.
        config["dropped_generation_defaults"] = dict(provenance.dropped_generation_defaults)
    return RunSpec(
        run_id=run.run_id,
        experiment_id=plan.experiment_id,
        config_hash=run.config_hash,
        model=request.label,
        model_revision=provenance.revision if provenance else None,
        quantization=provenance.quantization if provenance else request.quantize,
        dtype=provenance.dtype if provenance else request.dtype,
        device=provenance.device if provenance else request.device,
        dataset=dataset.source,
        dataset_sha=dataset.sha,
        metadata_type=request.prompt.metadata.name if request.prompt.metadata else None,
        rag_mode=run.mode,
        seed=request.seed,
        prompt_version=PROMPT_VERSION,
        git_sha=git_sha(),
        library_versions=dict(provenance.library_versions) if provenance else library_versions(),
        config=config,
        n_items=len(run.items),
    )


def generation_config(request: RunRequest):
    """How a request decodes (engine.generate.GenerationConfig)."""
    from engine.generate import GenerationConfig

    return GenerationConfig(
        max_new_tokens=request.max_new_tokens,
        do_sample=request.do_sample,
        temperature=request.temperature,
        top_p=request.top_p,
        top_k_sampling=request.top_k_sampling,
        seed=request.seed,
        batch_size=request.batch_size,
        top_n_logprobs=request.top_n_logprobs,
    )


def execute_plan(
    plan: ExperimentPlan,
    loaded,
    sink: Sink,
    *,
    on_progress: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    copy_from: Mapping[Mode, str] | None = None,
    backend: Backend | None = None,
) -> ExperimentOutcome:
    """Create (or resume) the planned runs in one transaction, then generate batch by batch.

    `should_stop` is asked after every committed batch; when it says yes, RunCancelled is
    raised, the unfinished runs end as failed (resumable), and what was committed stays.
    `copy_from` maps a mode to a run of the same prompt whose answers are copied instead of
    generated (a study's vanilla run, shared between metadata types); items that run lacks are
    generated. `backend` generates the batches (default: a LocalBackend over `loaded`, the
    model loaded in this process); whichever it is, this process alone writes the store.
    """
    copy_from = dict(copy_from or {})
    request = plan.request
    claimed = [run for run in plan.runs if run.needs_claim]
    if backend is None and loaded is not None:
        backend = LocalBackend(loaded, generation_config(request), request)
    if any(run.todo for run in claimed if run.mode not in copy_from) and backend is None:
        raise ValueError("execute_plan: items to generate but no model loaded")
    provenance = backend.provenance if backend is not None else None
    if claimed:
        needed = {it.id for run in claimed for it in run.items}
        sink.claim(
            plan.spec,
            plan.experiment_id,
            {run.mode: run.resumes.run_id if run.resumes else None for run in claimed},
            [_run_spec(plan, run, provenance, copy_from.get(run.mode)) for run in claimed],
            [it for it in plan.dataset.items if it.id in needed],
        )
    open_runs = []
    for run in claimed:
        prompt = replace(request.prompt, mode=run.mode)
        open_runs.append(OpenRun(run.run_id, run.mode, len(run.items),
                                 {it.id: (it, prompt) for it in run.todo}))
    try:
        for run, state in zip(claimed, open_runs):
            if run.todo and run.mode in copy_from:
                copied = sink.copy_generations(copy_from[run.mode], run.run_id, [it.id for it in run.todo])
                if on_progress and copied:
                    on_progress(copied)
                for item_id in sink.done_item_ids(run.run_id):
                    state.todo.pop(item_id, None)
        batches: tuple[PlannedBatch, ...] = ()
        if any(state.todo for state in open_runs):
            if backend is None:
                raise ValueError("execute_plan: items to generate but no model loaded")
            # Prompts are built here, once: the write loop needs them to resolve citations.
            for state in open_runs:
                for item_id, (item, prompt_config) in list(state.todo.items()):
                    state.todo[item_id] = (item, build_prompt(item, prompt_config))
            batches = plan_batches(
                backend.tokenizer,
                [(s.run_id, list(s.todo), [p.text for _, p in s.todo.values()]) for s in open_runs if s.todo],
                request.batch_size,
            )
    except BaseException:
        for state in open_runs:
            try:
                sink.finish_run(state.run_id, "failed")
            except Exception:  # noqa: BLE001 - keep the first error; an unreleased run stays resumable
                pass
        raise
    results = backend.generate(batches) if batches else iter(())
    write_loop(
        open_runs,
        batches,
        results,
        sink,
        on_progress=on_progress,
        should_stop=should_stop,
        fingerprint=getattr(backend, "fingerprint", None),
    )
    outcomes = {
        s.run_id: RunOutcome(s.run_id, s.mode, "complete", s.n_items, s.n_generated, s.n_cited)
        for s in open_runs
    }
    runs = tuple(
        outcomes.get(run.run_id) or RunOutcome(run.run_id, run.mode, "already complete", len(run.items), 0, 0)
        for run in plan.runs
    )
    mode_items: dict[Mode, int | None] = {**plan.stored_items, **{r.mode: r.n_items for r in runs}}
    return ExperimentOutcome(
        experiment_id=plan.experiment_id,
        runs=runs,
        model=request.label,
        quantization=getattr(loaded, "quantization", None) if loaded is not None else (
            provenance.quantization if provenance is not None else None),
        experiment_name=plan.experiment_name,
        mode_items=mode_items,
        skipped=plan.skipped,
    )


def execute_plans(
    plans: Sequence[ExperimentPlan],
    sink: Sink,
    backend: Backend,
    *,
    copy_from: Sequence[Mapping[Mode, str] | None] = (),
    on_claimed: Callable[[int, ExperimentPlan], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> list[ExperimentOutcome]:
    """Several experiments of one model (a study grid) through ONE pipeline of `backend`, so that
    each Ray actor loads the model once for the whole grid; the driver writes every run.

    Each plan is claimed (then `on_claimed(index, plan)`, e.g. to record it in its study), all
    their batches go through one write loop, and a shared vanilla run (`copy_from[i]`, as for
    execute_plan) is copied once its source is complete: right away when the source is already
    stored, else after the pipeline, generating in a second one only what the source lacks.
    """
    copies = list(copy_from) + [None] * (len(plans) - len(copy_from))
    states: list[tuple[int, PlannedRun, OpenRun]] = []
    provenance = backend.provenance
    try:
        for index, plan in enumerate(plans):
            claimed = [run for run in plan.runs if run.needs_claim]
            if claimed:
                needed = {it.id for run in claimed for it in run.items}
                sink.claim(
                    plan.spec,
                    plan.experiment_id,
                    {run.mode: run.resumes.run_id if run.resumes else None for run in claimed},
                    [_run_spec(plan, run, provenance, (copies[index] or {}).get(run.mode)) for run in claimed],
                    [it for it in plan.dataset.items if it.id in needed],
                )
            for run in claimed:
                prompt = replace(plan.request.prompt, mode=run.mode)
                states.append((index, run, OpenRun(run.run_id, run.mode, len(run.items),
                                                   {it.id: (it, prompt) for it in run.todo})))
            if on_claimed is not None:
                on_claimed(index, plan)
        # Runs this pipeline generates: a copy from one of them waits until it is complete.
        generated_here = {state.run_id for index, run, state in states
                          if state.todo and (copies[index] or {}).get(run.mode) is None}
        first: list[OpenRun] = []
        deferred: list[tuple[OpenRun, str]] = []
        for index, run, state in states:
            source = (copies[index] or {}).get(run.mode)
            if source is not None and state.todo:
                if source in generated_here:
                    deferred.append((state, source))
                    continue
                _copy_into(sink, source, state, on_progress)
            first.append(state)
        _generate_into(first, plans[0].request, sink, backend, on_progress)
        if deferred:
            for state, source in deferred:
                _copy_into(sink, source, state, on_progress)
            _generate_into([state for state, _ in deferred], plans[0].request, sink, backend, on_progress)
    except BaseException:
        for _, _, state in states:
            if not state.finished:
                try:
                    sink.finish_run(state.run_id, "failed")
                except Exception:  # noqa: BLE001 - keep the first error; an unreleased run stays resumable
                    pass
        raise
    outcomes = []
    by_run = {state.run_id: state for _, _, state in states}
    for plan in plans:
        runs = tuple(
            RunOutcome(run.run_id, run.mode, "complete", s.n_items, s.n_generated, s.n_cited)
            if (s := by_run.get(run.run_id)) is not None
            else RunOutcome(run.run_id, run.mode, "already complete", len(run.items), 0, 0)
            for run in plan.runs
        )
        outcomes.append(ExperimentOutcome(
            experiment_id=plan.experiment_id,
            runs=runs,
            model=plan.request.label,
            quantization=provenance.quantization,
            experiment_name=plan.experiment_name,
            mode_items={**plan.stored_items, **{r.mode: r.n_items for r in runs}},
            skipped=plan.skipped,
        ))
    return outcomes


def _copy_into(sink: Sink, source: str, state: OpenRun, on_progress) -> None:
    """A shared vanilla run's answers copied in; what the source lacks stays to generate."""
    copied = sink.copy_generations(source, state.run_id, list(state.todo))
    if on_progress and copied:
        on_progress(copied)
    for item_id in sink.done_item_ids(state.run_id):
        state.todo.pop(item_id, None)


def _generate_into(states: list[OpenRun], request: RunRequest, sink: Sink, backend: Backend, on_progress) -> None:
    """One pipeline for these runs' missing items (prompts built here), through the write loop."""
    for state in states:
        for item_id, (item, prompt_config) in list(state.todo.items()):
            state.todo[item_id] = (item, build_prompt(item, prompt_config))
    batches = plan_batches(
        backend.tokenizer,
        [(s.run_id, list(s.todo), [p.text for _, p in s.todo.values()]) for s in states if s.todo],
        request.batch_size,
    )
    results = backend.generate(batches) if batches else iter(())
    write_loop(states, batches, results, sink, on_progress=on_progress,
               fingerprint=getattr(backend, "fingerprint", None))


def load_model_for(request: RunRequest):
    """The model a request names, loaded as it asks (device, quantization, dtype, token)."""
    from engine.models import load_model

    return load_model(
        request.model,
        quantize=request.quantize,
        device=request.device,
        hf_token=request.hf_token,
        dtype=request.dtype,
    )


def run_experiment(
    dataset: Dataset,
    request: RunRequest,
    sink: Sink,
    *,
    on_progress: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
    load: Callable[[RunRequest], Any] = load_model_for,
) -> ExperimentOutcome:
    """Plan, load the model (only if there is work), check prompt lengths, then run or resume."""
    plan = plan_experiment(dataset, request, sink)
    loaded = None
    if plan.n_todo:
        loaded = load(request)
        plan = check_prompt_lengths(plan, loaded)
    if on_total:
        on_total(plan.n_todo)
    return execute_plan(plan, loaded, sink, on_progress=on_progress)
