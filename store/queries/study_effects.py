"""What the study model (engine.usecases.study.effects) reads besides the decision rows: the axes
a study lists (migration 009) and, per run, the prompt settings a grid varies."""

from __future__ import annotations

import json

from store.db import DbLike
from store.queries._read import fetch


def study_axes(db: DbLike, study: str) -> dict[str, list] | None:
    """The lists the study's grid was run with ({axis: [levels]}); None when there is no such study."""
    rows = fetch(db, "SELECT axes_json FROM studies WHERE name = ?", [study])
    if not rows:
        return None
    return json.loads(rows[0][0]) if rows[0][0] else {}


def run_grid_settings(db: DbLike, run_ids: list[str]) -> dict[str, dict[str, str]]:
    """Per run: the prompt axes a grid varies besides model, metadata and the battery (top_k, order,
    few_shot, xai), as text, with the defaults a run without them had."""
    rows = fetch(
        db,
        "SELECT run_id, "
        "coalesce(CAST(TRY_CAST(json_extract(config_json, '$.prompt.top_k') AS INTEGER) AS VARCHAR), 'all'), "
        "coalesce(json_extract_string(config_json, '$.prompt.order'), 'ranked'), "
        "CAST(coalesce(TRY_CAST(json_extract(config_json, '$.prompt.few_shot') AS INTEGER), 0) AS VARCHAR), "
        "coalesce(json_extract_string(config_json, '$.prompt.xai'), 'none') "
        "FROM runs WHERE list_contains(?, run_id)",
        [list(run_ids)],
    )
    return {r[0]: {"top_k": r[1], "order": r[2], "few_shot": r[3], "xai": r[4]} for r in rows}
