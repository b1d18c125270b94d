"""The prompted judges of stored answers, each one definition: what it asks, how its answer is
read, and which table its rows go to. A new judge is one `Judge` (or, for a judge of (answer
sentence, cited document) pairs, one `claim_judge(...)`) passed to `register`; the loop that loads,
checks lengths, generates and commits batch by batch is shared (engine.judges.plan.generate_plan),
and the use cases write each table through its one writer (engine.usecases.judges.judge_runs).

Registered here:
- explain: Prompt 5 (why did you cite what you cited?), read for the documents and labels it
  names; rows in `explanations`.
- attrscore: AttrScore's validator instruction per (sentence, cited document) pair, read for
  its first class word and the class probabilities; rows in `verifications`. `verify --judge
  llm:MODEL` (or a plain MODEL) is this judge.

A claim judge registered under NAME is `verify --judge NAME:MODEL`; its rows go to
`verifications` under "NAME:MODEL" (the `judges` row: kind llm, mapping NAME), beside every
other judge, so the shares, the agreement between judges and the Judges tab read it unchanged.
The NLI judge (engine.judges.nli) classifies rather than generates: it has a path of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from engine.errors import FieldError
from engine.judges.explain import explain_prompt, read_explanation
from engine.judges.verify import (
    CLASSES,
    TOP_N,
    UNPARSED,
    class_probabilities,
    parse_class,
    shown_label,
    verify_prompt,
)
from engine.types import Document, ExplainRun, ExplainSource, Explanation, GenerationOutput, Verification, VerifySource

S = TypeVar("S")  # what the judge is asked about: one stored answer (ExplainSource, VerifySource)
R = TypeVar("R")  # one row it stores

# The tables a judge may write, each through one writer in the use cases (engine.usecases.judges.judge_runs).
TABLES = ("explanations", "verifications")


@dataclass(frozen=True)
class Asked(Generic[S]):
    """One prompt a judge was given, with what it was about."""

    run: ExplainRun
    source: S
    index: int  # which of the source's prompts (a claim's place among the source's claims)
    judge: str  # the judge's name as stored
    prompt: str


@dataclass(frozen=True)
class Judge(Generic[S, R]):
    """A prompted judge: the prompts it asks of one stored answer, how one output becomes a row,
    and the table that row goes to."""

    name: str
    table: str  # one of TABLES
    asks: Callable[[S], Sequence[str]]  # the prompts for one stored answer, in order
    reads: Callable[[Asked[S], GenerationOutput], R]  # one output -> one stored row
    what: str  # one prompt's name in messages: "explanation", "verification"
    top_n_logprobs: int = 0  # alternatives to record per generated step (what `reads` may use)


def _claim_prompts(ask: Callable[[str, str, Document, str | None], str]) -> Callable[[VerifySource], Sequence[str]]:
    def asks(source: VerifySource) -> list[str]:
        docs = {d.id: d for d in source.item.documents}
        return [ask(source.item.question, c.sentence, docs[c.doc_id], shown_label(source, c.position))
                for c in source.claims]

    return asks


def claim_judge(name: str, *, ask: Callable[[str, str, Document, str | None], str], parse: Callable[[str], str],
                probabilities: Callable[[GenerationOutput], tuple[float | None, float | None, float | None]] | None = None,
                top_n_logprobs: int = 0) -> Judge[VerifySource, Verification]:
    """A judge of (answer sentence, cited document) pairs, stored in `verifications`.

    `ask(question, sentence, document, label)` is the judge's user turn for one pair (`label`: the
    label the answering model saw beside the document, for a judge that is to see it; None
    otherwise, and always for a registered judge today: `verify --show-label` and the label-bias
    pass it adds judge with AttrScore's prompt, engine.usecases.judges.judge_label_pairs);
    `parse(text)` reads its output as one of CLASSES or UNPARSED; `probabilities(output)`, when
    given, is (p_attributable, p_extrapolatory, p_contradictory) read off the recorded top-n."""

    def reads(asked: Asked[VerifySource], out: GenerationOutput) -> Verification:
        claim = asked.source.claims[asked.index]
        label = parse(out.text)
        if label not in (*CLASSES, UNPARSED):  # the table's CHECK would refuse it half-way through a run
            raise ValueError(f"judge {name}: parse gave {label!r}, not one of {', '.join((*CLASSES, UNPARSED))}")
        p_att, p_ext, p_con = probabilities(out) if probabilities is not None and label != UNPARSED else (None,) * 3
        return Verification(
            run_id=asked.source.run_id, item_id=claim.item_id, sentence_index=claim.sentence_index,
            position=claim.position, doc_id=claim.doc_id, judge_model=asked.judge, prompt=asked.prompt,
            raw_output=out.text, label=label, p_attributable=p_att, p_extrapolatory=p_ext, p_contradictory=p_con)

    return Judge(name, "verifications", _claim_prompts(ask), reads, "verification", top_n_logprobs)


def _explain_reads(asked: Asked[ExplainSource], out: GenerationOutput) -> Explanation:
    return read_explanation(asked.source, asked.run, asked.judge, asked.prompt, out)


EXPLAIN: Judge[ExplainSource, Explanation] = Judge(
    "explain", "explanations", lambda source: (explain_prompt(source),), _explain_reads, "explanation")
ATTRSCORE: Judge[VerifySource, Verification] = claim_judge(
    "attrscore", ask=verify_prompt, parse=parse_class, probabilities=class_probabilities, top_n_logprobs=TOP_N)

# What `verify --judge` reads before the colon for the AttrScore judge (its stored name is the model's).
LLM = "llm"
NLI = "nli"

# Judges of different rows side by side: each is used through its table's use case, which knows
# the row type (claim_judge_named narrows to the verifications judges).
_JUDGES: dict[str, Judge[Any, Any]] = {}


def register(judge: Judge[S, R]) -> Judge[S, R]:
    """Add a judge under its name (returned as given). A name taken, not one word, or a table no
    judge writes is the definition's fault, not a user's: ValueError."""
    if not judge.name.isidentifier():  # it is read back before a colon: `verify --judge NAME:MODEL`
        raise ValueError(f"a judge's name is one word of letters, digits and _, not {judge.name!r}")
    if judge.name in _JUDGES or judge.name in (LLM, NLI):
        raise ValueError(f"a judge named {judge.name!r} is registered already")
    if judge.table not in TABLES:
        raise ValueError(f"judge {judge.name!r} writes {judge.table!r}; a judge writes one of {', '.join(TABLES)}")
    _JUDGES[judge.name] = judge
    return judge


def registered() -> tuple[str, ...]:
    """Every registered judge's name, in the order registered."""
    return tuple(_JUDGES)


def claim_judges() -> tuple[str, ...]:
    """The registered judges of (sentence, cited document) pairs: the names `verify --judge` takes
    before a colon (beside llm and nli)."""
    return tuple(name for name, judge in _JUDGES.items() if judge.table == "verifications")


def claim_judge_named(name: str) -> Judge[VerifySource, Verification]:
    """The registered claim judge `name` ("llm" is AttrScore's); one line when there is none."""
    judge = ATTRSCORE if name == LLM else _JUDGES.get(name)
    if judge is None or judge.table != "verifications":
        raise FieldError("judge", "no judge {name!r} of cited sentences; registered: {names}",
                         name=name, names=", ".join((LLM, NLI, *claim_judges())))
    return cast(Judge[VerifySource, Verification], judge)  # what a judge writing verifications reads


register(EXPLAIN)
register(ATTRSCORE)
