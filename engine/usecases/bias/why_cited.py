"""Why was this document cited? The citation choice model over stored answers.

`why_cited(WhyCitedRequest(experiments=("exp1",)), db)` reads the chosen experiments' citation
decisions (the citation_decisions view: one row per shown document per answer), fits the
conditional logit of engine.statistics.choice_model (each answer a stratum: which of the documents shown
together got cited) and measures the suppression rate (answers citing nothing) per condition.
The CLI (`python -m engine why-cited`), the app's Bias tab and notebooks call this.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import UserError, WordedError
from engine.paths import require_store
from engine.types import MODES
from engine.usecases.bias.fit_memory import check_fit_memory
from engine.usecases.experiments import unknown_experiment

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from engine.statistics.choice_model import ChoiceModelFit
    from engine.statistics.choice_patterns import AnswerPatterns
    from engine.statistics.suppression import Suppression

POSITION_CODINGS = ("group", "number")


@dataclass(frozen=True)
class WhyCitedRequest:
    """Which answers to model and how: experiments (ids or names) and/or a study's, the modes
    (None: all), position as first/middle/last ("group") or as a number, the interactions
    ("label:relevant", ...) and the reference label (None: label B of the experiments' type)."""

    experiments: tuple[str, ...] = ()
    study: str | None = None
    modes: tuple[str, ...] | None = None
    position: str = "group"
    interactions: tuple[str, ...] = ()
    label_reference: str | None = None
    # At most this many answers, and this many decision rows (documents shown x answers), else
    # a one-line refusal before anything is read (None: no bound). The fit's time grows with the
    # rows, its memory with the answers (engine.usecases.bias.fit_memory); the app bounds both.
    max_answers: int | None = None
    max_decisions: int | None = None
    # Refuse, from the same count, a fit the memory available now cannot hold (engine.usecases.bias.fit_memory).
    memory_check: bool = True

    def __post_init__(self) -> None:
        if self.position not in POSITION_CODINGS:
            raise UserError(f"position must be {' or '.join(POSITION_CODINGS)}, not '{self.position}'")
        for mode in self.modes or ():
            if mode not in MODES:
                raise UserError(f"unknown mode '{mode}' (choose from {', '.join(MODES)})")


@dataclass(frozen=True)
class WhyCitedResult:
    """The fitted model, the suppression rates, and what they were fitted on."""

    experiment_ids: tuple[str, ...]
    n_runs: int
    fit: ChoiceModelFit
    suppression: Suppression

    def effects(self) -> pd.DataFrame:
        """One row per effect: term, odds ratio, its 95% interval, p, and the sentence."""
        import pandas as pd

        return pd.DataFrame([asdict(e) for e in self.fit.effects])

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form (what `why-cited --json` prints)."""
        return {
            "experiments": list(self.experiment_ids),
            "n_runs": self.n_runs,
            "fit": _plain(asdict(self.fit)),
            "multi_citation": {"answers_citing_several": self.fit.n_multi, "model": citation_counts(self.fit)},
            "robust_intervals": robust_note(self.fit),
            "suppression": _plain(asdict(self.suppression)),
        }


def _plain(value: Any) -> Any:
    """NaN and infinities as None, tuples as lists: strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _experiment_ids(request: WhyCitedRequest, db: Path) -> tuple[str, ...]:
    """The experiments named (ids or names) and the study's, in order, once each."""
    from store.queries import reading, resolve_experiment, study_experiment_ids

    if not request.experiments and request.study is None:
        raise UserError("choose the answers to model: give --experiment (repeatable) or --study")
    ids: list[str] = []
    # One connection for every reference: an open each took 9 of the 11 s that 334 experiments'
    # refusal took at 10M answers.
    with reading(db) as conn:
        for reference in request.experiments:
            found = resolve_experiment(conn, reference)
            if found is None:
                raise UserError(unknown_experiment(db, reference))
            ids.append(found)
        if request.study is not None:
            in_study = study_experiment_ids(conn, request.study)
            if in_study is None:
                raise WordedError("no study '{study}' ({see_studies})", study=request.study)
            ids.extend(in_study)
    return tuple(dict.fromkeys(ids))


def citation_decisions(request: WhyCitedRequest, db: Path) -> pd.DataFrame:
    """The chosen answers' decision rows (store.queries.DECISION_COLUMNS) plus the model's
    columns: `answer` (its stratum: run and item) and `condition` (experiment and mode)."""
    from store.queries import decision_frame

    ids = _experiment_ids(request, require_store(db))
    _check_bounds(request, db, ids)
    rows = decision_frame(db, ids, request.modes)
    if rows.empty:
        modes = f" in mode {', '.join(request.modes)}" if request.modes else ""
        raise UserError(f"no stored answers{modes} in experiment{'s' if len(ids) != 1 else ''} {', '.join(ids)}")
    rows["answer"] = rows["run_id"] + "/" + rows["item_id"]
    rows["item"] = rows["item_id"]
    names = rows["experiment_name"].where(rows["experiment_name"].notna(), rows["experiment_id"])
    rows["condition"] = names + ":" + rows["mode"]
    return rows


# Decision rows read at a time: a chunk of whole runs of about this many rows (a run with more is
# a chunk of its own). Ten million answers' hundred million rows held 16 GB at once;
# a chunk is read, folded into patterns (engine.statistics.choice_patterns) and let go.
CHUNK_DECISIONS = 2_000_000


@dataclass(frozen=True)
class ChosenAnswers:
    """What the choice model and the suppression rates read of the chosen answers: the answers as
    patterns, and per answer its condition (experiment name and mode), item and whether it cites
    nothing. Numbers only: no answer's text is ever made."""

    patterns: AnswerPatterns
    labels: tuple[str, ...]  # the text of each label code of the patterns
    conditions: tuple[str, ...]  # "experiment name:mode" of each condition code
    condition: np.ndarray  # (answers,) int
    item: np.ndarray  # (answers,) int: the item's code (the robust intervals' cluster)
    silent: np.ndarray  # (answers,) bool
    experiment_ids: tuple[str, ...]  # the experiments with answers, in the order asked
    n_runs: int  # runs with answers


def chosen_answers(request: WhyCitedRequest, db: Path, chunk_decisions: int | None = None) -> ChosenAnswers:
    """The chosen answers, read a chunk of runs at a time (store.queries.decisions.decision_code_chunks)
    and folded in, so that memory holds one chunk's rows and every answer's few numbers. Bounded
    as citation_decisions; refused in one line where there is no answer. chunk_decisions: rows
    a chunk (None: CHUNK_DECISIONS)."""
    import numpy as np

    from engine.statistics.choice_patterns import RAW_COLUMNS, PatternBuilder
    from store.queries.decisions import decision_code_chunks

    ids = _experiment_ids(request, db)
    _check_bounds(request, db, ids)
    builder = PatternBuilder()
    labels: dict[str, int] = {}
    condition, item, silent = [], [], []
    runs: set[int] = set()
    experiments: set[int] = set()
    conditions: tuple[str, ...] = ()
    for coded in decision_code_chunks(db, ids, request.modes, max_rows=chunk_decisions or CHUNK_DECISIONS):
        conditions = tuple(f"{name}:{mode}" for name in coded.experiment_names for mode in coded.modes)
        got = coded.rows
        if not len(coded):
            continue
        label, items, answer = chunk_codes(coded, labels)
        raw = {"relevant": got["relevant"], "position": got["position"], "position_group": got["position_group"],
               "label": label, "repeated": got["repeated"]}
        starts, cites = builder.add(answer, got["cited"], np.column_stack([raw[c] for c in RAW_COLUMNS]), items)
        condition.append(got["experiment"][starts].astype(np.int64) * len(coded.modes) + got["mode"][starts])
        item.append(items[starts])
        silent.append(cites == 0)
        runs.update(np.unique(got["run"]).tolist())
        experiments.update(np.unique(got["experiment"]).tolist())
    if not condition:
        modes = f" in mode {', '.join(request.modes)}" if request.modes else ""
        raise UserError(f"no stored answers{modes} in experiment{'s' if len(ids) != 1 else ''} {', '.join(ids)}")
    return ChosenAnswers(builder.patterns(), tuple(labels), conditions, np.concatenate(condition),
                         np.concatenate(item), np.concatenate(silent),
                         tuple(ids[i] for i in sorted(experiments)), len(runs))


def chunk_codes(coded: Any, labels: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of one chunk of store.queries.decisions.decision_code_chunks: each row's label as a code
    into every chunk's labels (`labels`, extended here; -1, none, stays -1), its item code and its
    answer's code (run and item in one number: the rows are in run, item order)."""
    import numpy as np

    got = coded.rows
    label = np.array([labels.setdefault(v, len(labels)) for v in coded.labels] + [-1])[got["label"]]
    items = got["item"].astype(np.int64)
    return label, items, got["run"].astype(np.int64) * (int(items.max()) + 1) + items


def _check_bounds(request: WhyCitedRequest, db: Path, ids: tuple[str, ...]) -> None:
    """Refuse, from a count and before a row is read, more answers or decisions than the request
    allows, or than the memory available now holds."""
    from store.queries import count_answers

    if request.max_answers is None and request.max_decisions is None and not request.memory_check:
        return
    n = count_answers(db, ids, request.modes)
    if request.max_answers is not None and n.answers > request.max_answers:
        raise WordedError("{answers} answers are more than the {most} fitted here; choose fewer experiments or "
                          "modes, or {fit_on_the_store}", answers=f"{n.answers:,}", most=f"{request.max_answers:,}")
    if request.max_decisions is not None and n.decisions > request.max_decisions:
        raise WordedError("{answers} answers x their shown documents make {decisions} citation decisions, more than "
                          "the {most} fitted here; choose fewer experiments or modes, or {fit_on_the_store}",
                          answers=f"{n.answers:,}", decisions=f"{n.decisions:,}", most=f"{request.max_decisions:,}")
    check_fit_memory(request, n.answers, n.decisions, "choose fewer experiments or modes")


def why_cited(request: WhyCitedRequest, db: Path) -> WhyCitedResult:
    """Fit the citation choice model and the suppression rates over the chosen answers."""
    from engine.statistics.choice_model import fit_patterns
    from engine.statistics.suppression import suppression_of_answers
    from store.queries import label_pairs

    chosen = chosen_answers(request, require_store(db))
    shown = {chosen.labels[c] for c in chosen.patterns.label_codes if c >= 0}
    reference = request.label_reference
    if reference is None:
        pairs = label_pairs(db, chosen.experiment_ids)
        # Label B is the reference, so an odds ratio above 1 favours label A: the side CAB > 0
        # favours (engine/statistics/bias.py's sign convention).
        reference = next((b for _, b in pairs if b in shown), None)
    elif reference not in shown:
        raise UserError(f"no shown document carries the label '{reference}'")
    fit = fit_patterns(chosen.patterns, list(chosen.labels), position=request.position,
                       interactions=tuple(request.interactions), label_reference=reference, cluster="item")
    suppression = suppression_of_answers(list(chosen.conditions), chosen.condition, chosen.silent, chosen.item)
    return WhyCitedResult(chosen.experiment_ids, chosen.n_runs, fit, suppression)


def not_converged(fit: Any) -> str:
    """Why a fit that did not converge says little (Newton with step halving stopped short)."""
    return ("the fit did not converge (Newton's method with step halving stopped before its tolerance); "
            "read the intervals with care or give more answers")


def separation_notes(fit: Any) -> list[str]:
    """One line per separated term: what separates and that the other effects are its limit fit."""
    if not fit.separated:
        return []
    return [f"separated: {term}: {why}" for term, why in fit.separated] + [
        "the other effects are the limit of the maximum likelihood fit along the separation: estimated among "
        "the documents each answer could still have cited (docs/method.md)"]


def citation_counts(fit: Any) -> str:
    """How many informative answers cite one, two, ... documents, and how several are modelled."""
    from engine.statistics.choice_model import MULTI_CITATION

    counts = ", ".join(f"{n:,} cite {k}" for k, n in fit.cited_counts)
    if fit.n_multi == 0:
        return f"every informative answer cites one document ({counts}): each is one choice among its documents"
    return (f"{fit.n_multi:,} of the {fit.n_informative:,} informative answers cite several documents "
            f"({counts}); {MULTI_CITATION}")


FEW_CLUSTERS = 30  # below this many effective clusters a robust interval says how few it rests on


def few_clusters_notes(fit: Any) -> list[str]:
    """One line per effect whose robust interval rests on few clusters (most answers coinciding)."""
    return [f"robust interval of {e.term}: rests on about {e.robust_df + 1:,.0f} of the {fit.n_clusters:,} "
            f"{fit.cluster}s (Student's t with {e.robust_df:,.1f} df): few carry its score (few {fit.cluster}s, or "
            "most answers citing alike where it varies), so the interval is wide and its p conservative "
            "(docs/method.md)"
            for e in fit.effects if not e.robust_undefined and e.robust_df + 1 < FEW_CLUSTERS]


def robust_note(fit: Any) -> str:
    """What the second interval is."""
    return (f"robust 95% CI: cluster-robust (sandwich) by {fit.cluster}, {fit.n_clusters:,} clusters; it allows the "
            f"answers of one {fit.cluster} to be correlated (documents of unequal quality) but does not undo the "
            "attenuation of odds ratios that such differences cause; its interval and p read Student's t with as "
            f"many degrees of freedom as the {fit.cluster}s each term's variance rests on, less one (few where most "
            "answers coincide) (docs/method.md)")
