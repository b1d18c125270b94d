"""A stored prompt split into its shown documents' blocks, so that one block, or all but some, can
be left out exactly (`python -m engine used`: is a cited document used?).

build_prompt (engine.prompting.prompts) lays the documents out as one line each under the last
"Search Results:" header, "Document [n](text)" plus " (written by LABEL)" where labelled, joined
by "\\n", and followed by "\\n\\nQuestion: ". The split walks the stored prompt with the shown
documents' texts: each line must start with its "Document [n](text)" exactly, and what follows up
to the next line (or the question) must be nothing or a label. Where the stored prompt does not
read so (a prompt written by other code, edited by hand), the split is None and the answer is
skipped, never guessed.

Numbering stays stable: a document's line is removed, the others keep their numbers, so "[3]" in
the answer still names the same document in every variant (a prompt without document 2 shows
[1], [3], [4]). Renumbering would make the answer's marks point at other documents, and the
answer's probability would then measure the renaming, not the use.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from engine.prompting.prompts import SEARCH_RESULTS_HEADER

LABEL_OPEN = " (written by "
QUESTION_OPEN = "\n\nQuestion: "


@dataclass(frozen=True)
class DocumentLayout:
    """A prompt as head + the shown documents' lines joined by "\\n" + tail."""

    head: str  # up to and with "Search Results:\n\n"
    lines: tuple[str, ...]  # position n = index + 1: "Document [n](text)" and its label, if any
    tail: str  # from the "\n\nQuestion: " on

    def without(self, drop: Collection[int]) -> str:
        """The prompt with the lines of the 1-based positions in `drop` left out, the others unchanged."""
        kept = [line for n, line in enumerate(self.lines, start=1) if n not in drop]
        return self.head + "\n".join(kept) + self.tail

    def only(self, keep: Collection[int]) -> str:
        """The prompt with only the lines of the positions in `keep` (none: no document at all)."""
        return self.without([n for n in range(1, len(self.lines) + 1) if n not in keep])

    @property
    def full(self) -> str:
        return self.without(())


def _label_ok(text: str) -> bool:
    return not text or (text.startswith(LABEL_OPEN) and text.endswith(")") and "\n" not in text)


def split_documents(prompt: str, texts: Sequence[str]) -> DocumentLayout | None:
    """The layout of `prompt`, whose shown documents' texts are `texts` in the order shown; None
    where the prompt does not hold them as build_prompt writes them (module docstring)."""
    if not texts:
        return None
    opening = f"{SEARCH_RESULTS_HEADER}\n\nDocument [1]({texts[0]})"
    start = prompt.rfind(opening)  # the last header: few-shot examples have their own before it
    if start < 0:
        return None
    pos = start + len(SEARCH_RESULTS_HEADER) + 2
    head = prompt[:pos]
    lines: list[str] = []
    for n, text in enumerate(texts, start=1):
        line = f"Document [{n}]({text})"
        if not prompt.startswith(line, pos):
            return None
        after = pos + len(line)
        last = n == len(texts)
        end = prompt.find(QUESTION_OPEN if last else f"\nDocument [{n + 1}]({texts[n]})", after)
        if end < 0 or not _label_ok(prompt[after:end]):
            return None
        lines.append(prompt[pos:end])
        if last:
            layout = DocumentLayout(head, tuple(lines), prompt[end:])
            return layout if layout.full == prompt else None
        pos = end + 1
    return None  # not reached: texts is not empty
