"""The Bias tab's "Why was it cited?" panel (`/why_cited`): the citation choice model of the
chosen experiments (engine.usecases.bias.why_cited), as plain rows for its tables and forest plot.

Every piece of stored text (experiment names, labels) that reaches Markdown is escaped by
markdown_text; the tables and the figure escape their own cells.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from demo import fit_child
from demo.field_words import app_message
from demo.fit_child import FitBounds
from demo.handlers.bias import markdown_text
from demo.settings import DEFAULT_MAX_FIT_DECISIONS, without_server_paths
from engine.errors import UserError
from engine.usecases.bias.choice import experiment_references
from engine.usecases.bias.why_cited import (
    WhyCitedRequest,
    citation_counts,
    not_converged,
    robust_note,
    separation_notes,
)

T = TypeVar("T")
EFFECT_COLUMNS = ["effect", "odds_ratio", "ci_low", "ci_high", "p", "robust_ci_low", "robust_ci_high", "robust_p"]
SUPPRESSION_COLUMNS = ["condition", "answers", "cite_nothing", "rate", "ci_low", "ci_high"]
POSITIONS = ("group", "number")
MAX_INTERACTIONS = 4  # a visitor's request stays a small model
MAX_ANSWERS = 500_000  # with the decisions' bound (AppSettings.max_fit_decisions); the CLI has no bound
MAX_WAITING_FITS = 4  # fits that may wait for a slot, all visitors together
BUSY = "another choice model is being fitted; try again in a moment"
PENDING = "your previous choice model is still being fitted: one fit at a time"


class FitGate:
    """Admission to fits (demo.fit_child runs each in a bounded child process): `slots` run at
    once (PATTRIEVAL_MAX_FITS), at most `max_waiting` more wait for a slot in arrival order, and
    each owner (demo.visitors.fair_key: a client address) has at most one fit waiting or running.

    Why: one fit holds a core for seconds, so fits take turns; a visitor looping the Fit button
    waits for their own fit and is refused a second one, while a second visitor waits their turn
    rather than being refused. A full queue is refused at once (BUSY)."""

    def __init__(self, slots: int = 1, max_waiting: int = MAX_WAITING_FITS):
        self.slots, self.max_waiting = slots, max_waiting
        self._changed = threading.Condition()
        self._owners: set[str] = set()
        self._waiting: deque[object] = deque()
        self._running = 0

    def run(self, owner: str | None, call: Callable[[], T]) -> T:
        """`call()` in its turn (UserError, one line: PENDING or BUSY, when refused). A None owner
        (a direct call, not a visitor) is bounded only by the queue's length."""
        ticket = object()
        with self._changed:
            if owner is not None and owner in self._owners:
                raise UserError(PENDING)
            if len(self._waiting) >= self.max_waiting and (self._waiting or self._running >= self.slots):
                raise UserError(BUSY)  # a free slot with nobody waiting is taken at once
            if owner is not None:
                self._owners.add(owner)
            self._waiting.append(ticket)
            self._changed.wait_for(lambda: self._running < self.slots and self._waiting[0] is ticket)
            self._waiting.popleft()
            self._running += 1
            self._changed.notify_all()  # the next in line may take another free slot
        try:
            return call()
        finally:
            with self._changed:
                self._running -= 1
                if owner is not None:
                    self._owners.discard(owner)
                self._changed.notify_all()


@functools.cache
def fit_gate(slots: int = 1) -> FitGate:
    """The process's gate for `slots` concurrent fits: every app built with that setting shares it."""
    return FitGate(slots)


@dataclass(frozen=True)
class WhyCitedPage:
    """What the panel shows (and what `/why_cited` returns, as a dict)."""

    experiment_ids: tuple[str, ...]
    summary: str  # Markdown: what was fitted, each effect in words, what could not be estimated
    forest: tuple[Any, ...]  # the fit's effects (engine.statistics.choice_model.Effect), as the forest plot draws them
    suppression: list[list[Any]]  # SUPPRESSION_COLUMNS
    suppression_note: str  # Markdown: the tests across conditions

    @property
    def effects(self) -> list[list[Any]]:
        """The effects table's rows (EFFECT_COLUMNS)."""
        return [[e.term, e.odds_ratio, e.ci_low, e.ci_high, e.p, e.robust_ci_low, e.robust_ci_high, e.robust_p]
                for e in self.forest]

    def as_dict(self) -> dict[str, Any]:
        return {
            "experiments": list(self.experiment_ids),
            "summary": self.summary,
            "effects": [dict(zip(EFFECT_COLUMNS, row, strict=True)) for row in self.effects],
            "suppression": [dict(zip(SUPPRESSION_COLUMNS, row, strict=True)) for row in self.suppression],
            "suppression_note": self.suppression_note,
        }


def interactions_of(text: str) -> tuple[str, ...]:
    """The interactions typed as "label:relevant, position:label" (commas or spaces between)."""

    found = tuple(dict.fromkeys(t for t in (text or "").replace(",", " ").split() if t))
    if len(found) > MAX_INTERACTIONS:
        raise UserError(f"at most {MAX_INTERACTIONS} interactions, not {len(found)}")
    return found


# Every visitor of the panel asks for the same few fits: each page is kept per store state
# (store.state_cache, as the bias reports are), so asking again costs a read of the file's stat.
@functools.cache
def _pages():
    from store.state_cache import StoreStateCache

    return StoreStateCache(16)


def clear_cache() -> None:
    """Forget the kept pages (tests and benchmarks time uncached fits with it)."""
    _pages().clear()


def why_cited_page(db_path: Path, text: str, chosen: Sequence[str] | None = (), position: str = "group",
                   interactions: str = "", modes: Sequence[str] | None = (), *,
                   max_decisions: int = DEFAULT_MAX_FIT_DECISIONS, owner: str | None = None,
                   bounds: FitBounds | None = None, gate: FitGate | None = None) -> WhyCitedPage:
    """The choice model of the experiments in `text` (ids or names, comma-separated) and
    `chosen`, at most `max_decisions` citation decisions (documents shown x answers), fitted in
    a child process within `bounds` (demo.fit_child) when its turn comes at `gate` (`owner`: the
    visitor, demo.visitors.fair_key); UserError in one line naming no server path, also when the
    owner's previous fit is still pending (PENDING) or the queue is full (BUSY)."""
    db_path = Path(db_path)
    references = experiment_references(text, chosen)
    if not references:
        raise UserError("choose an experiment (its id or name, from the Runs tab)")
    if not db_path.is_file():
        raise UserError("nothing is stored yet: start a run first")
    request = WhyCitedRequest(tuple(references), None, tuple(modes) if modes else None, position or "group",
                              interactions_of(interactions), max_answers=MAX_ANSWERS, max_decisions=max_decisions)
    return kept_fit(db_path, request, functools.partial(_fitted, request, db_path, bounds), owner, gate)


def kept_fit(db_path: Path, request: Any, fitted: Callable[[], T], owner: str | None, gate: FitGate | None) -> T:
    """The page kept for `request` at the store's present state, else `fitted()` in its turn at
    `gate` (the process's, fit_gate(), when None), kept. The panel's pooled fits and the study
    model's share the cache and the gate: a visitor has one fit of either kind at a time."""
    gate = gate or fit_gate()
    # A kept page is served without queuing; a fit that waited looks again, since the same
    # request may have been fitted (and kept) while it waited.
    return _pages().get(db_path, request, lambda: gate.run(owner, lambda: _pages().get(db_path, request, fitted)))


def _fitted(request: Any, db_path: Path, bounds: FitBounds | None) -> WhyCitedPage:
    """The page of a fit made now in a bounded child process (UserError, one line, not kept)."""
    return _page(fitted_in_child(request, db_path, bounds))


def fitted_in_child(request: Any, db_path: Path, bounds: FitBounds | None) -> Any:
    """The use case's result of a fit made now in a bounded child process (demo.fit_child), or
    UserError in one line naming no server path."""
    try:
        return fit_child.fit_in_child(request, db_path, bounds or FitBounds())
    except UserError as err:  # e.g. "no experiment 'x' in /srv/...": no server path reaches a visitor
        raise UserError(without_server_paths(app_message(err), db_path)) from None


def _page(result: Any) -> WhyCitedPage:
    """The panel's page of a fit (engine.usecases.bias.why_cited.WhyCitedResult)."""
    from engine.presentation.formatting import format_p

    fit, s = result.fit, result.suppression
    lines = [
        f"**{fit.n_answers:,} answers** of {len(result.experiment_ids)} experiment"
        f"{'s' if len(result.experiment_ids) != 1 else ''}; {fit.n_informative:,} cite some but not all of their "
        "documents and inform the fit (each answer a stratum: which of the documents shown together was cited)."
        + ("" if fit.converged else f" **Warning:** {markdown_text(not_converged(fit))}."),
        "",
        markdown_text(citation_counts(fit)) + ".",
        "",
        *[f"- {markdown_text(e.sentence)}" for e in fit.effects],
        *[f"- *{markdown_text(line.split(': ', 1)[0])}:* {markdown_text(line.split(': ', 1)[1])}"
          if line.startswith("separated: ") else f"- {markdown_text(line)}" for line in separation_notes(fit)],
        *[f"- *not estimated:* {markdown_text(term)}: {markdown_text(why)}" for term, why in fit.dropped],
        "",
        markdown_text(robust_note(fit)) + ".",
    ]
    tests = []
    if s.chi2_p is not None:
        tests.append(f"chi-square across conditions: chi2 = {s.chi2:.2f}, df = {s.chi2_df}, p {format_p(s.chi2_p)}")
    if s.mcnemar_p is not None:
        tests.append(f"exact McNemar on the {s.mcnemar_pairs:,} items both answered: p {format_p(s.mcnemar_p)} "
                     f"({s.mcnemar_b} silent in the first only, {s.mcnemar_c} in the second only)")
    tests += list(s.notes)
    return WhyCitedPage(
        experiment_ids=result.experiment_ids,
        summary="\n".join(lines),
        forest=fit.effects,
        suppression=[[r.condition, r.answers, r.silent, r.rate, r.ci_low, r.ci_high] for r in s.rates],
        suppression_note="Suppression (answers citing no shown document): "
        + markdown_text("; ".join(tests) if tests else "no test"),
    )
