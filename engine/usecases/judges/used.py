"""Cited or used? The one loop behind `python -m engine used` and engine.api.used.

For each stored answer of the chosen runs and each shown document, the answer's text is held
fixed and read (engine.judges.document_use) after three kinds of prompt: the stored prompt
(full), the prompt without that document's line (the others keep their numbers:
engine.prompting.ablation), and the prompt with only the cited documents' lines. Necessity of a
document = logp(full) - logp(without it); sufficiency = logp(only cited) - logp(full). One
forward pass per prompt variant, so answers x (shown documents + 2) passes; no generation.

As explain and verify, `plan_used` reads the store only and refuses in one line what cannot be
done (an unknown experiment or run, no answers, a served model without --model weights);
`run_used` loads the model and writes each answer's rows in one transaction, so a kill loses at
most the answer in flight and the same request again reads only the answers still missing. The
figures (engine.usecases.judges.used_figures) always come from the stored rows. `progress(n)` after each
stored answer, `stage(line)` before loading and before reading, `stop()` between answers (then
engine.errors.RunCancelled).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import FieldError, UserError
from engine.judges.document_use import answer_logprobs, answer_token_ids, prompt_length
from engine.judges.judging import choose_model
from engine.judges.plan import check_stop
from engine.paths import require_store
from engine.prompting.ablation import split_documents
from engine.usecases.experiments import unknown_experiment
from engine.usecases.judges.judge_runs import UnknownRun, load_judge
from engine.usecases.judges.used_figures import used_figures

Progress = Callable[[int], None]
Stage = Callable[[str], None]
Stop = Callable[[], bool]
Load = Callable[[str], Any]

# A document is used when leaving it out makes the answer at least e^0.5 = 1.65 times less
# likely (docs/method.md, "Cited or used"); the view citation_use uses the same number.
DEFAULT_THRESHOLD = 0.5

NO_PROMPT = "no stored prompt (imported answers)"
NOTHING_SHOWN = "no documents shown"
UNKNOWN_DOCUMENT = "a shown document is not in the dataset"
NOT_SPLIT = "the stored prompt does not hold the shown documents as the prompt builder writes them"
EMPTY = "the answer is empty"
TOO_LONG = "the prompt and answer exceed the model's context"


@dataclass(frozen=True)
class UsedRequest:
    """Which stored answers to read (an experiment, optionally some of its modes, or runs by id),
    and how to load the model that reads them."""

    db: Path
    experiment: str | None = None  # id or name; or else `runs`
    modes: tuple[str, ...] = ()  # with `experiment`: only these modes' runs (empty: all)
    runs: tuple[str, ...] = ()
    model: str | None = None  # Hugging Face id or local folder; None: the model that answered
    device: str = "auto"
    quantize: str = "auto"
    dtype: str = "auto"
    batch_size: int = 16  # prompt variants per forward pass
    limit: int | None = None  # only each run's first N answers
    threshold: float = DEFAULT_THRESHOLD  # nats of necessity above which a document is used


@dataclass(frozen=True)
class UseTodo:
    """One answer to read: its run, the answer, and its prompt split into documents."""

    run: Any  # store.queries.document_use.UseRun
    answer: Any  # store.queries.document_use.UseAnswer
    layout: Any  # engine.prompting.ablation.DocumentLayout

    @property
    def n_passes(self) -> int:
        return len(self.layout.lines) + 2


@dataclass(frozen=True)
class UsedPlan:
    """What a request covers: the runs, every answer in scope, those still to read, and those skipped."""

    db: Path
    runs: tuple[Any, ...]
    model: str  # what to load
    label: str  # the model's name as stored
    scope: tuple[tuple[Any, Any], ...]  # (run, answer) of every answer in scope that can be read
    todo: tuple[UseTodo, ...]
    skipped: tuple[tuple[str, str, str], ...]  # (run_id, item_id, reason)

    @property
    def n_passes(self) -> int:
        return sum(t.n_passes for t in self.todo)

    def cost_line(self) -> str:
        """The work ahead, stated before it starts."""
        n = len(self.todo)
        stored = len(self.scope) - n
        before = f"; {stored} stored before" if stored else ""
        return (f"{n} answer{'s' if n != 1 else ''} x (shown documents + 2) = {self.n_passes} forward "
                f"pass{'es' if self.n_passes != 1 else ''} with {self.label}{before}")


def check_request(request: UsedRequest) -> None:
    """One line for a bad number or an empty model name (FieldError: each face names the field)."""
    if request.batch_size < 1:
        raise FieldError("batch_size", "{batch_size} must be at least 1")
    if request.limit is not None and request.limit < 1:
        raise FieldError("limit", "{limit} must be at least 1")
    if not (math.isfinite(request.threshold) and request.threshold > 0):
        raise FieldError("threshold", "{threshold} must be a number of nats above 0, not {value}",
                         value=request.threshold)
    if request.model is not None and not request.model.strip():
        raise FieldError("model", "{model} must not be empty")
    if (request.experiment is None) == (not request.runs):
        raise ValueError("give exactly one of experiment and runs")


def _runs(request: UsedRequest) -> tuple[Any, ...]:
    """The runs the request names; one line when any is unknown, none has answers, or one was served."""
    from store.queries.document_use import use_runs

    path = Path(require_store(request.db))
    if request.experiment is not None:
        found = use_runs(path, experiment=request.experiment)
        if found is None:
            raise UserError(unknown_experiment(path, request.experiment))
        runs = tuple(r for r in found if not request.modes or r.rag_mode in request.modes)
        if not runs:
            have = ", ".join(sorted({r.rag_mode for r in found}))
            raise UserError(f"experiment '{request.experiment}' has no {' or '.join(request.modes)} run (it has {have})")
    else:
        picked: list[Any] = []
        for run_id in request.runs:
            one = use_runs(path, run=run_id)
            if one is None:
                raise UnknownRun(run_id, path)
            picked.extend(one)
        runs = tuple(picked)
    answered = tuple(r for r in runs if r.n_answers)
    if not answered:
        what = f"run {', '.join(request.runs)}" if request.runs else f"experiment '{request.experiment}'"
        raise UserError(f"{what} has no answers to read yet (run it first with `python -m engine run`)")
    served = [r.run_id for r in answered if r.served]
    if request.model is None and served:
        raise UserError(f"run {', '.join(served)} was answered by a served model: `used` needs the log-probs of a "
                        "given text under a prompt, which a server does not give; pass the model's weights with "
                        "--model PATH")
    return answered


def _reason(answer: Any) -> str | None:
    if answer.prompt is None:
        return NO_PROMPT
    if answer.texts is None:
        return UNKNOWN_DOCUMENT
    if not answer.texts:
        return NOTHING_SHOWN
    if not answer.answer:
        return EMPTY
    return None


def plan_used(request: UsedRequest) -> UsedPlan:
    """The answers still to read by the chosen model; reads the store only."""
    from store.queries.document_use import stored_document_use, use_answers

    check_request(request)
    runs = _runs(request)
    model, label = choose_model(request.model, list(runs))
    done = {(r[0], r[1]) for r in stored_document_use(request.db, [r.run_id for r in runs], label)}
    scope, todo, skipped = [], [], []
    for run in runs:
        for answer in use_answers(request.db, run.run_id, request.limit):
            reason = _reason(answer)
            layout = None
            if reason is None:
                assert answer.prompt is not None and answer.texts is not None  # _reason said so
                layout = split_documents(answer.prompt, answer.texts)
                reason = NOT_SPLIT if layout is None else None
            if reason is not None:
                skipped.append((run.run_id, answer.item_id, reason))
                continue
            scope.append((run, answer))
            if (run.run_id, answer.item_id) not in done:
                todo.append(UseTodo(run, answer, layout))
    if not scope:
        by_reason = Counter(reason for _, _, reason in skipped)
        raise UserError("no answer can be read: " + "; ".join(f"{n} with {r}" for r, n in by_reason.items()))
    return UsedPlan(Path(request.db), runs, model, label, tuple(scope), tuple(todo), tuple(skipped))


def _fits(loaded: Any, todo: UseTodo) -> bool:
    """Whether the full prompt and the answer fit the model's context (a --model with a shorter
    context than the one that answered); every other variant is shorter."""
    context = getattr(loaded, "context_length", None)
    return context is None or prompt_length(loaded, todo.layout.full, todo.answer.answer) <= context


def item_rows(loaded: Any, todo: UseTodo, batch_size: int) -> list[tuple[int, float, float, float, bool]]:
    """One answer's rows (position, logp_full, logp_without, logp_cited_only, cited): its
    shown documents + 2 prompt variants read in batches of `batch_size`."""
    layout, cited = todo.layout, todo.answer.cited
    n = len(layout.lines)
    prompts = [layout.full, *(layout.without([p]) for p in range(1, n + 1)), layout.only(cited)]
    scores = answer_logprobs(loaded, prompts, todo.answer.answer, batch_size=batch_size)
    full, cited_only = scores[0], scores[-1]
    return [(p, full, scores[p], cited_only, p in cited) for p in range(1, n + 1)]


def run_used(plan: UsedPlan, request: UsedRequest, *, load: Load | None = None, progress: Progress | None = None,
             stop: Stop | None = None, stage: Stage | None = None) -> tuple[int, tuple[tuple[str, str, str], ...]]:
    """Read what `plan` holds and store each answer as it finishes; loads nothing when nothing is
    to do. Returns (answers stored now, answers skipped for length)."""
    from store.document_use_store import DocumentUseStore

    if not plan.todo:
        return 0, ()
    check_stop(stop, "cancelled before reading")
    if stage is not None:
        stage(f"loading {plan.label}")
    loaded = (load or load_judge(request))(plan.model)
    check_stop(stop, "cancelled before reading")
    if stage is not None:
        stage("reading")
    store = DocumentUseStore(plan.db)
    n_now, skipped = 0, []
    for i, todo in enumerate(plan.todo):
        where = (todo.run.run_id, todo.answer.item_id)
        if not answer_token_ids(loaded.tokenizer, todo.answer.answer):
            skipped.append((*where, EMPTY))
        elif not _fits(loaded, todo):
            skipped.append((*where, TOO_LONG))
        else:
            store.write_item(*where, plan.label, item_rows(loaded, todo, request.batch_size))
            n_now += 1
        if progress is not None:
            progress(1)
        if i + 1 < len(plan.todo):
            check_stop(stop, f"stopped after {n_now} answer{'s' if n_now != 1 else ''}")
    return n_now, tuple(skipped)


def used(request: UsedRequest, *, load: Load | None = None, progress: Progress | None = None,
         stop: Stop | None = None, stage: Stage | None = None) -> Any:
    """Plan, read what is missing, and the figures from the stored rows (a UsedResult)."""
    plan = plan_used(request)
    n_now, too_long = run_used(plan, request, load=load, progress=progress, stop=stop, stage=stage)
    return used_figures(plan, request.threshold, n_now=n_now, skipped=plan.skipped + too_long)
