"""Explain stored answers (Prompt 5): the one loop behind `python -m engine explain`, the app's
Explain jobs (demo.jobs) and engine.api.

Two steps, so that a face can show what is to be done before the model loads: `plan_explain`
reads the store only (the runs, the explainer, the answers still unexplained by it) and refuses
in one line what cannot be done; `run_explain` loads the model, refuses a prompt that does not
fit its context before anything is written, then commits each finished batch on its own. So a
kill loses at most the batch in flight, and the same request again explains only what is missing.

The judge is engine.judges.registry.EXPLAIN (what Prompt 5 asks, how an explanation is read,
the `explanations` table); the plan, the loop and how progress and cancel come in are
engine.judges.plan's, shared with every judge.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.judges.plan import JudgePlan, JudgeResult, Load, Progress, RunTodo, Stage, Stop, generate_plan
from engine.judges.registry import EXPLAIN
from engine.types import ExplainSource
from engine.usecases.judges.judge_runs import (
    JudgeRequest,
    answered_runs,
    check_request,
    judge_model,
    load_judge,
    table_writer,
)

ExplainPlan = JudgePlan[ExplainSource]
ExplainResult = JudgeResult


@dataclass(frozen=True)
class ExplainRequest(JudgeRequest):
    """What to explain: every answer of an experiment, or of some runs, or one item's answers."""

    max_new_tokens: int = 256  # an explanation is a paragraph, a verdict a word
    item_id: str | None = None  # only this item's answers


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


def run_explain(plan: ExplainPlan, request: ExplainRequest, *, load: Load | None = None,
                progress: Progress | None = None, stop: Stop | None = None,
                stage: Stage | None = None) -> ExplainResult:
    """Explain what `plan` holds and store each batch as it finishes; loads nothing when
    nothing is to do. `load(model)` defaults to loading as the request asks."""
    return generate_plan(plan, EXPLAIN, table_writer(plan.db, EXPLAIN.table), max_new_tokens=request.max_new_tokens,
                         batch_size=request.batch_size, doing="explaining", load=load or load_judge(request),
                         progress=progress, stop=stop, stage=stage)


def explanation_rates(plan: ExplainPlan) -> tuple[tuple, ...]:
    """What the explanations of the plan's runs say, per run and explainer: (run_id, explainer_model,
    rag_mode, n_explanations, n_mention_label, label_share), in the plan's order; empty when none
    of its runs has explanations. What a face prints after `run_explain`, or instead of it."""
    from store.queries import explanation_rates as stored_rates

    return stored_rates(plan.db, plan.run_ids)


def explain(request: ExplainRequest, *, load: Load | None = None, progress: Progress | None = None,
            stop: Stop | None = None, stage: Stage | None = None) -> ExplainResult:
    """Plan and explain in one call (engine.api's entry)."""
    return run_explain(plan_explain(request, stop=stop), request, load=load, progress=progress, stop=stop, stage=stage)
