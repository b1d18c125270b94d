"""Load and validate datasets: the native layout, the seed library's layout and ALCE's.

Every item is validated before anything is generated; the first bad row stops the load with
one line naming the file, the line (JSONL) or item number, and what is wrong.

Relevance in the ALCE layout: a document's `relevant` or `gold` flag when present; otherwise a
document is relevant when a normalised gold answer occurs, as whole words, in its normalised
title + text (lowercase, punctuation removed, whitespace folded: the normalisation exact match
uses). Whole words, so that the answer "1969" does not make a document about "19690" relevant.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from engine.errors import UserError
from engine.metrics import normalize_answer
from engine.types import Document, Item, SkippedItem

# ALCE relevance must use exactly the normalisation exact match uses, so it is the same function.
normalize_text = normalize_answer


@dataclass(frozen=True)
class Dataset:
    """Validated items, a content hash that identifies them, and where they came from."""

    items: tuple[Item, ...]
    sha: str
    source: str
    layout: str  # "native" | "seed" | "alce"
    skipped: tuple[SkippedItem, ...] = ()  # left out with --skip-invalid


class _RowError(Exception):
    """A problem in one row; the loader adds the file and row to the message."""


def load_dataset(path: str | Path, limit: int | None = None) -> Dataset:
    """Load a JSONL, JSON, Parquet or `datasets.save_to_disk` folder and validate every item."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: no such file or folder")
    rows = list(_read_rows(p))
    if not rows:
        raise UserError(f"{p}: the dataset has no items")
    layout = _detect_layout(p, rows[0])
    items: list[Item] = []
    seen: dict[str, str] = {}
    for where, row in rows:
        try:
            item = _PARSERS[layout](row, where)
        except _RowError as err:
            raise UserError(f"{p}:{where}: {err}") from None
        if item.id in seen:
            raise UserError(f"{p}:{where}: duplicate item id '{item.id}' (first at {seen[item.id]})")
        seen[item.id] = where
        items.append(item)
    if limit is not None:
        items = items[:limit]
    return Dataset(tuple(items), dataset_sha(items), str(p), layout)


def dataset_sha(items: list[Item] | tuple[Item, ...]) -> str:
    """A short content hash: the same items give the same hash, whatever file they came from."""
    h = hashlib.sha256()
    for item in items:
        record = [item.id, item.question, list(item.answers), [[d.id, d.title, d.text, d.relevant] for d in item.documents]]
        h.update(json.dumps(record, ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


# ---------------------------------------------------------------- reading files into rows


def _read_rows(p: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, row) pairs: `where` is 'line N' for JSONL and 'item N' otherwise (1-based)."""
    if p.is_dir():
        yield from _numbered(_read_hf_folder(p))
    elif p.suffix == ".jsonl":
        yield from read_jsonl(p)
    elif p.suffix == ".json":
        yield from _numbered(_read_json(p))
    elif p.suffix == ".parquet":
        yield from _numbered(_read_parquet(p))
    else:
        raise UserError(f"{p}: unknown dataset format (use .jsonl, .json, .parquet or a datasets.save_to_disk folder)")


def _numbered(rows: list[Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for i, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise UserError(f"item {i}: expected an object, got {type(row).__name__}")
        yield f"item {i}", row


def json_kind(value: Any) -> str:
    """A JSON value's type in JSON's words, for error messages."""
    if value is None:
        return "null"
    kinds = {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}
    return kinds.get(type(value), type(value).__name__)


def read_jsonl(p: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """('line N', object) for each non-blank line; UserError on invalid JSON or a non-object."""
    with p.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise UserError(f"{p}:line {n}: invalid JSON ({err.msg} at column {err.colno})") from None
            if not isinstance(row, dict):
                raise UserError(f"{p}:line {n}: expected a JSON object, got {json_kind(row)}")
            yield f"line {n}", row


def _read_json(p: Path) -> list[Any]:
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UserError(f"{p}: invalid JSON ({err.msg} at line {err.lineno}, column {err.colno})") from None
    if isinstance(data, dict):
        # Common wrappers: {"data": [...]} or {"items": [...]}.
        for key in ("data", "items", "examples"):
            if isinstance(data.get(key), list):
                return data[key]
        raise UserError(f"{p}: expected a list of items (or an object with a 'data' list)")
    if not isinstance(data, list):
        raise UserError(f"{p}: expected a list of items")
    return data


def _read_parquet(p: Path) -> list[Any]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(p).to_pylist()
    except Exception as err:  # pyarrow raises several types for a damaged file
        raise UserError(f"{p}: cannot read Parquet ({err})") from None


def _read_hf_folder(p: Path) -> list[Any]:
    if not ((p / "dataset_info.json").exists() or (p / "dataset_dict.json").exists()):
        raise UserError(f"{p}: a folder must be saved with datasets' save_to_disk")
    import datasets

    loaded = datasets.load_from_disk(str(p))
    if isinstance(loaded, datasets.DatasetDict):
        if len(loaded) != 1:
            splits = ", ".join(loaded)
            raise UserError(f"{p}: holds several splits ({splits}); save the one to evaluate on its own")
        loaded = next(iter(loaded.values()))
    return loaded.to_list()


# ---------------------------------------------------------------- layouts


def _detect_layout(p: Path, first: tuple[str, dict[str, Any]]) -> str:
    where, row = first
    if "query" in row and "passages" in row:
        return "seed"
    if "docs" in row:
        return "alce"
    if "documents" in row:
        return "native"
    raise UserError(
        f"{p}:{where}: unknown layout: expected 'question' + 'documents' (native), "
        "'query' + 'passages' (seed library) or 'question' + 'docs' (ALCE)"
    )


def _text(value: Any, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _RowError(f"'{field}' must be a string, got {type(value).__name__}")
    return value


def _item_id(row: dict[str, Any], keys: tuple[str, ...], where: str) -> str:
    for key in keys:
        if row.get(key) not in (None, ""):
            return str(row[key])
    # No id in the file: the row number is stable as long as the file is.
    return where.split()[-1]


def _answers(value: Any) -> tuple[str, ...]:
    """Gold answers from a string, a list, or ALCE's list of alias lists (flattened)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise _RowError("'answers' must be a list of strings")
    out: list[str] = []
    for a in value:
        if isinstance(a, (list, tuple)):
            out.extend(str(x) for x in a if isinstance(x, str))
        elif isinstance(a, str):
            out.append(a)
        else:
            raise _RowError("'answers' must hold strings")
    out = [a.strip() for a in out if a and a.strip()]
    if not out:
        raise _RowError("no answers")
    return tuple(out)


def _relevant_flag(value: Any, doc_no: int) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise _RowError(f"document {doc_no}: 'relevant' must be true or false")


def _finish(item_id: str, question: str, answers: tuple[str, ...], docs: list[Document]) -> Item:
    if not question.strip():
        raise _RowError(f"item '{item_id}': empty question")
    if not docs:
        raise _RowError(f"item '{item_id}': no documents")
    for n, d in enumerate(docs, start=1):
        if not d.text.strip():
            raise _RowError(f"item '{item_id}': document {n} has empty text")
    ids = [d.id for d in docs]
    if len(set(ids)) != len(ids):
        raise _RowError(f"item '{item_id}': document ids are not unique")
    if not any(d.relevant for d in docs):
        raise _RowError(f"item '{item_id}': no relevant document")
    return Item(item_id, question.strip(), answers, tuple(docs))


def _native(row: dict[str, Any], where: str) -> Item:
    item_id = _item_id(row, ("id", "item_id"), where)
    question = _text(row.get("question"), "question")
    answers = _answers(row.get("answers", []))
    raw_docs = row.get("documents")
    if not isinstance(raw_docs, list):
        raise _RowError(f"item '{item_id}': 'documents' must be a list" if raw_docs is not None else f"item '{item_id}': no documents")
    docs = []
    for n, d in enumerate(raw_docs, start=1):
        if not isinstance(d, dict):
            raise _RowError(f"item '{item_id}': document {n} must be an object")
        if "relevant" not in d:
            raise _RowError(f"item '{item_id}': document {n} has no 'relevant' flag")
        docs.append(
            Document(
                id=str(d.get("id") or f"{item_id}-d{n}"),
                text=_text(d.get("text"), f"documents[{n}].text"),
                relevant=_relevant_flag(d["relevant"], n),
                title=_text(d.get("title"), f"documents[{n}].title"),
            )
        )
    return _finish(item_id, question, answers, docs)


def _seed(row: dict[str, Any], where: str) -> Item:
    item_id = _item_id(row, ("query_id", "id"), where)
    question = _text(row.get("query"), "query")
    answers = _answers(row.get("org_answers", []))
    passages = row.get("passages")
    # save_to_disk stores a sequence of structs as a dict of lists; JSON often as a list of dicts.
    if isinstance(passages, list):
        texts = [p.get("passage_text") if isinstance(p, dict) else None for p in passages]
        flags = [p.get("is_selected") if isinstance(p, dict) else None for p in passages]
    elif isinstance(passages, dict):
        texts = list(passages.get("passage_text") or [])
        flags = list(passages.get("is_selected") or [])
    else:
        raise _RowError(f"item '{item_id}': no documents")
    if len(texts) != len(flags):
        raise _RowError(f"item '{item_id}': passages.passage_text and passages.is_selected differ in length")
    docs = [
        Document(f"{item_id}-d{n}", _text(t, f"passages.passage_text[{n}]"), _relevant_flag(f, n))
        for n, (t, f) in enumerate(zip(texts, flags), start=1)
    ]
    return _finish(item_id, question, answers, docs)


def _alce(row: dict[str, Any], where: str) -> Item:
    item_id = _item_id(row, ("id", "sample_id", "query_id"), where)
    question = _text(row.get("question"), "question")
    answers = _answers(row.get("answers", row.get("answer", [])))
    normalized_answers = [normalize_text(a) for a in answers]
    raw_docs = row.get("docs")
    if not isinstance(raw_docs, list):
        raise _RowError(f"item '{item_id}': no documents")
    docs = []
    for n, d in enumerate(raw_docs, start=1):
        if not isinstance(d, dict):
            raise _RowError(f"item '{item_id}': document {n} must be an object")
        title = _text(d.get("title"), f"docs[{n}].title")
        text = _text(d.get("text"), f"docs[{n}].text")
        flag = d.get("relevant", d.get("gold"))
        if flag is None:
            haystack = f" {normalize_text(title + ' ' + text)} "
            relevant = any(a and f" {a} " in haystack for a in normalized_answers)
        else:
            relevant = _relevant_flag(flag, n)
        docs.append(Document(str(d.get("id") or f"{item_id}-d{n}"), text, relevant, title))
    return _finish(item_id, question, answers, docs)


_PARSERS = {"native": _native, "seed": _seed, "alce": _alce}
