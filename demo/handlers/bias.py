"""The Bias tab: CAS and CAB of chosen experiments with tests and intervals, citation confidence,
the paper's Tables 1 and 2, and the rows of its two plots (demo/plots.py draws them).

Every number comes from the use cases the CLI prints too: engine.usecases.bias (`python -m
engine bias`) per experiment, engine.usecases.tables (`python -m engine report`) for the tables.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from demo.plots import CabBar, ProbabilityBox
from demo.render import SMOKE_NOTE, is_smoke

# engine.statistics.bias.BiasResult's fields, as `python -m engine bias --json` gives them: value is None where
# undefined (direction then says why); n_cite_a / n_cite_b count the answers that cite a shown document.
RESULT_COLUMNS = ["measure", "metric", "value", "ci_low", "ci_high", "p", "n", "n_differ", "n_cite_a", "n_cite_b",
                  "direction", "test"]
CONFIDENCE_COLUMNS = ["rag_mode", "cited_docs", "label", "mean_probability", "n_with_probability", "n_citations"]
# The tab's tables hold several experiments: each row says which.
EXPERIMENT_COLUMNS = ["experiment", "model", "metadata"]
PAGE_RESULT_COLUMNS = EXPERIMENT_COLUMNS + RESULT_COLUMNS
PAGE_CONFIDENCE_COLUMNS = EXPERIMENT_COLUMNS + CONFIDENCE_COLUMNS
# Each experiment costs a bootstrap (2,000 resamples): a page of them at most.
MAX_EXPERIMENTS = 12
# Beyond the metrics (issue 8), per run of the shown experiments, when stored: the share of
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
    cab_bars: tuple[CabBar, ...]  # CAB of every metric; the plot shows precision and recall
    cab_note: str  # one line per experiment without CAB (no complete cf run yet); "" if none
    probability_boxes: tuple[ProbabilityBox, ...]
    probability_note: str
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


def experiment_references(text: str, chosen: Sequence[str] | None = ()) -> list[str]:
    """The experiments named in the text box (an id or name, or several separated by commas) and
    the multiselect, in order, without repeats. A name that contains a comma still works typed
    alone: the whole text is tried first (see _reports)."""
    refs = [r.strip() for r in (text or "").split(",")] + [str(c).strip() for c in (chosen or ())]
    return list(dict.fromkeys(r for r in refs if r))


def bias_page(db_path: Path, text: str, chosen: Sequence[str] | None = (), *, resamples: int | None = None) -> BiasPage:
    """The Bias tab for the experiments in `text` (ids or names, comma-separated) and `chosen`;
    UserError in one line naming no server path."""
    from engine.usecases.formatting import formatted_tables
    from store.derived import keep
    from store.queries import reading

    db_path = Path(db_path)
    _check_request(db_path, text, chosen)  # before opening: an open creates a missing store
    # One read connection for the whole request (each open costs more than most reads); what was
    # computed now rather than found kept in the store is kept after it closes (store.derived).
    pending: list = []
    with reading(db_path) as conn:
        reports, skipped = _reports(db_path, text, chosen, resamples, conn=conn, pending=pending)
        ids = tuple(r["experiment_id"] for r in reports)
        rows1, rows2, summaries = _store_reads(db_path, ids, tuple(run for r in reports for run in r["runs"].values()),
                                               conn=conn, pending=pending)
        explained, verified = _beyond_rows(db_path, reports, conn=conn)
    keep(db_path, pending)
    table1, table2 = formatted_tables(rows1, rows2)
    return BiasPage(
        experiment_ids=ids,
        summary=_summary(reports, skipped, rows1, rows2),
        results=[_experiment_cells(r) + [row[c] for c in RESULT_COLUMNS] for r in reports for row in r["results"]],
        confidence=[_experiment_cells(r) + [c[k] for k in CONFIDENCE_COLUMNS] for r in reports for c in r["confidence"]],
        table1=table1,
        table2=table2,
        cab_bars=tuple(_cab_bars(reports)),
        cab_note=" ".join(
            [f"{markdown_text(r['experiment_id'])}: no CAB yet (it needs complete base and cf runs; it has "
             f"{markdown_text(', '.join(r['runs']))})." for r in reports if "cf" not in r["runs"] or "base" not in r["runs"]]
            # Undefined where no answer cites a shown document (the smoke model's never do): no bar, the reason here.
            + [f"{markdown_text(r['experiment_id'])}: CAB undefined, {markdown_text(_undefined_cab(r))}."
               for r in reports if _undefined_cab(r)]
            + [f"{markdown_text(r['experiment_id'])}: {markdown_text(SMOKE_NOTE)}" for r in reports if is_smoke(r["model"])]
        ),
        probability_boxes=tuple(_probability_boxes(reports, summaries)),
        probability_note=_probability_note(reports, summaries),
        explanation_shares=explained,
        verification_shares=verified,
    )


def table_headers() -> tuple[list[str], list[str]]:
    """The header rows of Tables 1 and 2, as `python -m engine report` prints them."""
    from engine.usecases.formatting import formatted_tables

    table1, table2 = formatted_tables([], [])
    return table1[0], table2[0]


def bias_shares(db_path: Path, text: str, chosen: Sequence[str] | None = ()) -> BeyondShares:
    """The beyond-metric shares alone, for the experiments `bias_page` would show (the same
    refusals); `/bias_table` keeps its outputs, so API users get these from `/bias_shares`."""
    db_path = Path(db_path)
    reports, _ = _reports(db_path, text, chosen, None)
    explained, verified = _beyond_rows(db_path, reports)
    return BeyondShares(tuple(r["experiment_id"] for r in reports), explained, verified)


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


def _beyond_rows(db_path: Path, reports: list[dict[str, Any]], *, conn: Any = None) -> tuple[list[list[Any]], list[list[Any]]]:
    """(explanation share rows, verification share rows) of the reports' runs, in the reports'
    order and their mode order; kept per store state, as the tables' reads."""
    from store.queries import explanation_rates, verification_shares

    run_ids = [run for r in reports for run in r["runs"].values()]
    cells = {run: [*_experiment_cells(r), mode, run] for r in reports for mode, run in r["runs"].items()}
    explained, verified = _reads_cache().get(
        db_path, ("beyond", tuple(run_ids)),
        lambda: (explanation_rates(conn or db_path, run_ids), verification_shares(conn or db_path, run_ids)),
    )
    # The views' rag_mode repeats the run's, already in the experiment cells.
    return ([[*cells[row[0]], row[1], *row[3:]] for row in explained],
            [[*cells[row[0]], row[1], *row[3:]] for row in verified])


# Every visitor of the tab asks for the same few experiments: the tables' and boxes' reads
# (0.1-0.8 s from 10k to 1M answers, mostly planning and computing the views) are kept per store
# state (store.state_cache), as bias_report keeps its reports.
@functools.cache
def _reads_cache():
    from store.state_cache import StoreStateCache

    return StoreStateCache(16)


def clear_cache() -> None:
    """Forget the kept reads and reports (scripts/bench_app.py times a visitor's first look with it)."""
    from engine.usecases.bias import clear_report_cache

    _reads_cache().clear()
    clear_report_cache()


def _store_reads(db_path: Path, experiment_ids: tuple[str, ...], run_ids: tuple[str, ...], *, conn: Any = None,
                 pending: list | None = None) -> Any:
    """(Table 1 rows, Table 2 rows, probability summaries) of these experiments and runs; kept
    only while the store is unchanged, so a write that lands meanwhile is never hidden."""
    from engine.usecases.tables import experiment_tables
    from store.queries import citation_probability_summaries

    return _reads_cache().get(
        db_path, (experiment_ids, run_ids),
        lambda: (*experiment_tables(conn or db_path, experiment_ids, pending=pending),
                 citation_probability_summaries(conn or db_path, run_ids)),
    )


def bias_table(db_path: Path, experiment: str) -> tuple[str, list[list[Any]], list[list[Any]]]:
    """One experiment: (its summary, the CAS/CAB rows in RESULT_COLUMNS, the confidence rows),
    without the tables and plots of the tab (scripts/bench_app.py times this part alone)."""
    reports, skipped = _reports(Path(db_path), "", [experiment] if experiment.strip() else [], None)
    (report,) = reports
    return (_summary(reports, skipped), [[row[c] for c in RESULT_COLUMNS] for row in report["results"]],
            [[c[k] for k in CONFIDENCE_COLUMNS] for c in report["confidence"]])


def _check_request(db_path: Path, text: str, chosen: Sequence[str] | None) -> None:
    """UserError for a request with no experiment, or a store that does not exist yet."""
    from engine.errors import UserError

    if not (text or "").strip() and not chosen:
        raise UserError("choose an experiment (its id or name, from the Runs tab)")
    if not db_path.is_file():
        raise UserError("nothing is stored yet: start a run first")


def _reports(db_path: Path, text: str, chosen: Sequence[str] | None, resamples: int | None, *,
             conn: Any = None, pending: list | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """`python -m engine bias`'s report of each chosen experiment, and a line for each one skipped
    (read through `conn` when given; reports computed now are appended to `pending`)."""
    from demo.settings import without_server_paths
    from engine.errors import UserError
    from engine.usecases.bias import bias_report, unknown_experiment
    from store.queries import experiment_dataset_paths, resolve_experiment

    _check_request(db_path, text, chosen)
    db = conn or db_path
    whole = (text or "").strip()
    references = experiment_references(text, chosen)
    if "," in whole and resolve_experiment(db, whole):
        references = experiment_references("", [whole, *(chosen or ())])
    if len(references) > MAX_EXPERIMENTS:
        raise UserError(f"choose at most {MAX_EXPERIMENTS} experiments at once, not {len(references)}")

    reports: list[dict[str, Any]] = []
    skipped: list[str] = []
    first_error: UserError | None = None
    for reference in references:
        experiment_id = resolve_experiment(db, reference)
        if experiment_id is None:  # a typo: said at once, whatever else was chosen
            raise UserError(without_server_paths(unknown_experiment(db_path, reference), db_path))
        if any(r["experiment_id"] == experiment_id for r in reports):
            continue
        try:
            reports.append(bias_report(db_path, experiment_id, resamples=resamples, conn=conn, pending=pending).report)
        except UserError as err:
            # An experiment without two complete modes has nothing to compare yet: a note, unless
            # nothing else was chosen.
            message = str(err)
            # Its hint names the dataset as typed at the run (a server path on a Space): the file name only.
            for dataset in experiment_dataset_paths(db_path, experiment_id):
                message = without_server_paths(message, db_path, dataset_path=dataset)
            message = without_server_paths(message, db_path)
            first_error = first_error or UserError(message)
            skipped.append(message)
    if not reports:
        raise first_error or UserError("choose an experiment (its id or name, from the Runs tab)")
    return reports, skipped




@dataclass(frozen=True)
class StudySelection:
    """The experiments a study puts in the tab's multiselect, and a line on what was left out."""

    experiment_ids: list[str]  # grid order, at most MAX_EXPERIMENTS
    note: str  # Markdown; "" when every experiment of the study is chosen


def study_choices(db_path: Path) -> list[tuple[str, str]]:
    """(label, name) of every stored study, newest first: the tab's study picker."""
    from engine.bounds import PAGE_MAX_CHOICES, for_page
    from store.queries import study_listing

    if not Path(db_path).is_file():
        return []
    return [(for_page(f"{s.name} ({s.n_experiments} experiment{'' if s.n_experiments == 1 else 's'})"), s.name)
            for s in study_listing(db_path)[:PAGE_MAX_CHOICES]]


def study_selection(db_path: Path, study: str | None) -> StudySelection:
    """All the experiments of a study (in grid order) for the multiselect; those without a run yet
    are left out, and past MAX_EXPERIMENTS the rest, each said in the note. UserError in one line
    for an unknown study."""
    from demo.handlers.query import shown_reference
    from engine.errors import UserError
    from store.queries import experiment_choices, study_experiment_ids

    name = (study or "").strip()
    if not name:
        return StudySelection([], "")
    if not Path(db_path).is_file():
        raise UserError("nothing is stored yet: start a run first")
    ids = study_experiment_ids(db_path, name)
    if ids is None:
        raise UserError(f"no study '{shown_reference(name)}' in the store (`python -m engine list --studies` names them)")
    with_runs = {c.experiment_id for c in experiment_choices(db_path)}
    chosen = [e for e in ids if e in with_runs]
    notes = []
    if len(chosen) < len(ids):
        notes.append(f"{len(ids) - len(chosen)} of its experiments have no run yet.")
    if len(chosen) > MAX_EXPERIMENTS:
        notes.append(f"The tab shows at most {MAX_EXPERIMENTS} experiments at once: the first {MAX_EXPERIMENTS} "
                     f"of {len(chosen)} are chosen (`python -m engine report --study` covers them all).")
        chosen = chosen[:MAX_EXPERIMENTS]
    note = f"Study {markdown_text(name)}: " + " ".join(notes) if notes else ""
    return StudySelection(chosen, note)


def panel_title(report: dict[str, Any]) -> str:
    """An experiment as a plot names it: id, model, metadata type and its labels."""
    from demo.plots import type_name

    title = f"{report['experiment_id']} · {report['model']} · {type_name(report['metadata_type'])}"
    if report["label_a"]:
        title += f" (A = {report['label_a']}, B = {report['label_b']})"
    return title


def _experiment_cells(report: dict[str, Any]) -> list[Any]:
    return [report["experiment_id"], report["model"], report["metadata_type"] or "-"]


def _summary(reports: list[dict[str, Any]], skipped: list[str], rows1: list[dict] | None = None,
             rows2: list[dict] | None = None) -> str:
    """One line per experiment (with the equal-labels warning), the skipped ones, and the tables' notes."""
    from engine.statistics.bias import SIGNIFICANCE
    from engine.usecases.formatting import SETTING_NOTE, has_settings, single_dataset, table2_notes

    lines = []
    for r in reports:
        line = (f"- Experiment {markdown_text(r['experiment_id'])}: {markdown_text(r['model'])} on "
                f"{markdown_text(r['dataset'])}, metadata {markdown_text(r['metadata_type'] or 'none')}")
        if r["label_a"]:
            line += (f" (label A = {markdown_text(r['label_a'])} on relevant documents in base, "
                     f"{markdown_text(r['label_b'])} in cf)")
            if r["label_a"] == r["label_b"]:
                # The seed library's race type did this: base and cf then show the same prompt, CAB is 0 by construction.
                line += ". **WARNING: cf labels equal base labels, so CAB is 0 by construction**"
        if r.get("label_note"):
            line += f"; {markdown_text(r['label_note'])}"
        lines.append(line + ".")
    lines += [f"- Not shown: {markdown_text(message)}" for message in skipped]
    if any(is_smoke(r["model"]) for r in reports):  # every number below is 0: said before them
        lines = [f"**{markdown_text(SMOKE_NOTE)}**", ""] + lines
    lines.append("")
    lines.append("CAB > 0 favours label A. CAS and CAB: x100, bootstrap 95% intervals, undefined where no answer "
                 "cites a shown document (as `python -m engine bias`). CAB's p and verdict: the paired test of base "
                 "vs cf named in `test` (null: base and cf cite alike); CAS's p is a signed test of vanilla vs base, "
                 "not a test of CAS.")
    if rows1 is None or rows2 is None:
        return "\n".join(lines)
    lines.append(f"Tables 1 and 2 as `python -m engine report` prints them (* CAB's paired test p < {SIGNIFICANCE}).")
    dataset = single_dataset(rows1, rows2)
    if dataset is not None:
        lines.append(f"Dataset: {markdown_text(dataset)}.")
    if not rows2:
        lines.append("Table 2: no experiment here has complete base and cf runs.")
    lines += [f"Table 2, {markdown_text(note)}." for note in table2_notes(rows2)]
    if has_settings(rows1) or has_settings(rows2):
        lines.append(markdown_text(SETTING_NOTE))
    return "\n".join(lines)


def _undefined_cab(report: dict[str, Any]) -> str:
    """Why the experiment's CAB is undefined, with the share of answers that cite; "" if it is not."""
    for row in report["results"]:
        if row["measure"] == "CAB" and row.get("undefined_reason"):
            return (f"{row['undefined_reason']} (citing: {row['n_cite_a']}/{row['n']} in base, "
                    f"{row['n_cite_b']}/{row['n']} in cf)")
    return ""


def _cab_bars(reports: list[dict[str, Any]]) -> list[CabBar]:
    bars = []
    for r in reports:
        labels = f"{r['label_a']} vs {r['label_b']}" if r["label_a"] else "label A vs label B"
        for row in r["results"]:
            if row["measure"] == "CAB":
                bars.append(CabBar(r["experiment_id"], r["model"], r["metadata_type"], labels, row["metric"], row["value"],
                                   row["ci_low"], row["ci_high"], row["p"], row["n"], row["direction"]))
    return bars


def _probability_boxes(reports: list[dict[str, Any]], summaries: Sequence[Any]) -> list[ProbabilityBox]:
    by_run = {}
    for s in summaries:
        by_run.setdefault(s.run_id, []).append(s)
    boxes = []
    for r in reports:
        # The label each kind of cited document carried in each mode, as citation_confidence gives it.
        labels = {(c["rag_mode"], c["cited_docs"]): c["label"] for c in r["confidence"]}
        for mode, run_id in r["runs"].items():
            for s in by_run.get(run_id, ()):
                kind = "relevant" if s.relevant else "non-relevant"
                boxes.append(ProbabilityBox(panel_title(r), mode, s.relevant, labels.get((mode, kind)), s.n, s.minimum,
                                            s.q1, s.median, s.q3, s.maximum, s.mean))
    return boxes


def _probability_note(reports: list[dict[str, Any]], summaries: Sequence[Any]) -> str:
    """What the probability plot cannot show: experiments without probabilities, or without cf yet."""
    with_probabilities = {s.run_id for s in summaries}
    notes = []
    for r in reports:
        missing = [mode for mode, run in r["runs"].items() if run not in with_probabilities]
        name = markdown_text(r["experiment_id"])
        if len(missing) == len(r["runs"]):
            notes.append(f"{name}: no citation probabilities (imported answers, or no citation of a shown document).")
        elif missing:
            notes.append(f"{name}: no citation probabilities in {markdown_text(', '.join(missing))}.")
        if "cf" not in r["runs"]:
            notes.append(f"{name}: no complete cf run yet, so label B on relevant documents is not shown.")
    return " ".join(notes)
