"""The Runs tab: the stored experiments, filtered and paged on the server, and their export."""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demo.handlers.bias import study_choices as labelled  # the Bias tab's picker, same labels
from demo.handlers.query import shown_reference
from demo.render import SMOKE_NOTE
from demo.settings import without_server_paths
from engine.bounds import for_page
from engine.errors import UserError
from engine.usecases.runs.listing import experiments_page, study_experiments
from engine.usecases.runs.model_names import is_smoke
from engine.usecases.storage.export import export_format, write_export
from engine.usecases.storage.export_eee import EEE_FORMAT, export_eee

PAGE_SIZE = 50
MODE_COLUMNS = ["vanilla", "base", "cf"]  # engine.types.MODES, one metrics column each
# "studies" came last: scripts that read /runs by position keep working.
RUNS_COLUMNS = ["experiment", "name", "model", "dataset", "metadata", "modes", "status", "items",
                "created (UTC)", *(f"{m}: P / R / F1, EM" for m in MODE_COLUMNS), "studies"]
# Pages past this are clamped before they become an OFFSET (page 10**18 overflowed DuckDB's
# BIGINT); no store holds 50 million experiments.
MAX_PAGE = 1_000_000
EMPTY_STORE = "nothing is stored yet: start a run in the Run tab (or merge a results store)"


@dataclass(frozen=True)
class RunsView:
    """One page of the experiment table and where it sits among the matching experiments."""

    rows: list[list[Any]]
    page: int
    pages: int  # at least 1, even with nothing to show
    total: int  # experiments matching the filters
    filtered: bool = False  # any filter set: an empty page means "no match", not "nothing stored"
    smoke: bool = False  # a row on this page ran on the smoke model: its zeros need saying

    @property
    def caption(self) -> str:
        if self.total == 0:
            return "No experiment matches these filters." if self.filtered else f"**{EMPTY_STORE[0].upper()}{EMPTY_STORE[1:]}.**"
        line = (f"experiments: page {self.page} of {self.pages} ({self.total} matching, {PAGE_SIZE} a page); "
                "click a row to open it in the Query tab")
        return f"{line}\n\n**{SMOKE_NOTE}**" if self.smoke else line


def runs_view(db_path: Path, page: int = 1, *, model: str | None = None, dataset: str | None = None,
              metadata: str | None = None, mode: str | None = None, study: str | None = None,
              page_size: int = PAGE_SIZE) -> RunsView:
    """One page of experiments, newest first, filtered on the server; an empty store gives no rows.
    `study` (a name, exact) keeps the experiments of that study; an unknown one is a UserError."""
    page = page_number(page)
    filtered = any(_clean(v) for v in (model, dataset, metadata, mode, study))
    if not Path(db_path).is_file():
        return RunsView([], 1, 1, 0)  # nothing stored yet: the Run tab offers a first run
    study = _clean(study)
    # A typo in a study name would look like an empty study: said instead.
    if study is not None and study_experiments(db_path, study) is None:
        raise UserError(f"no study '{shown_reference(study)}' in the store (`python -m engine list --studies` names them)")
    filters = dict(model=_clean(model), dataset=_clean(dataset), metadata=_clean(metadata), mode=_clean(mode), study=study)
    listed = experiments_page(db_path, (page - 1) * page_size, page_size, **filters)
    found, studies = listed.page, listed.studies
    last = max(1, math.ceil(found.total / page_size))
    rows = []
    for e in found.experiments:
        newest = {run.mode: run for run in found.runs.get(e.experiment_id, ())}  # oldest first: newest wins
        rows.append([
            # Stored names are cut for the page (stores older than engine.bounds may hold megabytes).
            e.experiment_id, for_page(e.name or "-"), for_page(e.model), for_page(e.dataset_label),
            for_page(e.metadata_type or "-"), ",".join(e.modes),
            e.status, f"{e.n_done}/{e.n_total}{_served_tokens(found.runs.get(e.experiment_id, ()))}", e.created_utc.strftime("%Y-%m-%d %H:%M") if e.created_utc else "-",
            *(_metrics_cell(newest.get(m)) for m in MODE_COLUMNS),
            for_page(", ".join(studies.get(e.experiment_id, ())) or "-"),
        ])
    return RunsView(rows, page, last, found.total, filtered,
                    any(is_smoke(e.model) for e in found.experiments))


def page_number(page: Any) -> int:
    """A page as a visitor or an API call gives it (a number, a float, text), clamped to
    1..MAX_PAGE; UserError when it is no number at all."""
    try:
        number = float(page) if page not in (None, "") else 1.0
    except (TypeError, ValueError):
        raise UserError(f"the page must be a whole number, not {str(page)[:40]!r}") from None
    if math.isnan(number):
        raise UserError("the page must be a whole number, not NaN")
    return int(min(max(number, 1.0), MAX_PAGE))


def runs_page(db_path: Path, page: int = 1, *, model: str | None = None, metadata: str | None = None,
              dataset: str | None = None, mode: str | None = None, study: str | None = None,
              page_size: int = PAGE_SIZE) -> list[list[Any]]:
    """One page of experiments as table rows (RUNS_COLUMNS); see runs_view."""
    return runs_view(db_path, page, model=model, dataset=dataset, metadata=metadata, mode=mode, study=study,
                     page_size=page_size).rows


def study_choices(db_path: Path) -> list[tuple[str, str]]:
    """("any", "") then (label, name) for every stored study, newest first, for the study filter."""
    return [("any", "")] + labelled(db_path)


def _clean(value: str | None) -> str | None:
    return value.strip() or None if value else None


def _served_tokens(runs) -> str:
    """A served experiment's usage (prompt + completion tokens over its runs), after its items."""
    served = [r for r in runs if getattr(r, "prompt_tokens", None) is not None]
    if not served:
        return ""
    return (f" ({sum(r.prompt_tokens for r in served):,} prompt + "
            f"{sum(r.completion_tokens or 0 for r in served):,} completion tokens)")


def _metrics_cell(run: Any) -> str:
    """Citation precision, recall and F1 (x100) and EM of a mode's newest run, or '-' (no run, no answer yet)."""
    if run is None or run.precision is None:
        return "-"
    em = "-" if run.exact_match is None else f"{run.exact_match:.2f}"
    return f"{100 * run.precision:.1f} / {100 * run.recall:.1f} / {100 * run.f1:.1f}, {em}"


def export_file(db_path: Path, chosen: Sequence[str] | None, typed: str | None, fmt: str, *,
                owner: str | None = None, limits: Any = None) -> Path:
    """The chosen experiments' per-item results written to a temporary file
    `pattrieval-export.csv|parquet`, via store.export (the same code as `python -m engine export`),
    or for `fmt` "eee" their Every Eval Ever records (engine.usecases.storage.export_eee, as `export
    --format eee`) in one `pattrieval-eee.zip`, since a browser downloads one file.
    The same store state and request give the same file, written once; `limits`
    (demo.downloads.DownloadLimits) bound what `owner` and everyone keep on disk."""
    export_format(fmt or "")
    references = list(dict.fromkeys([*(c for c in chosen or () if c), *re.split(r"[,\s]+", typed or "")]))
    references = [r for r in references if r]
    if not references:
        raise UserError("choose at least one experiment to export")
    if not Path(db_path).is_file():
        raise UserError(EMPTY_STORE)
    from demo.downloads import bounded_download, store_state

    key = "\0".join(("export", store_state(db_path), fmt, *references))
    name = "pattrieval-eee.zip" if fmt == EEE_FORMAT else f"pattrieval-export.{fmt}"
    try:
        # Written aside and moved in whole (nothing half-written is handed out); the same key
        # returns the file already written.
        return bounded_download(name, lambda out: _write(db_path, references, fmt, out), key=key, owner=owner,
                                limits=limits)
    except OSError as err:  # a full temp disk: "[Errno 28] ...: '/tmp/...'", masked below
        raise UserError(without_server_paths(f"cannot write the export: {err}", db_path)) from None
    except UserError as err:
        # Messages may name the temporary folder or the store: a visitor sees neither (every
        # server path, wherever the temp folder lies: store.server_paths).
        raise UserError(without_server_paths(str(err), db_path, shown="the store")) from None


def _write(db_path: Path, references: list[str], fmt: str, out: Path) -> None:
    if fmt != EEE_FORMAT:
        write_export(db_path, references, fmt, out)
        return
    import zipfile

    folder = out.with_suffix("")  # beside the zip, in the download's own scratch folder
    try:
        export_eee(db_path, references, folder)
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                archive.write(path, path.relative_to(folder).as_posix())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
