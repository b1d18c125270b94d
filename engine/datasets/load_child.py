"""Load a dataset in a child process with a memory cap and a time limit: `python -m engine.datasets.load_child`.

Why a process of its own: what a file decodes to is not bounded by its size. A 2 KB Parquet
file whose dictionary-encoded column repeats one long string decodes to gigabytes, and
Python's json builds about 140 bytes of objects per byte of `[{}, {}, ...]`. In the app such a
file would take the server down for every visitor, so the app loads uploads here: the child
gets a hard address-space limit (RLIMIT_AS) and is killed when it outlives its time, as the
SQL console's sandbox is (store/sandbox.py). What comes back is bounded too: the loader's
limits (engine.datasets.data: items, documents per item, characters per field) and `max_reply_bytes`.

The child runs the same `engine.datasets.data.load_dataset` as the CLI, so the messages are the
loader's own one-liners.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.datasets.data import load_dataset
from engine.errors import UserError, WordedError
from engine.limits import limit_address_space

# A normal load (50 MB of JSONL, ~10,000 items) stays well under these; see README "Security".
DEFAULT_ADDRESS_SPACE = 2 * 1024**3  # virtual memory: pyarrow alone maps a few hundred MB
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_REPLY_BYTES = 256 * 1024**2

# What the child needs of the environment: programs, locale, temp files. No tokens.
_ENV_KEYS = ("PATH", "LANG", "LANGUAGE", "TMPDIR", "TEMP", "TMP", "SYSTEMROOT", "HOME")


@dataclass(frozen=True)
class LoadBounds:
    """How much memory, time and reply one load may take."""

    max_address_space: int | None = DEFAULT_ADDRESS_SPACE
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES


@dataclass(frozen=True)
class LoadRequest:
    """One load, as sent to the child (JSON on stdin)."""

    path: str
    limit: int | None = None
    skip_invalid: bool = False
    top_k: int | None = None
    check_only: bool = False  # reply with a DatasetCheck, not the items
    max_address_space: int | None = DEFAULT_ADDRESS_SPACE
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES


@dataclass(frozen=True)
class DatasetCheck:
    """What the upload check shows: the layout and counts, or the loader's one line."""

    layout: str | None = None
    n_items: int = 0  # valid items
    # The strict load's message (invalid items, or a broken file); a WordedError whole, for each face to word.
    error: str | WordedError | None = None
    broken: bool = False  # the file itself is unusable: nothing would run


def load_dataset_bounded(path: str | os.PathLike[str], limit: int | None = None, *, skip_invalid: bool = False,
                         top_k: int | None = None, bounds: LoadBounds = LoadBounds()):
    """`engine.datasets.data.load_dataset`, run in a capped child process; UserError (one line) on failure."""
    request = LoadRequest(str(path), limit, skip_invalid, top_k, False, bounds.max_address_space,
                          bounds.max_reply_bytes)
    reply = _call(request, bounds)
    error = reply.get("error")
    if error:
        raise error if isinstance(error, WordedError) else UserError(error)
    return reply["dataset"]


def check_dataset_bounded(path: str | os.PathLike[str], top_k: int | None = None, *,
                          bounds: LoadBounds = LoadBounds()) -> DatasetCheck:
    """The upload check in a capped child: a strict load, then what --skip-invalid would keep."""
    request = LoadRequest(str(path), None, False, top_k, True, bounds.max_address_space, bounds.max_reply_bytes)
    reply = _call(request, bounds)
    if "check" in reply:
        return DatasetCheck(**reply["check"])
    return DatasetCheck(error=reply.get("error") or "the dataset could not be checked", broken=True)


def _call(request: LoadRequest, bounds: LoadBounds) -> dict:
    """Run the child; its reply as a dict, or {'error': one line} when it died or ran too long."""
    name = Path(request.path).name
    child = subprocess.Popen(
        [sys.executable, "-m", "engine.datasets.load_child"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=_child_env(),
    )
    try:
        out, _ = child.communicate(json.dumps(asdict(request)).encode(), bounds.timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return {"error": f"{name}: loading took longer than {bounds.timeout_s:g} s (the time limit); "
                         "use a smaller dataset"}
    try:
        reply = pickle.loads(out) if out else None
    except Exception:  # noqa: BLE001 - a child killed mid-write leaves a truncated pickle
        reply = None
    if not isinstance(reply, dict):
        if child.returncode is not None and child.returncode < 0:
            # Killed by a signal: the kernel, or a C allocation that failed without a MemoryError.
            return {"error": _memory_message(name, request.max_address_space)}
        return {"error": f"{name}: the dataset could not be loaded (the loader ended without a reply)"}
    return reply


def _memory_message(name: str, limit: int | None) -> str:
    cap = f" (at most {limit / 2**30:g} GB)" if limit else ""
    return f"{name}: the dataset needs more memory than loading may take{cap}; use a smaller dataset"


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in _ENV_KEYS or k.startswith("LC_")}
    # The repository (or installed package) root, so that `-m engine.datasets.load_child` imports this code.
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    env["PYTHONNOUSERSITE"] = "1"
    env["HF_HUB_OFFLINE"] = "1"  # datasets' load_from_disk never needs the network
    return env


def _carried(err: UserError) -> str | WordedError:
    """What a reply carries of a user error: a WordedError whole (pickled with its fields, so that
    the app words it with its form's labels, the CLI as options), any other as its line."""
    return err if isinstance(err, WordedError) else str(err)


def _serve(request: LoadRequest) -> dict:
    name = Path(request.path).name
    try:
        if not request.check_only:
            return {"dataset": load_dataset(request.path, request.limit, skip_invalid=request.skip_invalid,
                                            top_k=request.top_k)}
        try:
            data = load_dataset(request.path, top_k=request.top_k)
            return {"check": asdict(DatasetCheck(data.layout, len(data.items)))}
        except UserError as strict:
            try:
                kept = load_dataset(request.path, top_k=request.top_k, skip_invalid=True)
            except UserError:
                return {"check": asdict(DatasetCheck(error=_carried(strict), broken=True))}
            return {"check": asdict(DatasetCheck(kept.layout, len(kept.items), _carried(strict)))}
    except UserError as err:
        return {"error": _carried(err)}
    except MemoryError:
        return {"error": _memory_message(name, request.max_address_space)}
    except RecursionError:
        return {"error": f"{name}: nested too deeply to read"}


def main() -> int:
    """Read a JSON LoadRequest on stdin, write the pickled reply dict on stdout."""
    request = LoadRequest(**json.loads(sys.stdin.read()))
    limit_address_space(request.max_address_space)
    try:
        reply = _serve(request)
        payload = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
    except MemoryError:
        payload = pickle.dumps({"error": _memory_message(Path(request.path).name, request.max_address_space)})
    except Exception as err:  # noqa: BLE001 - a loader bug: one line to the app, not a hang or a dump
        payload = pickle.dumps({"error": f"{Path(request.path).name}: the dataset could not be loaded "
                                         f"({type(err).__name__})"})
    if len(payload) > request.max_reply_bytes:
        payload = pickle.dumps({"error": f"{Path(request.path).name}: the dataset is larger than this app "
                                         f"takes ({request.max_reply_bytes // 2**20} MB loaded at most)"})
    sys.stdout.buffer.write(payload)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
