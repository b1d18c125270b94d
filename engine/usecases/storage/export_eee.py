"""`python -m engine export --format eee`: experiments in the Every Eval Ever schema, one aggregate
record and one instance-level file per experiment, in the datastore's layout
(OUT/data/pattrieval/<developer>/<model>/<uuid>.json and <uuid>_samples.jsonl).

The numbers are the store's and engine.statistics' (the bias report of engine.usecases.bias.report, the
per-item metrics of the export rows); engine.formats.every_eval_ever places them in the schema.
Every file is written under a temporary name and renamed into place once all are written, so a
refusal or a failure leaves none half-way; an existing file is replaced only with `force`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import __version__
from engine.errors import UserError

EEE_FORMAT = "eee"


@dataclass(frozen=True)
class EeeFiles:
    """One experiment's two files."""

    experiment_id: str
    aggregate: Path
    samples: Path
    n_samples: int
    n_results: int


@dataclass(frozen=True)
class EeeExport:
    """What export_eee wrote."""

    folder: Path
    files: tuple[EeeFiles, ...]


def export_eee(db: Path, experiments: Sequence[str], out: Path, *, force: bool = False,
               resamples: int | None = None, seed: int = 0) -> EeeExport:
    """Write the experiments (ids or names) under the folder `out`; UserError in one line, nothing
    written, for an unknown experiment, one with nothing to compare, a file that exists (unless
    `force`) or a folder that cannot be written."""
    from engine.formats.every_eval_ever import repository_path
    from engine.usecases.bias.report import bias_report

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is not a folder: --format eee writes a folder of files (data/pattrieval/...)")
    if not experiments:
        raise UserError("choose at least one experiment to export")
    stamp = str(int(time.time()))
    plans = []
    for reference in dict.fromkeys(experiments):
        report = bias_report(db, reference, resamples=resamples, seed=seed).report
        aggregate, samples = repository_path(report["model"], report["experiment_id"])
        for path in (aggregate, samples):
            target = out / path
            if target.exists() and not force:
                raise UserError(f"{target} exists; give another --out or add --force to replace it")
        plans.append((report, aggregate, samples))
    written: list[tuple[Path, Path]] = []  # (temporary, final)
    files = []
    try:
        for report, aggregate, samples in plans:
            files.append(_write_experiment(db, out, report, aggregate, samples, stamp, __version__, written))
        for tmp, final in written:
            os.replace(tmp, final)
    except OSError as err:
        raise UserError(f"cannot write under {out}: {err.strerror}") from err
    finally:
        for tmp, _ in written:
            if tmp.exists():
                tmp.unlink()
    return EeeExport(out, tuple(files))


def _temporary(final: Path, written: list[tuple[Path, Path]]) -> Any:
    """An open binary file beside `final`, recorded in `written` to be renamed or removed."""
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp")
    written.append((Path(tmp), final))
    return os.fdopen(fd, "wb")


def _write_experiment(db: Path, out: Path, report: dict[str, Any], aggregate: str, samples: str, stamp: str,
                      version: str, written: list[tuple[Path, Path]]) -> EeeFiles:
    """Stream the experiment's chosen runs' answers into its samples file, then its aggregate."""
    from engine.formats.every_eval_ever import aggregate_record, instance_record
    from store.queries import export_results_chunks

    chosen = report["runs"]  # mode -> run id
    run_ids = set(chosen.values())
    sums: dict[str, dict[str, list[float]]] = {m: {} for m in chosen}
    counts: dict[str, int] = dict.fromkeys(chosen, 0)
    quantization = None
    facts = _facts(report, [], None, version, stamp)  # the instance records need no summaries
    evaluation_id = f"pattrieval/{report['experiment_id']}/{report['model']}/{stamp}"
    digest = hashlib.sha256()
    n = 0
    with _temporary(out / samples, written) as f, \
            export_results_chunks(db, [report["experiment_id"]]) as chunks:
        for frame in chunks.frames:
            for row in frame.to_dict("records"):
                if row["run_id"] not in run_ids:
                    continue  # an older or unfinished run of a mode: the report's runs only
                quantization = quantization or row.get("quantization")
                mode = row["mode"]
                counts[mode] += 1
                for metric in ("precision", "recall", "f1", "exact_match"):
                    value = row.get(metric)
                    if value is not None and not (isinstance(value, float) and math.isnan(value)):
                        sums[mode].setdefault(metric, []).append(float(value))
                line = (json.dumps(instance_record(facts, evaluation_id, row), ensure_ascii=False,
                                   allow_nan=False) + "\n").encode("utf-8")
                digest.update(line)
                f.write(line)
                n += 1
        f.flush()
        os.fsync(f.fileno())
    facts = _facts(report, _summaries(chosen, sums, counts), quantization, version, stamp)
    record = aggregate_record(facts, samples, digest.hexdigest(), n)
    with _temporary(out / aggregate, written) as f:
        f.write(json.dumps(record, indent=2, ensure_ascii=False, allow_nan=False).encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())
    return EeeFiles(report["experiment_id"], out / aggregate, out / samples, n, len(record["evaluation_results"]))


def _summaries(chosen: dict[str, str], sums: dict[str, dict[str, list[float]]], counts: dict[str, int]) -> list[Any]:
    """Each chosen mode's means (math.fsum: the same float whatever the chunking)."""
    from engine.formats.every_eval_ever import MODE_METRICS, ModeSummary

    return [ModeSummary(mode, run_id, counts[mode],
                        {m: math.fsum(v) / len(v) for m in MODE_METRICS if (v := sums[mode].get(m))})
            for mode, run_id in chosen.items()]


def _facts(report: dict[str, Any], modes: list[Any], quantization: str | None, version: str, stamp: str) -> Any:
    from engine.formats.every_eval_ever import ExperimentFacts

    return ExperimentFacts(report["experiment_id"], report["model"], quantization, report["dataset"],
                           report["dataset_sha"], report.get("metadata_type"), report.get("label_a"),
                           report.get("label_b"), tuple(modes), report, version, stamp)
