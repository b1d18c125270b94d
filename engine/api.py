"""PAttriEval's Python API: the use cases the CLI and the app call, for notebooks and scripts.

    from engine import api

    data = api.load_dataset("sample")  # the bundled sample, or a path
    result = api.explain(api.ExplainRequest(db=Path("results/pattrieval.duckdb"), experiment="exp1"))
    report = api.bias_report(Path("results/pattrieval.duckdb"), "exp1").report
    ev = api.evaluate_answers(data, {"vanilla": [{"item_id": "q1", "answer": "Paris [1]"}]})
    ev.items  # a DataFrame, one row per answer, from the store's query_metrics view

Everything is imported on first use (module `__getattr__`): `import engine.api` loads neither
torch, transformers, DuckDB nor pandas. Each name below is documented where it is defined.
Errors a user can fix are engine.errors.UserError, one line; a cancelled job raises
engine.errors.RunCancelled, after which the same request resumes.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from engine.errors import UserError

if TYPE_CHECKING:
    from dataclasses import dataclass

    from engine.presentation.formatting import PrintedTables
    from engine.usecases.bias.page import BiasPage as PageOfRows
    from engine.usecases.bias.page import ExperimentBias as ExperimentOfValues
    from engine.usecases.bias.report import BiasReport

    # What a type checker reads: the classes _experiment_type and _bias_page_type make.
    @dataclass(frozen=True)
    class ExperimentBias(ExperimentOfValues):
        floor_lines: tuple[str, ...]

    @dataclass(frozen=True)
    class BiasPage(PrintedTables, PageOfRows):
        experiments: tuple[ExperimentBias, ...]

# name -> the module that defines it. One entry per public name; `__all__` is their keys.
_HOMES: dict[str, str] = {
    # data
    "load_dataset": "engine.datasets.data",
    # errors
    "UserError": "engine.errors",
    "RunCancelled": "engine.errors",
    # running experiments: one (dataset x prompt configuration x modes), or a study grid
    "RunRequest": "engine.running.run_request",
    "PromptConfig": "engine.prompting.prompts",
    "metadata_type": "engine.prompting.prompts",
    "ExperimentRequest": "engine.usecases.runs.run",
    "RayOptions": "engine.usecases.runs.run",
    "ServerOptions": "engine.usecases.runs.run",
    "Progress": "engine.usecases.runs.run",
    "ExperimentOutcome": "engine.running.run_request",
    "run_experiment": "engine.usecases.runs.run",
    "Grid": "engine.prompting.study",
    "StudyRequest": "engine.usecases.study.study",
    "StudyOutcome": "engine.usecases.study.study",
    "run_study": "engine.usecases.study.study",
    # explanations (Prompt 5) and verification (AttrScore)
    "ExplainRequest": "engine.usecases.judges.explain",
    "ExplainPlan": "engine.usecases.judges.explain",
    "ExplainResult": "engine.usecases.judges.explain",
    "plan_explain": "engine.usecases.judges.explain",
    "run_explain": "engine.usecases.judges.explain",
    "explain": "engine.usecases.judges.explain",
    "VerifyRequest": "engine.usecases.judges.verify_request",
    "VerifyPlan": "engine.usecases.judges.verify",
    "VerifyResult": "engine.usecases.judges.verify",
    "plan_verify": "engine.usecases.judges.verify",
    "run_verify": "engine.usecases.judges.verify",
    "verify": "engine.usecases.judges.verify",
    "verify_judges": "engine.usecases.judges.verify",
    "judge_cab": "engine.usecases.judges.judge_label_bias",
    "JudgeCab": "engine.usecases.judges.judge_label_bias",
    "LabelBiasPlan": "engine.usecases.judges.judge_label_pairs",
    "plan_label_bias": "engine.usecases.judges.judge_label_pairs",
    "run_label_bias": "engine.usecases.judges.judge_label_pairs",
    # judges of citations: human labels in, agreement between the judges out
    "ImportLabelsRequest": "engine.usecases.storage.import_labels",
    "ImportLabelsResult": "engine.usecases.storage.import_labels",
    "import_labels": "engine.usecases.storage.import_labels",
    "AgreementRequest": "engine.usecases.judges.agreement",
    "Agreement": "engine.usecases.judges.agreement",
    "agreement": "engine.usecases.judges.agreement",
    # propensity CAB: the label bias on the probabilities of citing, the answer text held fixed
    "PropensityRequest": "engine.usecases.judges.propensity",
    "PropensityResult": "engine.usecases.judges.propensity",
    "propensity": "engine.usecases.judges.propensity",
    # cited or used: each document's necessity, by ablation with the answer held fixed
    "UsedRequest": "engine.usecases.judges.used",
    "UsedPlan": "engine.usecases.judges.used",
    "UsedResult": "engine.usecases.judges.used_figures",
    "plan_used": "engine.usecases.judges.used",
    "run_used": "engine.usecases.judges.used",
    "used": "engine.usecases.judges.used",
    # bias and the paper's tables
    "BiasReport": "engine.usecases.bias.report",
    # BiasPage and ExperimentBias are made below (_MADE): the use case's page and reports with
    # their tables and rerun floors printed, as bias_page returns them
    "ReportRequest": "engine.usecases.bias.tables",
    "ReportTables": "engine.usecases.bias.tables",
    "report_tables": "engine.usecases.bias.tables",
    "report_xai_blocks": "engine.usecases.bias.tables",
    "formatted_tables": "engine.presentation.formatting",
    # two runs or experiments compared on the same items, with paired statistics
    "CompareRequest": "engine.usecases.compare.compare",
    "Comparison": "engine.usecases.compare.compare",
    "compare": "engine.usecases.compare.compare",
    # the models of a store ranked by label bias, with tiers by Holm-corrected pairwise tests
    "LeaderboardRequest": "engine.usecases.bias.leaderboard",
    "Leaderboard": "engine.usecases.bias.leaderboard",
    "leaderboard": "engine.usecases.bias.leaderboard",
    "read_item_ids": "engine.usecases.bias.leaderboard",
    # why was a document cited? the citation choice model
    "WhyCitedRequest": "engine.usecases.bias.why_cited",
    "WhyCitedResult": "engine.usecases.bias.why_cited",
    "why_cited": "engine.usecases.bias.why_cited",
    "citation_decisions": "engine.usecases.bias.why_cited",
    "fit_choice_model": "engine.statistics.choice_model",
    # one model of label bias across a study: the label effect per configuration
    "StudyEffectsRequest": "engine.usecases.study.effects",
    "StudyEffectsResult": "engine.usecases.study.effects",
    "why_cited_study": "engine.usecases.study.effects",
    "fit_study_model": "engine.statistics.study_model",
    "suppression_rates": "engine.statistics.suppression",
    # metrics as DataFrames, from a store or from answers in memory
    "Evaluation": "engine.usecases.runs.evaluate",
    "evaluate": "engine.usecases.runs.evaluate",
    "evaluate_answers": "engine.usecases.runs.evaluate",
    # the store: import, export, merge, list
    "ImportRequest": "engine.usecases.storage.import_answers",
    "ImportResult": "engine.usecases.storage.import_answers",
    "import_answers": "engine.usecases.storage.import_answers",
    "import_metadata": "engine.usecases.storage.import_answers",
    # Inspect AI logs in (needs the `inspect` extra): each mode's answers stored as a run
    "InspectImportRequest": "engine.usecases.storage.import_inspect",
    "InspectImportResult": "engine.usecases.storage.import_inspect",
    "ExportRequest": "engine.usecases.storage.export",
    "export": "engine.usecases.storage.export",
    "merge": "engine.usecases.storage.merge",
    "experiments": "engine.usecases.runs.listing",
    "studies": "engine.usecases.runs.listing",
}


# Defined here, not re-exported: the use cases take what the app and the CLI pass besides (a
# request's read session, the --db text for hints), which has no place in a notebook's help().
def bias_report(db: str | os.PathLike[str], experiment: str, *, resamples: int | None = None,
                seed: int = 0) -> BiasReport:
    """CAS and CAB of one experiment (id or name) in the store `db`, with their intervals, tests and
    citation confidence, as `python -m engine bias` reports them.

    `.report` is the JSON-ready dict (`bias --json`), `.results` its CAS and CAB rows as a DataFrame,
    `.floors` their rerun floors (`run --reruns`; empty without reruns);
    `resamples` (bootstrap) and `seed` as `bias --resamples/--seed`. UserError for an unknown
    experiment, one line naming the known ones."""
    from pathlib import Path

    from engine.usecases.bias.report import bias_report as report

    return report(Path(db), experiment, resamples=resamples, seed=seed)


def bias_page(db: str | os.PathLike[str], experiments: list[str] | tuple[str, ...], *,
              resamples: int | None = None) -> BiasPage:
    """The app's Bias page for these experiments (ids or names, at most 12): each one's CAS and CAB
    report (`.experiments`, typed, each with its rerun floors as `bias` prints them in
    `.floor_lines`), the paper's Tables 1 and 2 of them as `python -m engine report` prints them
    (`.table1`, `.table2`; their rows before formatting in `.tables`), the CAB plot's values, the
    citation-probability spreads, the beyond-metric shares of their runs and the notes on what
    cannot be shown. An experiment with nothing to compare yet is in `.skipped`; UserError if
    every one is, or for an unknown one."""
    from dataclasses import fields
    from pathlib import Path

    from engine.presentation.display import printed_floors
    from engine.presentation.formatting import printed_tables
    from engine.usecases.bias.page import bias_page as page

    found = page(Path(db), list(experiments), resamples=resamples)
    if not found.experiments:
        raise UserError(found.skipped[0].message if found.skipped else "choose an experiment")
    printed = printed_tables(found.tables.table1, found.tables.table2)
    shown = tuple(_experiment_type()(**{f.name: getattr(e, f.name) for f in fields(e)},
                                     floor_lines=tuple(printed_floors(e.rerun_experiments, e.rerun_lines,
                                                                      e.rerun_note)))
                  for e in found.experiments)
    return _bias_page_type()(**{f.name: getattr(found, f.name) for f in fields(found) if f.name != "experiments"},
                             experiments=shown, **{f.name: getattr(printed, f.name) for f in fields(printed)})


@functools.cache
def _experiment_type() -> type[ExperimentBias]:
    """An experiment of the page a notebook gets: the use case's report
    (engine.usecases.bias.page.ExperimentBias, which holds its rerun floors as values) with the
    floors as `bias` prints them (engine.presentation.display.printed_floors). Made on first use."""
    from dataclasses import dataclass

    from engine.usecases.bias.page import ExperimentBias as ExperimentOfValues

    @dataclass(frozen=True)
    class Experiment(ExperimentOfValues):
        """One experiment's report, as `python -m engine bias --json` gives it, without
        explanations, with its rerun floors as `bias` prints them: `.floor_lines`, a heading and
        one line per measure, or the line that says there is none and how to get one."""

        floor_lines: tuple[str, ...]

    # Named as this module hands it out, so that help(), repr and pickle find it here.
    Experiment.__module__, Experiment.__name__, Experiment.__qualname__ = __name__, "ExperimentBias", "ExperimentBias"
    return cast("type[ExperimentBias]", Experiment)


@functools.cache
def _bias_page_type() -> type[BiasPage]:
    """The page a notebook gets: the use case's (engine.usecases.bias.page.BiasPage, whose tables
    are rows, since the use cases leave printing to the faces) with the tables as `report` prints
    them (engine.presentation.formatting.PrintedTables). Made on first use, as every name here is
    loaded: its bases load the use case."""
    from dataclasses import dataclass

    from engine.presentation.formatting import PrintedTables
    from engine.usecases.bias.page import BiasPage as PageOfRows

    @dataclass(frozen=True)
    class Page(PrintedTables, PageOfRows):
        """The Bias page of the chosen experiments (engine.api.bias_page), with Tables 1 and 2 as
        `python -m engine report` prints them: `.table1`, `.table2` (header row first), `.dataset`,
        `.table2_notes`, `.has_settings`; each of `.experiments` with its rerun floors printed."""

    # Named as this module hands it out, so that help(), repr and pickle find it here.
    Page.__module__, Page.__name__, Page.__qualname__ = __name__, "BiasPage", "BiasPage"
    return cast("type[BiasPage]", Page)


def experiment_tables(db: str | os.PathLike[str], experiment_ids: list[str] | tuple[str, ...]
                      ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of the paper's Table 1 (quality, exact match) and Table 2 (CAB) for these
    experiments (ids), as `python -m engine report --experiment` gives them for one."""
    from pathlib import Path

    from engine.usecases.bias.tables import experiment_tables as tables

    return tables(Path(db), experiment_ids)


def import_inspect(log: str | os.PathLike[str], db: str | os.PathLike[str], *, name: str | None = None,
                   experiment: str | None = None, mode: str = "vanilla", metadata: Any = None,
                   citation_syntax: str | None = None) -> Any:
    """Store the answers of an Inspect AI log as runs of one experiment in the store `db`, as
    `python -m engine import --inspect LOG` does: one run per mode its samples answer (our tasks
    answer vanilla, base and cf; another task's output is the answer of `mode`). `name` defaults to
    the log's model, `metadata` (metadata_type) to the label type its samples carry. Every sample
    is checked first; UserError in one line naming the sample and the field, and nothing is
    written. Returns an InspectImportResult (experiment_id, run_ids by mode). docs/inspect.md."""
    from pathlib import Path

    from engine.usecases.storage.import_inspect import InspectImportRequest
    from engine.usecases.storage.import_inspect import import_inspect as read

    return read(InspectImportRequest(Path(log), Path(db), name, experiment, mode, metadata, citation_syntax))


# Classes this module makes of the use cases' (the faces' printing added), on first use.
_MADE: dict[str, Callable[[], type]] = {"BiasPage": _bias_page_type, "ExperimentBias": _experiment_type}

__all__ = sorted([*_HOMES, *_MADE, "bias_page", "bias_report", "experiment_tables", "import_inspect"])


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if name in _MADE:
        value: Any = _MADE[name]()
    elif home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    else:
        value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup skips this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
