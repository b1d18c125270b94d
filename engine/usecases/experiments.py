"""The one line that names an experiment a store does not hold, and the experiments it does: every
use case that reads an experiment refuses an unknown one in these words."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def unknown_experiment(path: Path, experiment_id: str) -> str:
    """The one-line message for an experiment id that is not in the store, naming known ones."""
    from store.queries import newest_experiments

    total, newest = newest_experiments(path, limit=3)
    if not total:
        return f"no experiment '{experiment_id}' in {path}: it holds no runs yet (start with `python -m engine run`)"
    shown = "; ".join(_shown_experiment(e) for e in newest)
    more = f" (all {total}: python -m engine list)" if total > len(newest) else ""
    return f"no experiment '{experiment_id}' in {path}; newest: {shown}{more}"


def _shown_experiment(e: Any) -> str:
    """'ID 'NAME' (model, type, modes)': users name experiments (`run --experiment NAME`) and
    remember the name, not the id; either works with --experiment."""
    named = f" '{e.name}'" if e.name and e.name != e.experiment_id else ""
    return f"{e.experiment_id}{named} ({e.model}, {e.metadata_type or 'no metadata type'}, {'+'.join(e.modes)})"
