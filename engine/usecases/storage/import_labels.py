"""Import a person's labels of cited documents as a judge: `python -m engine import-labels` and
engine.api.import_labels.

A labels file is CSV (a header row) or JSONL (one object a line) with the fields `item_id`, `run`
(a run id) or `experiment` (id or name) and `mode` (vanilla, base or cf), `position` (the cited
document's number as shown, 1-based) and `label` (attributable or not_attributable; true/false,
yes/no and 1/0 are read as those). The whole file is checked before anything is written, and the
first problem refuses it in one line `FILE:line N: what is wrong`; then every label and the
judge's row go into the store in one transaction. Labels stored already are kept, so the same
file again adds nothing.

Where the store has a quota (the app's PATTRIEVAL_MAX_STORE_MB and PATTRIEVAL_MAX_JOB_MB, given
in the request), an import is refused in one line, nothing written, when the store is at its
quota before the file is read, or when its labels' estimated bytes (label_bytes) exceed what one
import may add or what the quota leaves: checked with the writer's lock held before the first
row, and between chunks of rows while they are written (store.judge_labels_store).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.bounds import MAX_MODEL_CHARS, check_name
from engine.datasets.data_files import read_jsonl
from engine.errors import FieldError, UserError, WordedError, quoted
from engine.types import MODES

ATTRIBUTABLE = ("attributable", "true", "1", "yes")
NOT_ATTRIBUTABLE = ("not_attributable", "false", "0", "no")
FIELDS = ("item_id", "run", "experiment", "mode", "position", "label")
# A position is a document number as the prompt showed it: ASCII digits, no more than any prompt
# could show. int() reads "²" as a digit and fails on it, and refuses 4,301 digits or more.
_POSITION = re.compile(r"[0-9]{1,9}")


@dataclass(frozen=True)
class ImportLabelsRequest:
    """A labels file, the store it goes into and the judge's name (a person, or a team)."""

    db: Path
    labels: Path
    judge: str
    max_store_bytes: int | None = None  # the store's quota (None: none)
    max_import_bytes: int | None = None  # what one import may add (None: no bound)


@dataclass(frozen=True)
class ImportLabelsResult:
    judge: str
    n_labels: int  # rows in the file
    n_added: int  # rows new in the store (0: imported before)
    sha256: str
    run_ids: tuple[str, ...]  # the runs the labels are of, in the order first named

    @property
    def already(self) -> bool:
        return self.n_added == 0


def read_label_file(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, row) for each row of a CSV or JSONL file (by its suffix; else by its first
    character, '{' for JSONL); UserError on unreadable bytes, bad JSON or a missing column."""
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    try:
        head = path.read_bytes()[:4096].decode("utf-8-sig", errors="replace").lstrip()
    except OSError as err:
        raise UserError(f"{path}: cannot read ({err.strerror or err})") from None
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson") or (suffix != ".csv" and head.startswith("{")):
        return [(int(where.split()[-1]), row) for where, row in read_jsonl(path)]
    return _read_csv(path)


def _read_csv(path: Path) -> list[tuple[int, dict[str, Any]]]:
    import csv


    try:
        with path.open(encoding="utf-8-sig", newline="") as fh:
            reader = csv.DictReader(fh)
            columns = [c.strip() for c in reader.fieldnames or ()]
            reader.fieldnames = columns
            if not columns:
                raise UserError(f"{path}: empty file (a CSV needs a header row: {', '.join(FIELDS)})")
            for need in ("item_id", "position", "label"):
                if need not in columns:
                    raise UserError(f"{path}:line 1: no column '{need}' (the header has: {quoted(', '.join(columns))})")
            if "run" not in columns and not ("experiment" in columns and "mode" in columns):
                raise UserError(f"{path}:line 1: no column 'run', nor 'experiment' and 'mode' (the header has: "
                                f"{quoted(', '.join(columns))})")
            rows = []
            for row in reader:
                if not any((v or "").strip() for k, v in row.items() if k is not None):
                    continue  # a blank line
                rows.append((reader.line_num, {k: v.strip() if isinstance(v, str) else v
                                               for k, v in row.items() if k in FIELDS}))
            return rows
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except csv.Error as err:
        raise UserError(f"{path}: not a readable CSV ({err})") from None
    except OSError as err:
        raise UserError(f"{path}: cannot read ({err.strerror or err})") from None


def parse_label(value: Any) -> str | None:
    """'attributable' or 'not_attributable' for what a file may hold, None for anything else."""
    if isinstance(value, bool):
        return "attributable" if value else "not_attributable"
    if isinstance(value, int):
        value = str(value)
    if not isinstance(value, str):
        return None
    word = value.strip().lower()
    if word in ATTRIBUTABLE:
        return "attributable"
    return "not_attributable" if word in NOT_ATTRIBUTABLE else None


def _text(value: Any) -> str | None:
    """A cell as text: numbers (JSON writers turn numeric ids into numbers) as their digits."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _position(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _POSITION.fullmatch(value.strip()):
        return int(value.strip())
    return None


def _shown(value: Any) -> str:
    """A cell as a refusal quotes it: text in quotes, anything else (a JSON number, null) as is."""
    return f"'{quoted(value)}'" if isinstance(value, str) else quoted(json.dumps(value, default=str))


def check_labels(path: Path, rows: list[tuple[int, dict[str, Any]]], db: Path, judge: str) -> tuple:
    """The rows as store.judge_labels_store.LabelRow, each checked against the store: its run,
    item, shown and cited document, label, and against the other rows and the judge's stored
    labels; UserError `PATH:line N: problem` on the first bad one."""
    from store.judge_labels_store import LabelRow
    from store.queries import cited_answers, label_runs, stored_labels

    runs = {r.run_id: r for r in label_runs(db)}
    by_mode: dict[tuple[str, str], str] = {}
    names: dict[str, str] = {}
    for r in runs.values():
        by_mode[(r.experiment_id, r.mode)] = r.run_id
        names.setdefault(r.experiment_id, r.experiment_id)
        if r.experiment_name:
            names.setdefault(r.experiment_name, r.experiment_id)

    def run_of(row: dict[str, Any]) -> str | None:
        run, experiment, mode = _text(row.get("run")), _text(row.get("experiment")), _text(row.get("mode"))
        if experiment is None:
            return run
        found = by_mode.get((names.get(experiment, ""), mode or ""))
        return found if run is None or found == run else None

    named = list(dict.fromkeys(r for r in (run_of(row) for _, row in rows) if r in runs))
    answers = cited_answers(db, named)
    stored = stored_labels(db, judge, named)
    first: dict[tuple[str, str, int], int] = {}
    out = []
    for line, row in rows:

        def bad(problem: str, line: int = line) -> UserError:
            return UserError(f"{path}:line {line}: {problem}")

        item_id = _text(row.get("item_id"))
        if item_id is None:
            raise bad("no item_id")
        run, experiment, mode = _text(row.get("run")), _text(row.get("experiment")), _text(row.get("mode"))
        if experiment is not None or mode is not None:
            if experiment is None or mode is None:
                raise bad("give experiment and mode together (or a run id)")
            if experiment not in names:
                raise bad(f"unknown experiment '{quoted(experiment)}'")
            if mode not in MODES:
                raise bad(f"unknown mode '{quoted(mode)}' (one of {', '.join(MODES)})")
            found = by_mode.get((names[experiment], mode))
            if found is None:
                raise bad(f"experiment '{quoted(experiment)}' has no {mode} run")
            if run is not None and run != found:
                raise bad(f"run '{quoted(run)}' is not the {mode} run of experiment '{quoted(experiment)}' ({found} is)")
            run = found
        elif run is None:
            raise bad("no run (give run, or experiment and mode)")
        elif run not in runs:
            raise bad(f"unknown run '{quoted(run)}'")
        answer = answers.get((run, item_id))
        if answer is None:
            raise bad(f"unknown item '{quoted(item_id)}': run {run} holds no answer for it")
        position = _position(row.get("position"))
        if position is None or position < 1:
            raise bad(f"position must be a document number (1, 2, ...), not {_shown(row.get('position'))}")
        if position > len(answer.shown_doc_ids):
            raise bad(f"position {quoted(position)} is beyond the {len(answer.shown_doc_ids)} documents shown for item "
                      f"'{item_id}' in run {run}")
        if position not in answer.cited:
            cites = ", ".join(f"[{p}]" for p in sorted(answer.cited)) or "nothing"
            raise bad(f"the answer to item '{item_id}' in run {run} does not cite [{position}] (it cites {cites})")
        label = parse_label(row.get("label"))
        if label is None:
            raise bad(f"label must be attributable or not_attributable (or true/false, yes/no, 1/0), "
                      f"not {_shown(row.get('label'))}")
        key = (run, item_id, position)
        if key in first:
            raise bad(f"duplicate: item '{item_id}', [{position}] in run {run} is labelled at line {first[key]} already")
        if key in stored and stored[key] != label:
            raise WordedError("{where}: judge '{who}' labelled item '{item}', [{position}] in run {run} '{label}' "
                              "already (stored labels are kept: {judge} must name another)",
                              where=f"{path}:line {line}", who=judge, item=item_id, position=position, run=run,
                              label=stored[key])
        first[key] = line
        out.append(LabelRow(run, item_id, position, answer.shown_doc_ids[position - 1], label,
                            f"{path.name}:line {line}"))
    return tuple(out)


# What a label row takes in the store, an upper estimate: its text twice (the write-ahead log,
# then the table once checkpointed), the position, timestamp and key. Measured with
# scripts/bench_judges.py: 161,262 labels of 95 characters of text added 19.5 to 45.5 MB
# (121 to 282 bytes a row, the larger while the log and the table both hold them); the estimate
# gives 318 bytes a row there.
LABEL_FIXED_BYTES = 128


def label_bytes(rows: tuple, judge: str) -> int:
    """The store bytes these checked label rows (LabelRow) take at most, judge name included."""
    name = len(judge.encode())
    text = sum(len(r.run_id.encode()) + len(r.item_id.encode()) + len(r.doc_id.encode()) + len(r.label)
               + len(r.source.encode()) + name for r in rows)
    return LABEL_FIXED_BYTES * len(rows) + 2 * text


def store_size(db: Path) -> int:
    """The store's bytes on disk: its file and its write-ahead log."""
    total = 0
    for path in (db, Path(f"{db}.wal")):
        try:
            total += path.stat().st_size
        except OSError:
            pass  # no log: checkpointed
    return total


def quota_problem(request: ImportLabelsRequest, n_rows: int, need: int, still: int | None = None) -> str | None:
    """Why `n_rows` labels of `need` bytes may not be added to the store now, in one line, or
    None; `still`: the bytes of those not written yet (all of them by default)."""
    mb = 1024 * 1024
    if request.max_import_bytes is not None and need > request.max_import_bytes:
        return (f"these {n_rows:,} labels would store about {need / mb:,.0f} MB; one import may store at most "
                f"{request.max_import_bytes / mb:,.0f} MB here: split the file")
    if request.max_store_bytes is None:
        return None
    used, quota = store_size(Path(request.db)), request.max_store_bytes
    if used >= quota:
        return (f"the store is at its quota here ({used / mb:,.0f} MB of {quota / mb:,.0f} MB): no labels may be "
                "added to it until the operator makes room")
    if used + (need if still is None else still) > quota:
        return (f"these {n_rows:,} labels would store about {need / mb:,.0f} MB and the store has "
                f"{(quota - used) / mb:,.0f} MB left of its {quota / mb:,.0f} MB quota here")
    return None


def import_labels(request: ImportLabelsRequest) -> ImportLabelsResult:
    """Check every label of the file, then store them and the judge in one transaction."""
    from store.judge_labels_store import write_labels
    from store.queries import judge_kinds

    db, path = Path(request.db), Path(request.labels)
    judge = check_name((request.judge or "").strip(), "the judge's name", MAX_MODEL_CHARS)
    if not judge:
        raise FieldError("judge", "{judge} must name who labelled (a person or a team)")
    if not db.is_file():
        raise FieldError("db", "no database at {path}: give {db} the path of a store", path=db)
    kind = judge_kinds(db).get(judge)
    if kind is not None and kind != "human":
        raise FieldError("judge", "{judge} '{who}' is an {kind} judge in {db}; name the person another way",
                         who=judge, kind=kind, db=db)
    full = quota_problem(request, 0, 0)
    if full:  # at its quota already: the file is not read
        raise UserError(full)
    rows = read_label_file(path)
    if not rows:
        raise UserError(f"{path}: no labels")
    checked = check_labels(path, rows, db, judge)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    need = label_bytes(checked, judge)

    def room(left: int) -> str | None:
        # Asked with the writer's lock held, before the first row and between chunks: the rows
        # still to write against what the store takes now (grown by the rows written so far).
        return quota_problem(request, len(checked), need, round(need * left / len(checked)))

    added = write_labels(db, judge, {"file": path.name, "sha256": sha, "rows": len(checked)}, checked, room=room)
    return ImportLabelsResult(judge, len(checked), added, sha, tuple(dict.fromkeys(r.run_id for r in checked)))
