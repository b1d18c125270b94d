"""Planning an experiment, read-only: which experiment a request joins, what each mode's run
must still do, and which prompts fit the model's context (phases 1 and 3 of engine.running.runner).

Nothing here writes: a plan that cannot run is refused before the store is touched.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

from engine.datasets.data import Dataset
from engine.errors import UserError
from engine.prompting.prompts import build_prompt
from engine.running.experiment import (
    config_hash,
    experiment_key,
    experiment_settings,
    incompatibility,
    run_in_progress,
)
from engine.running.run_request import RunRequest, run_config
from engine.sink import Sink
from engine.types import MODES, ExperimentSpec, Item, Mode, SkippedItem, StoredRun


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
        if stored is not None and existing is not None and existing.owner:
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
    from engine.generation.models import chat_input_ids

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
    measured: tuple[Mode, ...] = ("base", "cf") if request.prompt.metadata is not None else ("vanilla",)
    configs = [replace(request.prompt, mode=mode) for mode in measured]
    # No token covers more characters than the longest one in the vocabulary, so a text of more
    # than context x that many characters is too long without tokenizing it (a 10 MB question
    # would otherwise take half a minute to count).
    longest = _longest_token_chars(loaded.tokenizer)
    too_long: dict[str, str] = {}  # item id -> "110,903" or "more than 36,000"
    for index, item in enumerate(plan.dataset.items):  # dataset order, so the first named is the first in the file
        if item.id not in pending:
            continue
        texts = [build_prompt(item, c, index).text for c in configs]
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
