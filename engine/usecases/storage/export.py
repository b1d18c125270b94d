"""Export the chosen experiments' per-item results as CSV or Parquet: `python -m engine export` and
engine.api. The file is written by store.export under a temporary name and renamed into place;
an existing file is replaced only when asked. `format="eee"` writes the Every Eval Ever schema's
records instead, into the folder `out` (engine.usecases.storage.export_eee)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.errors import UserError
from engine.paths import require_store
from engine.usecases.experiments import unknown_experiment
from engine.usecases.storage.export_eee import EEE_FORMAT, export_eee


@dataclass(frozen=True)
class ExportRequest:
    """Which experiments (ids or names) to write where; `format` None: from the file's suffix."""

    db: Path
    experiments: tuple[str, ...]
    out: Path
    format: str | None = None
    force: bool = False  # replace `out` if it exists
    rows: str = "answers"  # or "decisions": one row per shown document per answer (citation_decisions)


def export_format(format: str | None, out: Path | str | None = None) -> str:
    """The format to write: `format` as given (one line naming csv and parquet for any other), or
    else the one the file name `out`'s suffix names (one line when it names none). A face asks this
    before it looks for the store, so the wording wins."""
    from store.export import check_format, format_from_suffix

    if format == EEE_FORMAT:
        return format
    if format or out is None:
        return check_format(format or "")
    fmt = format_from_suffix(out)
    if fmt is None:
        raise UserError(f"give --format csv or parquet (the name {out} does not say which)")
    return fmt


def write_export(db: Path, experiments: Sequence[str], fmt: str, out: Path, *, overwrite: bool = False,
                 rows: str = "answers"):
    """Write the experiments' (ids or names) rows to `out` in `fmt` (store.export.ExportResult says
    what was written); store.queries.UnknownExperiment, one line naming only the reference, for
    one that is not in the store: each face says more in its own words (`export` names the newest)."""
    from store.export import export_results

    return export_results(db, list(experiments), fmt, out, overwrite=overwrite, rows=rows)


def export(request: ExportRequest):
    """Write the file; store.export.ExportResult says what was written (engine.usecases.storage.export_eee.
    EeeExport for format "eee"). One line for an unknown experiment (naming the newest ones) or a
    file name that names no format."""
    from store.queries import UnknownExperiment

    fmt = export_format(request.format, request.out)
    require_store(request.db)  # after the format, as the CLI checks them (the wording wins)
    if fmt == "eee":  # a folder of records; bias_report names the newest experiments for an unknown one

        return export_eee(Path(request.db), request.experiments, Path(request.out), force=request.force)
    try:
        return write_export(request.db, request.experiments, fmt, request.out, overwrite=request.force,
                            rows=request.rows)
    except UnknownExperiment as err:
        raise UserError(unknown_experiment(Path(request.db), err.reference)) from err
