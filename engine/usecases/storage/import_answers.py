"""Import answers made by another system as a run, for evaluation: `python -m engine import` and
engine.api (which also takes answers in memory, see `import_answers`).

Answers are JSONL, one object per answer: {"item_id", "answer", "shown_doc_ids"?}.
`shown_doc_ids` is the order the documents were shown in ([1] is the first); without it the
dataset's ranked order is assumed. Every row is validated before anything is written: the
first bad row stops the import with one line naming the file, the line and the problem.

Imported runs have quantization 'imported', no prompt, no tokens and no citation
probabilities. Three imports with one experiment and modes vanilla, base and cf form an
experiment that the bias report reads.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.datasets.data_files import json_kind, read_jsonl
from engine.errors import UserError
from engine.prompting.citations import check_citation_syntax, parse_citations
from engine.prompting.prompts import METADATA_TYPES, MetadataType, PromptConfig, metadata_type
from engine.running.experiment import config_hash
from engine.types import MODES, Citation, Generation, Mode, RunSpec
from engine.usecases.bias.kept import after_run


@dataclass(frozen=True)
class ImportRequest:
    """Answers (a JSONL file, or rows in memory) for a dataset, stored as one run of `mode`."""

    dataset: Any  # engine.datasets.data.Dataset
    answers: Path | str | tuple[dict[str, Any], ...]  # a JSONL file, or its rows
    db: Path
    name: str = "imported"  # the model name to store
    mode: str = "vanilla"
    experiment: str | None = None  # join this experiment (default: a new one)
    metadata: Any = None  # engine.prompting.prompts.MetadataType; see import_metadata
    # How the answers' citations are read and scored (engine.prompting.citations): "ours", or "paper" for
    # the seed library's reading.
    citation_syntax: str = "ours"


@dataclass(frozen=True)
class ImportResult:
    """The run the answers went into; `already` when the same answers were imported before."""

    run_id: str
    experiment_id: str
    already: bool
    n_answers: int = 0
    n_cited: int = 0  # answers with at least one citation
    n_missing: int = 0  # dataset items without an answer


@dataclass(frozen=True)
class AnswerRow:
    """One validated answer."""

    item_id: str
    answer: str
    shown_doc_ids: tuple[str, ...]


def read_answers(path: Path, dataset: Any) -> tuple[AnswerRow, ...]:
    """Validate every row of an answers file against the dataset; UserError on the first bad one."""
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    return check_answers(read_jsonl(path), dataset, str(path))


def check_answers(numbered: Iterable[tuple[str, Any]], dataset: Any, path: str) -> tuple[AnswerRow, ...]:
    """Validate (where, row) pairs against the dataset; UserError "PATH:WHERE: problem" on the
    first bad one."""
    items = {item.id: item for item in dataset.items}
    seen: dict[str, str] = {}
    rows: list[AnswerRow] = []
    for where, row in numbered:
        def bad(problem: str, where: str = where) -> UserError:
            return UserError(f"{path}:{where}: {problem}")

        if "item_id" not in row or row["item_id"] is None:
            raise bad("missing item_id")
        item_id = row["item_id"]
        if isinstance(item_id, int) and not isinstance(item_id, bool):
            item_id = str(item_id)  # JSON writers often turn numeric ids into numbers
        if not isinstance(item_id, str):
            raise bad(f"item_id must be a string, got {json_kind(item_id)}")
        if not item_id.strip():
            raise bad("empty item_id")
        if item_id not in items:
            raise bad(f"unknown item_id '{item_id}' (not in {dataset.source})")
        if item_id in seen:
            raise bad(f"duplicate item_id '{item_id}' (first at {seen[item_id]})")
        if "answer" not in row:
            raise bad("missing answer")
        if not isinstance(row["answer"], str):
            raise bad(f"answer must be a string, got {json_kind(row['answer'])}")
        doc_ids = {d.id for d in items[item_id].documents}
        shown = row.get("shown_doc_ids")
        if shown is None:
            shown_ids = tuple(d.id for d in items[item_id].documents)
        else:
            if not isinstance(shown, list):
                raise bad(f"shown_doc_ids must be a list of document ids, got {json_kind(shown)}")
            if not shown:
                raise bad("shown_doc_ids is empty")
            for doc_id in shown:
                if not isinstance(doc_id, str):
                    raise bad(f"shown_doc_ids must hold document id strings, got {json_kind(doc_id)}")
                if doc_id not in doc_ids:
                    raise bad(f"shown_doc_ids: '{doc_id}' is not a document of item '{item_id}'")
            if len(set(shown)) != len(shown):
                repeated = next(d for d in shown if shown.count(d) > 1)
                raise bad(f"shown_doc_ids repeats '{repeated}'")
            shown_ids = tuple(shown)
        seen[item_id] = where
        rows.append(AnswerRow(item_id, row["answer"], shown_ids))
    if not rows:
        raise UserError(f"{path}: no answers")
    return tuple(rows)


def to_generations(rows: tuple[AnswerRow, ...], dataset: Any, citation_syntax: str = "ours") -> list:
    """Generations with citations parsed in `citation_syntax`; no prompt, tokens or probabilities are known."""
    items = {item.id: item for item in dataset.items}
    out = []
    for row in rows:
        relevant = {d.id: d.relevant for d in items[row.item_id].documents}
        citations = []
        for index, number in enumerate(parse_citations(row.answer, citation_syntax)):
            shown = 1 <= number <= len(row.shown_doc_ids)
            doc_id = row.shown_doc_ids[number - 1] if shown else None
            citations.append(Citation(index, number, doc_id, relevant[doc_id] if doc_id else None, None))
        out.append(
            Generation(
                item_id=row.item_id,
                prompt="",
                answer=row.answer,
                shown_doc_ids=row.shown_doc_ids,
                finish_reason="imported",
                n_prompt_tokens=0,
                tokens=(),
                citations=tuple(citations),
            )
        )
    return out


def check_experiment(path: Path, experiment_id: str, mode: str, config_hash: str, model: str,
                      dataset_sha: str, metadata_type: str | None, citation_syntax: str = "ours") -> None:
    """Refuse to join an experiment whose runs are for another dataset, model or metadata type,
    or read citations in another syntax (CAS and CAB would compare two readings)."""
    from store.queries import experiment_runs

    if not path.is_file():
        return
    for run in experiment_runs(path, experiment_id):
        if run.dataset_sha != dataset_sha:
            raise UserError(f"experiment '{experiment_id}' is for another dataset (run {run.run_id}); use another --experiment")
        if run.model != model:
            raise UserError(f"experiment '{experiment_id}' is for model '{run.model}', not '{model}' (--name)")
        if run.metadata_type and metadata_type and run.metadata_type != metadata_type:
            raise UserError(f"experiment '{experiment_id}' is for metadata type '{run.metadata_type}', not '{metadata_type}'")
        if run.citation_syntax != citation_syntax:
            raise UserError(f"experiment '{experiment_id}' reads citations as '{run.citation_syntax}', not "
                            f"'{citation_syntax}' (--citation-syntax); use another --experiment")
        if run.mode == mode and run.status == "complete" and run.config_hash != config_hash:
            raise UserError(
                f"experiment '{experiment_id}' already has a complete {mode} run ({run.run_id}) from other answers; "
                "use another --experiment"
            )


def import_metadata(name: str, label_a: str | None, label_b: str | None, consideration: str | None):
    """The metadata type of imported answers: a built-in by name, or a custom one from its two labels.

    Unlike `run`, a custom type needs no consideration sentence: import renders no prompt, and
    only the labels are read afterwards (tables name the side CAB favours by them).
    """
    if consideration or (name in METADATA_TYPES and not (label_a or label_b)):
        return metadata_type(name, label_a, label_b, consideration)
    missing = [option for option, value in (("--label-a", label_a), ("--label-b", label_b))
               if not (value and value.strip())]
    if len(missing) == 2:
        from engine.suggest import did_you_mean

        known = ", ".join(METADATA_TYPES)
        raise UserError(f"metadata type '{name}' is not built in ({known}); name its labels with --label-a and "
                        f"--label-b{did_you_mean(name, METADATA_TYPES)}")
    if missing:
        raise UserError(f"metadata type '{name}': {missing[0]} is missing; a type of your own needs --label-a and --label-b")
    a, b = (label_a or "").strip(), (label_b or "").strip()  # both given: `missing` is empty
    if a == b:
        raise UserError(f"metadata type '{name}': label A and label B must differ (both '{a}')")
    return MetadataType(name, a, b, "", a, b)


def _checked_mode(mode: str) -> Mode:
    """The mode as the store's type; a caller other than the CLI (whose choices are MODES) may
    pass any string, and an unknown one must not be stored as a run's rag_mode."""

    for known in MODES:
        if mode == known:
            return known
    raise UserError(f"--mode must be one of {', '.join(MODES)}, not '{mode}'")


def import_answers(request: ImportRequest) -> ImportResult:
    """Validate every answer, then store them as one run in one transaction (all or none); the
    same answers again are found and not stored twice."""
    import uuid

    from engine.running.provenance import git_sha, library_versions
    from store.run_store import RunStore

    dataset, meta, path = request.dataset, request.metadata, Path(request.db)
    syntax = check_citation_syntax(request.citation_syntax)
    mode = _checked_mode(request.mode)
    if mode != "vanilla" and meta is None:
        raise UserError(f"--mode {request.mode} needs --metadata (hai, gender, race or a custom type)")
    if isinstance(request.answers, (str, Path)):
        answers_path = Path(request.answers)
        rows = read_answers(answers_path, dataset)
        answers_bytes = answers_path.read_bytes()
    else:
        answers_path = Path("answers")
        rows = check_answers(((f"{i}", r) for i, r in enumerate(request.answers, start=1)), dataset, "answers")
        answers_bytes = "\n".join(json.dumps(r, sort_keys=True) for r in request.answers).encode()
    generations = to_generations(rows, dataset, syntax)

    answers_sha = hashlib.sha256(answers_bytes).hexdigest()[:16]
    prompt = PromptConfig(mode=mode, metadata=meta).to_dict()
    # As in run_config: recorded (and hashed) only when not the default, so older imports keep their hashes.
    reading = {} if syntax == "ours" else {"citation_syntax": syntax}
    run_hash = config_hash(request.name, dataset.sha,
                           {"import": answers_sha, "prompt": prompt, "experiment": request.experiment, **reading})

    store = RunStore(path, on_finished=after_run(path))  # the Bias page's values, kept
    existing = store.find_resumable(run_hash)
    if existing is not None and existing.status == "complete":
        return ImportResult(existing.run_id, existing.experiment_id, already=True)
    experiment_id = existing.experiment_id if existing else (request.experiment or uuid.uuid4().hex[:12])
    if request.experiment:
        check_experiment(path, experiment_id, request.mode, run_hash, request.name, dataset.sha, meta.name if meta else None,
                         syntax)
    run_id = existing.run_id if existing else uuid.uuid4().hex[:12]
    spec = RunSpec(
        run_id=run_id,
        experiment_id=experiment_id,
        config_hash=run_hash,
        model=request.name,
        model_revision=None,
        quantization="imported",
        dtype="n/a",
        device="n/a",
        dataset=dataset.source,
        dataset_sha=dataset.sha,
        metadata_type=meta.name if meta else None,
        rag_mode=mode,
        seed=0,
        prompt_version="imported",
        git_sha=git_sha(),
        library_versions=library_versions(),
        config={
            "prompt": prompt,
            "prompt_version": "imported",
            "import": {"answers": str(answers_path), "answers_sha": answers_sha, "n_answers": len(rows)},
            **reading,
        },
        n_items=len(rows),
    )
    store.put_items(dataset.sha, dataset.items)
    store.start_run(spec)
    try:
        store.write_batch(run_id, generations)  # one transaction: all answers or none
    except BaseException:
        store.finish_run(run_id, "failed")
        raise
    store.finish_run(run_id, "complete")
    return ImportResult(run_id, experiment_id, already=False, n_answers=len(rows),
                        n_cited=sum(1 for g in generations if g.citations), n_missing=len(dataset.items) - len(rows))
