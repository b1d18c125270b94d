"""AttrScore attribution verification: does each cited document support the sentence citing it?

For every (answer sentence, cited document) pair of a stored answer, a judge model (by default
the model that answered) gets AttrScore's validator instruction (Yue et al., 2023): the claim is
the question followed by the answer sentence that carries the citation (its citation marks
removed), the reference is the cited document as shown (title and text, no label). Its answer
is read for the first class word:

- attributable: the reference supports the claim;
- extrapolatory: the reference lacks the information to tell;
- contradictory: the reference contradicts the claim;
- unparsed: no class word in the answer. Never a guess.

Probabilities (see class_probabilities): at the first generated step where the parsed class word
starts, the probability the judge gave, among the top-n alternatives recorded at that step, to
tokens that begin each class word.

Pure functions. The judge that asks this prompt and reads its answer with them is
engine.judges.registry.ATTRSCORE; generation and the batch loop are engine.judges.plan's, and the
store is reached only through the writer the use case passes, as for engine.judges.explain.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

from engine.prompting.citations import parse_citation_marks

# The value types live in engine.types (the store builds them); re-exported here.
from engine.types import Claim, Document, StoredAnswer, VerifySource

CLASSES = ("attributable", "extrapolatory", "contradictory")
UNPARSED = "unparsed"
# Top alternatives recorded per step: enough that every tokenization of the three class words
# the judge ranks plausibly ("Att", " Att", "**Att", "attrib", ...) is among them.
TOP_N = 20

# AttrScore's validator instruction (the paper's prompt for zero-shot LLM evaluators), verbatim.
INSTRUCTION = (
    "As an Attribution Validator, your task is to verify whether a given reference can support the "
    "given claim. A claim can be either a plain sentence or a question followed by its answer. "
    "Specifically, your response should clearly indicate the relationship: Attributable, "
    "Contradictory or Extrapolatory. A contradictory error occurs when you can infer that the "
    "answer contradicts the fact presented in the context, while an extrapolatory error means that "
    "you cannot infer the correctness of the answer based on the information provided in the context."
)


# ------------------------------------------------------------------ sentences and claims

# A sentence ends at . ! or ? followed by white space; "[1]" marks written after the full stop
# ("... in 1990. [1] Next ...") belong to the sentence before, not to the next one.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_LEADING_MARKS = re.compile(r"^(?:\[[\d\s,;\-–]+\]\s*)+")
_MARKS = re.compile(r"\s*\[[\d\s,;\-–]+\]")


def split_sentences(answer: str) -> tuple[str, ...]:
    """The answer's sentences, stripped, with citation marks after a full stop kept with the
    sentence they follow. Empty pieces are dropped."""
    pieces = [p.strip() for p in _SENTENCE_END.split(answer.strip()) if p.strip()]
    sentences: list[str] = []
    for piece in pieces:
        lead = _LEADING_MARKS.match(piece)
        if lead and sentences:
            sentences[-1] = f"{sentences[-1]} {lead.group(0).strip()}"
            piece = piece[lead.end():].strip()
        if piece:
            sentences.append(piece)
    return tuple(sentences)


def claims_of(item_id: str, answer: str, shown_doc_ids: Sequence[str]) -> tuple[Claim, ...]:
    """The (sentence, cited document) pairs of an answer: each number a sentence cites once, in
    order of first citation; numbers outside 1..len(shown_doc_ids) cite no shown document and
    are left out."""
    claims: list[Claim] = []
    for index, sentence in enumerate(split_sentences(answer)):
        seen: set[int] = set()
        for mark in parse_citation_marks(sentence):
            n = mark.number
            if 1 <= n <= len(shown_doc_ids) and n not in seen:
                seen.add(n)
                claims.append(Claim(item_id, index, sentence, n, shown_doc_ids[n - 1]))
    return tuple(claims)


def sources_to_verify(answers: Iterable[StoredAnswer]) -> tuple[VerifySource, ...]:
    """The answers (store.queries.answers_to_verify) with the claims their judge has not judged yet,
    in the same order; answers with nothing left to judge are left out."""
    sources = []
    for stored in answers:
        claims = tuple(c for c in claims_of(stored.item.id, stored.answer, stored.shown_doc_ids)
                       if (c.sentence_index, c.position) not in stored.judged)
        if claims:
            sources.append(VerifySource(stored.run_id, stored.item, stored.answer, stored.shown_doc_ids, claims))
    return tuple(sources)


def claim_text(question: str, sentence: str) -> str:
    """AttrScore's claim: the question followed by the answer sentence, without citation marks
    (the judge sees one reference; "[2]" would only point at documents it does not see)."""
    return f"{question.strip()} {_MARKS.sub('', sentence).strip()}"


def reference_text(document: Document) -> str:
    """The cited document as the judge reads it: title and text, without the label the answering
    model may have seen (the judge checks support, not authorship)."""
    return f"{document.title}: {document.text}" if document.title else document.text


def verify_prompt(question: str, sentence: str, document: Document, label: str | None = None) -> str:
    """The judge's user turn for one pair; `label`: the label line the answering model saw after
    the document, repeated for a judge that is to see it (`verify --show-label`)."""
    # The layout of AttrScore's own evaluation script: instruction, blank line, "Claim: ...", blank
    # line, "Reference: ...".
    shown = f" (written by {label})" if label is not None else ""
    return f"{INSTRUCTION}\n\nClaim: {claim_text(question, sentence)}\n\nReference: {reference_text(document)}{shown}\n"


def shown_label(source: VerifySource, position: int) -> str | None:
    """The label shown beside document `position` (1-based), for a judge that sees labels."""
    return source.labels[position - 1] if source.labels else None


# ------------------------------------------------------------------ reading the judge

# A class word as a whole word; "not attributable" / "isn't attributable" is no verdict of that
# class, so a negated occurrence is skipped and the next one read.
_CLASS_WORD = re.compile(r"(?<![A-Za-z])(attributable|extrapolatory|contradictory)(?![A-Za-z])", re.IGNORECASE)
_NEGATION = re.compile(r"(?:\bnot|n't|\bnon-?)\s*[\W_]*$", re.IGNORECASE)


def find_class(text: str) -> tuple[str, int | None]:
    """The first class word of `text` that is not negated, and where it starts; (UNPARSED, None)
    when there is none."""
    for match in _CLASS_WORD.finditer(text):
        before = text[max(0, match.start() - 12): match.start()]
        if _NEGATION.search(before):
            continue
        return match.group(1).lower(), match.start()
    return UNPARSED, None


def parse_class(text: str) -> str:
    """The judge's class: the first non-negated class word, any case or markup; else "unparsed"."""
    return find_class(text)[0]


def _letters(token: str) -> str:
    """A token's text with leading non-letters (space, "▁", "Ġ", "*", quotes, ":") removed,
    lowercased: what the token contributes to the start of a word."""
    return re.sub(r"^[^A-Za-z]+", "", token).lower()


def token_class(token: str) -> str | None:
    """The class whose word `token` can begin: its letters are a non-empty prefix of exactly
    that class word ("Att", " attributable", "**Ex", "contr"). The three words start with
    different letters, so a prefix names at most one class."""
    letters = _letters(token)
    if not letters:
        return None
    for name in CLASSES:
        if name.startswith(letters):
            return name
    return None


def class_probabilities(output) -> tuple[float | None, float | None, float | None]:
    """(p_attributable, p_extrapolatory, p_contradictory) from one generation output.

    The step is the first generated token whose characters overlap the start of the parsed class
    word (find_class). At that step, p_class is the sum of exp(log-prob) over the top-n
    alternatives recorded there whose text begins the class word (token_class): the probability
    that the judge starts writing that class word at the point where it started its verdict,
    over every tokenization it ranked in its top n. Tokens outside the recorded top n count as 0,
    so the values are lower bounds and need not sum to 1; a one-letter "A" counts for
    attributable even where it is an article. All None when nothing parses or no top-n
    alternatives were recorded.
    """
    label, start = find_class(output.text)
    if start is None:
        return (None, None, None)
    # An output without recorded offsets (char_offsets is optional) has no step: all None.
    for token, (lo, hi) in zip(output.tokens, output.char_offsets, strict=False):
        if lo <= start < hi:
            if not token.top:
                return (None, None, None)
            sums = dict.fromkeys(CLASSES, 0.0)
            for alt in token.top:
                name = token_class(alt.token)
                if name is not None:
                    sums[name] += math.exp(alt.logprob)
            return tuple(min(1.0, sums[name]) for name in CLASSES)  # type: ignore[return-value]
    return (None, None, None)

