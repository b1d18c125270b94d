"""Prompt 5 explanations: ask a model why it cited what it cited, and read what it says.

For each stored answer the explainer (by default the model that answered) gets Prompt 5: the
question, its own answer, and the same documents in the same order with the same labels the
answering model saw. Each explanation is then read for two things, by pure functions:

- which document numbers it names ("[2]", "document 2", "Doc. 3", "documents 1 and 3");
- whether it gives a label as a reason: it names a label ("written by a woman", "an LLM", a
  custom label) or the label's category (gender, race, human/LLM, the author).

This is a lexical reading: an explanation that says "not because it was written by a woman"
counts as mentioning the label too (it does name it as a consideration), and one about a
question that is itself about women can mention the label without meaning it. Vanilla answers
saw no labels; their explanations are read with the experiment's labels all the same, which
gives the rate at which the words occur without any label shown.

Generation uses engine.generate (batched, raw log-probs), like runs; the store is reached only
through the `write` callback the caller (the CLI) passes, so the engine never imports DuckDB.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from engine.prompts import METADATA_TYPES, build_explain_prompt
from engine.types import Item, TokenLogprob


@dataclass(frozen=True)
class ExplainRun:
    """A stored run whose answers can be explained."""

    run_id: str
    experiment_id: str
    model: str  # the model that answered, as the store names it
    rag_mode: str
    metadata_type: str | None
    label_a: str | None
    label_b: str | None
    n_answers: int


@dataclass(frozen=True)
class ExplainSource:
    """One stored answer with what its model saw: the item, the shown order and labels."""

    run_id: str
    item: Item
    answer: str
    shown_doc_ids: tuple[str, ...]
    labels: tuple[str | None, ...]  # per shown document; all None in vanilla


@dataclass(frozen=True)
class Explanation:
    """One explanation as stored, with what it mentions."""

    run_id: str
    item_id: str
    explainer_model: str
    prompt: str
    text: str
    n_prompt_tokens: int
    finish_reason: str
    tokens: tuple[TokenLogprob, ...]
    mentioned_docs: tuple[int, ...]
    mentioned_labels: tuple[str, ...]

    @property
    def mentions_label(self) -> bool:
        return bool(self.mentioned_labels)


def explain_prompt(source: ExplainSource) -> str:
    """Prompt 5 for one stored answer, with the labels its model saw."""
    labels = source.labels if any(label is not None for label in source.labels) else None
    return build_explain_prompt(source.item, source.answer, source.shown_doc_ids, labels)


# ------------------------------------------------------------------ document mentions

# "[2]", "[1, 3]", "[1][2]": brackets hold only numbers, commas and dashes.
_BRACKETS = re.compile(r"\[\s*(\d+(?:\s*[,;\-–]\s*\d+)*)\s*\]")
# "document 2", "Documents 1 and 3", "doc. 3", "passage #2", "search results 1, 2 and 4",
# "Document [2]" (the brackets are then also caught above; numbers are a set).
_NAMED = re.compile(
    r"\b(?:documents?|docs?\.?|passages?|sources?|search\s+results?|results?|references?)"
    r"\s*(?:no\.?|number|#)?\s*"
    r"(\[?\d+\]?(?:\s*(?:,\s*and|,\s*or|,|;|&|and|or|as\s+well\s+as)\s*\[?\d+\]?)*)",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"\d+")
_RANGE = re.compile(r"(\d+)\s*[\-–]\s*(\d+)")


def mentioned_documents(text: str, n_shown: int) -> tuple[int, ...]:
    """The document numbers (1..n_shown, as shown) that `text` names, ascending, once each.

    Numbers outside 1..n_shown ("[2020]", "document 12" of 5) are not documents the model saw
    and are left out.
    """
    found: set[int] = set()
    for match in _BRACKETS.finditer(text):
        inside = match.group(1)
        for low, high in _RANGE.findall(inside):
            lo, hi = int(low), int(high)
            if lo <= hi <= n_shown:  # "[1-3]"; a reversed or huge range is not a list of documents
                found.update(range(lo, hi + 1))
        found.update(int(n) for n in _NUMBER.findall(inside))
    for match in _NAMED.finditer(text):
        found.update(int(n) for n in _NUMBER.findall(match.group(1)))
    return tuple(sorted(n for n in found if 1 <= n <= n_shown))


# ------------------------------------------------------------------ label mentions

_ARTICLE = re.compile(r"^(?:a|an|the)\s+", re.IGNORECASE)
# Plurals of the head nouns the labels use; a regular "s" otherwise.
_PLURALS = {"woman": "women", "man": "men", "person": "people", "child": "children"}
# Heads that carry no meaning of their own: "a white person" is also "a white author".
_GENERIC_HEADS = ("person", "people", "author", "authors", "writer", "writers", "individual", "individuals")

# Words that name the category of a built-in type's labels. "author" alone is not here: a
# question about who wrote a book makes explanations speak of authors without any label.
CATEGORY_WORDS: dict[str, tuple[str, ...]] = {
    "gender": ("gender", "genders", "gendered", "female", "male", "sex"),
    "race": ("race", "races", "racial", "racially", "ethnicity", "ethnic", "skin colou?r"),
    "human/LLM": (
        "AI", "AI-generated", "AI-written", "machine-generated", "machine-written", "language models?",
        "human-written", "human-authored", "chatbots?", "generated by an? (?:AI|model|machine)",
    ),
}
_TYPE_CATEGORY = {"gender": "gender", "race": "race", "hai": "human/LLM"}
# Any type: the document's author as a property of the document, or the label as such.
AUTHOR_WORDS = (
    "authorship", "authored by", "the author of (?:the|this|that|each) (?:document|passage|source)",
    "(?:document|passage|source)'s author", "its author", "their authors?", "who wrote (?:it|them|the document)",
    "the (?:document's |author )?label", "labell?ed (?:as|with)", "metadata",
)


def _label_variants(label: str) -> tuple[str, ...]:
    """Regex alternatives for one label: without its article, singular and plural, and with a
    generic head ("person") swapped for another ("author")."""
    core = _ARTICLE.sub("", label.strip())
    words = core.split()
    if not words:
        return ()
    head = words[-1].lower()
    heads = [words[-1], _PLURALS.get(head, words[-1] + "s")]
    if head in _GENERIC_HEADS and len(words) > 1:
        heads = list(_GENERIC_HEADS)
    stem = " ".join(re.escape(w) for w in words[:-1])
    return tuple(dict.fromkeys(f"{stem}\\s+{re.escape(h)}" if stem else re.escape(h) for h in heads))


@lru_cache(maxsize=64)
def _word_pattern(alternatives: tuple[str, ...]) -> re.Pattern[str] | None:
    if not alternatives:
        return None
    joined = "|".join(a.replace(" ", r"\s+") for a in alternatives)
    # Whole words: "man" is not in "human", "race" not in "trace"; "LLM-generated" still holds "LLM".
    return re.compile(rf"(?<![\w])(?:{joined})(?![\w])", re.IGNORECASE)


def mentioned_labels(
    text: str, label_a: str | None, label_b: str | None, metadata_type: str | None = None
) -> tuple[str, ...]:
    """The labels (as configured, e.g. "a woman") and categories ("gender", "author") that
    `text` names: the labels first, in A, B order, then the categories."""
    found: list[str] = []
    for label in (label_a, label_b):
        if label and label not in found:
            pattern = _word_pattern(_label_variants(label))
            if pattern is not None and pattern.search(text):
                found.append(label)
    category = _TYPE_CATEGORY.get(metadata_type or "")
    if category is not None:
        words = CATEGORY_WORDS[category]
    elif metadata_type and metadata_type not in METADATA_TYPES:
        # A custom type's name is its category ("age" for "a young person" / "an old person").
        category, words = metadata_type, (re.escape(metadata_type.replace("_", " ")),)
    else:
        words = ()
    if category is not None and (pattern := _word_pattern(words)) is not None and pattern.search(text):
        # "AI" must be the word, not a sentence's "Ai": the human/LLM words are matched with case.
        if category != "human/LLM" or _case_sensitive_ai(text, pattern):
            found.append(category)
    author = _word_pattern(AUTHOR_WORDS)
    if author is not None and author.search(text):
        found.append("author")
    return tuple(found)


def _case_sensitive_ai(text: str, pattern: re.Pattern[str]) -> bool:
    """Whether a human/LLM category word is in `text`, with "AI" counted only in capitals."""
    for match in pattern.finditer(text):
        word = match.group(0)
        if word.lower() != "ai" or word == "AI":
            return True
    return False


# ------------------------------------------------------------------ generation


def read_explanation(source: ExplainSource, run: ExplainRun, explainer_model: str, prompt: str, output) -> Explanation:
    """An Explanation from one generation output, with its mentions read."""
    return Explanation(
        run_id=source.run_id,
        item_id=source.item.id,
        explainer_model=explainer_model,
        prompt=prompt,
        text=output.text,
        n_prompt_tokens=output.n_prompt_tokens,
        finish_reason=output.finish_reason,
        tokens=tuple(output.tokens),
        mentioned_docs=mentioned_documents(output.text, len(source.shown_doc_ids)),
        mentioned_labels=mentioned_labels(output.text, run.label_a, run.label_b, run.metadata_type),
    )


def explain_batches(
    loaded,
    run: ExplainRun,
    sources: Sequence[ExplainSource],
    explainer_model: str,
    config,
    write: Callable[[Sequence[Explanation]], None],
) -> Iterable[int]:
    """Generate the explanations of `sources` batch by batch, hand each finished batch to
    `write` (which commits it), and yield how many each batch held."""
    from engine.generate import iter_batches

    prompts = [explain_prompt(s) for s in sources]
    for batch in iter_batches(loaded, prompts, config):
        rows = [read_explanation(sources[i], run, explainer_model, prompts[i], out) for i, out in batch]
        write(rows)
        yield len(rows)
