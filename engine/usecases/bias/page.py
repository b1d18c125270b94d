"""The Bias page's data for a few experiments at once: CAS and CAB of each (`python -m engine
bias`'s report), the paper's Tables 1 and 2 of them (`python -m engine report`), the rows of the
CAB and citation-probability plots, the beyond-metric shares of their runs, and the notes on
what cannot be shown. The app's Bias tab (demo/handlers/bias.py) turns it into widgets; a
notebook gets the same page from engine.api.bias_page. The tables are rows, as `report` reads
them, and the rerun floors the report's values: the faces print them
(engine.presentation.formatting.printed_tables, engine.presentation.display.printed_floors).

The whole page is read in one ReadSession (store.queries.session): one connection, each
reference resolved once, each experiment's signature computed once; explanation_rates is read
once for every run shown (the reports are asked for without it).
The reads are kept per store state (store.state_cache), as bias_report keeps its reports:
every visitor of the tab asks for the same few experiments.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import UserError
from engine.usecases.bias.tables import experiment_tables
from engine.usecases.experiments import unknown_experiment

if TYPE_CHECKING:
    from store.queries import ReadSession

# Each experiment costs a bootstrap (2,000 resamples): a page of them at most.
MAX_EXPERIMENTS = 12


@dataclass(frozen=True)
class BiasRow:
    """CAS or CAB of one metric (engine.statistics.bias.BiasResult as the report stores it: None where undefined)."""

    measure: str
    metric: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    p: float | None
    n: int
    n_differ: int
    n_cite_a: int | None
    n_cite_b: int | None
    direction: str | None
    test: str
    undefined_reason: str | None = None
    interval_note: str | None = None


@dataclass(frozen=True)
class ConfidenceRow:
    """Mean citation probability of one mode's citations to relevant, or non-relevant, documents."""

    rag_mode: str
    cited_docs: str  # relevant | non-relevant
    label: str | None
    mean_probability: float | None
    n_with_probability: int
    n_citations: int


@dataclass(frozen=True)
class ExperimentBias:
    """One experiment's report, as `python -m engine bias --json` gives it, without explanations."""

    experiment_id: str
    model: str
    dataset: str
    metadata_type: str | None
    label_a: str | None
    label_b: str | None
    label_note: str | None
    runs: tuple[tuple[str, str], ...]  # (mode, run id) of the runs compared, in mode order
    results: tuple[BiasRow, ...]
    confidence: tuple[ConfidenceRow, ...]
    # The rerun floors, as bias_report's dict holds them (its reports kept before the floors existed
    # hold none): the reruns' experiment ids, one line per measure beside its floor
    # (engine.statistics.rerun_floor.floor_line), and the note where there is no floor (how to get
    # one, or why it is undefined). The faces print them (engine.presentation.display.printed_floors).
    rerun_experiments: tuple[str, ...]
    rerun_lines: tuple[str, ...]
    rerun_note: str | None

    @property
    def modes(self) -> tuple[str, ...]:
        return tuple(mode for mode, _ in self.runs)

    @property
    def undefined_cab(self) -> str:
        """Why CAB is undefined, with the share of answers that cite; "" if it is not."""
        for row in self.results:
            if row.measure == "CAB" and row.undefined_reason:
                return (f"{row.undefined_reason} (citing: {row.n_cite_a}/{row.n} in base, "
                        f"{row.n_cite_b}/{row.n} in cf)")
        return ""


@dataclass(frozen=True)
class Skipped:
    """A chosen experiment with nothing to compare yet: bias's message, and the dataset paths
    (as typed at its runs) that the message may name."""

    experiment_id: str
    message: str
    dataset_paths: tuple[str, ...]


@dataclass(frozen=True)
class Note:
    """A line about one experiment (plain text; the faces escape it as they print it)."""

    experiment_id: str
    text: str


@dataclass(frozen=True)
class CabValue:
    """One CAB (x100) of one experiment and metric with its interval: a bar of the CAB plot."""

    experiment_id: str
    model: str
    metadata_type: str | None
    labels: str  # "Woman vs Man": label A vs label B
    metric: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    p: float | None
    n: int
    direction: str | None


@dataclass(frozen=True)
class ProbabilitySpread:
    """The citation probabilities of one run's citations to relevant, or non-relevant, documents:
    a box of the probability plot."""

    experiment_id: str
    mode: str
    relevant: bool
    label: str | None  # the label those documents carried; None in vanilla
    n: int
    minimum: float
    q1: float
    median: float
    q3: float
    maximum: float
    mean: float


@dataclass(frozen=True)
class ExplanationShare:
    """Of one run's Prompt 5 explanations by one model, the share that gives a label as a reason (view explanation_rates)."""

    experiment_id: str
    rag_mode: str
    run_id: str
    explainer_model: str
    n_explanations: int
    n_mention_label: int
    label_share: float | None


@dataclass(frozen=True)
class VerificationShare:
    """AttrScore classes of one run's citations judged by one model (view verification_shares)."""

    experiment_id: str
    rag_mode: str
    run_id: str
    judge_model: str
    n_citations: int
    attributable_share: float | None
    extrapolatory_share: float | None
    contradictory_share: float | None
    unparsed_share: float | None


@dataclass(frozen=True)
class BeyondShares:
    """The beyond-metric shares of the shown experiments' runs, in their order and mode order."""

    explanations: tuple[ExplanationShare, ...]
    verifications: tuple[VerificationShare, ...]


@dataclass(frozen=True)
class TableRows:
    """The rows of the paper's Tables 1 and 2 of the shown experiments, as
    engine.usecases.bias.tables.experiment_tables reads them (one dict per row), before any
    formatting: engine.presentation.formatting.printed_tables prints them as `report` does."""

    table1: tuple[dict[str, Any], ...]
    table2: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class BiasPage:
    """The Bias page of the chosen experiments; `experiments` is empty when every one was skipped."""

    experiments: tuple[ExperimentBias, ...]  # in the order chosen, each once
    skipped: tuple[Skipped, ...]
    tables: TableRows  # Tables 1 and 2 as rows: the faces print them
    cab: tuple[CabValue, ...]  # every metric; the app plots precision and recall
    cab_notes: tuple[Note, ...]  # experiments without CAB: no complete base and cf, or undefined
    probabilities: tuple[ProbabilitySpread, ...]
    probability_notes: tuple[Note, ...]
    shares: BeyondShares

    @property
    def experiment_ids(self) -> tuple[str, ...]:
        return tuple(e.experiment_id for e in self.experiments)

    def experiment(self, experiment_id: str) -> ExperimentBias:
        return next(e for e in self.experiments if e.experiment_id == experiment_id)


def experiment_bias(report: Mapping[str, Any]) -> ExperimentBias:
    """bias_report's dict (`bias --json`) as an ExperimentBias."""
    fields = BiasRow.__dataclass_fields__
    return ExperimentBias(
        report["experiment_id"], report["model"], report["dataset"], report["metadata_type"], report["label_a"],
        report["label_b"], report.get("label_note"), tuple(report["runs"].items()),
        tuple(BiasRow(**{k: v for k, v in row.items() if k in fields}) for row in report["results"]),
        tuple(ConfidenceRow(**c) for c in report["confidence"]),
        tuple(report.get("rerun_experiments") or ()), tuple(report.get("rerun_lines") or ()), report.get("rerun_note"),
    )


def bias_page(db: Path | ReadSession, references: Sequence[str], *, resamples: int | None = None) -> BiasPage:
    """The page of these experiments (ids or names, at most MAX_EXPERIMENTS), read in one
    ReadSession (store.queries.session): a request's, whose pending values then include what this
    computed rather than found kept, or one of its own on the store `db`. UserError in one line
    for none chosen, a missing store or an unknown reference.
    """
    from store.queries import ReadSession, citation_probability_summaries, read_session

    if not isinstance(db, ReadSession):
        check_request(Path(db), references)  # before opening: an open creates a missing store
    with read_session(db) as session:
        experiments, skipped = experiment_reports(session, references, resamples)
        ids = tuple(e.experiment_id for e in experiments)
        run_ids = tuple(run for e in experiments for _, run in e.runs)
        rows1, rows2, summaries = _reads_cache().get(
            session.path, (ids, run_ids),
            lambda: (*experiment_tables(session, ids), citation_probability_summaries(session.db, run_ids)),
        )
        shares = beyond_shares(session, experiments)
    return BiasPage(
        experiments=experiments,
        skipped=skipped,
        tables=TableRows(tuple(rows1), tuple(rows2)),
        cab=tuple(_cab_values(experiments)),
        cab_notes=tuple(
            [Note(e.experiment_id, f"no CAB yet (it needs complete base and cf runs; it has {', '.join(e.modes)}).")
             for e in experiments if "cf" not in e.modes or "base" not in e.modes]
            # Undefined where no answer cites a shown document (the smoke model's never do): no bar, the reason here.
            + [Note(e.experiment_id, f"CAB undefined, {e.undefined_cab}.") for e in experiments if e.undefined_cab]
        ),
        probabilities=tuple(_probabilities(experiments, summaries)),
        probability_notes=tuple(_probability_notes(experiments, summaries)),
        shares=shares,
    )


def check_request(db_path: Path, references: Sequence[str]) -> None:
    """UserError for a request with no experiment, or a store that does not exist yet."""
    check_references(references)
    if not Path(db_path).is_file():
        raise UserError("nothing is stored yet: start a run first")


def check_references(references: Sequence[str]) -> None:
    """UserError for a request that names no experiment."""
    if not any(r.strip() for r in references):
        raise UserError("choose an experiment (its id or name, from the Runs tab)")


def experiment_reports(session: ReadSession, references: Sequence[str], resamples: int | None
                       ) -> tuple[tuple[ExperimentBias, ...], tuple[Skipped, ...]]:
    """bias's report of each referenced experiment (each once, in order), and those skipped for
    having nothing to compare yet; UserError for an unknown reference, before any report."""
    from engine.usecases.bias.report import bias_report
    from store.queries import experiment_dataset_paths

    check_references(references)  # the store is open: it exists
    references = [r for r in dict.fromkeys(r.strip() for r in references) if r]
    if len(references) > MAX_EXPERIMENTS:
        raise UserError(f"choose at most {MAX_EXPERIMENTS} experiments at once, not {len(references)}")
    ids: list[str] = []
    for reference in references:
        experiment_id = session.experiment_id(reference)
        if experiment_id is None:  # a typo: said at once, whatever else was chosen
            raise UserError(unknown_experiment(session.path, reference))
        if experiment_id not in ids:
            ids.append(experiment_id)

    experiments: list[ExperimentBias] = []
    skipped: list[Skipped] = []
    for experiment_id in ids:
        try:
            found = bias_report(session.path, experiment_id, resamples=resamples, session=session, explanations=False)
        except UserError as err:  # no two complete modes: nothing to compare yet
            skipped.append(Skipped(experiment_id, str(err), experiment_dataset_paths(session.db, experiment_id)))
            continue
        experiments.append(experiment_bias(found.report))
    return tuple(experiments), tuple(skipped)


def beyond_shares(db: Path | ReadSession, experiments: Sequence[ExperimentBias]) -> BeyondShares:
    """The explanation and verification shares of the experiments' runs (one read of each view),
    kept per store state as the tables' reads; in the request's ReadSession, or one of their own."""
    from store.queries import ReadSession, explanation_rates, read_session, verification_shares

    run_ids = [run for e in experiments for _, run in e.runs]
    experiment_of = {run: e.experiment_id for e in experiments for _, run in e.runs}

    def read() -> tuple[Any, Any]:  # a store of its own is opened only when the reads are not kept
        with read_session(db) as session:
            return explanation_rates(session.db, run_ids), verification_shares(session.db, run_ids)

    path = db.path if isinstance(db, ReadSession) else Path(db)
    explained, verified = _reads_cache().get(path, ("beyond", tuple(run_ids)), read)
    return BeyondShares(
        tuple(ExplanationShare(experiment_of[run], mode, run, model, n, n_label, share)
              for run, model, mode, n, n_label, share in explained),
        tuple(VerificationShare(experiment_of[run], mode, run, judge, n, *shares)
              for run, judge, mode, n, *shares in verified),
    )


@functools.cache
def _reads_cache() -> Any:
    """The tables', boxes' and shares' reads (0.1-0.8 s from 10k to 1M answers, mostly planning
    the views), made on first use: importing store at import time would load DuckDB."""
    from store.state_cache import StoreStateCache

    return StoreStateCache(16)


def clear_cache() -> None:
    """Forget the kept reads and reports (scripts/bench_app.py times a visitor's first look with it)."""
    from engine.usecases.bias.report import clear_report_cache

    _reads_cache().clear()
    clear_report_cache()


def _cab_values(experiments: Sequence[ExperimentBias]) -> list[CabValue]:
    values = []
    for e in experiments:
        labels = f"{e.label_a} vs {e.label_b}" if e.label_a else "label A vs label B"
        values += [CabValue(e.experiment_id, e.model, e.metadata_type, labels, row.metric, row.value, row.ci_low,
                            row.ci_high, row.p, row.n, row.direction) for row in e.results if row.measure == "CAB"]
    return values


def _probabilities(experiments: Sequence[ExperimentBias], summaries: Sequence[Any]) -> list[ProbabilitySpread]:
    by_run: dict[str, list[Any]] = {}
    for s in summaries:
        by_run.setdefault(s.run_id, []).append(s)
    spreads = []
    for e in experiments:
        # The label each kind of cited document carried in each mode, as citation_confidence gives it.
        labels = {(c.rag_mode, c.cited_docs): c.label for c in e.confidence}
        for mode, run_id in e.runs:
            for s in by_run.get(run_id, ()):
                kind = "relevant" if s.relevant else "non-relevant"
                spreads.append(ProbabilitySpread(e.experiment_id, mode, s.relevant, labels.get((mode, kind)), s.n,
                                                 s.minimum, s.q1, s.median, s.q3, s.maximum, s.mean))
    return spreads


def _probability_notes(experiments: Sequence[ExperimentBias], summaries: Sequence[Any]) -> list[Note]:
    """What the probability plot cannot show: experiments without probabilities, or without cf yet."""
    with_probabilities = {s.run_id for s in summaries}
    notes = []
    for e in experiments:
        missing = [mode for mode, run in e.runs if run not in with_probabilities]
        if len(missing) == len(e.runs):
            notes.append(Note(e.experiment_id,
                              "no citation probabilities (imported answers, or no citation of a shown document)."))
        elif missing:
            notes.append(Note(e.experiment_id, f"no citation probabilities in {', '.join(missing)}."))
        if "cf" not in e.modes:
            notes.append(Note(e.experiment_id, "no complete cf run yet, so label B on relevant documents is not shown."))
    return notes
