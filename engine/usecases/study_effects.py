"""The label effect in each configuration of a study, from one model across it (issue 33).

`why_cited_study(StudyEffectsRequest("grid"), db)` reads the study's citation decisions (one row per
shown document per answer, every experiment of the study), labels each document A, B or neither by
its experiment's metadata type, gives each row its configuration (the levels of the axes the study
varies: model, metadata type, cut-off, order, few-shot, XAI, the battery's axes) and fits
engine.statistics.study_model: the label effect per configuration with cluster-robust intervals by
item, the Wald tests of whether it differs between configurations, and every two configurations'
difference with Holm's correction. With `save` the per-configuration effects replace the study's
rows in the table study_label_effects (migration 021). `python -m engine why-cited --study NAME`,
the API and notebooks call this.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import UserError
from engine.types import MODES

if TYPE_CHECKING:
    import pandas as pd

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
        from engine.usecases.why_cited import _plain

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


def study_decisions(request: StudyEffectsRequest,
                    db: Path) -> tuple[pd.DataFrame, tuple[str, ...], list[str], list[tuple[str, str]]]:
    """The study's decision rows as the study model reads them (engine.statistics.study_model's
    COLUMNS, `label`, `position` and one column per axis); the experiment ids with rows; the axes to fit (those with two or more
    levels, in the grid's order) and (axis, why) for the others its grid lists. Numbers and
    categoricals only (store.queries.decision_codes): text columns held 5.9 GB at a million answers."""
    from engine.prompting.study import AXES
    from store.queries.study_effects import study_axes

    listed = study_axes(db, request.study)
    if listed is None:
        raise UserError(f"no study '{request.study}' (see `python -m engine list --studies`)")
    check_bounds(request, db)
    rows, experiment_ids = study_frame(request, db)
    # The axes are every axis of the grid with two or more levels in the answers. An axis the grid
    # lists with one level, or the answers hold one level of, is no axis: it is named; one the grid
    # does not list and the answers do not vary is left unsaid.
    from engine.statistics.study_model import varying_axes

    axes, one_level = varying_axes(rows, AXES)
    dropped = [(axis, f"one level ({', '.join(map(str, listed[axis]))}) in the study's grid: not an axis")
               if len(listed[axis]) == 1 else (axis, why) for axis, why in one_level if axis in listed]
    return rows, experiment_ids, axes, dropped


def study_frame(request: StudyEffectsRequest, db: Path) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """The study's decision rows (no bound checked) and the experiment ids with rows, in order."""
    import numpy as np
    import pandas as pd

    from engine.prompting.study import AXES
    from engine.usecases.why_cited import coded_decisions, plain_categorical
    from store.queries import label_pairs, study_experiment_ids
    from store.queries.decisions import POSITION_GROUPS, run_settings
    from store.queries.study_effects import run_grid_settings

    ids = study_experiment_ids(db, request.study)
    if ids is None:
        raise UserError(f"no study '{request.study}' (see `python -m engine list --studies`)")
    coded, items, answers = coded_decisions(db, ids, request.modes)
    got = coded.rows
    run = got["run"].astype(np.int64)
    rows = pd.DataFrame({"answer": answers, "item": items, "cited": got["cited"],
                         "relevant": got["relevant"], "position": got["position"],
                         "position_group": plain_categorical(got["position_group"], list(POSITION_GROUPS)),
                         "label": plain_categorical(got["label"], list(coded.labels))})
    # Label A or B by the experiment's metadata type (its oldest labelled run's pair).
    index = {label: i for i, label in enumerate(coded.labels)}
    side_a = np.full(len(coded.experiment_ids), -2)
    side_b = np.full(len(coded.experiment_ids), -2)
    present = np.unique(got["experiment"])
    for e in present:
        pairs = label_pairs(db, [coded.experiment_ids[e]])
        if pairs:
            side_a[e], side_b[e] = index.get(pairs[0][0], -2), index.get(pairs[0][1], -2)
    label, experiment = got["label"], got["experiment"].astype(np.int64)
    side = np.where(label == side_a[experiment], 0, np.where(label == side_b[experiment], 1, -1))
    rows["label_side"] = plain_categorical(side.astype(np.int8), ["A", "B"])
    # Each run's levels, then each row its run's. A configuration is an experiment's: its vanilla
    # answers (copied into every metadata type's experiment, with no metadata of their own) take
    # the levels of its first labelled run (in mode order, then oldest).
    used = [coded.run_ids[r] for r in np.unique(run)]
    settings, grid = run_settings(db, used), run_grid_settings(db, used)
    levels_of = {r: {a: (grid.get(r, {}).get(a, "") if a in _RUN_AXES else _level(settings[r][_ROW_AXES[a]]))
                     for a in AXES} for r in used}
    first: dict[str, str] = {}
    for r in sorted((r for r in used if settings[r]["mode"] != "vanilla"),
                    key=lambda r: (_mode_rank(settings[r]["mode"]), settings[r]["created_utc"], r)):
        first.setdefault(settings[r]["experiment_id"], r)
    for r in used:
        source = first.get(settings[r]["experiment_id"])
        if source is not None:
            levels_of[r] = levels_of[source]
    code_of_run = {r: i for i, r in enumerate(coded.run_ids)}
    for axis in AXES:
        values = list(dict.fromkeys(levels_of[r][axis] for r in used))
        per_run = np.full(len(coded.run_ids), -1, dtype=np.int32)
        for r in used:
            per_run[code_of_run[r]] = values.index(levels_of[r][axis])
        rows[axis] = plain_categorical(per_run[run], values)
    return rows, tuple(coded.experiment_ids[e] for e in present)


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
    from engine.usecases.fit_memory import check_fit_memory
    from store.queries import count_answers, study_experiment_ids

    ids = study_experiment_ids(db, request.study)
    if ids is None:
        raise UserError(f"no study '{request.study}' (see `python -m engine list --studies`)")
    n = count_answers(db, tuple(ids), request.modes)
    cli = f"run `python -m engine why-cited --study {request.study}` on the store (no bound there)"
    if request.max_answers is not None and n.answers > request.max_answers:
        raise UserError(f"study '{request.study}' holds {n.answers:,} answers, more than the "
                        f"{request.max_answers:,} fitted here; choose fewer modes, or {cli}")
    if request.max_decisions is not None and n.decisions > request.max_decisions:
        raise UserError(f"study '{request.study}': {n.answers:,} answers x their shown documents make "
                        f"{n.decisions:,} citation decisions, more than the {request.max_decisions:,} fitted here; "
                        f"choose fewer modes, or {cli}")
    check_fit_memory(request, n.answers, n.decisions, "choose fewer modes", f"study '{request.study}': ")


def why_cited_study(request: StudyEffectsRequest, db: Path) -> StudyEffectsResult:
    """Fit the study model across the study's answers; with `save`, keep its effects in the store."""
    from dataclasses import replace

    from engine.paths import require_store
    from engine.statistics.study_model import fit_study_model

    rows, experiment_ids, axes, dropped = study_decisions(request, require_store(db))
    try:
        fit = fit_study_model(rows, axes, position=request.position)
    except UserError as err:  # name the study in the one line
        raise UserError(f"study '{request.study}': {err}") from None
    fit = replace(fit, dropped_axes=tuple(dropped))
    saved = None
    if request.save:
        from store.study_effects import save_study_effects

        saved = save_study_effects(db, request.study, ",".join(request.modes) if request.modes else "all",
                                   effect_rows(fit))
    return StudyEffectsResult(request.study, experiment_ids, fit, saved)
