"""Read a dataset file into rows: JSONL, JSON, Parquet or a `datasets.save_to_disk` folder.

Everything here is a broken *file* (unreadable, not UTF-8, invalid JSON, a row that is not an
object), so it raises UserError at once with `FILE:line N: problem` and is never skippable;
checking the rows as items is engine/datasets/data.py's job.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.errors import UserError

Row = tuple[str, dict[str, Any]]  # ("line N" for JSONL or "item N", the row's object)

# A JSONL line longer than this is refused before it is parsed: the longest valid item
# (engine.datasets.data's bounds: 100 documents of 100,000 characters, 4 bytes each at worst) fits.
MAX_LINE_BYTES = 64 * 1024 * 1024


def read_rows(p: Path, max_rows: int | None = None) -> Iterator[Row]:
    """(where, row) pairs: `where` is 'line N' for JSONL and 'item N' otherwise (1-based).
    More than `max_rows` rows is a UserError, raised as soon as the count is known."""
    if p.is_dir():
        yield from _numbered(p, _read_hf_folder(p, max_rows), max_rows)
    elif p.suffix == ".jsonl":
        yield from _counted(p, read_jsonl(p), max_rows)
    elif p.suffix == ".json":
        yield from _numbered(p, _read_json(p), max_rows)
    elif p.suffix == ".parquet":
        yield from _numbered(p, _read_parquet(p, max_rows), max_rows)
    else:
        raise UserError(f"{p}: unknown dataset format (use .jsonl, .json, .parquet or a datasets.save_to_disk folder)")


def require_regular_file(p: Path, what: str = "") -> None:
    """UserError unless `p` is a regular file (or missing): a FIFO blocks its reader forever and
    /dev/zero never ends, so neither may be opened as a dataset, answers or a database."""
    try:
        mode = p.stat().st_mode
    except OSError:
        return  # missing or unreadable: the caller's own message
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a file")
        raise UserError(f"{p}: {kind}, not a regular file{what}")


def _too_many(p: Path, max_rows: int) -> UserError:
    return UserError(f"{p}: more than {max_rows:,} items (at most {max_rows:,}); split the dataset")


def _counted(p: Path, rows: Iterator[Row], max_rows: int | None) -> Iterator[Row]:
    for n, row in enumerate(rows, start=1):
        if max_rows is not None and n > max_rows:
            raise _too_many(p, max_rows)
        yield row


def _numbered(p: Path, rows: list[Any], max_rows: int | None = None) -> Iterator[Row]:
    if max_rows is not None and len(rows) > max_rows:
        raise _too_many(p, max_rows)
    for i, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise UserError(f"{p}:item {i}: expected a JSON object, got {json_kind(row)}")
        yield f"item {i}", row


def json_kind(value: Any) -> str:
    """A JSON value's type in JSON's words, for error messages."""
    if value is None:
        return "null"
    kinds = {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}
    return kinds.get(type(value), type(value).__name__)


class _BadJson(Exception):
    """Why a JSON text does not parse, without the file name."""


def _parse_json(text: str, *, one_line: bool = False) -> Any:
    """json.loads with every way it can fail turned into one `_BadJson` reason."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        at = f"column {err.colno}" if one_line else f"line {err.lineno}, column {err.colno}"
        raise _BadJson(f"{err.msg} at {at}") from None
    except RecursionError:
        raise _BadJson("nested too deeply") from None
    except ValueError as err:  # e.g. an integer of more than 4,300 digits
        raise _BadJson(str(err).splitlines()[0].split(";")[0]) from None


def _decode(p: Path, data: bytes, line_no: int = 1) -> str:
    """UTF-8 text (a leading byte-order mark is dropped); UserError naming the line and byte if not."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = line_no + data.count(b"\n", 0, err.start)
        column = err.start - data.rfind(b"\n", 0, err.start)
        raise UserError(f"{p}:line {line}: not UTF-8 text (byte 0x{data[err.start]:02x} at byte {column} of the line)") from None


def read_jsonl(p: Path) -> Iterator[Row]:
    """('line N', object) for each non-blank line; UserError on bad bytes, invalid JSON or a non-object."""
    require_regular_file(p)
    try:
        with p.open("rb") as fh:
            # readline with a limit: one endless line (a file of zeros) must not be read whole.
            for n, raw in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""), start=1):
                if len(raw) > MAX_LINE_BYTES:
                    raise UserError(f"{p}:line {n}: longer than {MAX_LINE_BYTES // 2**20} MB (at most "
                                    f"{MAX_LINE_BYTES // 2**20} MB a line)")
                line = _decode(p, raw, n)
                if not line.strip():
                    continue
                try:
                    row = _parse_json(line.rstrip("\r\n"), one_line=True)
                except _BadJson as err:
                    raise UserError(f"{p}:line {n}: invalid JSON ({err})") from None
                if not isinstance(row, dict):
                    raise UserError(f"{p}:line {n}: expected a JSON object, got {json_kind(row)}")
                yield f"line {n}", row
    except OSError as err:
        raise UserError(f"{p}: cannot read ({err.strerror or err})") from None


def _read_json(p: Path) -> list[Any]:
    require_regular_file(p)
    try:
        data = p.read_bytes()
    except OSError as err:
        raise UserError(f"{p}: cannot read ({err.strerror or err})") from None
    try:
        value = _parse_json(_decode(p, data))
    except _BadJson as err:
        raise UserError(f"{p}: invalid JSON ({err})") from None
    if isinstance(value, dict):
        # Common wrappers: {"data": [...]} or {"items": [...]}.
        for key in ("data", "items", "examples"):
            if isinstance(value.get(key), list):
                return value[key]
        raise UserError(f"{p}: expected a list of items (or an object with a 'data' list)")
    if not isinstance(value, list):
        raise UserError(f"{p}: expected a list of items, got {json_kind(value)}")
    return value


def _first_line(err: Exception) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def _read_parquet(p: Path, max_rows: int | None = None) -> list[Any]:
    import pyarrow.parquet as pq

    require_regular_file(p)
    try:
        # The row count is in the footer: too many rows are refused before anything is decoded.
        # What each row expands to is not (a dictionary-encoded column repeats one long string
        # cheaply): the app loads uploads in a child process with a memory cap (engine.datasets.load_child).
        if max_rows is not None and pq.ParquetFile(p).metadata.num_rows > max_rows:
            raise _too_many(p, max_rows)
        return pq.read_table(p).to_pylist()
    except (UserError, MemoryError):
        raise
    except Exception as err:  # pyarrow raises several types for a damaged file
        raise UserError(f"{p}: cannot read Parquet ({_first_line(err)})") from None


def _read_hf_folder(p: Path, max_rows: int | None = None) -> list[Any]:
    if not ((p / "dataset_info.json").exists() or (p / "dataset_dict.json").exists()):
        raise UserError(f"{p}: a folder must be saved with datasets' save_to_disk")
    import datasets

    try:
        loaded = datasets.load_from_disk(str(p))
    except MemoryError:
        raise
    except Exception as err:  # a damaged folder fails in json, pyarrow or datasets itself
        raise UserError(f"{p}: cannot read the datasets folder ({_first_line(err)})") from None
    if isinstance(loaded, datasets.DatasetDict):
        if len(loaded) != 1:
            splits = ", ".join(loaded)
            raise UserError(f"{p}: holds several splits ({splits}); save the one to evaluate on its own")
        loaded = next(iter(loaded.values()))
    if max_rows is not None and len(loaded) > max_rows:
        raise _too_many(p, max_rows)
    return loaded.to_list()
