"""Which rows the report's tables show, and what tells their experiments apart (Tables 1 and 2,
the xai layout's blocks): every experiment gets its rows, and rows that the table's own columns
(model, dataset, labels) would show alike are labelled by the settings in which the experiments
shown differ (`order reversed`, `few-shot 1`), and by the experiment's name or id where that is
still not enough (two experiments of one configuration). A study's vanilla run copied from
another of the same configuration is the row of the run it copies. Pure functions over runs'
config_json (store.queries.run_settings).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from engine.running.experiment import Setting, experiment_settings, setting_items

# The metadata type's settings: the tables show its labels in their own columns.
_METADATA = "prompt.metadata"


# A run's configuration: its settings, as `configuration` gives them.
Configuration = tuple[Setting, ...]


def configuration(config: Mapping[str, Any] | None) -> Configuration:
    """A run's settings without its mode and metadata type (the configuration a study varies,
    and generation settings), absent ones at what their absence means."""
    settings = experiment_settings(dict(config or {}))
    # Worked out once per distinct configuration: a store's runs share a few, and the whole-store
    # report asks twice per run (0.1 ms each: 20 ms of `report` at 100 runs). Configs
    # are config_json parsed, so their JSON text names them; the Settings are never changed.
    try:
        text = json.dumps(settings, sort_keys=True)
    except TypeError:  # not from JSON: worked out as it is
        return _configuration(settings)
    return _configuration_of(text)


def configurations(settings: Mapping[str, Any]) -> dict[str, Configuration]:
    """Each run's configuration, by run id, from store.queries.run_settings' records: worked out
    once for both of the report's tables (each table's own pass took ~13 ms at 1,000 runs)."""
    return {run_id: configuration(found.config) for run_id, found in settings.items()}


@functools.lru_cache(maxsize=1024)
def _configuration_of(text: str) -> Configuration:
    return _configuration(json.loads(text))


def _configuration(settings: dict[str, Any]) -> Configuration:
    return tuple(s for s in setting_items(settings) if not s.path.startswith(_METADATA))


def configuration_fields(settings: tuple[Setting, ...]) -> dict[str, Any]:
    """A configuration as JSON fields: {dotted path: value}."""
    return {s.path: s.value for s in settings}


def differing(configurations: Iterable[tuple[Setting, ...]]) -> tuple[str, ...]:
    """The paths of the settings whose values are not the same in all these configurations."""
    values = [{s.path: s.shown for s in c} for c in configurations]
    paths = list(dict.fromkeys(p for v in values for p in v))
    return tuple(p for p in paths if len({v.get(p) for v in values}) > 1)


def setting_label(settings: tuple[Setting, ...], paths: tuple[str, ...]) -> str:
    """The settings at these paths as options write them ("order reversed, few-shot 1"); "" for none.
    (The prompt's and the generation's seed are both --seed: written once when equal.)"""
    return ", ".join(dict.fromkeys(f"{s.option.lstrip('-')} {s.shown}" for s in settings if s.path in paths))


def experiment_label(name: Any, experiment_id: str) -> str:
    """An experiment as a row label names it: `run --experiment NAME`'s name, else its id."""
    return f"experiment {name if isinstance(name, str) and name else experiment_id}"


def with_label(setting: str, extra: str) -> str:
    return f"{setting}, {extra}" if setting else extra


def label_collisions(rows: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any],
                     extras: Iterable[Callable[[dict[str, Any]], str]]) -> None:
    """Where rows share key(row) (they would print alike), add to their "setting" the first of
    `extras` that tells them apart, trying the next ones while some still share a key."""
    for extra in extras:
        seen: dict[Any, int] = {}
        for row in rows:
            seen[key(row)] = seen.get(key(row), 0) + 1
        alike = [row for row in rows if seen[key(row)] > 1]
        if not alike:
            return
        for row in alike:
            label = extra(row)
            if label not in row["setting"].split(", "):
                row["setting"] = with_label(row["setting"], label)


def run_config(settings: Mapping[str, Any], run_id: str) -> dict[str, Any]:
    """A run's config_json from store.queries.run_settings' records; {} when not there."""
    found = settings.get(run_id)
    return found.config if found is not None else {}


def run_experiment(settings: Mapping[str, Any], run_id: str, experiment_id: str) -> str:
    """experiment_label of a run's experiment."""
    found = settings.get(run_id)
    return experiment_label(found.experiment_name if found is not None else None, experiment_id)


def shared_vanilla(records: list[dict[str, Any]], settings: Mapping[str, Any],
                   conf: dict[str, tuple]) -> dict[str, str]:
    """vanilla run -> the shown vanilla run whose answers it copies (a study's shared vanilla,
    config `shared_from`, followed to the run that generated them), where both have the same
    model, dataset and configuration: the vanilla prompt does not depend on the metadata type."""
    by_id = {r["run_id"]: r for r in records}
    out = {}
    for rec in records:
        if rec["rag_mode"] != "vanilla":
            continue
        run_id, seen = rec["run_id"], {rec["run_id"]}
        while True:
            source = run_config(settings, run_id).get("shared_from")
            if not isinstance(source, str) or source in seen:
                break
            src = by_id.get(source)
            if src is None or src["rag_mode"] != "vanilla" or conf[source] != conf[rec["run_id"]] or (
                    src["model"], src["dataset_sha"]) != (rec["model"], rec["dataset_sha"]):
                break
            run_id = source
            seen.add(source)
        if run_id != rec["run_id"]:
            out[rec["run_id"]] = run_id
    return out
