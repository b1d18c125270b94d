"""Judges for `verify` beside the LLM: an NLI model (`--judge nli:MODEL`), the panel of judges one
request names, the `judges` row each judge writes with its first batch, and the labels a judge
sees under `--show-label`.

An NLI judge goes through the same plan as the LLM judge (engine.usecases.judges.verify.plan_verify:
the pairs the judge has not judged yet, so a second request judges only what is missing) and
stores its verdicts in the same `verifications` table, under `nli:<model as given>`
(`+label` when it saw the labels). It loads, and counts the pairs whose document it must cut,
before anything is written; then each batch is committed on its own with the judge's row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import FieldError, UserError
from engine.generation import model_check
from engine.judges.nli import check_nli, count_truncated, load_nli, mapping_json, nli_batches, nli_pairs
from engine.judges.plan import JudgePlan, JudgeResult, Progress, RunDone, RunTodo, Stage, Stop, check_stop, run_by_run
from engine.judges.registry import ATTRSCORE, LLM, NLI, Judge, claim_judge_named, claim_judges
from engine.types import Verification, VerifySource
from engine.usecases.judges.verify_request import VerifyRequest

if TYPE_CHECKING:
    from store.verification_store import JudgeRow

SHOWN = "+label"  # what a judge that sees the labels adds to its stored name


@dataclass(frozen=True)
class NliResult(JudgeResult):
    """What an NLI judge judged, and how many of those pairs had their document cut to fit."""

    n_truncated: int = 0


def parse_judge(spec: str) -> tuple[str, str]:
    """(kind, model) of a judge spec: "nli:MODEL", "llm:MODEL" (or "attrscore:MODEL"), a plain
    MODEL (llm), or "NAME:MODEL" for a claim judge registered in engine.judges.registry (kind NAME)."""
    kind, sep, model = spec.partition(":")
    if sep and kind in (NLI, LLM, *claim_judges()):
        name = model.strip()
        kind = LLM if kind == ATTRSCORE.name else kind
    else:  # a Hub id or folder holds no judge's prefix; "C:\\..." stays whole
        kind, name = LLM, spec.strip()
    if not name:
        raise FieldError("judge", "{judge} needs a model: nli:MODEL, llm:MODEL or MODEL, not {spec!r}", spec=spec)
    return kind, name


def judge_requests(request: VerifyRequest) -> tuple[VerifyRequest, ...]:
    """One request per judge of `request`, in order: its `model` first (an LLM judge, as before),
    then each of `judges`; an NLI judge's request names it in `judges` alone, an LLM judge's in
    `model`. A request naming no judge is returned as is (the model that answered judges)."""
    out: list[VerifyRequest] = []
    seen: set[tuple[str, str]] = set()
    if request.model is not None:
        out.append(replace(request, judges=()))
        seen.add(("llm", request.model))
    for spec in request.judges:
        kind, model = parse_judge(spec)
        if (kind, model) in seen:
            continue
        seen.add((kind, model))
        if kind == LLM:
            out.append(replace(request, model=model, label=None, judges=()))
        else:  # an NLI or another prompted judge is named in `judges` alone
            out.append(replace(request, model=None, label=None, judges=(f"{kind}:{model}",)))
    return tuple(out) or (request,)


def prompted(request: VerifyRequest) -> tuple[Judge[VerifySource, Verification], str | None]:
    """The prompted judge of a one-judge request, and the model its `judges` names for it (None:
    the request's `model`, or the model that answered): AttrScore's unless `judges` names another
    registered claim judge."""
    if len(request.judges) == 1 and request.model is None:
        kind, model = parse_judge(request.judges[0])
        if kind not in (NLI, LLM):
            return claim_judge_named(kind), model
    return ATTRSCORE, None


def check_loadable(request: VerifyRequest, plan: JudgePlan[VerifySource]) -> None:
    """Refuse in one line a judge of `plan` that cannot load: its name (a folder, a cached or
    reachable Hub id), and an NLI judge's config, labels and tokenizer. Run for every judge before
    any judge writes, so that a misspelt second judge leaves the store as it was. A served judge
    and one with nothing to do are not read; a judge whose folder exists but whose weights do not
    load still fails at its own load, after the judges before it have written."""
    if plan.n_todo == 0 or request.server is not None:
        return

    model = nli_model(request)
    model_check.check_model_name(model if model is not None else plan.model)  # "unknown model 'x'", did you mean
    if model is not None:
        check_nli(model)


def nli_model(request: VerifyRequest) -> str | None:
    """The NLI model a one-judge request names, else None (an LLM judge)."""
    if len(request.judges) == 1 and request.model is None:
        kind, model = parse_judge(request.judges[0])
        return model if kind == "nli" else None
    return None


def check_judge_name(db: Path, judge: str, kind: str) -> None:
    """Refuse in one line, before anything loads, a model judge (`kind` llm or nli) whose name the
    store gives another kind: a person's labels imported under a model's name would otherwise
    have the model's verdicts added to them."""
    from store.queries import judge_kinds
    from store.verification_store import taken_judge

    stored = judge_kinds(db).get(judge)
    if stored is not None and stored != kind:
        raise UserError(taken_judge(judge, stored, kind))


def with_labels(db: Path, todo: tuple[RunTodo[VerifySource], ...]) -> tuple[RunTodo[VerifySource], ...]:
    """The plan's runs whose prompts showed labels, each source carrying the labels its model
    saw; one line when none of the runs showed any (vanilla)."""
    from store.queries.verify_labels import labels_as_shown

    out: list[RunTodo[VerifySource]] = []
    for t in todo:
        labels = labels_as_shown(db, t.run)
        if not any(label is not None for shown in labels.values() for label in shown):
            continue
        out.append(RunTodo(t.run, tuple(replace(s, labels=labels.get(s.item.id, ())) for s in t.sources)))
    if not out:
        raise UserError(f"run {', '.join(t.run.run_id for t in todo)} showed no labels: --show-label judges "
                        "base and cf runs")
    return tuple(out)


def judge_row(label: str, kind: str, model: str, mapping: str) -> JudgeRow:
    """The `judges` row of a judge, with the library versions that judged."""
    import importlib.metadata as md

    from store.verification_store import JudgeRow

    versions: dict[str, str | None] = {}
    for package in ("transformers", "torch"):
        try:
            versions[package] = md.version(package)
        except md.PackageNotFoundError:
            versions[package] = None
    provenance = {**versions, "shows_label": label.endswith(SHOWN)}
    return JudgeRow(label, kind, model, mapping, json.dumps(provenance))


def run_nli(plan: JudgePlan[VerifySource], request: VerifyRequest, *, progress: Progress | None = None, stop: Stop | None = None,
            stage: Stage | None = None) -> NliResult:
    """Load the NLI judge, count the pairs it must cut, then judge and store batch by batch.
    Loads nothing when nothing is to do; refuses a model it cannot load before any write."""
    from store.verification_store import VerificationStore

    if plan.n_todo == 0:
        return NliResult(plan.label, plan.experiment_id, tuple(RunDone(t.run, 0) for t in plan.runs), 0)
    check_stop(stop, "cancelled before judging")
    if stage is not None:
        stage(f"loading {plan.label}")
    judge = load_nli(plan.model, request.device)
    pairs = {t.run.run_id: nli_pairs(t.sources) for t in plan.runs}
    n_cut = sum(count_truncated(judge, ps, lambda p: f"run {p.source.run_id}, item '{p.claim.item_id}'")
                for ps in pairs.values())
    row = judge_row(plan.label, "nli", plan.model, mapping_json(judge))
    store = VerificationStore(plan.db)
    if stage is not None:
        stage("verifying")
    done = run_by_run(plan.runs, lambda todo: nli_batches(judge, pairs[todo.run.run_id], plan.label, request.batch_size,
                                                          lambda rows: store.write_batch(rows, row)),
                      what="verification", progress=progress, stop=stop)
    return NliResult(plan.label, plan.experiment_id, done, plan.n_todo, n_cut)
