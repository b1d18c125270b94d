"""Where things live by default: the database, the cache and the bundled sample dataset.

On a Hugging Face Space, /data is the persistent volume (a paid add-on); everything goes there
when it exists so results survive restarts. Without it, the store goes where this user can write:
results/ under the working folder, else the user's data folder, else a temporary folder, since a
Space's app folder may belong to root (the run failed after loading its model).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from engine.errors import UserError

_ENGINE = Path(__file__).resolve().parent
# An installed package carries the sample as engine/bundled/ (setup.py maps data/ there); a
# checkout keeps it at data/, where the README's commands name it. One stat, at import.
_BUNDLED = _ENGINE / "bundled" / "sample_nq.jsonl"
SAMPLE_DATASET = _BUNDLED if _BUNDLED.is_file() else _ENGINE.parent / "data" / "sample_nq.jsonl"
PERSISTENT = Path("/data")  # a Space's persistent storage, where it has some
DB_NAME = "pattrieval.duckdb"
# The --db help of every command: what default_db_path() tries, in order.
DEFAULT_DB_HELP = ("$PATTRIEVAL_DB, /data/pattrieval.duckdb, or results/pattrieval.duckdb; where results/ cannot "
                   "be written, ~/.local/share/pattrieval/ or a temporary folder")


def _persistent_root() -> Path | None:
    return PERSISTENT if PERSISTENT.is_dir() and os.access(PERSISTENT, os.W_OK) else None


def store_writable_problem(path: Path) -> str | None:
    """Why this user cannot write the store at `path` (its file; its folder, where DuckDB writes
    the write-ahead log beside it; or the folders to make), or None when it can. Reads only."""
    path = Path(path)
    if path.exists():
        if not path.is_file():
            return None  # a folder or a device: store.db refuses it in its own words
        if not os.access(path, os.R_OK | os.W_OK):
            return f"{path} is not writable by this user"
    return _folder_problem(path.parent)


def _folder_problem(folder: Path) -> str | None:
    """Why this user cannot write in `folder`, or make it, or None when it can."""
    folder = Path(os.path.abspath(folder))
    while not folder.exists() and folder != folder.parent:  # the nearest folder that exists makes the rest
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable by this user"
    return None


def _data_home() -> Path:
    """The user's data folder (XDG): $XDG_DATA_HOME/pattrieval, else ~/.local/share/pattrieval."""
    base = os.environ.get("XDG_DATA_HOME", "").strip()
    return (Path(base) if base else Path.home() / ".local" / "share") / "pattrieval"


def _temp_root() -> Path:
    """A folder of this user's under the system's temporary folder."""
    return Path(tempfile.gettempdir()) / f"pattrieval-{os.getuid() if hasattr(os, 'getuid') else 'user'}"


def default_db_path() -> Path:
    """$PATTRIEVAL_DB, else /data/pattrieval.duckdb on a Space with storage, else
    results/pattrieval.duckdb when it exists or this user can create it, else the user's data
    folder, else a temporary folder (see transient_store for what a face says then)."""
    if os.environ.get("PATTRIEVAL_DB"):
        return Path(os.environ["PATTRIEVAL_DB"])
    root = _persistent_root()
    if root:
        return root / DB_NAME
    usual = Path("results") / DB_NAME
    # An existing store is read where it is (a read-only folder still browses); only a store that
    # would be created in a folder this user cannot write goes elsewhere.
    if usual.is_file() or store_writable_problem(usual) is None:
        return usual
    try:
        home = _data_home() / DB_NAME
    except RuntimeError:  # no home to expand ~ into
        home = None
    if home is not None and (home.is_file() or store_writable_problem(home) is None):
        return home
    return _temp_root() / DB_NAME


def moved_default_note(path: Path) -> str | None:
    """One line when the default store is not results/ because this user cannot write there."""
    if os.environ.get("PATTRIEVAL_DB") or path.parent in (Path("results"), PERSISTENT):
        return None
    return f"note: {Path('results').absolute()} cannot be written here; the store is {path}"


def transient_store(path: Path) -> str | None:
    """One sentence when a store at `path` will not survive a restart, else None: on a Space,
    anything outside its persistent storage (/data) goes with the container; anywhere, the
    temporary folder default_db_path() falls back on may be cleared."""
    where = Path(os.path.abspath(path))
    if os.environ.get("SPACE_ID") and PERSISTENT not in where.parents:
        why = "the store is not on its persistent storage" if _persistent_root() else "it has no persistent storage"
        return f"Results are kept only until this Space restarts: {why} (/data)."
    if Path(os.path.abspath(_temp_root())) in where.parents:
        return "Results are kept in a temporary folder, which the system may clear: no other place here is writable."
    return None


def cache_dir() -> Path:
    """$PATTRIEVAL_CACHE, else /data/pattrieval-cache on a Space, else ~/.cache/pattrieval, else
    (a home this user cannot write) a temporary folder."""
    if os.environ.get("PATTRIEVAL_CACHE"):
        return Path(os.environ["PATTRIEVAL_CACHE"])
    root = _persistent_root()
    if root:
        return root / "pattrieval-cache"
    try:
        home = Path.home() / ".cache" / "pattrieval"
    except RuntimeError:
        home = None
    if home is not None and (home.is_dir() or _folder_problem(home) is None):
        return home
    return _temp_root() / "cache"


def require_store(db):
    """`db` itself, where it is a store or the path of one: a read of a path that is no file
    would create an empty store there (store.db migrates on open) and then report nothing found.
    The command line checks its --db first; this is the Python API's check."""

    # Only what is not there at all: a FIFO, a device or a folder at the path is the store's open
    # to refuse, in its own words ("not a regular file").
    if isinstance(db, (str, os.PathLike)) and not os.path.lexists(db):
        raise UserError(f"no database at {db}: give the path of a store")
    return db
