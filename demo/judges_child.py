"""The Judges tab's heavy work in a bounded child process: `python -m demo.judges_child`.

Why a process of its own: `/agreement` on a store of a few hundred thousand verdicts reads them
all into Python and takes tens of seconds of CPU, much of it holding the GIL, and a labels file
at the upload bound is parsed, checked against every answer it names and written for as long.
In the web server's process either slowed every other visitor's page. Here the web process only
waits on a pipe, and the child has the bounds a Why-cited fit's child has (demo.fit_child): an
address-space cap (PATTRIEVAL_FIT_MEMORY_MB), a CPU-time limit (PATTRIEVAL_JUDGES_TIMEOUT_S; the
child runs below the web process's priority, so a wall clock of 4 times that stops one that
waits), one BLAS thread, a bounded reply and an environment without tokens.

The child runs the CLI's own use cases (engine.usecases.judges.agreement, engine.usecases.storage.import_labels)
through the store's ordinary short transactions. A label import writes in one transaction, so a
child stopped part-way (its time, its memory) has written nothing. Its one-line UserErrors come
back as they are; the handler masks server paths in them.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from demo.fit_child import (
    _ONE_THREAD,
    _OUT_OF_MEMORY,
    MAX_REPLY_BYTES,
    STDERR_TAIL,
    FitBounds,
    _limit_cpu,
    _python_path,
    out_of_memory,
)
from engine.errors import UserError, WordedError
from engine.limits import limit_address_space
from engine.usecases.judges.agreement import agreement, disagreements
from engine.usecases.storage.import_labels import import_labels

DEFAULT_JUDGES_TIMEOUT_S = 120  # CPU seconds: an agreement of 480,000 verdicts took about 20
FEWER = "choose fewer runs, or run it with `python -m engine` on the store"


@dataclass(frozen=True)
class JudgesTask:
    """One piece of work: "agreement" (an AgreementRequest), "disagreements" (an AgreementRequest,
    the `pair` of judges and how many to list) or "import_labels" (an ImportLabelsRequest)."""

    kind: str
    request: Any
    pair: tuple[str, ...] = ()
    limit: int | None = None

    @property
    def what(self) -> str:
        return {"agreement": "the judges' agreement", "disagreements": "the disagreements",
                "import_labels": "the labels' import"}[self.kind]

    @property
    def fewer(self) -> str:
        return "split the file" if self.kind == "import_labels" else FEWER


def in_child(task: JudgesTask, bounds: FitBounds) -> Any:
    """What the task's use case returns, computed in a bounded child; UserError in one line (the
    use case's own, or why the child was stopped)."""
    from store.sandbox import child_environment

    env = {**child_environment(os.environ, _python_path()), **_ONE_THREAD}
    message = pickle.dumps({"task": task, "max_address_space": bounds.max_address_space, "cpu_s": bounds.timeout_s})
    child = subprocess.Popen([sys.executable, "-m", "demo.judges_child"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        # communicate() waits in select() without the GIL: the web process serves others meanwhile.
        out, err = child.communicate(message, bounds.wall_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise UserError(f"{task.what} did not finish within {bounds.wall_s:g} s (the server or the store is busy); "
                        "try again in a moment") from None
    try:
        reply = pickle.loads(out) if out else None
    except Exception:  # noqa: BLE001 - a child killed mid-write leaves a truncated pickle
        reply = None
    if not isinstance(reply, dict):
        if child.returncode == -getattr(signal, "SIGPROF", 27):
            raise UserError(f"{task.what} took more than {bounds.timeout_s:g} s of CPU (the time limit here); "
                            f"{task.fewer}")
        tail = (err or b"")[-STDERR_TAIL:].decode(errors="replace")
        if child.returncode is not None and child.returncode < 0 or (
                bounds.max_address_space and _OUT_OF_MEMORY.search(tail)):
            raise UserError(memory_message(bounds.max_address_space, task))
        raise UserError(f"{task.what} ended without a reply")
    error = reply.get("error")
    if error:
        raise error if isinstance(error, WordedError) else UserError(error)
    return reply["result"]


def memory_message(limit: int | None, task: JudgesTask) -> str:
    cap = f" (at most {limit / 2**20:,.0f} MB)" if limit else ""
    return (f"{task.what} needs more memory than this app gives it{cap}; {task.fewer} "
            "(the operator's cap: PATTRIEVAL_FIT_MEMORY_MB)")


def _serve(message: dict) -> dict:
    import duckdb

    task: JudgesTask = message["task"]
    try:
        if task.kind == "agreement":
            return {"result": agreement(task.request)}
        if task.kind == "disagreements":
            return {"result": disagreements(task.request, *task.pair, limit=task.limit)}

        return {"result": import_labels(task.request)}
    except UserError as err:
        if message["max_address_space"] and err.__cause__ is not None and out_of_memory(err.__cause__):
            return {"error": memory_message(message["max_address_space"], task)}
        if isinstance(err, WordedError):  # whole, so that the page words its fields and places
            return {"error": err}
        return {"error": str(err).splitlines()[0] if str(err).strip() else f"{task.what} failed"}
    except (MemoryError, duckdb.OutOfMemoryException):
        return {"error": memory_message(message["max_address_space"], task)}


def main() -> int:
    """Read the pickled task from the parent on stdin, write the pickled reply on stdout."""
    message = pickle.loads(sys.stdin.buffer.read())  # the app's own process wrote it

    task = message["task"]
    limit_address_space(message["max_address_space"])
    _limit_cpu(message["cpu_s"])
    try:
        payload = pickle.dumps(_serve(message), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as err:  # noqa: BLE001 - a bug or a library's failure: one line, not a dump
        if message["max_address_space"] and out_of_memory(err):
            payload = pickle.dumps({"error": memory_message(message["max_address_space"], task)})
        else:
            payload = pickle.dumps({"error": f"{task.what} failed ({type(err).__name__})"})
    if len(payload) > MAX_REPLY_BYTES:
        payload = pickle.dumps({"error": f"{task.what}'s result is larger than this app returns"})
    sys.stdout.buffer.write(payload)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
