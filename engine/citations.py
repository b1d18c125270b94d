"""Citations: parsed from answer text, and (with token offsets) given the model's probability.

The text parser accepts the forms models actually write for "cite them properly using
[1][2][3]": `[1]`, `[1][2]`, `[1, 2]`, `[1;2]` and `[1-3]` (a range cites each number in it).
Numbers are 1-based positions of documents as shown in the prompt.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from engine.types import GenerationOutput

# A bracket holding only numbers, separated by commas, semicolons, spaces or a range dash.
_BRACKET = re.compile(r"\[\s*\d+(?:\s*(?:[,;]|-|–)\s*\d+|\s+\d+)*\s*\]")
_NUMBER = re.compile(r"\d+")
_RANGE = re.compile(r"(\d+)\s*[-–]\s*(\d+)")
_MAX_RANGE = 100  # a "[1-100000]" is a typo, not a hundred thousand citations
# The largest number a citation records. Any larger one cites no document either, so it is
# recorded as this (out of range, like [11] of 10 documents): the store's INTEGER column
# and Python's int() of a 5,000-digit string would otherwise fail on a model's answer.
MAX_CITATION_NUMBER = 2**31 - 1


def _number(digits: str) -> int:
    """The cited number, capped at MAX_CITATION_NUMBER (checked on the digits, before int())."""
    digits = digits.lstrip("0") or "0"
    if len(digits) > len(str(MAX_CITATION_NUMBER)):
        return MAX_CITATION_NUMBER
    return min(int(digits), MAX_CITATION_NUMBER)


@dataclass(frozen=True)
class CitationMark:
    """One cited number and where its digits sit in the answer text."""

    number: int
    start: int  # char offset of the first digit
    end: int  # char offset after the last digit


def parse_citation_marks(text: str) -> list[CitationMark]:
    """Every cited number in order of appearance, repeats included."""
    marks: list[CitationMark] = []
    for bracket in _BRACKET.finditer(text):
        body_start = bracket.start()
        body = bracket.group()
        ranges = {m.start(): m for m in _RANGE.finditer(body)}
        pos = 0
        while True:
            number = _NUMBER.search(body, pos)
            if number is None:
                break
            rng = ranges.get(number.start())
            if rng is not None and _number(rng.group(2)) - _number(rng.group(1)) <= _MAX_RANGE:
                lo, hi = _number(rng.group(1)), _number(rng.group(2))
                # Every number in a range is attributed to the whole range's digits.
                for n in range(lo, hi + 1):
                    marks.append(CitationMark(n, body_start + rng.start(1), body_start + rng.end(2)))
                pos = rng.end()
                continue
            marks.append(CitationMark(_number(number.group()), body_start + number.start(), body_start + number.end()))
            pos = number.end()
    return marks


def parse_citations(text: str) -> list[int]:
    """Cited 1-based positions in order of appearance, repeats included."""
    return [m.number for m in parse_citation_marks(text)]




def citation_probabilities(output: GenerationOutput) -> list[float | None]:
    """P(model produced each cited number), one per `parse_citation_marks(output.text)` mark.

    The probability is exp(sum of the log-probs of every token whose char span overlaps the
    number's digits): the "[1]" token where a tokenizer merges it, the "1" token where it splits
    "[", "1", "]", and the product over "1", "0" where "10" is split. None when no token overlaps
    (no offsets recorded, or the text came from elsewhere).
    """
    spans = output.char_offsets
    result: list[float | None] = []
    for mark in parse_citation_marks(output.text):
        logprobs = [
            token.logprob
            for token, (start, end) in zip(output.tokens, spans)
            if start < mark.end and end > mark.start  # empty spans (special tokens) never overlap
        ]
        result.append(math.exp(sum(logprobs)) if logprobs else None)
    return result
