"""The Bias tab: CAS and CAB of chosen experiments with tests and intervals, citation confidence,
the paper's Tables 1 and 2, and the rows of its two plots (demo/plots.py draws them).

Every number comes from engine.usecases.bias.page (engine.api.bias_page in a notebook), whose
reports are `python -m engine bias`'s and whose tables are `python -m engine report`'s; this
module only turns that page into widget values: Markdown with stored text escaped, table rows,
plot rows, messages without server paths.
"""

from __future__ import annotations

import html
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from demo.handlers.query import shown_reference
from demo.render import SMOKE_NOTE
from demo.settings import without_server_paths
from engine.bounds import PAGE_MAX_CHOICES, for_page
from engine.errors import UserError
from engine.presentation.display import printed_floors
from engine.usecases.bias import page as usecase
from engine.usecases.bias.choice import chosen_page, chosen_reports
from engine.usecases.bias.page import MAX_EXPERIMENTS, CabValue, ProbabilitySpread
from engine.usecases.bias.page import clear_cache as clear
from engine.usecases.runs.listing import studies, study_experiments
from engine.usecases.runs.model_names import is_smoke

# engine.statistics.bias.BiasResult's fields, as `python -m engine bias --json` gives them: value is None where
# undefined (direction then says why); n_cite_a / n_cite_b count the answers that cite a shown document.
RESULT_COLUMNS = ["measure", "metric", "value", "ci_low", "ci_high", "p", "n", "n_differ", "n_cite_a", "n_cite_b",
                  "direction", "test"]
CONFIDENCE_COLUMNS = ["rag_mode", "cited_docs", "label", "mean_probability", "n_with_probability", "n_citations"]
# The tab's tables hold several experiments: each row says which.
EXPERIMENT_COLUMNS = ["experiment", "model", "metadata"]
PAGE_RESULT_COLUMNS = EXPERIMENT_COLUMNS + RESULT_COLUMNS
PAGE_CONFIDENCE_COLUMNS = EXPERIMENT_COLUMNS + CONFIDENCE_COLUMNS
# Beyond the metrics, per run of the shown experiments, when stored: the share of
# Prompt 5 explanations that give a label as a reason (view explanation_rates, `engine explain`)
# and the AttrScore classes of its citations (view verification_shares, `engine verify`).
RUN_COLUMNS = EXPERIMENT_COLUMNS + ["rag_mode", "run_id"]
EXPLANATION_SHARE_COLUMNS = RUN_COLUMNS + ["explainer_model", "n_explanations", "n_mention_label", "label_share"]
VERIFICATION_SHARE_COLUMNS = RUN_COLUMNS + ["judge_model", "n_citations", "attributable_share", "extrapolatory_share",
                                            "contradictory_share", "unparsed_share"]


@dataclass(frozen=True)
class BiasPage:
    """What the Bias tab shows for the chosen experiments."""

    experiment_ids: tuple[str, ...]  # those shown, in the order chosen
    summary: str  # Markdown; every piece of stored text escaped
    results: list[list[Any]]  # PAGE_RESULT_COLUMNS: CAS and CAB per experiment and metric
    confidence: list[list[Any]]  # PAGE_CONFIDENCE_COLUMNS
    table1: list[list[str]]  # header row first, cells as `python -m engine report` prints them
    table2: list[list[str]]
    cab_bars: tuple[CabValue, ...]  # CAB of every metric; the plot shows precision and recall
    cab_note: str  # one line per experiment without CAB (no complete cf run yet); "" if none
    probability_boxes: tuple[ProbabilitySpread, ...]
    probability_note: str
    # Each experiment as its probability plot's panel names it (demo.plots.probability_figure).
    panels: dict[str, str] = field(default_factory=dict)
    # Beyond the metrics: empty when no shown run has explanations (verifications).
    explanation_shares: list[list[Any]] = field(default_factory=list)  # EXPLANATION_SHARE_COLUMNS
    verification_shares: list[list[Any]] = field(default_factory=list)  # VERIFICATION_SHARE_COLUMNS

    @property
    def beyond_note(self) -> str:
        """The line above the beyond-metric tables; "" when there is nothing to show."""
        return beyond_note(self.explanation_shares, self.verification_shares)


@dataclass(frozen=True)
class BeyondShares:
    """The beyond-metric shares of the chosen experiments' runs (what `/bias_shares` returns)."""

    experiment_ids: tuple[str, ...]
    explanation_shares: list[list[Any]]  # EXPLANATION_SHARE_COLUMNS
    verification_shares: list[list[Any]]  # VERIFICATION_SHARE_COLUMNS


def markdown_text(value: object) -> str:
    """Stored text (a model id, a custom label) as Markdown that shows it literally, within a line.

    HTML is escaped; so is every character that marks emphasis, code, links, tables or maths
    inline. Block markers (#, -, 1.) only count at the start of a line, where no stored text goes.
    """
    text = html.escape(str(value), quote=False)
    return "".join("\\" + ch if ch in "\\`*_[]|~$" else ch for ch in text)


def bias_page(db_path: Path, text: str, chosen: Sequence[str] | None = (), *, resamples: int | None = None) -> BiasPage:
    """The Bias tab for the experiments in `text` (ids or names, comma-separated) and `chosen`;
    UserError in one line naming no server path."""
    from engine.presentation.formatting import SETTING_NOTE, SIGNIFICANCE, printed_tables

    db_path = Path(db_path)
    with _shown_errors(db_path):
        page = chosen_page(db_path, text, chosen, resamples=resamples)
    skipped = _shown_skipped(db_path, page)
    tables = printed_tables(page.tables.table1, page.tables.table2)
    lines = _summary(page.experiments, skipped)
    lines.append(f"Tables 1 and 2 as `python -m engine report` prints them (* CAB's paired test p < {SIGNIFICANCE}).")
    if tables.dataset is not None:
        lines.append(f"Dataset: {markdown_text(tables.dataset)}.")
    if len(tables.table2) <= 1:
        lines.append("Table 2: no experiment here has complete base and cf runs.")
    lines += [f"Table 2, {markdown_text(note)}." for note in tables.table2_notes]
    if tables.has_settings:
        lines.append(markdown_text(SETTING_NOTE))
    explained, verified = _share_rows(page.experiments, page.shares)
    return BiasPage(
        experiment_ids=page.experiment_ids,
        summary="\n".join(lines),
        results=[_experiment_cells(e) + _result_cells(row) for e in page.experiments for row in e.results],
        confidence=[_experiment_cells(e) + _confidence_cells(c) for e in page.experiments for c in e.confidence],
        table1=[list(row) for row in tables.table1],
        table2=[list(row) for row in tables.table2],
        cab_bars=tuple(page.cab),
        cab_note=" ".join(
            [_note(n) for n in page.cab_notes]
            + [f"{markdown_text(e.experiment_id)}: {markdown_text(SMOKE_NOTE)}" for e in page.experiments if is_smoke(e.model)]
        ),
        probability_boxes=tuple(page.probabilities),
        panels={e.experiment_id: panel_title(e) for e in page.experiments},
        probability_note=" ".join(_note(n) for n in page.probability_notes),
        explanation_shares=explained,
        verification_shares=verified,
    )


def table_headers() -> tuple[list[str], list[str]]:
    """The header rows of Tables 1 and 2, as `python -m engine report` prints them."""
    from engine.presentation.formatting import formatted_tables

    table1, table2 = formatted_tables([], [])
    return table1[0], table2[0]


def bias_shares(db_path: Path, text: str, chosen: Sequence[str] | None = ()) -> BeyondShares:
    """The beyond-metric shares alone, for the experiments `bias_page` would show (the same
    refusals); `/bias_table` keeps its outputs, so API users get these from `/bias_shares`."""
    db_path = Path(db_path)
    experiments = _experiments(db_path, text, chosen)
    with _shown_errors(db_path):
        shares = usecase.beyond_shares(db_path, experiments)
    return BeyondShares(tuple(e.experiment_id for e in experiments), *_share_rows(experiments, shares))


def beyond_note(explanation_shares: Sequence[Any], verification_shares: Sequence[Any]) -> str:
    """What the beyond-metric tables hold, in one Markdown line; "" when both are empty."""
    parts = []
    if explanation_shares:
        parts.append("**label share**: of the Prompt 5 explanations of a run's answers (`python -m engine explain`), "
                     "the share that gives a label as a reason (its text or its category)")
    if verification_shares:
        parts.append("**AttrScore shares**: of a run's citations judged by `python -m engine verify`, the share "
                     "attributable, extrapolatory, contradictory or unparsed (they sum to 1)")
    return ("Beyond the metrics, per run: " + "; ".join(parts) + ".") if parts else ""


def clear_cache() -> None:
    """Forget the kept reads and reports (scripts/bench_app.py times a visitor's first look with it)."""
    clear()


def bias_table(db_path: Path, experiment: str) -> tuple[str, list[list[Any]], list[list[Any]]]:
    """One experiment: (its summary, the CAS/CAB rows in RESULT_COLUMNS, the confidence rows),
    without the tables and plots of the tab (scripts/bench_app.py times this part alone)."""
    db_path = Path(db_path)
    experiments, skipped = _experiments_and_skipped(db_path, "", [experiment] if experiment.strip() else [])
    (shown,) = experiments
    return ("\n".join(_summary(experiments, skipped)), [_result_cells(row) for row in shown.results],
            [_confidence_cells(c) for c in shown.confidence])


def _experiments_and_skipped(db_path: Path, text: str, chosen: Sequence[str] | None
                             ) -> tuple[tuple[usecase.ExperimentBias, ...], list[str]]:
    """The reports of the chosen experiments (at least one) and a line for each one skipped."""
    with _shown_errors(db_path):
        experiments, skipped = chosen_reports(db_path, text, chosen)
    page_skipped = [_shown_message(db_path, s) for s in skipped]
    if not experiments:  # nothing else chosen: the note is the error
        raise UserError(page_skipped[0] if page_skipped else "choose an experiment (its id or name, from the Runs tab)")
    return experiments, page_skipped


def _experiments(db_path: Path, text: str, chosen: Sequence[str] | None) -> tuple[usecase.ExperimentBias, ...]:
    return _experiments_and_skipped(db_path, text, chosen)[0]


@contextmanager
def _shown_errors(db_path: Path) -> Iterator[None]:
    """UserErrors of the use case as a visitor sees them: no server path."""
    try:
        yield
    except UserError as err:
        raise UserError(without_server_paths(str(err), db_path)) from None


def _shown_message(db_path: Path, skipped: usecase.Skipped) -> str:
    """bias's message on a skipped experiment without server paths: its hint names the dataset as
    typed at the run (a server path on a Space), shown by file name only."""
    message = skipped.message
    for dataset in skipped.dataset_paths:
        message = without_server_paths(message, db_path, dataset_path=dataset)
    return without_server_paths(message, db_path)


def _shown_skipped(db_path: Path, page: usecase.BiasPage) -> list[str]:
    skipped = [_shown_message(db_path, s) for s in page.skipped]
    if not page.experiments:  # nothing else chosen: the note is the error
        raise UserError(skipped[0] if skipped else "choose an experiment (its id or name, from the Runs tab)")
    return skipped


def _note(note: usecase.Note) -> str:
    return f"{markdown_text(note.experiment_id)}: {markdown_text(note.text)}"


def _share_rows(experiments: Sequence[usecase.ExperimentBias], shares: usecase.BeyondShares
                ) -> tuple[list[list[Any]], list[list[Any]]]:
    """The rows of the beyond-metric tables (EXPLANATION_SHARE_COLUMNS, VERIFICATION_SHARE_COLUMNS)."""
    by_id = {e.experiment_id: e for e in experiments}
    return ([[*_experiment_cells(by_id[s.experiment_id]), s.rag_mode, s.run_id, s.explainer_model, s.n_explanations,
              s.n_mention_label, s.label_share] for s in shares.explanations],
            [[*_experiment_cells(by_id[s.experiment_id]), s.rag_mode, s.run_id, s.judge_model, s.n_citations,
              s.attributable_share, s.extrapolatory_share, s.contradictory_share, s.unparsed_share]
             for s in shares.verifications])


@dataclass(frozen=True)
class StudySelection:
    """The experiments a study puts in the tab's multiselect, and a line on what was left out."""

    experiment_ids: list[str]  # grid order, at most MAX_EXPERIMENTS
    note: str  # Markdown; "" when every experiment of the study is chosen


def study_choices(db_path: Path) -> list[tuple[str, str]]:
    """(label, name) of every stored study, newest first: the tab's study picker."""
    if not Path(db_path).is_file():
        return []
    return [(for_page(f"{s.name} ({s.n_experiments} experiment{'' if s.n_experiments == 1 else 's'})"), s.name)
            for s in studies(db_path)[:PAGE_MAX_CHOICES]]


def study_selection(db_path: Path, study: str | None) -> StudySelection:
    """All the experiments of a study (in grid order) for the multiselect; those without a run yet
    are left out, and past MAX_EXPERIMENTS the rest, each said in the note. UserError in one line
    for an unknown study."""
    name = (study or "").strip()
    if not name:
        return StudySelection([], "")
    if not Path(db_path).is_file():
        raise UserError("nothing is stored yet: start a run first")
    found = study_experiments(db_path, name)
    if found is None:
        raise UserError(f"no study '{shown_reference(name)}' in the store (`python -m engine list --studies` names them)")
    ids, chosen = found.experiment_ids, list(found.with_runs)
    notes = []
    if len(chosen) < len(ids):
        notes.append(f"{len(ids) - len(chosen)} of its experiments have no run yet.")
    if len(chosen) > MAX_EXPERIMENTS:
        notes.append(f"The tab shows at most {MAX_EXPERIMENTS} experiments at once: the first {MAX_EXPERIMENTS} "
                     f"of {len(chosen)} are chosen (`python -m engine report --study` covers them all).")
        chosen = chosen[:MAX_EXPERIMENTS]
    note = f"Study {markdown_text(name)}: " + " ".join(notes) if notes else ""
    return StudySelection(chosen, note)


def panel_title(experiment: usecase.ExperimentBias) -> str:
    """An experiment as a plot names it: id, model, metadata type and its labels."""
    from demo.plots import type_name

    title = f"{experiment.experiment_id} · {experiment.model} · {type_name(experiment.metadata_type)}"
    if experiment.label_a:
        title += f" (A = {experiment.label_a}, B = {experiment.label_b})"
    return title


def _experiment_cells(experiment: usecase.ExperimentBias) -> list[Any]:
    return [experiment.experiment_id, experiment.model, experiment.metadata_type or "-"]


def _result_cells(row: usecase.BiasRow) -> list[Any]:
    return [getattr(row, c) for c in RESULT_COLUMNS]


def _confidence_cells(row: usecase.ConfidenceRow) -> list[Any]:
    return [getattr(row, c) for c in CONFIDENCE_COLUMNS]


def _summary(experiments: Sequence[usecase.ExperimentBias], skipped: Sequence[str]) -> list[str]:
    """One line per experiment (with the equal-labels warning), the skipped ones, and what the numbers are."""
    lines = []
    for e in experiments:
        line = (f"- Experiment {markdown_text(e.experiment_id)}: {markdown_text(e.model)} on "
                f"{markdown_text(e.dataset)}, metadata {markdown_text(e.metadata_type or 'none')}")
        if e.label_a:
            line += (f" (label A = {markdown_text(e.label_a)} on relevant documents in base, "
                     f"{markdown_text(e.label_b)} in cf)")
            if e.label_a == e.label_b:
                # The seed library's race type did this: base and cf then show the same prompt, CAB is 0 by construction.
                line += ". **WARNING: cf labels equal base labels, so CAB is 0 by construction**"
        if e.label_note:
            line += f"; {markdown_text(e.label_note)}"
        lines.append(line + ".")
        # Beside the measures, what they read when only the engine's noise differs (`run --reruns`).
        floors = printed_floors(e.rerun_experiments, e.rerun_lines, e.rerun_note)
        lines += [f"{'    ' if floor.startswith('  ') else '  '}- {markdown_text(floor.strip())}" for floor in floors]
    lines += [f"- Not shown: {markdown_text(message)}" for message in skipped]
    if any(is_smoke(e.model) for e in experiments):  # every number below is 0: said before them
        lines = [f"**{markdown_text(SMOKE_NOTE)}**", ""] + lines
    lines.append("")
    lines.append("CAB > 0 favours label A. CAS and CAB: x100, bootstrap 95% intervals, undefined where no answer "
                 "cites a shown document (as `python -m engine bias`). CAB's p and verdict: the paired test of base "
                 "vs cf named in `test` (null: base and cf cite alike); CAS's p is a signed test of vanilla vs base, "
                 "not a test of CAS.")
    return lines
