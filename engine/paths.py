"""Where things live by default: the database, the cache and the bundled sample dataset.

On a Hugging Face Space, /data is the persistent volume; everything goes there when it exists
so results survive restarts.
"""

from __future__ import annotations

import os
from pathlib import Path

_ENGINE = Path(__file__).resolve().parent
# An installed package carries the sample as engine/bundled/ (setup.py maps data/ there); a
# checkout keeps it at data/, where the README's commands name it. One stat, at import.
_BUNDLED = _ENGINE / "bundled" / "sample_nq.jsonl"
SAMPLE_DATASET = _BUNDLED if _BUNDLED.is_file() else _ENGINE.parent / "data" / "sample_nq.jsonl"


def _persistent_root() -> Path | None:
    data = Path("/data")
    return data if data.is_dir() and os.access(data, os.W_OK) else None


def default_db_path() -> Path:
    """$PATTRIEVAL_DB, else /data/pattrieval.duckdb on a Space, else results/pattrieval.duckdb."""
    if os.environ.get("PATTRIEVAL_DB"):
        return Path(os.environ["PATTRIEVAL_DB"])
    root = _persistent_root()
    return root / "pattrieval.duckdb" if root else Path("results") / "pattrieval.duckdb"


def cache_dir() -> Path:
    """$PATTRIEVAL_CACHE, else /data/pattrieval-cache on a Space, else ~/.cache/pattrieval."""
    if os.environ.get("PATTRIEVAL_CACHE"):
        return Path(os.environ["PATTRIEVAL_CACHE"])
    root = _persistent_root()
    return root / "pattrieval-cache" if root else Path.home() / ".cache" / "pattrieval"
