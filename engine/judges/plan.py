"""What every judge of stored answers shares: its plan (the runs and what is still to judge in
each), its result, and the loop that loads the judge, checks every prompt's length, then
generates run by run and batch by batch, handing each finished batch to a writer.

No store here: the runs and their sources come in from the use cases (engine.usecases.judges.explain,
.verify), which read the store, and each batch goes out through the `write` they pass, which
commits it. So a kill loses at most the batch in flight, and the same request again judges only
what is missing.

Progress and cancel come in as arguments: `progress(n)` after each committed batch, `stage(line)`
before loading and before generating, and `stop()` (true once cancel was asked) checked between
steps and after each batch, which then raises engine.errors.RunCancelled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from engine.errors import RunCancelled
from engine.judges.judging import check_lengths
from engine.judges.registry import Asked, Judge
from engine.types import ExplainRun, Item

if TYPE_CHECKING:  # torch stays out of a plan's import
    from engine.generation.generate import GenerationConfig

Progress = Callable[[int], None]
Stage = Callable[[str], None]
Stop = Callable[[], bool]
# A judge as loaded: engine.generation.models.LoadedModel, or a served model that brings its own
# iter_batches (engine.running.backend_server.ServedModel, a folder this one does not import):
# engine.generation.generate.iter_batches takes either, so no narrower type holds both here.
Loaded = Any
Load = Callable[[str], Loaded]



class AboutItem(Protocol):
    """What a judge is asked about holds the item it is about (ExplainSource, VerifySource)."""

    @property
    def item(self) -> Item: ...


S = TypeVar("S", bound=AboutItem)  # what a judge is asked about, one answer each
R = TypeVar("R")  # one row a judge stores


@dataclass(frozen=True)
class RunTodo(Generic[S]):
    """One run and its sources still to judge."""

    run: ExplainRun
    sources: tuple[S, ...]


@dataclass(frozen=True)
class JudgePlan(Generic[S]):
    """What a judge will do: nothing is loaded or written yet."""

    db: Path
    runs: tuple[RunTodo[S], ...]
    model: str  # what to load
    label: str  # its name in the store
    n_todo: int  # prompts to generate: answers (explain) or (sentence, document) pairs (verify)

    @property
    def experiment_id(self) -> str | None:
        return self.runs[0].run.experiment_id if self.runs else None

    @property
    def run_ids(self) -> list[str]:
        return [t.run.run_id for t in self.runs]

    def capped(self, limit: int | None) -> JudgePlan[S]:
        """At most `limit` of the plan's sources (None: all), shared evenly among its runs (modes),
        so that a capped job still compares modes; each run keeps its first ones. The app bounds
        every job a visitor queues by the operator's item cap; the rest wait for the next job."""
        if limit is None or self.n_todo <= limit:
            return self
        sizes = [len(t.sources) for t in self.runs]
        shares = [0] * len(sizes)
        left = limit
        while left > 0:  # even shares; what a small run leaves goes to the others
            open_runs = [i for i, n in enumerate(sizes) if shares[i] < n]
            each = max(1, left // len(open_runs))
            for i in open_runs:
                take = min(each, sizes[i] - shares[i], left)
                shares[i] += take
                left -= take
        runs = tuple(replace(t, sources=t.sources[:k]) for t, k in zip(self.runs, shares, strict=True))
        return replace(self, runs=runs, n_todo=limit)


@dataclass(frozen=True)
class RunDone:
    """How many a run got (answers explained, or pairs judged)."""

    run: ExplainRun
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


def nothing_done(plan: JudgePlan[S]) -> JudgeResult:
    """The result of a plan with nothing to do: every run at 0, nothing loaded."""
    return JudgeResult(plan.label, plan.experiment_id, tuple(RunDone(t.run, 0) for t in plan.runs), 0)


def check_stop(stop: Stop | None, message: str) -> None:
    """RunCancelled(message) when `stop` says so (heard between batches)."""
    if stop is not None and stop():
        raise RunCancelled(message)


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def close_judge(loaded: object) -> None:
    """Close a served judge's connections now, not when it is collected (a local model has none)."""
    close = getattr(loaded, "close", None)
    if close is not None:
        close()


def judge_batches(judge: Judge[S, R], loaded: Loaded, todo: RunTodo[S], name: str, config: GenerationConfig,
                  write: Callable[[Sequence[R]], object]) -> Iterator[int]:
    """Ask `judge` about every source of one run batch by batch, hand each finished batch's rows
    to `write` (which commits it; its return is not used), and yield how many each batch held.
    `name`: the judge's name as stored."""
    from engine.generation.generate import iter_batches

    asked = [Asked(todo.run, s, i, name, p) for s in todo.sources for i, p in enumerate(judge.asks(s))]
    for batch in iter_batches(loaded, [a.prompt for a in asked], config):
        rows = [judge.reads(asked[i], out) for i, out in batch]
        write(rows)
        yield len(rows)


def generate_plan(plan: JudgePlan[S], judge: Judge[S, R], write: Callable[[Sequence[R]], object], *,
                  max_new_tokens: int, batch_size: int, doing: str, load: Load, progress: Progress | None,
                  stop: Stop | None, stage: Stage | None) -> JudgeResult:
    """The loop every prompted judge shares: load, check every prompt's length before anything
    is written, then generate run by run, batch by batch, each batch committed by `write`.
    Loads nothing when nothing is to do. `doing` is the stage line while generating."""
    from engine.generation.generate import GenerationConfig

    if plan.n_todo == 0:
        return nothing_done(plan)
    config = GenerationConfig(max_new_tokens=max_new_tokens, batch_size=batch_size,
                              top_n_logprobs=judge.top_n_logprobs)
    check_stop(stop, "cancelled before generating")
    if stage is not None:
        stage(f"loading {plan.label}")
    loaded = load(plan.model)
    try:
        check_stop(stop, "cancelled before generating")
        check_lengths(loaded, ((f"run {t.run.run_id}, item '{s.item.id}'", p) for t in plan.runs
                               for s in t.sources for p in judge.asks(s)), max_new_tokens, judge.what)
        if stage is not None:
            stage(doing)
        done = run_by_run(plan.runs, lambda todo: judge_batches(judge, loaded, todo, plan.label, config, write)
                          if todo.sources else (), what=judge.what, progress=progress, stop=stop)
    finally:
        close_judge(loaded)
    return JudgeResult(plan.label, plan.experiment_id, done, plan.n_todo)


def run_by_run(runs: Sequence[RunTodo[S]], batches: Callable[[RunTodo[S]], Iterable[int]], *, what: str,
               progress: Progress | None, stop: Stop | None) -> tuple[RunDone, ...]:
    """Judge run after run, each through `batches` (which commits each batch and yields its
    size): progress after every batch, and a stop honoured between batches, saying how many
    `what`s were done. Every judge's loop, prompted or not."""
    done: list[RunDone] = []
    total = 0
    for todo in runs:
        n_run = 0
        for n in batches(todo):
            n_run += n
            total += n
            if progress is not None:
                progress(n)
            check_stop(stop, f"stopped after {plural(total, what)}")
        done.append(RunDone(todo.run, n_run))
    return tuple(done)
