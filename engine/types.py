"""Values passed between the engine's modules, the store and the app.

They are frozen dataclasses so they can be shared and hashed safely; the store persists them
column for column, so a field added here needs a migration there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

# Closed sets, each spelt once: everything else imports these names.
Mode = Literal["vanilla", "base", "cf"]
MODES: tuple[Mode, ...] = get_args(Mode)  # also the display order
RunStatus = Literal["running", "complete", "failed"]
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
FinishReason = Literal["stop", "length"]
Order = Literal["ranked", "reversed", "random"]  # of the shown documents
ORDERS: tuple[Order, ...] = get_args(Order)
XaiVariant = Literal["none", "direct", "counterfactual"]  # self-interpretation prompting (Garigliotti)
XAI_VARIANTS: tuple[XaiVariant, ...] = get_args(XaiVariant)
FewShot = Literal[0, 1, 2]  # demonstrations before the question; engine.prompts holds two
FEW_SHOT_COUNTS: tuple[FewShot, ...] = get_args(FewShot)
Quantize = Literal["auto", "4bit", "8bit", "none"]  # what a user asks for; auto resolves to one of the others
QUANTIZATIONS: tuple[Quantize, ...] = get_args(Quantize)
ExportFormat = Literal["csv", "parquet"]  # of `python -m engine export` and the app's /export
EXPORT_FORMATS: tuple[ExportFormat, ...] = get_args(ExportFormat)


@dataclass(frozen=True)
class Document:
    """One retrieved document; `relevant` means it contains the answer."""

    id: str
    text: str
    relevant: bool
    title: str = ""


@dataclass(frozen=True)
class Item:
    """A question, its gold answers and its retrieved documents in ranked order."""

    id: str
    question: str
    answers: tuple[str, ...]
    documents: tuple[Document, ...]


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt: the user-turn text and the document ids in the order shown ([1] first)."""

    item_id: str
    text: str
    shown_doc_ids: tuple[str, ...]
    shown_relevant: tuple[bool, ...]


@dataclass(frozen=True)
class TopLogprob:
    """One alternative at a generation step."""

    token_id: int
    token: str
    logprob: float


@dataclass(frozen=True)
class TokenLogprob:
    """The chosen token at one step, its raw log-prob, and optionally the top-n alternatives."""

    token_id: int
    token: str
    logprob: float
    top: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True)
class GenerationOutput:
    """What the generator returns for one prompt, already cut at its first stop token."""

    text: str
    tokens: tuple[TokenLogprob, ...]
    finish_reason: str  # "stop" (a stop token ended it) or "length" (max_new_tokens reached)
    n_prompt_tokens: int
    # char_offsets[i] = (start, end) of token i inside `text`; used to align citations to tokens.
    char_offsets: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Citation:
    """One `[n]` in an answer: n is the 1-based position of the document as shown."""

    index: int  # order of appearance in the answer, from 0
    position: int
    doc_id: str | None  # None when n was not shown (out of range)
    relevant: bool | None
    probability: float | None  # P(model produced the number token(s) of n); None if unknown


@dataclass(frozen=True)
class Generation:
    """One stored answer: the unit the runner hands to its sink."""

    item_id: str
    prompt: str
    answer: str
    shown_doc_ids: tuple[str, ...]
    finish_reason: str
    n_prompt_tokens: int
    tokens: tuple[TokenLogprob, ...]
    citations: tuple[Citation, ...] = field(default_factory=tuple)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class SkippedItem:
    """An item left out of a run with --skip-invalid, and why (printed and stored with the run)."""

    where: str  # "line N" (JSONL) or "item N"
    item_id: str | None
    reason: str
