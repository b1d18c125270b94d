"""The label effect in each configuration of a study, from one model across it.

`why_cited_study(StudyEffectsRequest("grid"), db)` reads the study's citation decisions (one row per
shown document per answer, every experiment of the study) a chunk of runs at a time, labels each
document A, B or neither by its experiment's metadata type, folds the answers into patterns
(engine.statistics.study_answers), gives each run its configuration (the levels of the axes the
study varies: model, metadata type, cut-off, order, few-shot, XAI, the battery's axes) and fits
engine.statistics.study_model: the label effect per configuration with cluster-robust intervals by
item, the Wald tests of whether it differs between configurations, and every two configurations'
difference with Holm's correction. With `save` the per-configuration effects replace the study's
rows in the table study_label_effects (migration 021). `python -m engine why-cited --study NAME`,
the API and notebooks call this.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import UserError, WordedError
from engine.paths import require_store
from engine.prompting.study import AXES
from engine.types import MODES
from engine.usecases.bias import why_cited
from engine.usecases.bias.fit_memory import check_fit_memory
from engine.usecases.bias.why_cited import _plain, chunk_codes

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from engine.statistics.study_answers import StudyAnswers
    from engine.statistics.study_model import StudyModelFit

# The run settings (store.queries.decisions.run_settings) of each axis the study model can read
# (engine.prompting.study.AXES' names), and the axes store.queries.run_grid_settings reads.
_ROW_AXES = {"model": "model", "metadata": "metadata_type", "relevant_at": "relevant_at",
             "repetition": "repetition", "label_scope": "label_scope"}
_RUN_AXES = ("top_k", "order", "few_shot", "xai")


@dataclass(frozen=True)
class StudyEffectsRequest:
    """The study (by name), the modes (None: all), position as first/middle/last ("group") or a
    number, whether to keep the effects in the store, and the bounds of why_cited's request."""

    study: str
    modes: tuple[str, ...] | None = None
    position: str = "group"
    save: bool = False
    max_answers: int | None = None
    max_decisions: int | None = None
    memory_check: bool = True  # as why_cited's: a fit the memory available now cannot hold is refused

    def __post_init__(self) -> None:
        if self.position not in ("group", "number"):
            raise UserError(f"position must be group or number, not '{self.position}'")
        for mode in self.modes or ():
            if mode not in MODES:
                raise UserError(f"unknown mode '{mode}' (choose from {', '.join(MODES)})")


@dataclass(frozen=True)
class StudyEffectsResult:
    """The fitted study model and what it was fitted on."""

    study: str
    experiment_ids: tuple[str, ...]
    fit: StudyModelFit
    saved: int | None = None  # rows written to study_label_effects (None: not saved)

    def effects(self) -> pd.DataFrame:
        """One row per configuration: its label effect (log odds and odds ratio) with 95% intervals."""
        import pandas as pd

        return pd.DataFrame(effect_rows(self.fit))

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form (what `why-cited --study NAME --json` prints)."""
        return {"study": self.study, "experiments": list(self.experiment_ids), "saved": self.saved,
                "configurations": _plain(effect_rows(self.fit)),
                "fit": _plain({k: v for k, v in asdict(self.fit).items() if k != "configurations"})}


def effect_rows(fit: StudyModelFit) -> list[dict[str, Any]]:
    """The per-configuration effects as plain rows (study_label_effects' columns)."""
    test = fit.interaction
    return [{"configuration": e.configuration, "configuration_json": dict(e.levels), "label_a": e.label_a,
             "label_b": e.label_b, "n_answers": e.n_answers, "n_items": e.n_items, "log_odds": e.log_odds,
             "se": e.se, "ci_low": e.ci_low, "ci_high": e.ci_high, "odds_ratio": e.odds_ratio, "or_low": e.or_low,
             "or_high": e.or_high, "p": e.p, "interaction_chi2": test.chi2 if test else None,
             "interaction_df": test.df if test else None, "interaction_p": test.p if test else None}
            for e in fit.configurations]


def study_answers(request: StudyEffectsRequest,
                  db: Path) -> tuple[StudyAnswers, tuple[str, ...], list[str], list[tuple[str, str]]]:
    """The study's answers as the study model reads them (engine.statistics.study_answers), the
    experiment ids with rows, the axes to fit (those with two or more levels, in the grid's order)
    and (axis, why) for the others its grid lists. Read a chunk of runs at a time: a study's
    decision rows are never held at once."""
    from engine.statistics.study_model import varying_axes
    from store.queries.study_effects import study_axes

    listed = study_axes(db, request.study)
    if listed is None:
        raise WordedError("no study '{study}' ({see_studies})", study=request.study)
    check_bounds(request, db)
    answers, experiment_ids = read_study_answers(request, db)
    # The axes are every axis of the grid with two or more levels in the answers. An axis the grid
    # lists with one level, or the answers hold one level of, is no axis: it is named; one the grid
    # does not list and the answers do not vary is left unsaid.
    axes, one_level = varying_axes(answers)
    dropped = [(axis, f"one level ({', '.join(map(str, listed[axis]))}) in the study's grid: not an axis")
               if len(listed[axis]) == 1 else (axis, why) for axis, why in one_level if axis in listed]
    return answers, experiment_ids, axes, dropped


def read_study_answers(request: StudyEffectsRequest, db: Path,
                       chunk_decisions: int | None = None) -> tuple[StudyAnswers, tuple[str, ...]]:
    """The study's answers (no bound checked), read a chunk of runs at a time
    (store.queries.decisions.decision_code_chunks; chunk_decisions rows a chunk, None:
    why_cited.CHUNK_DECISIONS), and the experiment ids with rows, in order. Each answer's group is
    its run; each run's configuration is found once every chunk is in."""
    import numpy as np

    from engine.statistics.choice_patterns import PatternBuilder
    from engine.statistics.study_answers import STUDY_COLUMNS, StudyAnswers, label_rows
    from store.queries import label_pairs, study_experiment_ids
    from store.queries.decisions import decision_code_chunks

    ids = study_experiment_ids(db, request.study)
    if ids is None:
        raise WordedError("no study '{study}' ({see_studies})", study=request.study)
    builder = PatternBuilder(STUDY_COLUMNS)
    labels: dict[str, int] = {}
    side_a = np.full(len(ids), -2)  # per experiment code, label A's and B's codes (-2: not known yet, or none)
    side_b = np.full(len(ids), -2)
    asked: set[int] = set()
    seen: dict[int, None] = {}  # run codes in the order their rows come
    tallies: list[tuple[np.ndarray, np.ndarray]] = []
    run_ids: tuple[str, ...] = ()
    item_ids: tuple[str, ...] = ()
    for coded in decision_code_chunks(db, ids, request.modes, max_rows=chunk_decisions or why_cited.CHUNK_DECISIONS):
        run_ids, item_ids, got = coded.run_ids, coded.item_ids, coded.rows
        if not len(coded):
            continue
        label, items, answer = chunk_codes(coded, labels)
        experiment = got["experiment"].astype(np.int64)
        for e in (int(e) for e in np.unique(experiment) if e not in asked):
            # Label A or B by the experiment's metadata type (its oldest labelled run's pair).
            asked.add(e)
            pairs = label_pairs(db, [coded.experiment_ids[e]])
            if pairs:
                side_a[e], side_b[e] = labels.setdefault(pairs[0][0], len(labels)), labels.setdefault(pairs[0][1],
                                                                                                       len(labels))
        side = np.where(label == side_a[experiment], 0, np.where(label == side_b[experiment], 1, -1))
        run = got["run"].astype(np.int64)
        raw = np.column_stack([got["relevant"], got["position"], got["position_group"], side]).astype(float)
        builder.add(answer, got["cited"], raw, items, run)
        runs, first = np.unique(run, return_index=True)
        seen.update(dict.fromkeys(int(r) for r in runs[np.argsort(first)]))
        # Rows per (run, side: 0 A, 1 B, 2 neither, label + 1), for the labels each configuration shows.
        key = (run * 3 + np.where(side < 0, 2, side)) * 2**24 + (label + 1)
        found, count = np.unique(key, return_counts=True)
        tallies.append((found, count))
    if not seen:
        modes = f" in mode {', '.join(request.modes)}" if request.modes else ""
        raise UserError(f"no stored answers{modes} in study '{request.study}'")
    configuration, levels = _configurations(db, run_ids, list(seen))
    keys, counts = np.concatenate([k for k, _ in tallies]), np.concatenate([c for _, c in tallies])
    rows = label_rows(keys // 2**24 // 3, keys // 2**24 % 3, keys % 2**24 - 1, len(run_ids), len(labels), counts)
    return (StudyAnswers(builder.patterns(), configuration, levels, tuple(labels), rows, item_ids),
            tuple(ids[e] for e in sorted(asked)))


def _configurations(db: Path, run_ids: tuple[str, ...],
                    used: list[int]) -> tuple[np.ndarray, tuple[tuple[tuple[str, str], ...], ...]]:
    """Each run code's configuration (-1: a run without rows) and each configuration's (axis,
    level) over every axis, in the order the runs' rows come. A configuration is an experiment's:
    its vanilla answers (copied into every metadata type's experiment, with no metadata of their
    own) take the levels of its first labelled run (in mode order, then oldest)."""
    import numpy as np

    from store.queries.decisions import run_settings
    from store.queries.study_effects import run_grid_settings

    runs = [run_ids[r] for r in used]
    settings, grid = run_settings(db, runs), run_grid_settings(db, runs)
    levels_of = {r: tuple((a, grid.get(r, {}).get(a, "") if a in _RUN_AXES else _level(settings[r][_ROW_AXES[a]]))
                          for a in AXES) for r in runs}
    first: dict[str, str] = {}
    for r in sorted((r for r in runs if settings[r]["mode"] != "vanilla"),
                    key=lambda r: (_mode_rank(settings[r]["mode"]), settings[r]["created_utc"], r)):
        first.setdefault(settings[r]["experiment_id"], r)
    index: dict[tuple[tuple[str, str], ...], int] = {}
    configuration = np.full(len(run_ids), -1, dtype=np.int64)
    for code, r in zip(used, runs, strict=True):
        source = first.get(settings[r]["experiment_id"], r)
        configuration[code] = index.setdefault(levels_of[source], len(index))
    return configuration, tuple(index)


def _level(value: Any) -> str:
    """A row axis's level as the model reads it: text, "default" where the run has none."""
    return "default" if value is None else str(value)


def _mode_rank(mode: str) -> int:
    return MODES.index(mode) if mode in MODES else len(MODES)


def check_bounds(request: StudyEffectsRequest, db: Path) -> None:
    """Refuse in one line, from a count and before a decision row is read, a study past the
    request's bounds (the app's), pointing at the command that has none, or past the memory
    available now."""
    if request.max_answers is None and request.max_decisions is None and not request.memory_check:
        return
    from store.queries import count_answers, study_experiment_ids

    ids = study_experiment_ids(db, request.study)
    if ids is None:
        raise WordedError("no study '{study}' ({see_studies})", study=request.study)
    n = count_answers(db, tuple(ids), request.modes)
    if request.max_answers is not None and n.answers > request.max_answers:
        raise WordedError("study '{study}' holds {answers} answers, more than the {most} fitted here; choose fewer "
                          "modes, or {fit_study_on_the_store}", study=request.study, answers=f"{n.answers:,}",
                          most=f"{request.max_answers:,}")
    if request.max_decisions is not None and n.decisions > request.max_decisions:
        raise WordedError("study '{study}': {answers} answers x their shown documents make {decisions} citation "
                          "decisions, more than the {most} fitted here; choose fewer modes, or {fit_study_on_the_store}",
                          study=request.study, answers=f"{n.answers:,}", decisions=f"{n.decisions:,}",
                          most=f"{request.max_decisions:,}")
    check_fit_memory(request, n.answers, n.decisions, "choose fewer modes", f"study '{request.study}': ")


def why_cited_study(request: StudyEffectsRequest, db: Path) -> StudyEffectsResult:
    """Fit the study model across the study's answers; with `save`, keep its effects in the store."""
    from engine.statistics.study_model import fit_study_answers

    answers, experiment_ids, _, dropped = study_answers(request, require_store(db))
    try:
        fit = fit_study_answers(answers, position=request.position)
    except UserError as err:  # name the study in the one line
        raise UserError(f"study '{request.study}': {err}") from None
    fit = replace(fit, dropped_axes=tuple(dropped))
    saved = None
    if request.save:
        from store.study_effects import save_study_effects

        saved = save_study_effects(db, request.study, ",".join(request.modes) if request.modes else "all",
                                   effect_rows(fit))
    return StudyEffectsResult(request.study, experiment_ids, fit, saved)
