"""The Bias tab's study model (`/why_cited_study`): one model of label bias across the chosen
study (engine.usecases.study.effects, as `python -m engine why-cited --study NAME`), as rows for
its tables and forest plot: the label effect per configuration with item-clustered intervals,
the Wald tests of whether it differs, and every two configurations' difference, Holm-corrected.

Fitted as the panel's pooled choice model is (demo.handlers.why_cited): at most MAX_ANSWERS
answers and the operator's decisions bound (PATTRIEVAL_MAX_FIT_DECISIONS), counted before a row
is read, in a bounded child process (demo.fit_child), in its turn at the same gate, kept per
store state. Stored text reaching Markdown is escaped by markdown_text; the tables and the
figure escape their own cells.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from demo.handlers.bias import markdown_text
from demo.handlers.why_cited import MAX_ANSWERS, fitted_in_child, kept_fit
from demo.settings import DEFAULT_MAX_FIT_DECISIONS
from engine.errors import UserError
from engine.usecases.study.effects import StudyEffectsRequest

if TYPE_CHECKING:
    from demo.fit_child import FitBounds
    from demo.handlers.why_cited import FitGate

EFFECT_COLUMNS = ["configuration", "labels (A vs B)", "odds ratio [95% CI]", "p", "items", "answers"]
PAIRWISE_COLUMNS = ["configuration b", "against configuration a", "ratio of odds ratios b / a [95% CI]", "p",
                    "p (Holm)", "differs (Holm, 5%)"]
TITLE = "Label effect per configuration: odds ratios of citing label A over label B"
AXIS_TITLE = "odds ratio, label A over label B (log scale; 1 = no effect)"
BOUND_NOTE = (f"The app fits a study of at most {MAX_ANSWERS:,} answers; above that, run "
              "`python -m engine why-cited --study NAME` on the store.")


@dataclass(frozen=True)
class ForestRow:
    """A configuration's label effect as plots.forest_figure draws it."""

    term: str
    odds_ratio: float
    ci_low: float
    ci_high: float
    p: float


@dataclass(frozen=True)
class StudyModelPage:
    """What the study panel shows (and what `/why_cited_study` returns, as a dict)."""

    study: str
    experiment_ids: tuple[str, ...]
    summary: str  # Markdown: what was fitted, over which axes, what is no axis, notes
    tests: str  # Markdown: the Wald tests, each named
    pairwise_title: str  # the pairwise table's caption, naming the correction
    configurations: tuple[Any, ...]  # engine.statistics.study_model.ConfigurationEffect
    differences: tuple[Any, ...]  # engine.statistics.study_model.PairwiseDifference
    result: dict[str, Any]  # the use case's as_dict(): the API's numbers

    @property
    def effects(self) -> list[list[Any]]:
        """The effects table's rows (EFFECT_COLUMNS)."""
        return [[e.configuration, f"{e.label_a} vs {e.label_b}", _interval(e.odds_ratio, e.or_low, e.or_high),
                 _p(e.p), e.n_items, e.n_answers] for e in self.configurations]

    @property
    def pairwise(self) -> list[list[Any]]:
        """The pairwise table's rows (PAIRWISE_COLUMNS): the differences of log odds as ratios."""
        return [[d.b, d.a, _interval(math.exp(d.difference), math.exp(d.ci_low), math.exp(d.ci_high)), _p(d.p),
                 _p(d.p_adjusted), "yes" if d.reject else "no"] for d in self.differences]

    @property
    def forest(self) -> list[ForestRow]:
        return [ForestRow(e.configuration, e.odds_ratio, e.or_low, e.or_high, e.p) for e in self.configurations]

    def as_dict(self) -> dict[str, Any]:
        return {**self.result, "summary": self.summary, "tests": self.tests}


def _interval(x: float, low: float, high: float) -> str:
    from engine.presentation.formatting import format_ratio

    return f"{format_ratio(x)} [{format_ratio(low)}, {format_ratio(high)}]"


def _p(p: float) -> str:
    from engine.presentation.formatting import format_p

    return "-" if p != p else format_p(p)


def study_model_page(db_path: Path, study: str | None, modes: Sequence[str] | None = (), position: str = "group", *,
                     max_decisions: int = DEFAULT_MAX_FIT_DECISIONS, owner: str | None = None,
                     bounds: FitBounds | None = None, gate: FitGate | None = None) -> StudyModelPage:
    """The study model of `study` (a name), at most MAX_ANSWERS answers and `max_decisions`
    citation decisions, fitted in a bounded child when its turn comes at `gate` (`owner`: the
    visitor), kept per store state; UserError in one line naming no server path (past a bound,
    what cannot be estimated, an unknown study, PENDING or BUSY)."""
    db_path = Path(db_path)
    name = (study or "").strip()
    if not name:
        raise UserError("choose a study (the study picker at the top of the tab)")
    if not db_path.is_file():
        raise UserError("nothing is stored yet: start a run first")
    request = StudyEffectsRequest(name, tuple(modes) if modes else None, position or "group",
                                  max_answers=MAX_ANSWERS, max_decisions=max_decisions)
    fitted = functools.partial(_fitted, request, db_path, bounds)
    return kept_fit(db_path, request, fitted, owner, gate)


def _fitted(request: Any, db_path: Path, bounds: FitBounds | None) -> StudyModelPage:
    return page_of(fitted_in_child(request, db_path, bounds))


def page_of(result: Any) -> StudyModelPage:
    """The panel's page of a fitted study model (engine.usecases.study.effects.StudyEffectsResult)."""
    fit = result.fit
    n = len(result.experiment_ids)
    over = (f"over the axes {markdown_text(', '.join(fit.axes))}" if fit.axes else "(one configuration)")
    lines = [
        f"**One model of label bias across study {markdown_text(result.study)}**: {n} experiment{'s' if n != 1 else ''}, "
        f"{fit.n_answers:,} answers; {fit.n_informative:,} cite some but not all of their documents and inform the "
        f"fit ({fit.n_items:,} items). A conditional logit of which shown document is cited (each answer a stratum) "
        f"with relevance, position, the label and the label x configuration interactions, {over}; intervals "
        f"{markdown_text(fit.covariance)}, so that items recurring across configurations are counted once.",
        *([""] + [f"- *not an axis:* {markdown_text(axis)}: {markdown_text(why)}" for axis, why in fit.dropped_axes]
          if fit.dropped_axes else []),
        *(["", "**Warning:** the fit did not converge; read the intervals with care."] if not fit.converged else []),
        *([""] + [f"- *note:* {markdown_text(note)}" for note in fit.notes] if fit.notes else []),
    ]
    if fit.interaction is None:
        tests = "One configuration: no test between configurations."
    else:
        tests = "\n".join(f"- **Wald test** ({markdown_text(fit.covariance)}) that {markdown_text(t.hypothesis)}: "
                          f"chi-square = {t.chi2:.2f}, df = {t.df}, p {_p(t.p)}"
                          for t in (fit.interaction, *fit.per_axis))
    return StudyModelPage(
        study=result.study,
        experiment_ids=tuple(result.experiment_ids),
        summary="\n".join(lines),
        tests=tests,
        pairwise_title=f"pairwise differences of the label effect, {fit.correction}-corrected over "
                       f"{len(fit.pairwise)} pair{'s' if len(fit.pairwise) != 1 else ''}",
        configurations=tuple(fit.configurations),
        differences=tuple(fit.pairwise),
        result=result.as_dict(),
    )
