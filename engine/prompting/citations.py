"""Citations: parsed from answer text, and (with token offsets) given the model's probability.

Two readings of an answer ("citation syntaxes"), chosen per run with `run`/`import
--citation-syntax` and recorded in the run's config as `citation_syntax` (docs/method.md,
"Citations"):
- "ours", the default, accepts the forms models actually write for "cite them properly using
  [1][2][3]": `[1]`, `[1][2]`, `[1, 2]`, `[1;2]`, `[1 2]`, `[ 1 ]` and ranges `[1-3]`, `[1–3]`;
- "paper" is the seed library's reading (github aminvenv/attrieval, evaluation.py): the regex
  `\\[\\d+\\]`, a bracket holding digits and nothing else, so `[1, 2]` and `[ 1 ]` cite nothing.
  For these runs the store's query_metrics view also leaves out-of-range numbers out of
  precision, as the seed does (it scores only the shown documents).

Numbers are 1-based positions of documents as shown in the prompt. Edges, defined here:
- a range cites every number from its first end to its second, either way round ([3-1] cites
  3, 2, 1), when it covers at most MAX_RANGE numbers; a wider one ([1-500]) is a typo, not 500
  citations, and reads as its two end points (1 and 500);
- a number above MAX_CITATION_NUMBER cites no document (out of range, like [11] of 10), but the
  store's INTEGER column cannot hold it: it is recorded as a stand-in counted down from
  MAX_CITATION_NUMBER, one per distinct number of the answer (skipping numbers the answer writes
  itself), so that two different huge numbers stay two distinct out-of-range citations.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass

from engine.errors import UserError
from engine.types import GenerationOutput

CITATION_SYNTAXES: tuple[str, ...] = ("ours", "paper")
DEFAULT_CITATION_SYNTAX = "ours"

# A bracket holding only numbers, separated by commas, semicolons, spaces or a range dash.
# Possessive (++) and the lookbehind: a digit run is never split, so a long one costs linear time
# (with backtracking, `_RANGE` took 5 s on one number of 20,000 digits and grew as its square).
_BRACKET = re.compile(r"\[\s*\d++(?:\s*(?:[,;]|-|–)\s*\d++|\s+\d++)*\s*\]")
# The seed library's pattern, as its evaluate_prec_recall, cab_evaluation and cas_evaluation use it.
_PAPER_BRACKET = re.compile(r"\[\d+\]")
_NUMBER = re.compile(r"\d+")
_RANGE = re.compile(r"(?<!\d)(\d++)\s*[-–]\s*(\d++)")
MAX_RANGE = 100  # numbers one range may cite: "[1-100]" cites 100, "[1-101]" its two ends
# The largest number the store records (its INTEGER column); no prompt shows that many documents.
MAX_CITATION_NUMBER = 2**31 - 1
_CHUNK = 4000  # int() refuses strings of more than 4,300 digits; longer ones are read in chunks


def check_citation_syntax(syntax: str) -> str:
    """`syntax` when it is one of CITATION_SYNTAXES; UserError otherwise."""

    if syntax not in CITATION_SYNTAXES:
        raise UserError(f"--citation-syntax must be one of {', '.join(CITATION_SYNTAXES)}, not {syntax!r}")
    return syntax


def _value(digits: str) -> int:
    """The exact number `digits` writes, any length, any Unicode decimal digits (\\d matches them)."""
    if not digits.isascii():
        digits = "".join(str(unicodedata.digit(ch)) for ch in digits)
    value = 0
    for start in range(0, len(digits), _CHUNK):
        chunk = digits[start:start + _CHUNK]
        value = value * 10 ** len(chunk) + int(chunk)
    return value


@dataclass(frozen=True)
class CitationMark:
    """One cited number and where its digits sit in the answer text."""

    number: int
    start: int  # char offset of the first digit
    end: int  # char offset after the last digit


def _ours(text: str) -> list[tuple[int, int, int]]:
    """(exact number, start, end) of every number cited in our syntax, in order of appearance."""
    found: list[tuple[int, int, int]] = []
    for bracket in _BRACKET.finditer(text):
        at, body = bracket.start(), bracket.group()
        ranges = {m.start(): m for m in _RANGE.finditer(body)}
        pos = 0
        while (number := _NUMBER.search(body, pos)) is not None:
            rng = ranges.get(number.start())
            if rng is None:
                found.append((_value(number.group()), at + number.start(), at + number.end()))
                pos = number.end()
                continue
            first, last = _value(rng.group(1)), _value(rng.group(2))
            if abs(last - first) < MAX_RANGE:
                step = 1 if last >= first else -1
                # Every number in a range is attributed to the whole range's digits.
                found += [(n, at + rng.start(1), at + rng.end(2)) for n in range(first, last + step, step)]
            else:
                found += [(first, at + rng.start(1), at + rng.end(1)), (last, at + rng.start(2), at + rng.end(2))]
            pos = rng.end()
    return found


def _paper(text: str) -> list[tuple[int, int, int]]:
    """The seed's reading: every `[digits]`, in order of appearance (repeats kept, as ours)."""
    return [(_value(m.group()[1:-1]), m.start() + 1, m.end() - 1) for m in _PAPER_BRACKET.finditer(text)]


def _stored(found: list[tuple[int, int, int]]) -> list[CitationMark]:
    """The marks with each number above MAX_CITATION_NUMBER replaced by its distinct stand-in."""
    written = {n for n, _, _ in found if n <= MAX_CITATION_NUMBER}
    stand_ins: dict[int, int] = {}
    free = MAX_CITATION_NUMBER
    marks = []
    for number, start, end in found:
        if number > MAX_CITATION_NUMBER:
            if number not in stand_ins:
                while free in written:
                    free -= 1
                stand_ins[number] = free
                free -= 1
            number = stand_ins[number]
        marks.append(CitationMark(number, start, end))
    return marks


def parse_citation_marks(text: str, syntax: str = DEFAULT_CITATION_SYNTAX) -> list[CitationMark]:
    """Every cited number in order of appearance, repeats included, read in `syntax`."""
    return _stored(_paper(text) if check_citation_syntax(syntax) == "paper" else _ours(text))


def parse_citations(text: str, syntax: str = DEFAULT_CITATION_SYNTAX) -> list[int]:
    """Cited 1-based positions in order of appearance, repeats included, read in `syntax`."""
    return [m.number for m in parse_citation_marks(text, syntax)]


def citation_probabilities(output: GenerationOutput, syntax: str = DEFAULT_CITATION_SYNTAX) -> list[float | None]:
    """P(model produced each cited number), one per `parse_citation_marks(output.text, syntax)` mark.

    The probability is exp(sum of the log-probs of every token whose char span overlaps the
    number's digits): the "[1]" token where a tokenizer merges it, the "1" token where it splits
    "[", "1", "]", and the product over "1", "0" where "10" is split. None when no token overlaps
    (no offsets recorded, or the text came from elsewhere).
    """
    spans = output.char_offsets
    result: list[float | None] = []
    for mark in parse_citation_marks(output.text, syntax):
        logprobs = [
            token.logprob
            # No offsets recorded (char_offsets is optional): no token overlaps, so None.
            for token, (start, end) in zip(output.tokens, spans, strict=False)
            if start < mark.end and end > mark.start  # empty spans (special tokens) never overlap
        ]
        result.append(math.exp(sum(logprobs)) if logprobs else None)
    return result
