"""Which model a command uses: a Hub id or path as given, or what `auto` settles on.

`auto` picks a real instruct model whenever one can be had, because a first run on a random
model tells the user nothing:
- on a GPU, the paper's Mistral-7B-Instruct-v0.3 (in 4-bit);
- on a CPU, Qwen2.5-0.5B-Instruct (Apache-2.0, ~1 GB, a few seconds per answer on a laptop);
- only where neither is cached and the Hugging Face Hub cannot be reached, the offline smoke
  model, saying so: it has random weights and proves the pipeline, not anything about
  attribution.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from engine.generation.tiny_model import write_tiny_model
from engine.paths import cache_dir

DEFAULT_MODEL = "mistralai/Mistral-7B-Instruct-v0.3"
CPU_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
PAPER_MODELS = (
    "mistralai/Mistral-7B-Instruct-v0.3",
    "openchat/openchat-3.6-8b-20240522",
    "meta-llama/Meta-Llama-3-8B-Instruct",
)
SMOKE = "smoke"
SMOKE_LABEL = "smoke (tiny random Llama)"
SMOKE_DIR_NAME = "smoke-model-llama"  # under cache_dir(); written by smoke_model_dir()
# The smoke model's random weights never emit a stop token, so every answer runs to the limit:
# 48 tokens prove the pipeline (prompt, generation, log-probs, store) in seconds, where the
# real models' 256 took minutes for the README's five items.
SMOKE_MAX_NEW_TOKENS = 48
REAL_MAX_NEW_TOKENS = 256


@dataclass(frozen=True)
class ModelChoice:
    """What `--model auto` settled on, and one line saying why."""

    name: str  # a Hub id, or SMOKE
    why: str


def smoke_model_dir() -> Path:
    """Write the smoke model once into the cache and return its folder."""
    path = cache_dir() / SMOKE_DIR_NAME
    if not (path / "config.json").exists():
        # Written beside it and renamed into place: a second process (the app and a CLI run, two
        # test workers) never loads a folder whose config exists but whose weights do not yet.
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{SMOKE_DIR_NAME}-", dir=path.parent))
        try:
            write_tiny_model(staging, arch="llama", seed=0)
            if path.exists() and not (path / "config.json").exists():
                shutil.rmtree(path, ignore_errors=True)  # a partial folder left by an older version
            try:
                os.rename(staging, path)
            except OSError:  # another process renamed its copy first (or an old partial folder)
                if not (path / "config.json").exists():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return path


def hub_model_available(model_id: str, hub_cache: str | os.PathLike[str] | None = None) -> bool:
    """True when the model's config is in the local Hub cache or the Hub answers within seconds."""
    try:
        from huggingface_hub import model_info, try_to_load_from_cache

        if isinstance(try_to_load_from_cache(model_id, "config.json",
                                             cache_dir=None if hub_cache is None else os.fspath(hub_cache)), str):
            return True
        model_info(model_id, timeout=5)
        return True
    except Exception:  # offline, DNS failure, offline mode, gated metadata: all mean "not usable now"
        return False


def choose_auto_model(gpu: bool | None = None, hub_cache: str | os.PathLike[str] | None = None) -> ModelChoice:
    """The model `--model auto` uses here: Mistral on a GPU, Qwen2.5-0.5B on CPU, smoke offline."""
    if gpu is None:
        import torch

        gpu = torch.cuda.is_available()
    if gpu and hub_model_available(DEFAULT_MODEL, hub_cache):
        return ModelChoice(DEFAULT_MODEL, f"using {DEFAULT_MODEL} (4-bit on the GPU)")
    if hub_model_available(CPU_MODEL, hub_cache):
        where = "the Hub has no answer for Mistral" if gpu else "no GPU"
        return ModelChoice(
            CPU_MODEL, f"{where}: using {CPU_MODEL}, a small real instruct model that runs on a CPU"
        )
    return ModelChoice(
        SMOKE,
        "the Hugging Face Hub is not reachable and no real model is cached: using the offline smoke "
        "model (tiny, random weights: its answers are random text and its scores mean nothing). "
        f"With network access, auto uses {CPU_MODEL} on CPU or {DEFAULT_MODEL} on a GPU.",
    )


def resolve_model(name: str) -> tuple[str, str]:
    """(what to load, what to call it in the store) for a --model value, 'auto' and 'smoke' too."""
    if name == "auto":
        choice = choose_auto_model()
        print(f"note: {choice.why}", file=sys.stderr)
        name = choice.name
    if name == SMOKE:
        return str(smoke_model_dir()), SMOKE_LABEL
    return name, name
