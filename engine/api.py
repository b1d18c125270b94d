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

import importlib
import os
from typing import TYPE_CHECKING, Any

from engine.errors import UserError

if TYPE_CHECKING:
    from engine.usecases.bias import BiasReport
    from engine.usecases.bias_page import BiasPage

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
    "ExperimentRequest": "engine.usecases.run",
    "RayOptions": "engine.usecases.run",
    "ServerOptions": "engine.usecases.run",
    "Progress": "engine.usecases.run",
    "ExperimentOutcome": "engine.running.run_request",
    "run_experiment": "engine.usecases.run",
    "Grid": "engine.prompting.study",
    "StudyRequest": "engine.usecases.study",
    "StudyOutcome": "engine.usecases.study",
    "run_study": "engine.usecases.study",
    # explanations (Prompt 5) and verification (AttrScore)
    "ExplainRequest": "engine.usecases.explain",
    "ExplainPlan": "engine.usecases.explain",
    "ExplainResult": "engine.usecases.explain",
    "plan_explain": "engine.usecases.explain",
    "run_explain": "engine.usecases.explain",
    "explain": "engine.usecases.explain",
    "VerifyRequest": "engine.usecases.verify_request",
    "VerifyPlan": "engine.usecases.verify",
    "VerifyResult": "engine.usecases.verify",
    "plan_verify": "engine.usecases.verify",
    "run_verify": "engine.usecases.verify",
    "verify": "engine.usecases.verify",
    "verify_judges": "engine.usecases.verify",
    "judge_cab": "engine.usecases.judge_label_bias",
    "JudgeCab": "engine.usecases.judge_label_bias",
    "LabelBiasPlan": "engine.usecases.judge_label_pairs",
    "plan_label_bias": "engine.usecases.judge_label_pairs",
    "run_label_bias": "engine.usecases.judge_label_pairs",
    # judges of citations: human labels in, agreement between the judges out
    "ImportLabelsRequest": "engine.usecases.import_labels",
    "ImportLabelsResult": "engine.usecases.import_labels",
    "import_labels": "engine.usecases.import_labels",
    "AgreementRequest": "engine.usecases.agreement",
    "Agreement": "engine.usecases.agreement",
    "agreement": "engine.usecases.agreement",
    # propensity CAB: the label bias on the probabilities of citing, the answer text held fixed
    "PropensityRequest": "engine.usecases.propensity",
    "PropensityResult": "engine.usecases.propensity",
    "propensity": "engine.usecases.propensity",
    # cited or used: each document's necessity, by ablation with the answer held fixed
    "UsedRequest": "engine.usecases.used",
    "UsedPlan": "engine.usecases.used",
    "UsedResult": "engine.usecases.used_figures",
    "plan_used": "engine.usecases.used",
    "run_used": "engine.usecases.used",
    "used": "engine.usecases.used",
    # bias and the paper's tables
    "BiasReport": "engine.usecases.bias",
    "BiasPage": "engine.usecases.bias_page",
    "ExperimentBias": "engine.usecases.bias_page",
    "ReportRequest": "engine.usecases.tables",
    "ReportTables": "engine.usecases.tables",
    "report_tables": "engine.usecases.tables",
    "report_xai_blocks": "engine.usecases.tables",
    "formatted_tables": "engine.usecases.formatting",
    # two runs or experiments compared on the same items, with paired statistics
    "CompareRequest": "engine.usecases.compare",
    "Comparison": "engine.usecases.compare",
    "compare": "engine.usecases.compare",
    # the models of a store ranked by label bias, with tiers by Holm-corrected pairwise tests
    "LeaderboardRequest": "engine.usecases.leaderboard",
    "Leaderboard": "engine.usecases.leaderboard",
    "leaderboard": "engine.usecases.leaderboard",
    "read_item_ids": "engine.usecases.leaderboard",
    # why was a document cited? the citation choice model
    "WhyCitedRequest": "engine.usecases.why_cited",
    "WhyCitedResult": "engine.usecases.why_cited",
    "why_cited": "engine.usecases.why_cited",
    "citation_decisions": "engine.usecases.why_cited",
    "fit_choice_model": "engine.statistics.choice_model",
    # one model of label bias across a study: the label effect per configuration
    "StudyEffectsRequest": "engine.usecases.study_effects",
    "StudyEffectsResult": "engine.usecases.study_effects",
    "why_cited_study": "engine.usecases.study_effects",
    "fit_study_model": "engine.statistics.study_model",
    "suppression_rates": "engine.statistics.suppression",
    # metrics as DataFrames, from a store or from answers in memory
    "Evaluation": "engine.usecases.evaluate",
    "evaluate": "engine.usecases.evaluate",
    "evaluate_answers": "engine.usecases.evaluate",
    # the store: import, export, merge, list
    "ImportRequest": "engine.usecases.import_answers",
    "ImportResult": "engine.usecases.import_answers",
    "import_answers": "engine.usecases.import_answers",
    "import_metadata": "engine.usecases.import_answers",
    # Inspect AI logs in (needs the `inspect` extra): each mode's answers stored as a run
    "InspectImportRequest": "engine.usecases.import_inspect",
    "InspectImportResult": "engine.usecases.import_inspect",
    "ExportRequest": "engine.usecases.export",
    "export": "engine.usecases.export",
    "merge": "engine.usecases.merge",
    "experiments": "engine.usecases.listing",
    "studies": "engine.usecases.listing",
}


# Defined here, not re-exported: the use cases take what the app and the CLI pass besides (an
# open connection, the --db text for hints, a list to collect derived values in), which has
# no place in a notebook's help().
def bias_report(db: str | os.PathLike[str], experiment: str, *, resamples: int | None = None,
                seed: int = 0) -> BiasReport:
    """CAS and CAB of one experiment (id or name) in the store `db`, with their intervals, tests and
    citation confidence, as `python -m engine bias` reports them.

    `.report` is the JSON-ready dict (`bias --json`), `.results` its CAS and CAB rows as a DataFrame,
    `.floors` their rerun floors (`run --reruns`; empty without reruns);
    `resamples` (bootstrap) and `seed` as `bias --resamples/--seed`. UserError for an unknown
    experiment, one line naming the known ones."""
    from pathlib import Path

    from engine.usecases.bias import bias_report as report

    return report(Path(db), experiment, resamples=resamples, seed=seed)


def bias_page(db: str | os.PathLike[str], experiments: list[str] | tuple[str, ...], *,
              resamples: int | None = None) -> BiasPage:
    """The app's Bias page for these experiments (ids or names, at most 12): each one's CAS and CAB
    report (`.experiments`, typed), the paper's Tables 1 and 2 of them as `python -m engine report`
    prints them, the CAB plot's values, the citation-probability spreads, the beyond-metric shares
    of their runs and the notes on what cannot be shown. An experiment with nothing to compare yet
    is in `.skipped`; UserError if every one is, or for an unknown one."""
    from pathlib import Path

    from engine.usecases.bias_page import bias_page as page

    found = page(Path(db), list(experiments), resamples=resamples)
    if not found.experiments:
        raise UserError(found.skipped[0].message if found.skipped else "choose an experiment")
    return found


def experiment_tables(db: str | os.PathLike[str], experiment_ids: list[str] | tuple[str, ...]
                      ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of the paper's Table 1 (quality, exact match) and Table 2 (CAB) for these
    experiments (ids), as `python -m engine report --experiment` gives them for one."""
    from pathlib import Path

    from engine.usecases.tables import experiment_tables as tables

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

    from engine.usecases.import_inspect import InspectImportRequest
    from engine.usecases.import_inspect import import_inspect as read

    return read(InspectImportRequest(Path(log), Path(db), name, experiment, mode, metadata, citation_syntax))


__all__ = sorted([*_HOMES, "bias_page", "bias_report", "experiment_tables", "import_inspect"])


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup skips this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
