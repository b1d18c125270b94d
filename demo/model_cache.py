"""The worker's loaded model (demo.jobs): kept for the next job with the same model settings, freed
before another is loaded, so that two 7-8B models never sit in one GPU's memory at once."""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class _ModelKey:
    model: str
    quantize: str
    device: str
    dtype: str
    # Whose access loaded it: a digest of the typed token, "environment" or "none". A model a
    # visitor's token opened is not handed to a later job without that token.
    access: str


class ModelCache:
    """Keeps the last loaded model; loading another frees it first."""

    def __init__(self, load: Callable[[Any], Any]):
        self._load = load
        self._key: _ModelKey | None = None
        self._model: Any = None

    def get(self, request: Any) -> Any:
        """The model the request names, loaded now or kept from the previous job."""
        key = _ModelKey(request.model, request.quantize, request.device, request.dtype, _access(request))
        if key != self._key:
            self.clear()
            self._model = self._load(request)
            self._key = key
        return self._model

    @property
    def loaded(self) -> str | None:
        """The model id held now, if any."""
        return self._key.model if self._key else None

    def clear(self) -> None:
        """Drop the held model and give its memory back (the GPU's too)."""
        self._model, self._key = None, None
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass



def _access(request: Any) -> str:
    """How a request's model is reached on the Hub, without keeping the token itself."""
    token = getattr(request, "hf_token", None)
    if token:
        return "token:" + hashlib.sha256(token.encode()).hexdigest()
    return "environment" if getattr(request, "environment_token", True) else "none"
