"""Provenance: how the generating model was loaded and which libraries computed, as runs record it.

Recorded with every run, never hashed (engine.running.runner._run_spec); computed once per process.
"""

from __future__ import annotations

import functools
import platform
import subprocess
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any


@functools.lru_cache(maxsize=1)
def _library_versions() -> tuple[tuple[str, str], ...]:
    return tuple(_collect_library_versions().items())


def library_versions() -> dict[str, str]:
    """Versions of what shapes the numbers, for provenance (read once per process)."""
    return dict(_library_versions())


def _collect_library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in ("torch", "transformers", "accelerate", "bitsandbytes", "tokenizers", "duckdb"):
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            pass
    return versions


@functools.lru_cache(maxsize=1)
def git_sha() -> str | None:
    """The commit of this checkout, when it is one."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


@dataclass(frozen=True)
class Provenance:
    """How the generating model was loaded, as the runs record it (never hashed)."""

    revision: str | None
    quantization: str
    dtype: str
    device: str  # "cpu", "cuda:0", or for Ray e.g. "ray:cuda×4"
    dropped_generation_defaults: tuple[tuple[str, str], ...] = ()
    library_versions: tuple[tuple[str, str], ...] = ()
    threads: int | None = None  # torch intra-op threads every batch computed with (engine.generation.threads)

    @classmethod
    def of_loaded(cls, loaded: Any, request: Any, threads: int | None = None) -> Provenance:
        """A model loaded in this process; the request's settings stand in for what it lacks."""
        return cls(
            revision=getattr(loaded, "revision", None),
            quantization=getattr(loaded, "quantization", request.quantize),
            dtype=getattr(loaded, "dtype", request.dtype),
            device=getattr(loaded, "device", request.device),
            dropped_generation_defaults=tuple(getattr(loaded, "dropped_generation_defaults", ()) or ()),
            library_versions=tuple(library_versions().items()),
            threads=threads,
        )
