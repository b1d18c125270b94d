"""Verify stored answers (AttrScore): the one loop behind `python -m engine verify` and engine.api.

Every (answer sentence, cited document) pair is judged attributable, extrapolatory or
contradictory (engine.judges.verify). As in engine.usecases.judges.explain, `plan_verify` reads the store only
and refuses in one line what cannot be done; `run_verify` loads the judge, checks every prompt's
length before the first write, then commits each batch on its own, so the same request again
judges only the pairs the same judge has not judged.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from engine.errors import FieldError
from engine.judges.plan import JudgePlan, JudgeResult, Load, Progress, RunTodo, Stage, Stop, generate_plan
from engine.judges.registry import ATTRSCORE
from engine.judges.verify import sources_to_verify
from engine.types import VerifySource
from engine.usecases.judges.judge_label_pairs import plan_label_bias, run_label_bias
from engine.usecases.judges.judge_runs import answered_runs, check_request, judge_model, load_judge, table_writer
from engine.usecases.judges.verify_nli import (
    SHOWN,
    check_judge_name,
    check_loadable,
    judge_requests,
    judge_row,
    nli_model,
    prompted,
    run_nli,
    with_labels,
)
from engine.usecases.judges.verify_request import VerifyRequest

VerifyPlan = JudgePlan[VerifySource]
VerifyResult = JudgeResult


def plan_verify(request: VerifyRequest, *, stop: Stop | None = None) -> VerifyPlan:
    """The (sentence, cited document) pairs still to judge by the request's one judge; reads the
    store only. A request naming several judges is planned one judge at a time (judge_requests)."""
    from store.queries import answers_to_verify

    check_request(request)
    requests = judge_requests(request)
    if len(requests) > 1:
        raise FieldError("judge", "plan_verify plans one judge; judge_requests(request) gives one request per judge")
    request = requests[0]  # a lone "llm:M" judge as `model`
    nli = nli_model(request)
    judge, judged_by = prompted(request)
    if request.show_label and judge.name != ATTRSCORE.name:
        # The label-bias pass it adds judges with AttrScore's prompt (engine.usecases.judges.judge_label_pairs).
        raise FieldError("show_label", "{show_label} is for AttrScore's and NLI judges, not {name}", name=judge.name)
    answered = answered_runs(request, "verify", stop)
    if nli is not None:
        model, label = nli, f"nli:{nli}"
    else:
        model, label = judge_model(replace(request, model=judged_by or request.model, judges=()), answered)
        if judge.name != ATTRSCORE.name:  # another prompt's verdicts are another judge's, by name
            label = f"{judge.name}:{label}"
    if request.show_label:
        label += SHOWN
    check_judge_name(request.db, label, "llm" if nli is None else "nli")
    todo = tuple(RunTodo(run, tuple(sources_to_verify(answers_to_verify(request.db, run, label, request.limit))))
                 for run in answered)
    if request.show_label:
        todo = with_labels(request.db, todo)
    return JudgePlan(Path(request.db), todo, model, label, sum(len(s.claims) for t in todo for s in t.sources))


def run_verify(plan: VerifyPlan, request: VerifyRequest, *, load: Load | None = None,
               progress: Progress | None = None, stop: Stop | None = None,
               stage: Stage | None = None) -> VerifyResult:
    """Judge what `plan` holds and store each batch as it finishes; loads nothing when nothing
    is to do. `progress(n)` counts judged pairs."""
    request = judge_requests(request)[0]
    if nli_model(request) is not None:
        return run_nli(plan, request, progress=progress, stop=stop, stage=stage)
    judge = prompted(request)[0]
    write = table_writer(plan.db, judge.table, judge_row(plan.label, "llm", plan.model, judge.name))
    return generate_plan(plan, judge, write, max_new_tokens=request.max_new_tokens, batch_size=request.batch_size,
                         doing="verifying", load=load or load_judge(request), progress=progress, stop=stop,
                         stage=stage)


def verification_shares(plan: VerifyPlan) -> tuple[tuple, ...]:
    """The judged shares of the plan's runs, per run and judge: (run_id, judge_model, rag_mode,
    n_citations, attributable, extrapolatory, contradictory, unparsed shares), in the plan's order;
    empty when none of its runs has verifications. What a face prints after `run_verify`, or instead."""
    from store.queries import verification_shares as stored_shares

    return stored_shares(plan.db, plan.run_ids)


def verify(request: VerifyRequest, *, load: Load | None = None, progress: Progress | None = None,
           stop: Stop | None = None, stage: Stage | None = None) -> VerifyResult:
    """Plan and verify in one call with the request's one judge (engine.api's entry)."""
    return run_verify(plan_verify(request, stop=stop), request, load=load, progress=progress, stop=stop, stage=stage)


def plan_judges(request: VerifyRequest, *, stop: Stop | None = None) -> tuple[tuple[VerifyRequest, VerifyPlan], ...]:
    """(request, plan) of every judge of the request (its `model`, then each of `judges`), each
    judge's config read (engine.usecases.judges.verify_nli.check_loadable): one that cannot load is
    refused in one line before any judge writes."""
    planned = tuple((one, plan_verify(one, stop=stop)) for one in judge_requests(request))
    for one, plan in planned:
        check_loadable(one, plan)
    return planned


def verify_judges(request: VerifyRequest, *, progress: Progress | None = None, stop: Stop | None = None,
                  stage: Stage | None = None) -> tuple[VerifyResult, ...]:
    """Every judge of the request, one after another on the same pairs (plan_judges): one result
    each, in order (an NLI judge's is engine.usecases.judges.verify_nli.NliResult, with how many pairs
    it judged on a cut document). With `show_label`, each judge then also judges the base run's
    sentences with the label as base and as cf showed it, and with none
    (engine.usecases.judges.judge_label_pairs), for engine.usecases.judges.judge_label_bias.judge_cab."""
    results = []
    for one, plan in plan_judges(request, stop=stop):
        results.append(run_verify(plan, one, progress=progress, stop=stop, stage=stage))
        labels = plan_label_bias(one, stop=stop) if one.show_label else None
        if labels is not None:
            run_label_bias(labels, one, progress=progress, stop=stop, stage=stage)
    return tuple(results)
