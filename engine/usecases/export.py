"""Export the chosen experiments' per-item results as CSV or Parquet: `python -m engine export` and
engine.api. The file is written by store.export under a temporary name and renamed into place;
an existing file is replaced only when asked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ExportRequest:
    """Which experiments (ids or names) to write where; `format` None: from the file's suffix."""

    db: Path
    experiments: tuple[str, ...]
    out: Path
    format: str | None = None
    force: bool = False  # replace `out` if it exists
    rows: str = "answers"  # or "decisions": one row per shown document per answer (citation_decisions)


def export_format(format: str | None, out: Path | str) -> str:
    """The format to write: `format` as given, or else the one the file name's suffix names. One
    line when neither says; a face asks this before it looks for the store, so the wording wins."""
    from engine.errors import UserError
    from store.export import format_from_suffix

    fmt = format or format_from_suffix(out)
    if fmt is None:
        raise UserError(f"give --format csv or parquet (the name {out} does not say which)")
    return fmt


def export(request: ExportRequest):
    """Write the file; store.export.ExportResult says what was written. One line for an unknown
    experiment (naming the newest ones) or a file name that names no format."""
    from engine.errors import UserError
    from engine.usecases.bias import unknown_experiment
    from store.export import export_results
    from store.queries import UnknownExperiment

    fmt = export_format(request.format, request.out)
    try:
        return export_results(request.db, list(request.experiments), fmt, request.out, overwrite=request.force,
                              rows=request.rows)
    except UnknownExperiment as err:
        raise UserError(unknown_experiment(Path(request.db), err.reference)) from err
