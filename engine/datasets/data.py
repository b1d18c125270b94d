"""Load and validate datasets: the native layout, the seed library's layout and ALCE's.

Two kinds of problem, handled differently:
- A broken file (unreadable, not UTF-8, invalid JSON, a row that is not an object, an unknown
  layout) stops the load at the first problem, with `FILE:line N: problem`.
- An invalid item (empty question, no documents, no answers, a field of the wrong type or too
  long, a duplicate id, no relevant document) is collected. Without `skip_invalid`, any invalid
  item refuses the whole dataset with ONE line: how many items, of what kind, and where the
  first one is. With `skip_invalid`, the valid items load and the others are listed in
  `Dataset.skipped`. Messages say "item" once: `FILE:line N: item 'ID': problem`.

Relevance in the ALCE layouts: a document's `relevant` or `gold` flag when present; otherwise a
document is relevant when a gold answer occurs, as whole words, in its title + text, both
normalised by `engine.datasets.normalize.normalize_answer` (the paper's exact-match normalisation). Whole
words, so that the answer "1969" does not make a document about "19690" relevant. ASQA's gold
answers are the short answers of its `qa_pairs`, not its long-form `answer`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from engine.datasets.data_files import Row, json_kind, read_rows, require_regular_file
from engine.datasets.normalize import normalize_answer
from engine.errors import FieldError, UserError
from engine.paths import SAMPLE_DATASET
from engine.types import Document, Item, SkippedItem

# The name tests and older callers use; relevance must normalise exactly as exact match does.
normalize_text = normalize_answer

Layout = Literal["native", "seed", "alce", "alce-asqa"]

# Bounds on one field, in characters. Generous for real data (an ALCE passage is ~100 words, a
# Wikipedia paragraph rarely passes 10,000 characters); they stop a stray 10 MB value from
# becoming a prompt. Documented in README "Datasets".
MAX_ID_CHARS = 1_000
MAX_QUESTION_CHARS = 10_000
MAX_ANSWER_CHARS = 10_000
MAX_TITLE_CHARS = 10_000
MAX_DOCUMENT_CHARS = 100_000
# Bounds on a dataset's shape: NQ's test split has 3,610 items, ALCE's sets 1,000 or so, and a
# prompt of more than 100 documents fits no model we run. They stop a small file from
# expanding into an unbounded prompt list; MAX_ITEMS is checked as rows are read.
MAX_ITEMS = 100_000
MAX_DOCUMENTS = 100

NO_RELEVANT = "no relevant document"
# The bundled sample's name wherever a dataset is named (`--dataset sample`, the app, load_dataset):
# its file lies at data/ in a checkout and inside an installed package (engine.paths.SAMPLE_DATASET).
SAMPLE_NAME = "sample"
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Dataset:
    """Validated items, a content hash that identifies them, and where they came from."""

    items: tuple[Item, ...]
    sha: str  # of `items`, the items actually kept
    source: str
    layout: Layout
    skipped: tuple[SkippedItem, ...] = ()  # left out with skip_invalid, in file order


class _Invalid(Exception):
    """One item's problem; `kind` groups problems in the summary ("empty question", "too long")."""

    def __init__(self, reason: str, kind: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind or reason


@dataclass(frozen=True)
class _Problem:
    where: str  # "line N" or "item N"
    item_id: str | None  # None when the id itself is the problem
    reason: str
    kind: str


def load_dataset(
    path: str | Path, limit: int | None = None, *, skip_invalid: bool = False, top_k: int | None = None
) -> Dataset:
    """Load a JSONL, JSON, Parquet or `datasets.save_to_disk` folder and validate every item.

    `limit` keeps the first N valid items; invalid items after them do not count. `top_k`
    checks relevance among the first K documents only (the ones a `--top-k K` run shows).
    """
    p = dataset_location(path)
    if not p.exists():
        raise UserError(f"{p}: no such file or folder{_sample_hint(p)}")
    require_regular_file(p)
    rows = list(read_rows(p, max_rows=MAX_ITEMS))
    if not rows:
        raise UserError(f"{p}: the dataset has no items")
    layout = _detect_layout(p, rows[0])
    considered = _up_to_limit(_check_rows(rows, layout, top_k), limit)
    items = [o for o in considered if isinstance(o, Item)]
    problems = [o for o in considered if isinstance(o, _Problem)]
    if problems and not skip_invalid:
        raise _summary(str(p), problems, len(considered))
    if not items:
        first = _located(str(p), problems[0])
        raise UserError(f"none of the {len(problems)} items is valid, nothing to run (first: {first})")
    skipped = tuple(SkippedItem(pr.where, pr.item_id, pr.reason) for pr in problems)
    return Dataset(tuple(items), dataset_sha(items), str(p), layout, skipped)


def dataset_location(path: str | Path) -> Path:
    """The file or folder a dataset argument names: `sample` is the bundled sample, wherever the
    program runs from, unless the working folder holds a file or folder of that name."""
    p = Path(path)
    if str(path) == SAMPLE_NAME and not p.exists():
        return SAMPLE_DATASET
    return p


def _sample_hint(missing: Path) -> str:
    """A missing sample_nq.jsonl is the bundled sample looked for outside a checkout."""
    return f" (the bundled sample is named '{SAMPLE_NAME}')" if missing.name == SAMPLE_DATASET.name else ""


def dataset_sha(items: Sequence[Item]) -> str:
    """A short content hash: the same items give the same hash, whatever file they came from."""
    h = hashlib.sha256()
    for item in items:
        record = [item.id, item.question, list(item.answers), [[d.id, d.title, d.text, d.relevant] for d in item.documents]]
        h.update(json.dumps(record, ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def describe_skipped(source: str, skipped: SkippedItem) -> str:
    """One line for a skipped item: `FILE:line N: item 'ID': reason`."""
    return _located(source, _Problem(skipped.where, skipped.item_id, skipped.reason, skipped.reason))


# ---------------------------------------------------------------- messages


def _shown(item_id: str) -> str:
    """An id fit for a one-line message: control characters escaped, long ids cut."""
    text = item_id if item_id.isprintable() else item_id.encode("unicode_escape").decode("ascii")
    return f"'{text[:80]}…'" if len(text) > 80 else f"'{text}'"


def _at(source: str, where: str, item_id: str | None, sep: str) -> str:
    # JSONL rows are lines, so "item" names the id; elsewhere "item N" is the row, so "id" does.
    if item_id is None:
        return f"{source}:{where}"
    if where.startswith("line"):
        return f"{source}:{where}{sep}item {_shown(item_id)}"
    return f"{source}:{where}, id {_shown(item_id)}"


def _located(source: str, problem: _Problem) -> str:
    return f"{_at(source, problem.where, problem.item_id, ': ')}: {problem.reason}"


def _summary(source: str, problems: list[_Problem], total: int) -> FieldError:
    """One line for all invalid items: the count, the kinds, the first one, and the way out (the
    skip_invalid field, which each face names its own way: --skip-invalid, the app's tick box)."""
    n, first, left = len(problems), problems[0], total - len(problems)
    hint = "; run the other {left} with {skip_invalid}" if left else ""
    values = {"left": "one" if left == 1 else left}
    if n == 1:  # a one-item dataset needs no count
        tail = f" (1 of {total} items{hint})" if left else ""
        return FieldError("skip_invalid", "{line}" + tail, line=_located(source, first), **values)
    kinds = Counter(p.kind for p in problems)
    if set(kinds) == {NO_RELEVANT}:
        where = _at(source, first.where, first.item_id, ", ")
        return FieldError("skip_invalid", f"{n} of {total} items have no relevant document among the shown documents "
                          "(first: {where})" + hint, where=where, **values)
    breakdown = "" if len(kinds) == 1 else ", ".join(f"{kind}: {k}" for kind, k in kinds.most_common()) + "; "
    return FieldError("skip_invalid", f"{n} of {total} items are invalid ({{breakdown}}first: {{first}}){hint}",
                      breakdown=breakdown, first=_located(source, first), **values)


# ---------------------------------------------------------------- checking rows


def _detect_layout(p: Path, first: Row) -> Layout:
    where, row = first
    if "query" in row and "passages" in row:
        return "seed"
    if "docs" in row:
        return "alce-asqa" if "qa_pairs" in row else "alce"
    if "documents" in row:
        return "native"
    raise UserError(
        f"{p}:{where}: unknown layout: expected 'question' + 'documents' (native), "
        "'query' + 'passages' (seed library) or 'question' + 'docs' (ALCE)"
    )


def _check_rows(rows: list[Row], layout: Layout, top_k: int | None) -> list[Item | _Problem]:
    """Each row as an Item or a _Problem, in file order; a repeated id is a problem of the later row."""
    id_keys, parse = _LAYOUTS[layout]
    first_at: dict[str, str] = {}
    out: list[Item | _Problem] = []
    for where, row in rows:
        item_id = None
        try:
            item_id = _item_id(row, id_keys, where)
            if item_id in first_at:
                raise _Invalid(f"duplicate id (first at {first_at[item_id]})", "duplicate id")
            first_at[item_id] = where
            item = parse(row, item_id)
            _check_relevant(item, top_k)
            out.append(item)
        except _Invalid as bad:
            out.append(_Problem(where, item_id, bad.reason, bad.kind))
    return out


def _up_to_limit(outcomes: list[Item | _Problem], limit: int | None) -> list[Item | _Problem]:
    """The outcomes up to and including the limit-th valid item: later rows would not be used."""
    if limit is None:
        return outcomes
    valid = 0
    for n, outcome in enumerate(outcomes, start=1):
        valid += isinstance(outcome, Item)
        if valid == limit:
            return outcomes[:n]
    return outcomes


def _check_relevant(item: Item, top_k: int | None) -> None:
    shown = item.documents[:top_k] if top_k else item.documents
    if not any(d.relevant for d in shown):
        raise _Invalid(NO_RELEVANT)


def _string(value: Any, label: str, limit: int) -> str:
    """A text field: None reads as empty; the wrong type, too long or lone surrogates are invalid."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Invalid(f"{label} must be a string, got {json_kind(value)}", "wrong type")
    if len(value) > limit:
        raise _Invalid(f"{label} is {len(value):,} characters long (at most {limit:,})", "too long")
    # JSON allows "\ud800"; such a str cannot be encoded to UTF-8, so it would fail in the store.
    bad = _SURROGATE.search(value)
    if bad:
        code = f"\\u{ord(bad.group()):04x}"
        raise _Invalid(f"{label} holds a lone surrogate {code} at character {bad.start() + 1}, which is not text", "not text")
    return value


def _an_id(value: Any, label: str) -> str | None:
    """A string or integer id as text; None when absent."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        got = f"the number {value!r}" if isinstance(value, float) else json_kind(value)
        raise _Invalid(f"{label} must be a string or an integer, got {got}", "bad id")
    return _string(str(value), label, MAX_ID_CHARS)


def _item_id(row: dict[str, Any], keys: tuple[str, ...], where: str) -> str:
    for key in keys:
        item_id = _an_id(row.get(key), f"'{key}'")
        if item_id is not None:
            return item_id
    # No id in the file: the row number is stable as long as the file is.
    return where.split()[-1]


def _question(row: dict[str, Any], key: str) -> str:
    question = _string(row.get(key), f"'{key}'", MAX_QUESTION_CHARS).strip()
    if not question:
        raise _Invalid("empty question")
    return question


def _answers(row: dict[str, Any], key: str) -> tuple[str, ...]:
    """Gold answers from a string, a list, or ALCE's list of alias lists (flattened)."""
    value = row.get(key)
    if isinstance(value, str):
        value = [value]
    if value is None:
        value = []
    if not isinstance(value, list):
        raise _Invalid(f"'{key}' must be a list of strings, got {json_kind(value)}", "wrong type")
    out: list[str] = []
    for i, entry in enumerate(value, start=1):
        aliases = entry if isinstance(entry, list) else [entry]
        for alias in aliases:
            if not isinstance(alias, str):
                raise _Invalid(f"'{key}' entry {i} must be a string or a list of strings, got {json_kind(alias)}", "wrong type")
            out.append(_string(alias, f"'{key}' entry {i}", MAX_ANSWER_CHARS))
    return _non_empty_answers(out)


def _asqa_answers(row: dict[str, Any]) -> tuple[str, ...]:
    """ASQA: the short answers of every qa_pair, flattened, first occurrence kept."""
    pairs = row.get("qa_pairs")
    if not isinstance(pairs, list):
        raise _Invalid(f"'qa_pairs' must be a list, got {json_kind(pairs)}", "wrong type")
    out: list[str] = []
    for i, pair in enumerate(pairs, start=1):
        shorts = pair.get("short_answers") if isinstance(pair, dict) else None
        if not isinstance(shorts, list):
            raise _Invalid(f"'qa_pairs' entry {i} must be an object with a 'short_answers' list", "wrong type")
        label = f"'qa_pairs' entry {i} 'short_answers'"
        for answer in shorts:
            if not isinstance(answer, str):
                raise _Invalid(f"{label} must hold strings, got {json_kind(answer)}", "wrong type")
            out.append(_string(answer, label, MAX_ANSWER_CHARS))
    return tuple(dict.fromkeys(_non_empty_answers(out)))


def _non_empty_answers(answers: list[str]) -> tuple[str, ...]:
    kept = tuple(a.strip() for a in answers if a.strip())
    if not kept:
        raise _Invalid("no answers")
    return kept


def _relevant_flag(value: Any, label: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise _Invalid(f"{label} must be true or false, got {json_kind(value)}", "wrong type")


def _document_list(row: dict[str, Any], key: str) -> list[dict[str, Any]]:
    raw = row.get(key)
    if raw is None:
        raise _Invalid("no documents")
    if not isinstance(raw, list):
        raise _Invalid(f"'{key}' must be a list, got {json_kind(raw)}", "wrong type")
    _check_count(len(raw))
    for n, d in enumerate(raw, start=1):
        if not isinstance(d, dict):
            raise _Invalid(f"document {n} must be an object, got {json_kind(d)}", "wrong type")
    return raw


def _check_count(n: int) -> None:
    if n > MAX_DOCUMENTS:
        raise _Invalid(f"{n:,} documents (at most {MAX_DOCUMENTS})", "too many documents")


def _document(d: dict[str, Any], n: int, item_id: str, relevant: Callable[[str, str], bool]) -> Document:
    """One document; `relevant(title, text)` decides its flag (a field, or the answer rule)."""
    title = _string(d.get("title"), f"document {n} 'title'", MAX_TITLE_CHARS)
    text = _string(d.get("text"), f"document {n} 'text'", MAX_DOCUMENT_CHARS)
    doc_id = _an_id(d.get("id"), f"document {n} 'id'") or f"{item_id}-d{n}"
    return Document(doc_id, text, relevant(title, text), title)


def _given(flag: bool) -> Callable[[str, str], bool]:
    """The rule for a document whose own field gives its flag (bound now, not read from a loop later)."""
    return lambda _title, _text: flag


def _finish(item_id: str, question: str, answers: tuple[str, ...], docs: list[Document]) -> Item:
    if not docs:
        raise _Invalid("no documents")
    for n, d in enumerate(docs, start=1):
        if not d.text.strip():
            raise _Invalid(f"document {n} has empty text", "empty document")
    repeated = [doc_id for doc_id, k in Counter(d.id for d in docs).items() if k > 1]
    if repeated:
        raise _Invalid(f"document id {_shown(repeated[0])} appears more than once", "duplicate document id")
    return Item(item_id, question, answers, tuple(docs))


# ---------------------------------------------------------------- layouts


def _native(row: dict[str, Any], item_id: str) -> Item:
    question = _question(row, "question")
    answers = _answers(row, "answers")
    docs = []
    for n, d in enumerate(_document_list(row, "documents"), start=1):
        if "relevant" not in d:
            raise _Invalid(f"document {n} has no 'relevant' flag", "no relevant flag")
        flag = _relevant_flag(d["relevant"], f"document {n} 'relevant'")
        docs.append(_document(d, n, item_id, _given(flag)))
    return _finish(item_id, question, answers, docs)


def _seed(row: dict[str, Any], item_id: str) -> Item:
    question = _question(row, "query")
    answers = _answers(row, "org_answers")
    passages = row.get("passages")
    # save_to_disk stores a sequence of structs as a dict of lists; JSON often as a list of dicts.
    if isinstance(passages, list):
        texts = [p.get("passage_text") if isinstance(p, dict) else None for p in passages]
        flags = [p.get("is_selected") if isinstance(p, dict) else None for p in passages]
    elif isinstance(passages, dict):
        texts = list(passages.get("passage_text") or [])
        flags = list(passages.get("is_selected") or [])
    else:
        raise _Invalid("no documents")
    _check_count(len(texts))
    if len(texts) != len(flags):
        raise _Invalid("'passages.passage_text' and 'passages.is_selected' differ in length", "wrong type")
    docs = [
        Document(
            f"{item_id}-d{n}",
            _string(t, f"document {n} 'passage_text'", MAX_DOCUMENT_CHARS),
            _relevant_flag(f, f"document {n} 'is_selected'"),
        )
        for n, (t, f) in enumerate(zip(texts, flags, strict=True), start=1)
    ]
    return _finish(item_id, question, answers, docs)


def _alce_with(answers: tuple[str, ...], row: dict[str, Any], item_id: str) -> Item:
    question = _question(row, "question")
    golds = [g for g in (normalize_answer(a) for a in answers) if g]

    def answer_rule(title: str, text: str) -> bool:
        haystack = f" {normalize_answer(title + ' ' + text)} "
        return any(f" {g} " in haystack for g in golds)

    docs = []
    for n, d in enumerate(_document_list(row, "docs"), start=1):
        key = "relevant" if "relevant" in d else "gold" if "gold" in d else None
        if key is None or d[key] is None:
            docs.append(_document(d, n, item_id, answer_rule))
        else:
            flag = _relevant_flag(d[key], f"document {n} '{key}'")
            docs.append(_document(d, n, item_id, _given(flag)))
    return _finish(item_id, question, answers, docs)


def _alce(row: dict[str, Any], item_id: str) -> Item:
    return _alce_with(_answers(row, "answers" if "answers" in row else "answer"), row, item_id)


def _alce_asqa(row: dict[str, Any], item_id: str) -> Item:
    return _alce_with(_asqa_answers(row), row, item_id)


_LAYOUTS: dict[str, tuple[tuple[str, ...], Callable[[dict[str, Any], str], Item]]] = {
    "native": (("id", "item_id"), _native),
    "seed": (("query_id", "id"), _seed),
    "alce": (("id", "sample_id", "query_id"), _alce),
    "alce-asqa": (("id", "sample_id", "query_id"), _alce_asqa),
}
