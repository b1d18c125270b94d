"""The metrics of stored answers as DataFrames, for notebooks (engine.api): per item, per run, and
CAS/CAB per experiment. The store's SQL views are the truth for the metrics (query_metrics,
run_metrics), engine.statistics.bias for CAS and CAB's intervals and tests (through the bias report), so a
notebook reads the very numbers the CLI and the app print.

`evaluate_answers` is the in-memory path: answers held in Python (another system's, say) are
imported into a store (a throwaway one for db=":memory:") and read back through the same views.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import UserError
from engine.presentation.display import evaluation_html, evaluation_text, evaluation_title
from engine.types import MODES
from engine.usecases.experiments import unknown_experiment
from engine.usecases.storage.import_answers import ImportRequest, import_answers

if TYPE_CHECKING:
    import pandas as pd

MEMORY = ":memory:"


@dataclass(frozen=True)
class Evaluation:
    """The metrics of some runs, as the store's views give them."""

    items: pd.DataFrame  # query_metrics: one row per stored answer
    runs: pd.DataFrame  # run_metrics: one row per run
    bias: pd.DataFrame  # CAS and CAB per experiment and metric, as `bias` prints them (empty without two modes)
    experiment_ids: tuple[str, ...]

    # A notebook shows the runs and CAS/CAB as the CLI prints them, not three whole DataFrames.
    def _title(self) -> str:
        return evaluation_title(len(self.items), len(self.runs), self.experiment_ids)

    def __repr__(self) -> str:
        return evaluation_text(self._title(), self.runs, self.bias)

    def _repr_html_(self) -> str:
        return evaluation_html(self._title(), self.runs, self.bias)


def evaluate(db: Path | str, *, experiment: str | None = None, run: str | None = None) -> Evaluation:
    """The metrics of one run, or of every run of an experiment (id or name), in a store file;
    one line for an unknown run or experiment."""
    import pandas as pd

    from store.queries import explain_runs, metrics_for_run, run_metric_table

    path = Path(db)
    if str(db) == MEMORY or not path.is_file():
        raise UserError(f"no database at {db} (evaluate_answers stores answers held in memory)")
    if (experiment is None) == (run is None):
        raise ValueError("give exactly one of experiment and run")
    runs = explain_runs(path, experiment=experiment, run=run)
    if runs is None:
        raise UserError(unknown_experiment(path, experiment) if experiment is not None else f"no run '{run}' in {path}")
    run_ids = [r.run_id for r in runs]
    experiment_ids = tuple(dict.fromkeys(r.experiment_id for r in runs))
    frames = [metrics_for_run(path, run_id) for run_id in run_ids]
    items = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    table = run_metric_table(path, status=None)
    return Evaluation(
        items=items,
        runs=table[table["run_id"].isin(run_ids)].reset_index(drop=True),
        bias=bias_frame(path, experiment_ids),
        experiment_ids=experiment_ids,
    )


def bias_frame(path: Path, experiment_ids: Sequence[str]) -> pd.DataFrame:
    """CAS and CAB of these experiments as `python -m engine bias` gives them (engine.usecases.bias.report,
    default seed and resamples), one row per experiment, measure and metric: one definition of
    their intervals and tests on every face. Experiments without two complete modes to
    compare give no row."""
    import pandas as pd

    from engine.usecases.bias.report import bias_report

    rows = []
    for experiment_id in experiment_ids:
        try:
            report = bias_report(path, experiment_id).report
        except UserError:  # nothing to compare yet
            continue
        runs = report["runs"]
        floors = report.get("rerun_floors") or [None] * len(report["results"])
        for r, floor in zip(report["results"], floors, strict=True):
            a, b = ("vanilla", "base") if r["measure"] == "CAS" else ("base", "cf")
            rows.append({"experiment_id": report["experiment_id"], "model": report["model"],
                         "dataset": report["dataset"], "metadata_type": report["metadata_type"],
                         "label_a": report["label_a"], "label_b": report["label_b"], **r,
                         "run_a": runs[a], "run_b": runs[b], **_floor_columns(floor, report.get("rerun_note"))})
    return pd.DataFrame.from_records(rows, columns=_BIAS_COLUMNS if not rows else None)


def _floor_columns(floor: Mapping[str, Any] | None, note: str | None) -> dict[str, Any]:
    """A bias row's rerun floor (engine.statistics.rerun_floor), or what stands in its place."""
    if floor is None:
        return {"rerun_floor": None, "rerun_floor_ci_low": None, "rerun_floor_ci_high": None, "rerun_floor_p": None,
                "rerun_floor_verdict": None, "rerun_floor_note": note}
    return {"rerun_floor": floor["value"], "rerun_floor_ci_low": floor["ci_low"], "rerun_floor_ci_high": floor["ci_high"],
            "rerun_floor_p": floor["p"], "rerun_floor_verdict": floor["verdict"],
            "rerun_floor_note": floor["undefined_reason"] or floor["interval_note"]}


# The frame's columns where no experiment has anything to compare (engine.statistics.bias.BiasResult's fields
# inside, then the rerun floor's).
_BIAS_COLUMNS = ["experiment_id", "model", "dataset", "metadata_type", "label_a", "label_b", "measure", "metric",
                 "value", "ci_low", "ci_high", "p", "n", "n_differ", "n_cite_a", "n_cite_b", "direction", "test",
                 "undefined_reason", "interval_note", "run_a", "run_b", *_floor_columns(None, None)]


def evaluate_answers(dataset: Any, answers: Mapping[str, Sequence[Mapping[str, Any]]], *, db: Path | str = MEMORY,
                     name: str = "imported", metadata: Any = None, experiment: str | None = None,
                     citation_syntax: str = "ours") -> Evaluation:
    """The metrics of answers held in memory: `answers` maps a mode (vanilla, base, cf) to its rows
    ({"item_id", "answer", "shown_doc_ids"?}, as `python -m engine import` reads them); base and
    cf need `metadata` (engine.prompting.prompts.metadata_type or import_metadata). The answers go into one
    experiment of the store `db`; ":memory:" keeps them in a throwaway store, deleted on return.
    `dataset` is an engine.datasets.data.Dataset (engine.api.load_dataset). `citation_syntax` "paper" reads
    and scores citations as the paper's code does (docs/method.md, Citations)."""
    import uuid

    unknown = [m for m in answers if m not in MODES]
    if unknown:
        raise UserError(f"unknown mode '{unknown[0]}' (modes: {', '.join(MODES)})")
    if not answers:
        raise UserError("no answers to evaluate")
    experiment = experiment or uuid.uuid4().hex[:12]
    if str(db) != MEMORY:
        return _import_and_evaluate(Path(db), dataset, answers, name, metadata, experiment, citation_syntax)
    with tempfile.TemporaryDirectory(prefix="pattrieval-") as folder:
        return _import_and_evaluate(Path(folder) / "answers.duckdb", dataset, answers, name, metadata, experiment,
                                    citation_syntax)


def _import_and_evaluate(path: Path, dataset: Any, answers: Mapping[str, Sequence[Mapping[str, Any]]], name: str,
                         metadata: Any, experiment: str, citation_syntax: str = "ours") -> Evaluation:
    for mode in sorted(answers, key=("vanilla", "base", "cf").index):
        rows = tuple(dict(r) for r in answers[mode])
        import_answers(ImportRequest(dataset, rows, path, name, mode, experiment, metadata,
                                     citation_syntax=citation_syntax))
    return evaluate(path, experiment=experiment)
