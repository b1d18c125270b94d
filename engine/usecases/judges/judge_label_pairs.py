"""The judging behind the judge's own label bias (`verify --show-label`): the same sentence, only
the label changed.

Each (sentence, cited document) pair of the experiment's base run is judged four times by one
judge: with the label the base prompt showed after that document, with the label the cf prompt
showed after the same document (the other label: cf swaps them), and with no label, once in
each of those two passes. The answer sentence, the question and the document are the base run's
every time, so between the first two only the label differs. (Judging each run's own sentence,
as `verify` does per run, would mix the label with the generator's wording: a cf answer worded
otherwise moves the judge even with the label hidden.) The two hidden verdicts see the same
input beside other neighbours in their batch: the control, what the judge reads where nothing
but its own noise differs.

Verdicts go to judge_label_verdicts (migration 027), batch by batch; the same request again
judges only what is missing. engine.usecases.judges.judge_label_bias measures them.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import FieldError
from engine.judges.judging import check_lengths
from engine.judges.nli import (
    NliPair,
    count_truncated,
    label_probabilities,
    load_nli,
    mapping_json,
    premise,
    verification,
)
from engine.judges.plan import Load, Progress, Stage, Stop, check_stop, close_judge
from engine.judges.verify import TOP_N, claim_text, claims_of, class_probabilities, parse_class, verify_prompt
from engine.types import Claim, Document, LabelVerdict, Verification, VerifySource
from engine.usecases.judges.judge_runs import answered_runs, check_request, judge_model, load_judge
from engine.usecases.judges.verify_nli import SHOWN, judge_requests, judge_row, nli_model
from engine.usecases.judges.verify_request import VerifyRequest

if TYPE_CHECKING:
    from store.verification_store import JudgeRow

# Each batch's verdicts, and the `judges` row of the judge that judged them.
Batches = Generator[tuple[list[LabelVerdict], "JudgeRow"], None, None]


@dataclass(frozen=True)
class LabelCase:
    """One prompt to judge: a base run's pair with the document's label as `label_from` showed
    it, or (label None) with none, in `label_from`'s pass."""

    source: VerifySource  # the base run's answer
    claim: Claim
    label_from: str  # base | cf
    label: str | None


@dataclass(frozen=True)
class LabelBiasPlan:
    """What run_label_bias will judge; nothing is loaded or written yet."""

    db: Path
    experiment_id: str
    base_run: str
    cf_run: str
    model: str  # what to load
    judge: str  # its stored name: the judge as `verify --show-label` names it ("...+label")
    kind: str  # nli | llm
    cases: tuple[LabelCase, ...]
    n_left_out: int = 0  # pairs whose document the cf run did not show: no cf label to show

    @property
    def n_todo(self) -> int:
        return len(self.cases)


def plan_label_bias(request: VerifyRequest, *, stop: Stop | None = None) -> LabelBiasPlan | None:
    """The prompts still to judge for the request's one judge (a VerifyRequest); None where the
    request's runs hold no base and cf run of one experiment. Reads the store only."""
    from store.queries import answers_to_verify
    from store.queries.verify_labels import label_verdicts_done, labels_as_shown, labels_by_document

    check_request(request)
    requests = judge_requests(request)
    if len(requests) > 1:
        raise FieldError("judge", "plan_label_bias plans one judge; judge_requests(request) gives one request per judge")
    request = requests[0]
    answered = answered_runs(request, "verify", stop)
    by_mode = {r.rag_mode: r for r in answered}
    base, cf = by_mode.get("base"), by_mode.get("cf")
    if base is None or cf is None or base.experiment_id != cf.experiment_id:
        return None
    nli = nli_model(request)
    if nli is not None:
        model, judge, kind = nli, f"nli:{nli}{SHOWN}", "nli"
    else:
        model, name = judge_model(replace(request, judges=()), answered)
        judge, kind = name + SHOWN, "llm"
    db = Path(request.db)
    done = label_verdicts_done(db, base.run_id, judge)
    shown_base, shown_cf = labels_as_shown(db, base), labels_by_document(db, cf)
    passes: dict[str, list[LabelCase]] = {"base": [], "cf": []}
    left_out = 0
    for stored in answers_to_verify(db, base, judge, request.limit):
        source = VerifySource(stored.run_id, stored.item, stored.answer, stored.shown_doc_ids, ())
        for claim in claims_of(stored.item.id, stored.answer, stored.shown_doc_ids):
            in_base = shown_base.get(claim.item_id, ())
            labels = {"base": in_base[claim.position - 1] if claim.position <= len(in_base) else None,
                      "cf": shown_cf.get(claim.item_id, {}).get(claim.doc_id)}
            if None in labels.values():
                left_out += 1
                continue
            for label_from, label in labels.items():
                for shown in (True, False):
                    if (claim.item_id, claim.sentence_index, claim.position, label_from, shown) not in done:
                        passes[label_from].append(LabelCase(source, claim, label_from, label if shown else None))
    return LabelBiasPlan(db, base.experiment_id, base.run_id, cf.run_id, model, judge, kind,
                         tuple(passes["base"] + passes["cf"]), left_out)


def run_label_bias(plan: LabelBiasPlan, request: VerifyRequest, *, load: Load | None = None, progress: Progress | None = None,
                   stop: Stop | None = None, stage: Stage | None = None) -> int:
    """Judge what `plan` holds and store each batch as it finishes; how many verdicts were
    judged. Loads nothing when nothing is to do."""
    if not plan.cases:
        return 0
    check_stop(stop, "cancelled before judging")
    if stage is not None:
        stage(f"loading {plan.judge}")
    batches = _nli(plan, request) if plan.kind == "nli" else _llm(plan, request, load)
    from store.verification_store import VerificationStore

    store = VerificationStore(plan.db)
    total = 0
    try:
        for verdicts, row in batches:
            store.write_label_verdicts(verdicts, row)
            total += len(verdicts)
            if progress is not None:
                progress(len(verdicts))
            check_stop(stop, f"stopped after {total} verdict{'s' if total != 1 else ''}")
    finally:
        batches.close()  # a served judge's connections close now, not when the generator is collected
    return total


def _verdict(plan: LabelBiasPlan, case: LabelCase, judged: Verification) -> LabelVerdict:
    return LabelVerdict(judged, plan.cf_run, case.label_from, case.label)


def _nli(plan: LabelBiasPlan, request: VerifyRequest) -> Batches:
    """Each batch's verdicts and the judge's `judges` row, judged by the NLI model in plan order."""
    judge = load_nli(plan.model, request.device)
    pairs = [NliPair(c.source, c.claim, premise(_document(c), c.label), claim_text(c.source.item.question, c.claim.sentence))
             for c in plan.cases]
    count_truncated(judge, pairs, lambda p: f"run {plan.base_run}, item '{p.claim.item_id}'")  # refuses a claim too long
    row = judge_row(plan.judge, "nli", plan.model, mapping_json(judge))
    for start in range(0, len(pairs), request.batch_size):
        chunk = pairs[start:start + request.batch_size]
        yield ([_verdict(plan, case, verification(pair, judge, plan.judge, probs)) for case, pair, probs
                in zip(plan.cases[start:start + request.batch_size], chunk, label_probabilities(judge, chunk),
                       strict=True)], row)


def _llm(plan: LabelBiasPlan, request: VerifyRequest, load: Load | None) -> Batches:
    """Each batch's verdicts and the judge's `judges` row, judged with AttrScore's prompt."""
    from engine.generation.generate import GenerationConfig, iter_batches

    prompts = [verify_prompt(c.source.item.question, c.claim.sentence, _document(c), c.label) for c in plan.cases]
    loaded = (load or load_judge(request))(plan.model)
    try:
        check_lengths(loaded, ((f"run {plan.base_run}, item '{c.claim.item_id}'", p)
                               for c, p in zip(plan.cases, prompts, strict=True)), request.max_new_tokens, "verification")
        row = judge_row(plan.judge, "llm", plan.model, "attrscore")
        config = GenerationConfig(max_new_tokens=request.max_new_tokens, batch_size=request.batch_size, top_n_logprobs=TOP_N)
        for batch in iter_batches(loaded, prompts, config):
            verdicts = []
            for i, out in batch:
                c = plan.cases[i].claim
                p_att, p_ext, p_con = class_probabilities(out)
                verdicts.append(_verdict(plan, plan.cases[i], Verification(
                    run_id=plan.base_run, item_id=c.item_id, sentence_index=c.sentence_index, position=c.position,
                    doc_id=c.doc_id, judge_model=plan.judge, prompt=prompts[i], raw_output=out.text,
                    label=parse_class(out.text), p_attributable=p_att, p_extrapolatory=p_ext, p_contradictory=p_con)))
            yield verdicts, row
    finally:
        close_judge(loaded)


def _document(case: LabelCase) -> Document:
    return next(d for d in case.source.item.documents if d.id == case.claim.doc_id)
