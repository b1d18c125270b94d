"""Studies (migration 009): grids run by one `run` command with comma lists, and the prompt
settings they vary."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from store.db import DbLike
from store.queries._read import Readable, fetch, fetch_frame, reading

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class StudySummary:
    """One study: a grid run by one `run` command with comma lists."""

    name: str
    n_experiments: int
    axes: dict
    created_utc: Any


def study_listing(db: DbLike) -> tuple[StudySummary, ...]:
    """Every study, newest first, with how many experiments it groups."""
    return fetch(
        db,
        "SELECT s.name, count(e.experiment_id), s.axes_json, s.created_utc "
        "FROM studies s LEFT JOIN study_experiments e ON e.study = s.name "
        "GROUP BY ALL ORDER BY s.created_utc DESC, s.name",
        into=lambda name, n, axes, created: StudySummary(name, n, json.loads(axes) if axes else {}, created),
    )


def study_experiment_ids(db: Readable, study: str) -> list[str] | None:
    """The experiments of a study in grid order; None when there is no such study."""
    with reading(db) as conn:
        if conn.execute("SELECT 1 FROM studies WHERE name = ?", [study]).fetchone() is None:
            return None
        return [row[0] for row in conn.execute(
            "SELECT experiment_id FROM study_experiments WHERE study = ? ORDER BY position, experiment_id", [study]
        ).fetchall()]


def experiment_studies(db: Readable, experiment_ids: list[str] | tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """experiment id -> the studies it belongs to (one experiment can be in several grids),
    oldest study first; experiments in no study are left out."""
    if not experiment_ids:
        return {}
    return dict(fetch(
        db,
        "SELECT e.experiment_id, list(s.name ORDER BY s.created_utc, s.name) "
        "FROM study_experiments e JOIN studies s ON s.name = e.study "
        "WHERE list_contains($ids, e.experiment_id) GROUP BY e.experiment_id",
        {"ids": list(experiment_ids)},
        into=lambda experiment_id, names: (experiment_id, tuple(names)),
    ))


def run_prompt_settings(db: DbLike, run_ids: list[str]) -> pd.DataFrame:
    """Per run: the prompt axes a study varies (top_k, order, few_shot, xai), from config_json,
    and the run its answers were copied from (shared_from; NULL when generated)."""
    return fetch_frame(
        db,
        "SELECT run_id, "
        "TRY_CAST(json_extract(config_json, '$.prompt.top_k') AS INTEGER) AS top_k, "
        "coalesce(json_extract_string(config_json, '$.prompt.order'), 'ranked') AS \"order\", "
        "coalesce(TRY_CAST(json_extract(config_json, '$.prompt.few_shot') AS INTEGER), 0) AS few_shot, "
        "coalesce(json_extract_string(config_json, '$.prompt.xai'), 'none') AS xai, "
        "json_extract_string(config_json, '$.shared_from') AS shared_from "
        "FROM runs WHERE list_contains(?, run_id) ORDER BY run_id",
        [list(run_ids)],
    )
