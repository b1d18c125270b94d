"""Bounds on an NLI judge's config.json, read as plain JSON before transformers reads it.

Why: a model folder (or Hub repo) is anybody's. transformers builds `id2label` from `num_labels`
as one dict entry per label, so a config with `num_labels` 10^8 took gigabytes and minutes inside
`AutoConfig.from_pretrained`, before any check of ours could run; sizes such as `hidden_size` or
`vocab_size` decide how much memory the weights are given; and each label name is written into
every verdict's `raw_output`. So the file itself is read first, bounded, and refused in one line
naming the folder and the field. Real NLI models have 2 or 3 labels of a word each and at most a
billion or two parameters (DeBERTa-v2-xxlarge: 1.5 billion).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import UserError, quoted

MAX_CONFIG_BYTES = 1_000_000  # a real config.json is a few KB
MAX_LABELS = 16  # num_labels, id2label and label2id entries
MAX_LABEL_CHARS = 64  # one label name, stored in every verdict
MAX_PARAMETERS = 2_000_000_000  # estimated from the config's sizes (8 GB in float32)

# The sizes a BERT-like encoder's weights are made of (DeBERTa's relative positions too).
_SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "max_position_embeddings",
          "type_vocab_size", "num_attention_heads", "position_buckets", "max_relative_positions", "embedding_size")
# DeBERTa's -1: no buckets, or as many relative positions as max_position_embeddings.
_UNSET_AT_MINUS_ONE = frozenset({"position_buckets", "max_relative_positions"})


@dataclass(frozen=True)
class ConfigBounds:
    """What an NLI config may hold (the defaults above)."""

    max_bytes: int = MAX_CONFIG_BYTES
    max_labels: int = MAX_LABELS
    max_label_chars: int = MAX_LABEL_CHARS
    max_parameters: int = MAX_PARAMETERS


def config_path(model: str, token: str | None) -> Path:
    """The judge's config.json: in its folder, or from the Hub's cache (downloaded when missing)."""
    folder = Path(model)
    if folder.is_dir():
        return folder / "config.json"
    from transformers.utils import cached_file

    found = cached_file(model, "config.json", token=token)
    if found is None:
        raise OSError(f"{model} has no config.json")
    return Path(found)


def read_config(model: str, path: Path, bounds: ConfigBounds = ConfigBounds()) -> dict[str, Any]:
    """config.json as a dict once its size, labels and parameter count are within `bounds`;
    UserError naming `model` and the field otherwise."""
    def refuse(what: str) -> UserError:
        return UserError(f"NLI judge {model}: config.json {what}")

    size = path.stat().st_size
    if size > bounds.max_bytes:
        raise refuse(f"is {size:,} bytes (at most {bounds.max_bytes:,})")
    try:
        config = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as error:
        raise refuse(f"is not JSON ({str(error).splitlines()[0]})") from None
    if not isinstance(config, dict):
        raise refuse("is not a JSON object")
    check_labels(config, refuse, bounds)
    check_sizes(config, refuse, bounds)
    return config


def check_labels(config: Mapping[str, Any], refuse: Any, bounds: ConfigBounds) -> None:
    """num_labels, id2label and label2id: few labels, each name short."""
    n = config.get("num_labels")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= bounds.max_labels):
        shown = f"{n:,}" if isinstance(n, int) and not isinstance(n, bool) else quoted(n)
        raise refuse(f"sets num_labels to {shown} (at most {bounds.max_labels})")
    for field in ("id2label", "label2id"):
        table = config.get(field)
        if table is None:
            continue
        if not isinstance(table, dict):
            raise refuse(f"sets {field} to a {type(table).__name__}, not an object")
        if len(table) > bounds.max_labels:
            raise refuse(f"holds {len(table):,} labels in {field} (at most {bounds.max_labels})")
        names = table.values() if field == "id2label" else table.keys()
        for name in names:
            if not isinstance(name, str):
                raise refuse(f"holds a label that is not text in {field}: {quoted(name)}")
            if len(name) > bounds.max_label_chars:
                raise refuse(f"holds a label of {len(name):,} characters in {field} "
                             f"(at most {bounds.max_label_chars}): {quoted(name, 40)}")


def check_sizes(config: Mapping[str, Any], refuse: Any, bounds: ConfigBounds) -> None:
    """Every size a whole number from 0, and the parameters they give within the budget."""
    sizes: dict[str, int] = {}
    for field in _SIZES:
        value = config.get(field)
        if value is None:
            continue
        lowest = -1 if field in _UNSET_AT_MINUS_ONE else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
            raise refuse(f"sets {field} to {quoted(value)}, not a whole number from {lowest}")
        sizes[field] = max(value, 0)
    estimate = parameters(sizes)
    if estimate > bounds.max_parameters:
        largest = max(sizes, key=lambda f: sizes[f])
        raise refuse(f"sizes give about {estimate:,} parameters (at most {bounds.max_parameters:,}; "
                     f"its largest size is {largest} {sizes[largest]:,})")


def parameters(sizes: Mapping[str, int]) -> int:
    """About how many weights an encoder of these sizes has: embeddings (words, positions, token
    types, relative positions), then per layer attention (4 h^2) and the feed-forward block (2 h i)."""
    h = sizes.get("hidden_size", 0)
    e = sizes.get("embedding_size", h) or h
    positions = sizes.get("max_position_embeddings", 0) + sizes.get("type_vocab_size", 0)
    # Relative positions (DeBERTa): the buckets, else max_relative_positions, else the positions;
    # counted for every config, an over-estimate by at most 2 x positions x hidden_size.
    relative = 2 * (sizes.get("position_buckets") or sizes.get("max_relative_positions")
                    or sizes.get("max_position_embeddings", 0))
    per_layer = 4 * h * h + 2 * h * sizes.get("intermediate_size", 4 * h)
    return sizes.get("vocab_size", 0) * e + (positions + relative) * h + sizes.get("num_hidden_layers", 0) * per_layer
