"""The judges' registry (engine.judges.registry): what is registered, what a registration refuses,
how a claim judge's output becomes a stored row, and how `verify --judge NAME:MODEL` finds a
registered judge. A judge run end to end on a store is docs/extending.md's (tests/docs/test_extending.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.judges import registry
from engine.judges.registry import ATTRSCORE, EXPLAIN, Asked, Judge, claim_judge, register
from engine.types import Claim, Document, ExplainRun, GenerationOutput, Item, VerifySource
from engine.usecases.judges.verify_nli import judge_requests, parse_judge, prompted
from engine.usecases.judges.verify_request import VerifyRequest


@pytest.fixture(autouse=True)
def own_registry(monkeypatch):
    """Each test registers into a copy: nothing it adds outlives it."""
    monkeypatch.setattr(registry, "_JUDGES", dict(registry._JUDGES))


def _support(text: str) -> str:
    word = text.strip().split()[0].lower().strip(".,!") if text.strip() else ""
    return {"yes": "attributable", "no": "extrapolatory"}.get(word, "unparsed")


def _ask(question: str, sentence: str, document: Document, label: str | None) -> str:
    return f"Does this support '{question} {sentence}'? {document.text}\nAnswer yes or no."


SUPPORT = claim_judge("support", ask=_ask, parse=_support)


def test_the_product_s_judges_are_registered_and_only_claim_judges_follow_a_colon():
    assert registry.registered()[:2] == ("explain", "attrscore")
    assert registry.claim_judges() == ("attrscore",)
    assert (EXPLAIN.table, ATTRSCORE.table) == ("explanations", "verifications")
    assert registry.claim_judge_named("llm") is ATTRSCORE  # `--judge llm:MODEL` is AttrScore's prompt


@pytest.mark.parametrize(("judge", "says"), [
    (claim_judge("two words", ask=_ask, parse=_support), "one word"),
    (claim_judge("a:b", ask=_ask, parse=_support), "one word"),
    (claim_judge("attrscore", ask=_ask, parse=_support), "registered already"),
    (claim_judge("nli", ask=_ask, parse=_support), "registered already"),
    (Judge("elsewhere", "runs", EXPLAIN.asks, EXPLAIN.reads, "explanation"), "writes 'runs'"),
])
def test_a_registration_that_cannot_work_is_refused_and_not_kept(judge, says):
    with pytest.raises(ValueError, match=says):
        register(judge)
    assert registry.registered() == ("explain", "attrscore")


def _source() -> VerifySource:
    docs = (Document("i1-d0", "Paris is in France.", True, "Paris"), Document("i1-d1", "Lyon.", False))
    item = Item("i1", "Where is Paris?", ("France",), docs)
    claims = (Claim("i1", 0, "It is in France [1].", 1, "i1-d0"), Claim("i1", 1, "Not Lyon [2].", 2, "i1-d1"))
    return VerifySource("r1", item, "It is in France [1]. Not Lyon [2].", ("i1-d0", "i1-d1"), claims)


def _output(text: str) -> GenerationOutput:
    return GenerationOutput(text=text, tokens=(), finish_reason="stop", n_prompt_tokens=10)


RUN = ExplainRun("r1", "e1", "m", "base", "gender", "a woman", "a man", 1)


def test_a_claim_judge_asks_once_per_pair_and_reads_its_answer_into_a_verification():
    source = _source()
    prompts = SUPPORT.asks(source)
    assert prompts == [_ask("Where is Paris?", "It is in France [1].", source.item.documents[0], None),
                       _ask("Where is Paris?", "Not Lyon [2].", source.item.documents[1], None)]
    row = SUPPORT.reads(Asked(RUN, source, 1, "support:m", prompts[1]), _output("No."))
    assert (row.run_id, row.item_id, row.sentence_index, row.position, row.doc_id) == ("r1", "i1", 1, 2, "i1-d1")
    assert (row.judge_model, row.prompt, row.raw_output, row.label) == ("support:m", prompts[1], "No.", "extrapolatory")
    assert (row.p_attributable, row.p_extrapolatory, row.p_contradictory) == (None, None, None)


def test_a_claim_judge_sees_the_label_the_answering_model_saw_when_the_source_carries_it():
    seen = []
    judge = claim_judge("peek", ask=lambda q, s, d, label: seen.append(label) or "p", parse=_support)
    judge.asks(VerifySource(**{**_source().__dict__, "labels": ("a woman", "a man")}))
    assert seen == ["a woman", "a man"]


def test_a_parse_that_gives_no_class_of_the_table_fails_before_a_row_is_written():
    judge = claim_judge("loose", ask=_ask, parse=lambda text: "yes")
    with pytest.raises(ValueError, match="judge loose: parse gave 'yes'"):
        judge.reads(Asked(RUN, _source(), 0, "loose:m", "p"), _output("yes"))


def test_verify_finds_a_registered_judge_by_the_name_before_its_colon():
    assert parse_judge("support:m") == ("llm", "support:m")  # not registered: a model's name, as before
    register(SUPPORT)
    assert parse_judge("support:m") == ("support", "m")
    assert parse_judge("attrscore:m") == ("llm", "m")
    request = VerifyRequest(Path("s.duckdb"), experiment="e", model="a", judges=("support:m", "nli:n", "support:m"))
    ones = judge_requests(request)
    assert [(r.model, r.judges) for r in ones] == [("a", ()), (None, ("support:m",)), (None, ("nli:n",))]
    assert [prompted(r) for r in ones] == [(ATTRSCORE, None), (SUPPORT, "m"), (ATTRSCORE, None)]


def test_a_registered_judge_shown_the_labels_is_refused_in_one_line_before_the_store_is_read(tmp_path):
    from engine.commands._field_words import cli_message
    from engine.errors import FieldError
    from engine.usecases.judges.verify import plan_verify

    register(SUPPORT)
    missing = tmp_path / "none.duckdb"
    with pytest.raises(FieldError) as refused:
        plan_verify(VerifyRequest(missing, experiment="e", judges=("support:m",), show_label=True))
    assert cli_message(refused.value) == "--show-label is for AttrScore's and NLI judges, not support"
    assert not missing.exists()
