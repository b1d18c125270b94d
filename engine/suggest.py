"""'Did you mean …?' for a mistyped name: the one helper every message that names a choice uses
(models, metadata types), kept in the ground layer so that core modules can use it without
importing the model-loading code."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """'; did you mean X?' for the closest candidate, or '' when none is close.

    Compared without case, and also by the part after the organisation ('Mistral-7B-Instruct'
    finds mistralai/Mistral-7B-Instruct-v0.3)."""
    keys: dict[str, str] = {}
    for candidate in candidates:
        if candidate == name:
            continue  # the name itself is known; it cannot load for another reason
        keys.setdefault(candidate.lower(), candidate)
        keys.setdefault(candidate.rsplit("/", 1)[-1].lower(), candidate)
    match = difflib.get_close_matches(name.lower(), list(keys), n=1, cutoff=0.6)
    return f"; did you mean {keys[match[0]]}?" if match else ""
