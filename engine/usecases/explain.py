"""Explain stored answers (Prompt 5): the one loop behind `python -m engine explain`, the app's
Explain jobs (demo.jobs) and engine.api.

Two steps, so that a face can show what is to be done before the model loads: `plan_explain`
reads the store only (the runs, the explainer, the answers still unexplained by it) and refuses
in one line what cannot be done; `run_explain` loads the model, refuses a prompt that does not
fit its context before anything is written, then commits each finished batch on its own. So a
kill loses at most the batch in flight, and the same request again explains only what is missing.

Progress and cancel come in as arguments: `progress(n)` after each committed batch, `stage(line)`
before loading and before generating, and `stop()` (true once cancel was asked) checked between
steps and after each batch, which then raises engine.errors.RunCancelled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import FieldError, UserError

Progress = Callable[[int], None]
Stage = Callable[[str], None]
Stop = Callable[[], bool]
Load = Callable[[str], Any]


@dataclass(frozen=True)
class ExplainRequest:
    """What to explain: every answer of an experiment, or of some runs, or one item's answers."""

    db: Path
    experiment: str | None = None  # id or name; or else `runs`
    runs: tuple[str, ...] = ()
    item_id: str | None = None  # only this item's answers
    model: str | None = None  # Hugging Face id, local folder or 'smoke'; None: the model that answered
    # The explainer's name as stored, when `model` is already resolved (the app's RunRequest carries both).
    label: str | None = None
    limit: int | None = None  # only each run's first N answers
    batch_size: int = 8
    max_new_tokens: int = 256
    quantize: str = "auto"
    device: str = "auto"
    dtype: str = "auto"
    # An OpenAI-compatible server (engine.usecases.served); its model "" = the one that answered.
    server: Any = None


@dataclass(frozen=True)
class RunTodo:
    """One run and its sources still to do (ExplainSource or VerifySource)."""

    run: Any  # engine.judges.explain.ExplainRun
    sources: tuple[Any, ...]


@dataclass(frozen=True)
class JudgePlan:
    """What `run_explain` (or `run_verify`) will do: nothing is loaded or written yet."""

    db: Path
    runs: tuple[RunTodo, ...]
    model: str  # what to load
    label: str  # its name in the store
    n_todo: int  # answers (explain) or (sentence, document) pairs (verify) to generate

    @property
    def experiment_id(self) -> str | None:
        return self.runs[0].run.experiment_id if self.runs else None

    @property
    def run_ids(self) -> list[str]:
        return [t.run.run_id for t in self.runs]


@dataclass(frozen=True)
class RunDone:
    """How many a run got (answers explained, or pairs judged)."""

    run: Any  # engine.judges.explain.ExplainRun
    n_done: int


@dataclass(frozen=True)
class JudgeResult:
    """What was generated and stored, per run; n_todo 0 when nothing was left (no model loaded)."""

    label: str
    experiment_id: str | None
    runs: tuple[RunDone, ...]
    n_todo: int

    @property
    def n_done(self) -> int:
        return sum(r.n_done for r in self.runs)


ExplainPlan = JudgePlan
ExplainResult = JudgeResult


def capped_plan(plan: JudgePlan, limit: int | None) -> JudgePlan:
    """At most `limit` of the plan's answers (None: all), shared evenly among its runs (modes), so
    that a capped job still compares modes; each run keeps its first ones. The app bounds every
    job a visitor queues by the operator's item cap; the rest wait for the next job."""
    from dataclasses import replace

    if limit is None or plan.n_todo <= limit:
        return plan
    sizes = [len(t.sources) for t in plan.runs]
    shares = [0] * len(sizes)
    left = limit
    while left > 0:  # even shares; what a small run leaves goes to the others
        open_runs = [i for i, n in enumerate(sizes) if shares[i] < n]
        each = max(1, left // len(open_runs))
        for i in open_runs:
            take = min(each, sizes[i] - shares[i], left)
            shares[i] += take
            left -= take
    runs = tuple(replace(t, sources=t.sources[:k]) for t, k in zip(plan.runs, shares, strict=True))
    return replace(plan, runs=runs, n_todo=limit)


class UnknownRun(UserError):
    """A run id the store does not hold; `run_id` lets a face word it its own way."""

    def __init__(self, run_id: str, path: Path):
        super().__init__(f"no run '{run_id}' in {path} (see `python -m engine list`)")
        self.run_id = run_id


def check_request(request: Any) -> None:
    """One line for a bad number or an empty model name (FieldError: each face names the field)."""
    for name in ("batch_size", "max_new_tokens"):
        if getattr(request, name) < 1:
            raise FieldError(name, f"{{{name}}} must be at least 1")
    if request.limit is not None and request.limit < 1:
        raise FieldError("limit", "{limit} must be at least 1")
    if request.model is not None and not request.model.strip():
        raise FieldError("model", "{model} must not be empty")
    if (request.experiment is None) == (not request.runs):
        raise ValueError("give exactly one of experiment and runs")


def answered_runs(request: Any, verb: str, stop: Stop | None = None) -> list[Any]:
    """The runs of the request that have answers, in mode order; one line when any is unknown or
    none has answers."""
    from engine.paths import require_store
    from engine.usecases.bias import unknown_experiment
    from store.queries import explain_runs

    path = Path(require_store(request.db))  # their first read: a missing store is no store to judge
    if request.experiment is not None:
        runs = explain_runs(path, experiment=request.experiment)
        if runs is None:
            raise UserError(unknown_experiment(path, request.experiment))
        runs = list(runs)
    else:
        runs = []
        for run_id in request.runs:
            check_stop(stop, "cancelled before generating")
            found = explain_runs(path, run=run_id)
            if found is None:
                raise UnknownRun(run_id, path)
            runs.extend(found)
    answered = [r for r in runs if r.n_answers]
    if not answered:
        what = f"run {', '.join(request.runs)}" if request.runs else f"experiment '{request.experiment}'"
        raise UserError(f"{what} has no answers to {verb} yet (run it first with `python -m engine run`)")
    return answered


def judge_model(request: Any, answered: list[Any]) -> tuple[str, str]:
    """(what to load, its name as stored): the request's, else the one model that answered."""
    from engine.judges.judging import choose_model

    if request.label is not None and request.model is not None:
        return request.model, request.label
    server = getattr(request, "server", None)
    if server is not None:  # a served name is the server's: nothing to resolve or load here
        models = {r.model for r in answered}
        name = server.model or request.model
        if not name and len(models) > 1:
            raise FieldError("model", "the runs were answered by {n} models ({names}); choose the served one with "
                             "{model}", n=len(models), names=", ".join(sorted(models)))
        name = name or next(iter(models))
        return name, name
    return choose_model(request.model, answered)


def plan_explain(request: ExplainRequest, *, stop: Stop | None = None) -> ExplainPlan:
    """The answers still to explain by the chosen explainer; reads the store only."""
    from store.queries import explain_sources

    check_request(request)
    answered = answered_runs(request, "explain", stop)
    model, label = judge_model(request, answered)
    todo = tuple(
        RunTodo(run, tuple(s for s in explain_sources(request.db, run, label, request.limit)
                           if request.item_id is None or s.item.id == request.item_id))
        for run in answered
    )
    return JudgePlan(Path(request.db), todo, model, label, sum(len(t.sources) for t in todo))


def load_judge(request: Any) -> Load:
    """The default loader: the model as the request asks (4-bit on a GPU by default), with
    $HF_TOKEN when set."""

    server = getattr(request, "server", None)
    if server is not None:
        from dataclasses import replace

        from engine.usecases.served import served_model

        return lambda model: served_model(replace(server, model=model))

    def load(model: str) -> Any:
        import os

        from engine.judges.judging import load_model_quietly

        return load_model_quietly(model, quantize=request.quantize, device=request.device, dtype=request.dtype,
                                  hf_token=os.environ.get("HF_TOKEN") or None)

    return load


def check_stop(stop: Stop | None, message: str) -> None:
    """RunCancelled(message) when `stop` says so (heard between batches)."""
    from engine.errors import RunCancelled

    if stop is not None and stop():
        raise RunCancelled(message)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def generate_plan(plan: JudgePlan, *, what: str, unit: str, doing: str, max_new_tokens: int,
                  prompts: Callable[[RunTodo], Any], batches: Callable[[Any, RunTodo], Any], load: Load,
                  progress: Progress | None, stop: Stop | None, stage: Stage | None) -> JudgeResult:
    """The loop `run_explain` and `run_verify` share: load, check every prompt's length, then
    generate run by run, batch by batch (`batches(loaded, todo)` yields each committed batch's size)."""
    from engine.judges.judging import check_lengths

    check_stop(stop, "cancelled before generating")
    if stage is not None:
        stage(f"loading {plan.label}")
    loaded = load(plan.model)
    try:
        check_stop(stop, "cancelled before generating")
        check_lengths(loaded, ((f"run {t.run.run_id}, item '{s.item.id}'", p) for t in plan.runs
                               for s, p in prompts(t)), max_new_tokens, what)
        if stage is not None:
            stage(doing)
        done: list[RunDone] = []
        total = 0
        for todo in plan.runs:
            n_run = 0
            if todo.sources:
                for n in batches(loaded, todo):
                    n_run += n
                    total += n
                    if progress is not None:
                        progress(n)
                    check_stop(stop, f"stopped after {_plural(total, unit)}")
            done.append(RunDone(todo.run, n_run))
    finally:
        close = getattr(loaded, "close", None)  # a served judge's connections (a local model has none)
        if close is not None:
            close()
    return JudgeResult(plan.label, plan.experiment_id, tuple(done), plan.n_todo)


def run_explain(plan: ExplainPlan, request: ExplainRequest, *, load: Load | None = None,
                progress: Progress | None = None, stop: Stop | None = None,
                stage: Stage | None = None) -> ExplainResult:
    """Explain what `plan` holds and store each batch as it finishes; loads nothing when
    nothing is to do. `load(model)` defaults to loading as the request asks."""
    from engine.generation.generate import GenerationConfig
    from engine.judges.explain import explain_batches, explain_prompt
    from store.explanation_store import ExplanationStore

    if plan.n_todo == 0:
        return JudgeResult(plan.label, plan.experiment_id, tuple(RunDone(t.run, 0) for t in plan.runs), 0)
    store = ExplanationStore(plan.db)
    config = GenerationConfig(max_new_tokens=request.max_new_tokens, batch_size=request.batch_size)
    return generate_plan(
        plan, what="explanation", unit="explanation", doing="explaining", max_new_tokens=request.max_new_tokens,
        prompts=lambda t: ((s, explain_prompt(s)) for s in t.sources),
        batches=lambda loaded, t: explain_batches(loaded, t.run, t.sources, plan.label, config, store.write_batch),
        load=load or load_judge(request), progress=progress, stop=stop, stage=stage,
    )


def explanation_rates(plan: JudgePlan) -> tuple[tuple, ...]:
    """What the explanations of the plan's runs say, per run and explainer: (run_id, explainer_model,
    rag_mode, n_explanations, n_mention_label, label_share), in the plan's order; empty when none
    of its runs has explanations. What a face prints after `run_explain`, or instead of it."""
    from store.queries import explanation_rates as stored_rates

    return stored_rates(plan.db, plan.run_ids)


def explain(request: ExplainRequest, *, load: Load | None = None, progress: Progress | None = None,
            stop: Stop | None = None, stage: Stage | None = None) -> ExplainResult:
    """Plan and explain in one call (engine.api's entry)."""
    return run_explain(plan_explain(request, stop=stop), request, load=load, progress=progress, stop=stop, stage=stage)
