"""Which model a command uses: a Hub id or path as given, or the offline smoke model.

`auto` picks the paper's Mistral model when a GPU and the Hub (or a cached copy) are there,
and otherwise the smoke model, saying so: the smoke model has random weights and proves the
pipeline, not anything about attribution.
"""

from __future__ import annotations

import sys
from pathlib import Path

from engine.paths import cache_dir

DEFAULT_MODEL = "mistralai/Mistral-7B-Instruct-v0.3"
PAPER_MODELS = (
    "mistralai/Mistral-7B-Instruct-v0.3",
    "openchat/openchat-3.6-8b-20240522",
    "meta-llama/Meta-Llama-3-8B-Instruct",
)
SMOKE = "smoke"


def smoke_model_dir() -> Path:
    """Write the smoke model once into the cache and return its folder."""
    from engine.tiny_model import write_tiny_model

    path = cache_dir() / "smoke-model-llama"
    if not (path / "config.json").exists():
        write_tiny_model(path, arch="llama", seed=0)
    return path


def _hub_reachable(model_id: str) -> bool:
    """True when the model's config is cached locally or the Hub answers within seconds."""
    try:
        from huggingface_hub import model_info, try_to_load_from_cache

        if isinstance(try_to_load_from_cache(model_id, "config.json"), str):
            return True
        model_info(model_id, timeout=5)
        return True
    except Exception:  # offline, DNS failure, gated metadata: all mean "not usable now"
        return False


SMOKE_LABEL = "smoke (tiny random Llama)"


def resolve_model(name: str) -> tuple[str, str]:
    """(what to load, what to call it in the store) for a --model value, 'auto' and 'smoke' too."""
    if name == SMOKE:
        return str(smoke_model_dir()), SMOKE_LABEL
    if name != "auto":
        return name, name
    import torch

    if torch.cuda.is_available() and _hub_reachable(DEFAULT_MODEL):
        return DEFAULT_MODEL, DEFAULT_MODEL
    why = "no GPU" if not torch.cuda.is_available() else "the Hugging Face Hub is not reachable"
    print(
        f"note: {why}: using the offline smoke model (tiny, random weights; it exercises the "
        f"pipeline, its answers mean nothing). Pass --model {DEFAULT_MODEL} on a GPU machine.",
        file=sys.stderr,
    )
    return str(smoke_model_dir()), SMOKE_LABEL
