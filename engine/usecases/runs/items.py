"""One experiment's items as a face browses them: the item list that a search and a filter keep,
one item in every mode, its explanations, a run's explanations with their label share. The app's
Query, Explain and Compare tabs read them here, so that a notebook gets the same views.

Reads only the store; never creates it. An unknown experiment, item or run is a value here (None,
or a lookup that says which is missing): each face words it in its own vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.usecases.judges.used import DEFAULT_THRESHOLD
from engine.usecases.runs.rerun_marks import NO_RERUN, mode_marks

if TYPE_CHECKING:
    from engine.types import ExplainRun
    from engine.usecases.runs.rerun_marks import ModeRerunMark
    from store.db import DbLike
    from store.queries import QueryDetail, StoredExplanation
    from store.queries._read import Readable


def item_filters() -> tuple[str, ...]:
    """The filters an item list takes besides every item: "modes" (the answer differs between
    modes) and "base_cf" (between base and cf)."""
    from store.queries import CHANGED_FILTERS

    return CHANGED_FILTERS


@dataclass(frozen=True)
class ItemIds:
    """An experiment's item ids in dataset order, as a search and a filter keep them."""

    experiment_id: str
    item_ids: tuple[str, ...]


def item_ids(db: DbLike, experiment: str, search: str | None = None, changed: str | None = None) -> ItemIds | None:
    """The items of the experiment (id or name) whose question or item id contains `search`
    (case-insensitive, literal), kept by the filter `changed` (None: all, or one of
    item_filters()); None for an unknown experiment."""
    from store import queries

    with queries.reading(db) as conn:  # one open for both reads
        experiment_id = queries.resolve_experiment(conn, experiment)
        ids = queries.item_ids(conn, experiment_id, search, changed) if experiment_id is not None else None
    return None if experiment_id is None or ids is None else ItemIds(experiment_id, tuple(ids))


@dataclass(frozen=True)
class DocumentUse:
    """What `python -m engine used` stored for one shown document of one answer (migration 020):
    necessity = log P(answer | full prompt) - log P(answer | prompt without it), in nats."""

    run_id: str
    position: int  # the shown document's number (1-based)
    model: str  # the model that read the answer
    necessity: float
    sufficiency: float
    cited: bool
    threshold: float  # nats of necessity above which it counts as used (the view citation_use's)

    @property
    def used(self) -> bool:
        return self.necessity > self.threshold

    @property
    def post_rationalised(self) -> bool:
        """Cited, but the answer hardly needs it: the citation was added after the fact."""
        return self.cited and not self.used


@dataclass(frozen=True)
class ItemLookup:
    """One item of an experiment in every mode; which of the two is unknown when it is not found."""

    known_experiment: bool  # False: no experiment has this id or name
    detail: QueryDetail | None  # None: the experiment is unknown, or none of its runs holds the item
    explanations: tuple[StoredExplanation, ...] = ()  # with_explanations: of the item's answers, mode by mode
    # with_use: per shown document of each mode's answer, what `used` stored (one model per run); empty
    # where `used` has not read the item's answers.
    use: tuple[DocumentUse, ...] = ()
    # Per mode, whether the item's citations change on a rerun of its run too (empty without a
    # detail); every mark "" where the experiment has no rerun.
    reruns: tuple[ModeRerunMark, ...] = ()

    def no_rerun_note(self) -> str:
        """What to say when the item's citations differ between modes and no rerun can tell
        whether that is the engine's doing: "" otherwise."""
        if self.detail is None or any(m.reruns for m in self.reruns):
            return ""
        answered = [m.cited_doc_ids for m in self.detail.modes if m.answer is not None]
        return f"citations differ between modes; {NO_RERUN}" if len(set(answered)) > 1 else ""


def item_detail(db: DbLike, experiment: str, item_id: str, *, with_explanations: bool = False,
                with_use: bool = False) -> ItemLookup:
    """The item `item_id` of the experiment (id or name) across its modes, whether its citations
    change on a rerun of each mode's run, and the stored explanations of its answers and their
    documents' use when asked."""
    from store import queries
    from store.queries.rerun_changes import rerun_changes

    # One read of the store for all of it: each open costs more than most of these reads, and
    # the Query tab asks on every click.
    with queries.reading(db) as conn:
        detail = queries.query_detail(conn, experiment, item_id)
        if detail is None:
            return ItemLookup(queries.resolve_experiment(conn, experiment) is not None, None)
        explanations = (queries.item_explanations(conn, [m.run_id for m in detail.modes], detail.item_id)
                        if with_explanations else ())
        use = _item_use(conn, detail) if with_use else ()
        runs = [(m.mode, m.run_id) for m in detail.modes]
        changes = rerun_changes(conn, [run for _, run in runs], detail.item_id)
    return ItemLookup(True, detail, explanations, use, mode_marks(changes, runs, detail.item_id))


def _item_use(db: Readable, detail: QueryDetail) -> tuple[DocumentUse, ...]:
    """The stored use of the item's shown documents, per run read by one model: the model that
    answered where it read the run (the usual `used`), else the first by name, so that a
    document never shows two necessities side by side without saying whose."""
    from store.queries.document_use import item_document_use

    rows = item_document_use(db, [m.run_id for m in detail.modes], detail.item_id)
    answered_by = {m.run_id: m.model for m in detail.modes}
    models: dict[str, set[str]] = {}
    for run_id, _, model, *_ in rows:
        models.setdefault(run_id, set()).add(model)
    chosen = {run_id: answered_by[run_id] if answered_by.get(run_id) in found else min(found)
              for run_id, found in models.items()}
    return tuple(DocumentUse(run_id, int(position), model, float(necessity), float(sufficiency), bool(cited),
                             DEFAULT_THRESHOLD)
                 for run_id, position, model, necessity, sufficiency, cited in rows if chosen[run_id] == model)


def explainable_runs(db: DbLike, experiment: str) -> tuple[ExplainRun, ...] | None:
    """The experiment's runs in mode order with their answer counts:
    what `explain` can work on; None for an unknown experiment."""
    from store.queries import explain_runs

    return explain_runs(db, experiment=experiment)


@dataclass(frozen=True)
class RunExplanations:
    """A run's stored explanations and their label share per explainer model; `run` is None when
    the experiment has no such run, and the lookup itself None when the experiment is unknown."""

    run: ExplainRun | None
    explanations: tuple[StoredExplanation, ...] = ()
    rates: tuple[tuple, ...] = ()  # rows of the explanation_rates view (engine.usecases.judges.explain.explanation_rates)


def run_explanations(db: DbLike, experiment: str, run_id: str) -> RunExplanations | None:
    """The explanations of the run `run_id` of the experiment (id or name), with the label share
    of its explanations per explainer model."""
    from store import queries

    runs = queries.explain_runs(db, experiment=experiment)
    if runs is None:
        return None
    run = next((r for r in runs if r.run_id == run_id), None)
    if run is None:
        return RunExplanations(None)
    return RunExplanations(run, tuple(queries.run_explanations(db, run.run_id)),
                           tuple(queries.explanation_rates(db, [run.run_id])))
