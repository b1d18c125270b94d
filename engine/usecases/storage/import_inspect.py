"""Import an Inspect AI log as runs: `python -m engine import --inspect LOG` and engine.api.import_inspect.

The log is read with Inspect's own reader (inspect_ai.log), a chunk of samples at a time. A sample fits
when it carries (docs/inspect.md):
- `metadata.documents`: the documents in the order shown, [1] first, each {"text", "relevant",
  "id"?, "title"?};
- the question: `metadata.question`, else the sample's input when it is text;
- the gold answers: the sample's target (text or a list of texts);
- the answers: `metadata.answers`, {mode: answer} for vanilla, base and cf (our tasks write it,
  with `metadata.shown_doc_ids`, {mode: [document id, ...]}, where a mode showed other documents),
  else the sample's output as the answer of one mode (`mode`, vanilla by default);
- the label type of base and cf: `metadata.metadata_type` ({"name", "label_a", "label_b", ...}),
  else the request's.

Every sample is checked before anything is written: the first that does not fit is refused in
one line naming the sample and the field. The samples' items become the runs' dataset (their
content hash names it), and each mode's answers go in through engine.usecases.storage.import_answers,
the path every import takes, so every measure and page reads them.

A log is a stranger's file: its size, each sample's size, the number of samples and every
field's length are bounded before or as they are read, and a log Inspect cannot read (deep
JSON, wrong types) is refused in one line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.bounds import MAX_MODEL_CHARS, check_name
from engine.datasets.data import MAX_ANSWER_CHARS as MAX_GOLD_CHARS
from engine.datasets.data import (
    MAX_DOCUMENT_CHARS,
    MAX_DOCUMENTS,
    MAX_ID_CHARS,
    MAX_QUESTION_CHARS,
    MAX_TITLE_CHARS,
    Dataset,
    dataset_sha,
)
from engine.datasets.data_files import json_kind, require_regular_file
from engine.errors import UserError
from engine.prompting.citations import CITATION_SYNTAXES, check_citation_syntax
from engine.prompting.prompts import METADATA_TYPES, MetadataType, metadata_type
from engine.types import MODES, Document, Item
from engine.usecases.storage.import_answers import ImportRequest, import_answers, import_metadata

# Bounds on what a log may hold. A sample of ours (ten documents, three answers) is some 10 kB;
# Inspect's own .eval files keep each sample as one zip member, whose declared size is checked
# before it is read.
MAX_SAMPLES = 1_000_000
MAX_SAMPLE_BYTES = 16 * 1024 * 1024
MAX_JSON_LOG_BYTES = 64 * 1024 * 1024  # a .json log is read whole by Inspect
# JSON nesting: a sample of ours is 6 levels deep, Inspect's events some 20. Inspect's reader took
# all 23 GB of a test machine on one sample nested 100,000 deep, so every member the import reads
# is parsed once by Python's json (a RecursionError at about 1,000 levels) and its depth checked
# before Inspect reads it.
MAX_DEPTH = 200
MAX_ANSWER_CHARS = 100_000
INSTALL_HINT = "reading Inspect logs needs inspect-ai: pip install 'pattrieval[inspect]'"
# Sample fields an import never reads: the transcript, which can be most of a log's bytes.
_UNREAD = {"messages", "events", "store", "attachments"}
_CHUNK = 2_000


@dataclass(frozen=True)
class InspectImportRequest:
    """An Inspect log to store as runs (one per mode its samples answer) in the store `db`."""

    log: Path
    db: Path
    name: str | None = None  # the model name to store; default: the log's model
    experiment: str | None = None  # join this experiment (default: a new one)
    mode: str = "vanilla"  # the mode of samples that carry one answer (their output)
    metadata: Any = None  # engine.prompting.prompts.MetadataType where samples carry none
    citation_syntax: str | None = None  # default: the log's task argument, else "ours"


@dataclass(frozen=True)
class InspectImportResult:
    """The runs the log's answers went into, in MODES order."""

    experiment_id: str
    run_ids: dict[str, str]  # mode -> run id
    n_samples: int
    n_cited: dict[str, int]  # mode -> answers citing something
    already: bool  # every run was imported before
    model: str
    task: str


@dataclass(frozen=True)
class _Sample:
    item: Any  # engine.types.Item
    answers: dict[str, str]
    shown: dict[str, tuple[str, ...]]


def _inspect_log() -> Any:
    try:
        import inspect_ai.log as log
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    return log


def check_log_file(path: Path) -> None:
    """Refuse a log that is missing, not a regular file, of another format or too large, before
    Inspect reads any of it."""
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    require_regular_file(path)
    if path.suffix == ".json":
        size = path.stat().st_size
        if size > MAX_JSON_LOG_BYTES:
            raise UserError(f"{path}: a .json log of {size:,} bytes (at most {MAX_JSON_LOG_BYTES:,}); "
                            "write the log as .eval, which is read a sample at a time")
        _check_depth(path.read_bytes(), path, "the log")
        return
    if path.suffix != ".eval":
        raise UserError(f"{path}: not an Inspect log (.eval or .json)")
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError) as e:
        raise UserError(f"{path}: not a readable .eval log ({e})") from None
    # What the import reads: the header and the samples (the summaries are never read).
    read = [m for m in members if m.filename.startswith("samples/") or m.filename in ("header.json",
                                                                                       "_journal/start.json")]
    if len(read) > MAX_SAMPLES + 2:
        raise UserError(f"{path}: {len(read) - 2:,} samples (at most {MAX_SAMPLES:,})")
    for member in read:
        if member.file_size > MAX_SAMPLE_BYTES:
            raise UserError(f"{path}: {member.filename} is {member.file_size:,} bytes (at most {MAX_SAMPLE_BYTES:,})")
    _inspect_log()  # Inspect's import lets zipfile read its zstd members
    try:
        with zipfile.ZipFile(path) as archive:
            for member in read:
                with archive.open(member) as f:
                    _check_depth(f.read(MAX_SAMPLE_BYTES + 1), path, member.filename)
    except (zipfile.BadZipFile, NotImplementedError, OSError, EOFError) as e:
        raise UserError(f"{path}: not a readable .eval log ({_first_line(e)})") from None


def _check_depth(data: bytes, path: Path, what: str) -> None:
    """UserError unless `data` is JSON nested at most MAX_DEPTH deep."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise UserError(f"{path}: {what}: JSON nested too deeply to read (at most {MAX_DEPTH} levels)") from None
    except ValueError as e:
        raise UserError(f"{path}: {what}: not JSON ({_first_line(e)})") from None
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise UserError(f"{path}: {what}: JSON nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)


def _samples(log: Any, path: Path, header: Any) -> Iterator[Any]:
    """The log's samples, a chunk at a time; a sample Inspect cannot read is one line naming it.

    Inspect's sample-by-sample reader parses the zip's directory again for every sample (0.9 s
    per 2,000 samples at 2,000, growing with the log); reading by id shares one parse per chunk.
    """
    ids = header.eval.dataset.sample_ids
    if ids is None or path.suffix == ".json":
        yield from _checked(lambda: iter(log.read_eval_log(path).samples or []), path, "the log")
        return
    if len(ids) > MAX_SAMPLES:
        raise UserError(f"{path}: {len(ids):,} samples (at most {MAX_SAMPLES:,})")
    epochs = getattr(header.eval.config, "epochs", None) or 1
    if epochs != 1:
        raise UserError(f"{path}: {epochs} epochs; logs of several epochs are not imported (run with --epochs 1)")
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start:start + _CHUNK]
        try:
            yield from log.read_eval_log_samples_by_id(path, [(i, 1) for i in chunk], exclude_fields=_UNREAD)
            continue
        except Exception:  # read the chunk again one sample at a time, to name the bad one
            pass
        for sample_id in chunk:
            yield from _checked(lambda i=sample_id: iter([log.read_eval_log_sample(path, i, 1, exclude_fields=_UNREAD)]),
                                path, f"sample '{str(sample_id)[:100]}'")


def _checked(read: Any, path: Path, what: str) -> list[Any]:
    try:
        return list(read())
    except (RecursionError, MemoryError):
        raise UserError(f"{path}: {what}: nested too deeply to read") from None
    except IndexError:
        raise UserError(f"{path}: {what}: listed in the header but missing from the log") from None
    except Exception as e:  # pydantic's ValidationError, JSON errors, a broken zip member
        raise UserError(f"{path}: {what}: not a valid Inspect sample ({_first_line(e)})") from None


def _first_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:200] + ("..." if len(text) > 200 else "")


def _text(value: Any, where: str, field: str, limit: int) -> str:
    if not isinstance(value, str):
        raise UserError(f"{where}: {field} must be text, got {json_kind(value)}")
    if len(value) > limit:
        raise UserError(f"{where}: {field} is {len(value):,} characters long (at most {limit:,})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(f"{where}: {field} holds a lone surrogate, which is not text") from None
    return value


def _documents(metadata: Mapping[str, Any], where: str, item_id: str) -> tuple[Any, ...]:
    docs = metadata.get("documents")
    if docs is None:
        raise UserError(f"{where}: missing metadata.documents (the documents shown, [1] first)")
    if not isinstance(docs, list) or not docs:
        raise UserError(f"{where}: metadata.documents must be a non-empty list, got {json_kind(docs)}")
    if len(docs) > MAX_DOCUMENTS:
        raise UserError(f"{where}: metadata.documents holds {len(docs):,} documents (at most {MAX_DOCUMENTS})")
    out = []
    for n, d in enumerate(docs, start=1):
        field = f"metadata.documents[{n}]"
        if not isinstance(d, Mapping):
            raise UserError(f"{where}: {field} must be an object, got {json_kind(d)}")
        if "text" not in d:
            raise UserError(f"{where}: missing {field}.text")
        text = _text(d["text"], where, f"{field}.text", MAX_DOCUMENT_CHARS)
        if "relevant" not in d:
            raise UserError(f"{where}: missing {field}.relevant (whether it contains the answer)")
        if not isinstance(d["relevant"], bool):
            raise UserError(f"{where}: {field}.relevant must be true or false, got {json_kind(d['relevant'])}")
        doc_id = _text(d["id"], where, f"{field}.id", MAX_ID_CHARS) if d.get("id") is not None else f"{item_id}-d{n}"
        title = _text(d["title"], where, f"{field}.title", MAX_TITLE_CHARS) if d.get("title") is not None else ""
        out.append(Document(doc_id, text, d["relevant"], title))
    ids = [d.id for d in out]
    if len(set(ids)) != len(ids):
        repeated = next(i for i in ids if ids.count(i) > 1)
        raise UserError(f"{where}: metadata.documents repeats the id '{repeated[:100]}'")
    return tuple(out)


def _gold(target: Any, where: str) -> tuple[str, ...]:
    values = target if isinstance(target, list) else [target]
    if len(values) > 1_000:
        raise UserError(f"{where}: target holds {len(values):,} answers (at most 1,000)")
    for value in values:
        if not isinstance(value, str):
            raise UserError(f"{where}: target must be text or a list of texts, got {json_kind(value)}")
    return tuple(_text(v, where, "target", MAX_GOLD_CHARS) for v in values if v.strip())


def read_sample(sample: Any, mode: str, path: Path) -> _Sample:
    """One sample's item, answers and shown documents; UserError naming the sample and the field."""
    sample_id = sample.id
    if not isinstance(sample_id, (str, int)) or isinstance(sample_id, bool):
        raise UserError(f"{path}: a sample has no id")
    item_id = _text(str(sample_id), f"{path}: sample", "id", MAX_ID_CHARS)
    where = f"{path}: sample '{item_id}'"
    if sample.epoch != 1:
        raise UserError(f"{where}: epoch {sample.epoch}; logs of several epochs are not imported (run with --epochs 1)")
    metadata = sample.metadata
    if not isinstance(metadata, Mapping):
        raise UserError(f"{where}: missing metadata (the documents and the question)")
    documents = _documents(metadata, where, item_id)
    question = metadata.get("question", sample.input if isinstance(sample.input, str) else None)
    if question is None:
        raise UserError(f"{where}: missing metadata.question (the input is not text)")
    question = _text(question, where, "metadata.question", MAX_QUESTION_CHARS)
    item = Item(item_id, question, _gold(sample.target, where), documents)

    given = metadata.get("answers")
    if given is None:
        completion = sample.output.completion if sample.output is not None else None
        if not completion and not (sample.output and sample.output.choices):
            raise UserError(f"{where}: missing the answer (metadata.answers, or the sample's output)")
        answers = {mode: completion or ""}
    elif not isinstance(given, Mapping) or not given:
        raise UserError(f"{where}: metadata.answers must map modes to answers, got {json_kind(given)}")
    else:
        unknown = [m for m in given if m not in MODES]
        if unknown:
            raise UserError(f"{where}: metadata.answers has an unknown mode '{str(unknown[0])[:50]}' "
                            f"(modes: {', '.join(MODES)})")
        answers = {m: _text(given[m], where, f"metadata.answers.{m}", MAX_ANSWER_CHARS) for m in MODES if m in given}
    shown_given = metadata.get("shown_doc_ids") or {}
    if not isinstance(shown_given, Mapping):
        raise UserError(f"{where}: metadata.shown_doc_ids must map modes to document ids, got {json_kind(shown_given)}")
    known = {d.id for d in documents}
    shown: dict[str, tuple[str, ...]] = {}
    for m in answers:
        ids = shown_given.get(m)
        if ids is None:
            shown[m] = tuple(d.id for d in documents)
            continue
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i in known for i in ids):
            raise UserError(f"{where}: metadata.shown_doc_ids.{m} must list ids of metadata.documents")
        if len(set(ids)) != len(ids):
            raise UserError(f"{where}: metadata.shown_doc_ids.{m} repeats a document")
        shown[m] = tuple(ids)
    return _Sample(item, answers, shown)


def _metadata_type(given: Any, where: str) -> Any:
    """A sample's metadata.metadata_type as ours: a built-in by name, or the labels it names."""
    if not isinstance(given, Mapping):
        raise UserError(f"{where}: metadata.metadata_type must be an object, got {json_kind(given)}")
    for key in ("name", "label_a", "label_b"):
        if not isinstance(given.get(key), str) or not given[key].strip():
            raise UserError(f"{where}: metadata.metadata_type.{key} must be non-empty text")
    name = given["name"]
    known = METADATA_TYPES.get(name)
    if known is not None and (known.label_a, known.label_b) == (given["label_a"], given["label_b"]):
        return known
    consideration = given.get("consideration")
    if isinstance(consideration, str) and consideration.strip():
        return metadata_type(name, given["label_a"], given["label_b"], consideration)

    found = import_metadata(name, given["label_a"], given["label_b"], None)
    return found if isinstance(found, MetadataType) else None


def import_inspect(request: InspectImportRequest) -> InspectImportResult:
    """Check every sample of the log, then store each mode's answers as one run of one experiment."""
    log = _inspect_log()
    path = Path(request.log)
    check_log_file(path)
    try:
        header = log.read_eval_log(path, header_only=True)
    except (RecursionError, MemoryError):
        raise UserError(f"{path}: the log's header is nested too deeply to read") from None
    except Exception as e:
        raise UserError(f"{path}: not a readable Inspect log ({_first_line(e)})") from None
    if request.mode not in MODES:
        raise UserError(f"--mode must be one of {', '.join(MODES)}, not '{request.mode}'")
    name = check_name((request.name or str(header.eval.model)).strip(), "the model name", MAX_MODEL_CHARS)
    task_args = header.eval.task_args if isinstance(header.eval.task_args, Mapping) else {}
    logged_syntax = task_args.get("citation_syntax")
    syntax = check_citation_syntax(request.citation_syntax or
                                   (logged_syntax if logged_syntax in CITATION_SYNTAXES else "ours"))

    items: list[Any] = []
    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    meta = request.metadata
    seen: set[str] = set()
    for sample in _samples(log, path, header):
        got = read_sample(sample, request.mode, path)
        if got.item.id in seen:
            raise UserError(f"{path}: sample '{got.item.id}' appears twice")
        seen.add(got.item.id)
        items.append(got.item)
        for mode, answer in got.answers.items():
            rows[mode].append({"item_id": got.item.id, "answer": answer, "shown_doc_ids": list(got.shown[mode])})
        if meta is None and isinstance(sample.metadata, Mapping) and "metadata_type" in sample.metadata:
            meta = _metadata_type(sample.metadata["metadata_type"], f"{path}: sample '{got.item.id}'")
    if not items:
        raise UserError(f"{path}: the log holds no samples")
    modes = [m for m in MODES if rows[m]]
    for mode in modes:
        if mode != "vanilla" and meta is None:
            raise UserError(f"{path}: {mode} answers need a label type (metadata.metadata_type, or --metadata)")

    dataset = Dataset(tuple(items), dataset_sha(items), str(path), "native")
    experiment, already = request.experiment, True
    run_ids: dict[str, str] = {}
    n_cited: dict[str, int] = {}
    for mode in modes:
        # Each mode's rows are let go once stored: at 200,000 samples they are some 100 MB.
        result = import_answers(ImportRequest(dataset, tuple(rows.pop(mode)), Path(request.db), name, mode,
                                              experiment, meta, citation_syntax=syntax))
        experiment = result.experiment_id
        run_ids[mode] = result.run_id
        n_cited[mode] = result.n_cited
        already = already and result.already
    assert experiment is not None  # at least one mode was imported
    return InspectImportResult(experiment, run_ids, len(items), n_cited, already, name, str(header.eval.task))
