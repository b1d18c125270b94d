"""Write the chosen experiments' per-item results to a CSV or Parquet file, atomically.

The rows come from store.queries.export_results_frame; this module only writes files, from
Python (pandas and pyarrow), so the app's SQL sandbox never needs to let DuckDB write files.
A file is written next to its destination under a temporary name and renamed into place, so
a failure (full disk, a killed process) leaves no half-written export behind.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from engine.errors import UserError
from engine.types import ANSWER_METRICS, EXPORT_FORMATS, EXPORTED_METRICS
from store.db import DbLike

if TYPE_CHECKING:
    import pandas as pd

# Columns whose cells are lists; CSV has no lists, so they are written as JSON arrays there.
LIST_COLUMNS = ("gold_answers", "cited", "gold")


@dataclass(frozen=True)
class ExportResult:
    """What export_results wrote."""

    path: Path
    format: str
    experiment_ids: tuple[str, ...]
    n_runs: int
    n_rows: int


def check_format(fmt: str) -> str:
    """`fmt` if it is one of EXPORT_FORMATS, else a one-line UserError."""
    if fmt not in EXPORT_FORMATS:
        raise UserError(f"unknown export format '{fmt}': choose {' or '.join(EXPORT_FORMATS)}")
    return fmt


def format_from_suffix(path: str | os.PathLike[str]) -> str | None:
    """The export format a file name implies (.csv, .parquet), or None."""
    suffix = Path(path).suffix.lower().lstrip(".")
    return suffix if suffix in EXPORT_FORMATS else None


def export_results(
    db: DbLike,
    experiments: Sequence[str],
    fmt: str,
    out_path: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    rows: str = "answers",
) -> ExportResult:
    """Write the per-item results of `experiments` (ids or names) to `out_path` as `fmt`.

    Refused with a UserError, writing nothing, for an unknown format or experiment, an existing
    `out_path` unless `overwrite`, or a missing folder.
    """
    from store.queries import export_columns, export_results_chunks

    check_format(fmt)
    columns = export_columns(rows)
    out = Path(out_path)
    _check_destination(out, overwrite)
    if not experiments:
        raise UserError("choose at least one experiment to export")
    # Streamed: one chunk of rows in memory at a time, written as it is read.
    with export_results_chunks(db, list(experiments), rows=rows) as chunks:
        written = _Written()
        _write_atomically(out, lambda f: _write_chunks(f, chunks.frames, fmt, written, columns), overwrite)
    return ExportResult(out, fmt, chunks.experiment_ids, len(written.runs), written.rows)


@dataclass
class _Written:
    """What a streamed export wrote so far."""

    rows: int = 0
    runs: set = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self.runs = set()


def _write_chunks(f, frames, fmt: str, written: _Written, columns: tuple[str, ...]) -> None:
    """Write the frames (of `columns`) to the open binary file `f` as one CSV or Parquet file."""
    import pandas as pd

    empty = pd.DataFrame({c: pd.Series([], dtype=object) for c in columns})
    if fmt == "csv":
        header = True
        for frame in frames:
            f.write(_csv(frame, header))
            header = False
            written.rows += len(frame)
            written.runs.update(frame["run_id"])
        if header:
            f.write(_csv(empty, True))
        return
    import pyarrow.parquet as pq

    schema = _parquet_schema(empty)
    with pq.ParquetWriter(f, schema) as writer:
        for frame in frames:
            writer.write_table(_arrow(frame, schema))
            written.rows += len(frame)
            written.runs.update(frame["run_id"])


def _csv(frame: pd.DataFrame, header: bool) -> bytes:
    """One chunk as CSV (UTF-8, list cells as JSON, text that a spreadsheet would run as a formula
    quoted by store.csv_safe); the header only with the first."""
    from store.csv_safe import csv_frame

    flat = frame.copy()
    for column in LIST_COLUMNS:
        if column in flat.columns:
            # Only list cells: a decision row's `cited` is a plain bool.
            flat[column] = [json.dumps(v, ensure_ascii=False) if isinstance(v, list) else v for v in flat[column]]
    return csv_frame(flat).to_csv(index=False, header=header).encode("utf-8")


def _arrow(frame: pd.DataFrame, schema):
    import pyarrow as pa

    return pa.table([pa.array(frame[f.name].tolist(), type=f.type, from_pandas=True) for f in schema], schema=schema)


def encode(frame: pd.DataFrame, fmt: str) -> bytes:
    """The frame as the bytes of a CSV (UTF-8, list cells as JSON) or Parquet file."""
    check_format(fmt)
    if fmt == "csv":
        return _csv(frame, True)

    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(_arrow(frame, _parquet_schema(frame)), buffer)
    return buffer.getvalue()


def _parquet_schema(frame: pd.DataFrame):
    """Explicit types, so an export with no rows still has typed columns (not null ones)."""
    import pyarrow as pa

    types = {"gold_answers": pa.list_(pa.string()), "cited": pa.list_(pa.int32()), "gold": pa.list_(pa.int32()),
             **{name: pa.int64() for name in EXPORTED_METRICS if ANSWER_METRICS[name].count}}
    if "position_group" in frame.columns:  # decision rows (store.queries.decisions)
        types = {**{c: pa.int64() for c in ("position", "n_shown", "n_cited")},
                 **{c: pa.bool_() for c in ("relevant", "repeated", "cited", "answer_cites_any")}}
    floats = {*(name for name in EXPORTED_METRICS if not ANSWER_METRICS[name].count), "citation_probability"}
    return pa.schema([
        (c, types.get(c, pa.float64() if c in floats else pa.string())) for c in frame.columns
    ])


def _check_destination(out: Path, overwrite: bool) -> None:
    """Refuse a folder, a device, FIFO or socket (even with overwrite), an existing file (unless
    overwrite) or a missing parent, before any work."""
    if out.is_dir():
        raise UserError(f"{out} is a folder; give a file name for the export")
    _check_not_special(out)
    if out.exists() and not overwrite:
        raise UserError(f"{out} exists; give another --out or add --force to replace it")
    if not out.parent.is_dir():
        raise UserError(f"folder {out.parent} does not exist")


def _check_not_special(out: Path) -> None:
    """Refuse an existing `out` that is not a regular file: renaming over /dev/full or a FIFO
    would replace the device or pipe with a file (as root, /dev/null too)."""
    if out.exists() and not out.is_file():
        raise UserError(f"{out} is not a regular file (a device, pipe or socket); give a file name for the export")


def _write_atomically(out: Path, data: bytes | Callable[[BinaryIO], None], overwrite: bool) -> None:
    """Write `data` (bytes, or a function writing to the open file) to a temporary file beside
    `out`, then move it into place in one step."""
    try:
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    except OSError as err:
        raise UserError(f"cannot write to folder {out.parent}: {err.strerror}") from err
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            _check_not_special(out)  # again: it may have appeared while the rows were written
            os.replace(tmp, out)
        else:
            # A hard link fails if `out` appeared meanwhile, where a rename would replace it.
            try:
                os.link(tmp, out)
            except FileExistsError as err:
                raise UserError(f"{out} exists; give another --out or add --force to replace it") from err
            except OSError:
                if out.exists():
                    raise UserError(f"{out} exists; give another --out or add --force to replace it") from None
                os.replace(tmp, out)  # a file system without hard links
    except OSError as err:
        raise UserError(f"cannot write {out}: {err.strerror}") from err
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
