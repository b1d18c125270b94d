"""Write a tiny random-weight model of a real architecture, for tests and offline smoke runs:
`python -m engine tiny-model DIR`. engine.generation.tiny_model builds it; here a bad request
becomes one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.errors import UserError

# The architectures a face offers; light: engine.generation.tiny_model imports torch only when it writes.
from engine.generation.tiny_model import ARCHS, write_tiny_model


@dataclass(frozen=True)
class TinyModelRequest:
    """Where to write which architecture's tiny model."""

    dir: str | Path
    arch: str = "llama"  # one of ARCHS
    vocab: int | None = None  # the model's vocabulary (>= the tokenizer's); None: the tokenizer's
    seed: int = 0  # weight initialisation
    merged_citations: bool = False  # "[1]".."[20]" as single tokens


def tiny_model(request: TinyModelRequest) -> Path:
    """Write the model and its tokenizer to `request.dir` and return the folder. UserError (one
    line) for an unknown architecture (before torch is imported) or a vocabulary below the tokenizer's."""
    if request.arch not in ARCHS:
        raise UserError(f"unknown arch {request.arch!r}; choose one of {', '.join(ARCHS)}")
    try:
        return write_tiny_model(request.dir, arch=request.arch, vocab_size=request.vocab, seed=request.seed,
                                merged_citation_tokens=request.merged_citations)
    except ValueError as err:
        raise UserError(str(err)) from None
