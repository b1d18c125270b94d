"""Experiment identity: which runs belong together, and why a command cannot join an experiment.

A run is identified by a hash of everything that determines its output: the model, the
dataset content and its configuration (prompt, prompt version, generation settings,
quantization). The runs of one experiment share all of that except the mode, so an
experiment is identified by the same hash with the mode left out: its key. Commands with the
same key join one experiment unless the user names (`--experiment`) or repeats (`--repeat`) one.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NamedTuple

from engine.types import ExperimentSpec, Mode, StoredExperiment, StoredRun

# The keys of a run's config_json that identify it (and enter its hash); the others record
# what happened (limit, skipped items, a checkpoint's dropped generation defaults).
# citation_syntax is there only when not the default ("ours"), and rerun only on a rerun, so older
# runs keep their hashes.
IDENTITY_KEYS = ("prompt", "prompt_version", "generation", "quantize", "citation_syntax", "rerun")


def config_hash(model: str, dataset_sha: str, config: dict) -> str:
    """Identity of a run's output: same inputs -> same hash -> resume instead of restart."""
    blob = json.dumps({"model": model, "dataset": dataset_sha, "config": config}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def experiment_settings(config: dict) -> dict:
    """What the runs of one experiment share: a run's identity without its mode."""
    settings = {k: config[k] for k in IDENTITY_KEYS if k in config}
    if isinstance(settings.get("prompt"), dict):
        settings["prompt"] = {k: v for k, v in settings["prompt"].items() if k != "mode"}
    return settings


def experiment_key(model: str, dataset_sha: str, settings: dict) -> str:
    """Runs with the same key belong to one experiment unless the user names or repeats one."""
    return config_hash(model, dataset_sha, {"experiment": settings})


# Settings in the order a refusal names the first difference, with the option that sets them.
_SETTING_OPTIONS = (
    (("prompt", "metadata", "name"), "--metadata"),
    (("prompt", "metadata", "label_a"), "--label-a"),
    (("prompt", "metadata", "label_b"), "--label-b"),
    (("prompt", "metadata", "consideration"), "--consideration"),
    (("prompt", "metadata", "extra_labels"), "--extra-label"),
    (("prompt", "top_k"), "--top-k"),
    (("prompt", "order"), "--order"),
    (("prompt", "few_shot"), "--few-shot"),
    (("prompt", "xai"), "--xai"),
    (("prompt", "relevant_at"), "--relevant-at"),
    (("prompt", "repetition"), "--repetition"),
    (("prompt", "label_scope"), "--label-scope"),
    (("prompt", "seed"), "--seed"),
    (("prompt_version",), "prompt version"),
    (("generation", "max_new_tokens"), "--max-new-tokens"),
    (("generation", "do_sample"), "--sample"),
    (("generation", "temperature"), "--temperature"),
    (("generation", "top_p"), "--top-p"),
    (("generation", "top_k"), "--sample-top-k"),
    (("generation", "seed"), "--seed"),
    (("generation", "top_n_logprobs"), "--top-logprobs"),
    (("quantize",), "--quantize"),
    (("citation_syntax",), "--citation-syntax"),
)


# What a setting left out of a stored config means (engine.prompting.prompts: to_dict drops these defaults).
_ABSENT: dict[tuple[str, ...], Any] = {
    ("prompt", "relevant_at"): "ranked", ("prompt", "repetition"): "none", ("prompt", "label_scope"): "all",
    ("prompt", "metadata", "extra_labels"): [], ("citation_syntax",): "ours",
}


def _lookup(tree: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        tree = tree.get(key) if isinstance(tree, dict) else None
    return _ABSENT.get(path) if tree is None else tree


def _shown(value: Any, option: str) -> str:
    if value is None:
        return "all" if option == "--top-k" else "(none)"
    if isinstance(value, bool):
        return "on" if value else "off"
    return repr(value) if isinstance(value, str) and " " in value else str(value)


class Setting(NamedTuple):
    """One setting of an experiment: its dotted path in the settings, the option that sets it,
    its value (absent ones at what their absence means) and that value as the options write it."""

    path: str
    option: str
    value: Any
    shown: str


def setting_items(settings: dict) -> tuple[Setting, ...]:
    """Every setting that tells experiments apart, in the order a refusal names them: what the
    report's tables label rows with when experiments differ in nothing they have a column for."""
    return tuple(Setting(".".join(path), option, _lookup(settings, path), _shown(_lookup(settings, path), option))
                 for path, option in _SETTING_OPTIONS)


def settings_difference(stored: dict, requested: dict) -> str | None:
    """The first setting in which two experiments differ, as 'OPTION STORED, not REQUESTED'."""
    for path, option in _SETTING_OPTIONS:
        old, new = _lookup(stored, path), _lookup(requested, path)
        if old != new:
            return f"{option} {_shown(old, option)}, not {_shown(new, option)}"
    return None if stored == requested else "other settings"


def incompatibility(stored: StoredExperiment, spec: ExperimentSpec, hashes: dict[Mode, str]) -> str | None:
    """Why the requested runs cannot join `stored`, in one line; None when they can."""
    label = f"experiment '{stored.label}'"
    if stored.model is not None and stored.model != spec.model:
        return f"{label} uses model {stored.model}, not {spec.model}"
    if stored.dataset_sha is not None and stored.dataset_sha != spec.dataset_sha:
        return (
            f"{label} uses dataset {stored.dataset} (content {stored.dataset_sha}), "
            f"not {spec.dataset} (content {spec.dataset_sha})"
        )
    references = [stored.settings] if stored.settings is not None else []
    references += [experiment_settings(r.config) for r in stored.runs if r.config.get("generation")]
    for reference in references:
        difference = settings_difference(reference, spec.settings)
        if difference:
            return f"{label} uses {difference}"
    for run in stored.runs:
        if run.rag_mode in hashes and run.config_hash != hashes[run.rag_mode]:
            return f"{label} has a {run.rag_mode} run ({run.run_id}) made with other settings"
    return None


def run_in_progress(run: StoredRun, experiment: StoredExperiment) -> str:
    """The refusal for a run that a live process is generating."""
    return (
        f"run {run.run_id} ({run.rag_mode}) of experiment {experiment.label} is being generated by "
        f"{run.owner}; wait for it to finish, then run this command again"
    )
