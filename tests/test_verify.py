"""AttrScore verification: the sentence/claim splitter, the judge-output parser, the class
probabilities, `python -m engine verify` end to end with the tiny model (resume included), the
verification_shares view against Python, and migration 010 on a store as 009 left it."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from engine.types import GenerationOutput, TokenLogprob, TopLogprob
from engine.verify import (
    CLASSES, UNPARSED, Verification, claim_text, claims_of, class_probabilities, parse_class,
    split_sentences, token_class,
)

# ------------------------------------------------------------------ the judge's answer

JUDGE_CASES = [
    ("Attributable", "attributable"),
    ("Attributable.", "attributable"),
    ("attributable", "attributable"),
    ("ATTRIBUTABLE!", "attributable"),
    ("**Extrapolatory**", "extrapolatory"),
    ("The answer is: contradictory", "contradictory"),
    ("attributable/extrapolatory", "attributable"),
    ("Extrapolatory / Attributable", "extrapolatory"),
    ("Relationship: Contradictory\n\nThe reference says 1989, the claim says 1990.", "contradictory"),
    ('"Attributable"', "attributable"),
    ("- Extrapolatory: the reference does not mention the year.", "extrapolatory"),
    ("The claim is not attributable; it is contradictory.", "contradictory"),
    ("This isn't attributable to the reference. Extrapolatory.", "extrapolatory"),
    ("Not attributable.", UNPARSED),
    ("The reference supports the claim.", UNPARSED),  # right meaning, no class word: no guess
    ("Attribution: yes", UNPARSED),
    ("Attribut", UNPARSED),  # cut off by max-new-tokens
    ("", UNPARSED),
    ("   \n", UNPARSED),
    ("Contradictorily", UNPARSED),
    ("nonattributable", UNPARSED),
    ("1. Attributable 2. Contradictory", "attributable"),
    ("<answer>Extrapolatory</answer>", "extrapolatory"),
    ("Answer: [Contradictory]", "contradictory"),
    ("ExtrapolatoryAttributable", UNPARSED),  # glued words are not a verdict
]


@pytest.mark.parametrize("text, expected", JUDGE_CASES)
def test_parse_class(text, expected):
    assert parse_class(text) == expected


# ------------------------------------------------------------------ sentences and claims

SENTENCE_CASES = [
    ("Paris is the capital [1]. It has 2 million people [2][3].",
     ("Paris is the capital [1].", "It has 2 million people [2][3].")),
    ("It opened in 1990. [2] It closed in 2001. [1, 3]",
     ("It opened in 1990. [2]", "It closed in 2001. [1, 3]")),
    ("No citations here! Really? Yes.", ("No citations here!", "Really?", "Yes.")),
    ("  One sentence without a stop [4]  ", ("One sentence without a stop [4]",)),
    ("", ()),
]


@pytest.mark.parametrize("answer, expected", SENTENCE_CASES)
def test_split_sentences(answer, expected):
    assert split_sentences(answer) == expected


def test_claims_are_sentence_document_pairs_once_each_within_the_shown_documents():
    shown = ("d1", "d2", "d3")
    claims = claims_of("q", "A is B [1][2][1]. C is D [9]. E [2-3]. F.", shown)
    assert [(c.sentence_index, c.position, c.doc_id) for c in claims] == [
        (0, 1, "d1"), (0, 2, "d2"), (2, 2, "d2"), (2, 3, "d3")]
    assert claims[0].sentence == "A is B [1][2][1]."
    assert claim_text("who is A? ", claims[0].sentence) == "who is A? A is B."


# ------------------------------------------------------------------ probabilities


def output(text: str, steps: list[tuple[str, list[tuple[str, float]]]]) -> GenerationOutput:
    tokens, offsets, at = [], [], 0
    for i, (tok, top) in enumerate(steps):
        tokens.append(TokenLogprob(i, tok, dict(top).get(tok, -5.0), tuple(TopLogprob(j, t, lp) for j, (t, lp) in enumerate(top))))
        offsets.append((at, at + len(tok)))
        at += len(tok)
    assert "".join(t for t, _ in steps) == text
    return GenerationOutput(text=text, tokens=tuple(tokens), finish_reason="stop", n_prompt_tokens=1,
                            char_offsets=tuple(offsets))


def test_token_class():
    assert [token_class(t) for t in ("Att", " attributable", "**Ex", "▁contr", "A", "The", "**", " ", "Con")] == [
        "attributable", "attributable", "extrapolatory", "contradictory", "attributable", None, None, None, "contradictory"]


def test_class_probabilities_read_the_step_where_the_verdict_starts():
    lp = math.log
    out = output("**Extrapolatory**", [
        ("**", [("**", lp(0.9)), ("Att", lp(0.05))]),  # an earlier step: not where the word starts
        ("Extr", [("Extr", lp(0.5)), ("Ex", lp(0.1)), ("Att", lp(0.2)), (" Att", lp(0.05)), ("Cont", lp(0.1)), ("The", lp(0.05))]),
        ("apolatory", [("apolatory", lp(0.99))]),
        ("**", [("**", lp(0.9))]),
    ])
    p = class_probabilities(out)
    assert p == pytest.approx((0.25, 0.6, 0.1))
    assert class_probabilities(output("No idea", [("No", [("No", -0.1)]), (" idea", [(" idea", -0.1)])])) == (None, None, None)
    # No top-n recorded: no probabilities, never a guess from the chosen token alone.
    bare = GenerationOutput(text="Attributable", tokens=(TokenLogprob(0, "Attributable", -0.1),), finish_reason="stop",
                            n_prompt_tokens=1, char_offsets=((0, 12),))
    assert class_probabilities(bare) == (None, None, None)
