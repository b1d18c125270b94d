"""Fit the Bias tab's citation choice model (or a study's model) in a child process: `python -m demo.fit_child`.

Why a process of its own: a fit at the app's bound (PATTRIEVAL_MAX_FIT_DECISIONS) takes seconds
of pandas and statsmodels work, much of it holding the GIL, so in the web server's process it
slowed every other visitor's page. Here the web process only waits on a pipe (no
GIL held), and the child gets the bounds the dataset loader's child has (engine.datasets.load_child): a
hard address-space limit (RLIMIT_AS), a time limit after which it is killed (CPU seconds, as it
runs at a lower priority than the web process; and a wall clock), a bounded reply, one BLAS
thread, and an environment without tokens (store.sandbox.child_environment).

The child runs the same engine.usecases.bias.why_cited as the CLI (for a study model,
engine.usecases.study.effects.why_cited_study, as `why-cited --study`), reading the store through the
store's ordinary short read-only transactions (store.queries): it holds the file only while
reading, as the app's own reads do, and a writer holding it makes the open wait (store.db).
Its one-line UserErrors come back as they are; the handler masks server paths in them.
"""

from __future__ import annotations

import errno
import os
import pickle
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import PLACES, UserError, WordedError
from engine.limits import limit_address_space
from engine.usecases.study.effects import StudyEffectsRequest, why_cited_study

# Address space, not resident memory: a fit at the default bounds (500,000 answers, 5,000,000
# decisions) peaked at 1.94 GB of it (about 1.2 GB is the libraries' and DuckDB's reservations
# before a row is read; 0.87 GB resident) and 8.1 s of CPU: 3x under both caps (docs/figures.md).
DEFAULT_FIT_MEMORY_MB = 6144
DEFAULT_FIT_TIMEOUT_S = 30
MAX_REPLY_BYTES = 16 * 1024**2  # a fit's effects and rates are a few KB
# Below the web process, so that where cores are scarce (a 2-vCPU Space) visitors' pages get the
# CPU first. The time limit therefore counts the fit's CPU seconds (a profiling timer), not the
# clock; the clock stops only a child that waits (for the store's file, or on a machine busy
# with other work) past WALL_FACTOR times that.
NICENESS = 10
WALL_FACTOR = 4
FEWER = f"choose fewer experiments or modes, or {PLACES['fit_on_the_store']}"
# What a library says when the address-space cap stops it: dlopen of an extension module (an
# ImportError: "failed to map segment from shared object"), OpenBLAS ("Memory allocation still
# failed", then exit 1), glibc ("cannot allocate memory for thread-local data: ABORT", exit 127).
# Seen in the child's exception or, where the library ended the process itself, its stderr.
_OUT_OF_MEMORY = re.compile(r"failed to map segment|cannot allocate memory|memory allocation|out of memory",
                            re.IGNORECASE)
STDERR_TAIL = 4096  # of the child's stderr, kept only to tell such an end from another
# One thread per BLAS library: a fit takes one core, however many the server has.
_ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


@dataclass(frozen=True)
class FitBounds:
    """How much memory (address space, bytes; None: no cap) and time (s) one fit may take."""

    max_address_space: int | None = DEFAULT_FIT_MEMORY_MB * 1024**2
    timeout_s: float = DEFAULT_FIT_TIMEOUT_S  # CPU seconds; the wall clock allows WALL_FACTOR times more

    @property
    def wall_s(self) -> float:
        return self.timeout_s * WALL_FACTOR + 5.0


def fit_in_child(request: Any, db_path: Path, bounds: FitBounds = FitBounds()) -> Any:
    """engine.usecases.bias.why_cited(request, db_path) run in a bounded child: its WhyCitedResult
    (a StudyEffectsRequest: why_cited_study's StudyEffectsResult, the study model), or UserError
    in one line (the use case's own, or why the child was stopped)."""
    what, fewer = _words(request)
    from store.sandbox import child_environment

    env = {**child_environment(os.environ, _python_path()), **_ONE_THREAD}
    message = pickle.dumps({"request": request, "db": str(db_path), "max_address_space": bounds.max_address_space,
                            "cpu_s": bounds.timeout_s})
    child = subprocess.Popen([sys.executable, "-m", "demo.fit_child"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env)
    try:
        # communicate() waits in select() without the GIL: the web process serves others meanwhile.
        out, err = child.communicate(message, bounds.wall_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise UserError(f"{what} was not fitted within {bounds.wall_s:g} s (the server or the store is "
                        "busy); try again in a moment") from None
    try:
        reply = pickle.loads(out) if out else None
    except Exception:  # noqa: BLE001 - a child killed mid-write leaves a truncated pickle
        reply = None
    if not isinstance(reply, dict):
        if child.returncode == -getattr(signal, "SIGPROF", 27):
            raise UserError(time_message(bounds.timeout_s, what, fewer))
        if child.returncode is not None and child.returncode < 0:
            # Killed by a signal: the kernel, or a C allocation that failed without a MemoryError.
            raise UserError(memory_message(bounds.max_address_space, what, fewer))
        if bounds.max_address_space and _OUT_OF_MEMORY.search((err or b"")[-STDERR_TAIL:].decode(errors="replace")):
            # A library that could not allocate under the cap and ended the process itself.
            raise UserError(memory_message(bounds.max_address_space, what, fewer))
        raise UserError(f"{what} could not be fitted (the fit ended without a reply)")
    error = reply.get("error")
    if error:
        raise error if isinstance(error, WordedError) else UserError(error)
    return reply["result"]


def time_message(cpu_s: float, what: str = "the choice model", fewer: str = FEWER) -> str:
    return f"{what} took more than {cpu_s:g} s of CPU to fit (the time limit here); {fewer}"


def memory_message(limit: int | None, what: str = "the choice model", fewer: str = FEWER) -> str:
    cap = f" (at most {limit / 2**20:,.0f} MB)" if limit else ""
    return f"{what} needs more memory than a fit may take here{cap}; {fewer} (the operator's cap: PATTRIEVAL_FIT_MEMORY_MB)"


def out_of_memory(err: BaseException) -> bool:
    """Whether `err`, or an error it was raised from or during, is the address-space cap's doing:
    a MemoryError, ENOMEM, or an import whose shared library could not be mapped."""
    seen: set[int] = set()
    at: BaseException | None = err
    while at is not None and id(at) not in seen:
        seen.add(id(at))
        if isinstance(at, MemoryError) or (isinstance(at, OSError) and at.errno == errno.ENOMEM):
            return True
        if _OUT_OF_MEMORY.search(str(at)):
            return True
        at = at.__cause__ or at.__context__
    return False


def user_error_line(err: UserError, max_address_space: int | None, what: str = "the choice model",
                    fewer: str = FEWER) -> str | WordedError:
    """The line a fit's UserError comes back as: its own first line, or the cap's refusal where it
    was raised from an allocation that failed under the cap. The store's open turns DuckDB's
    errors into "cannot open database ...", its allocation failure included (DuckDB 2.0.1, what
    `pip install .` takes, cannot open a store under a 200 MB cap where 2.0.0 could): that is the
    cap's doing, not a damaged store."""
    if max_address_space and err.__cause__ is not None and out_of_memory(err.__cause__):
        return memory_message(max_address_space, what, fewer)
    if isinstance(err, WordedError):  # whole, so that the page words its fields and places
        return err
    return str(err).splitlines()[0] if str(err).strip() else f"{what} could not be fitted"


def _words(request: Any) -> tuple[str, str]:
    """What the request fits, and what a visitor past the bounds can do instead."""
    if isinstance(request, StudyEffectsRequest):
        return ("the study model",
                "choose fewer modes, or " + PLACES["fit_study_on_the_store"].format(study=request.study))
    return "the choice model", FEWER


def _python_path() -> str:
    """PYTHONPATH for the child: this package's root, then the parent's own PYTHONPATH."""
    root = str(Path(__file__).resolve().parent.parent)
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)


def _serve(message: dict) -> dict:
    import duckdb

    # Read at call time, not at the top: a test replaces it on its module to prove that only the
    # child fits, which an in-process call of this function would then show.
    from engine.usecases.bias.why_cited import why_cited

    request = message["request"]
    what, fewer = _words(request)
    try:
        if isinstance(request, StudyEffectsRequest):
            return {"result": why_cited_study(request, Path(message["db"]))}
        return {"result": why_cited(request, Path(message["db"]))}
    except UserError as err:
        return {"error": user_error_line(err, message["max_address_space"], what, fewer)}
    except (MemoryError, duckdb.OutOfMemoryException):
        return {"error": memory_message(message["max_address_space"], what, fewer)}


def _limit_cpu(cpu_s: float) -> None:
    """Run below the web process, and be killed (SIGPROF, whose default action ends the process)
    once this process's threads have used `cpu_s` seconds of CPU together."""
    try:
        os.nice(NICENESS)
        signal.setitimer(signal.ITIMER_PROF, cpu_s)
    except (AttributeError, ValueError, OSError):
        pass  # not on this platform (Windows): the wall clock still holds


def main() -> int:
    """Read the pickled request from the parent on stdin, write the pickled reply on stdout."""
    message = pickle.loads(sys.stdin.buffer.read())  # the app's own process wrote it

    what, fewer = _words(message["request"])  # before the limits: a failure past them still says what it was
    limit_address_space(message["max_address_space"])
    _limit_cpu(message["cpu_s"])
    try:
        payload = pickle.dumps(_serve(message), protocol=pickle.HIGHEST_PROTOCOL)
    except MemoryError:
        payload = pickle.dumps({"error": memory_message(message["max_address_space"], what, fewer)})
    except Exception as err:  # noqa: BLE001 - a bug or a library's failure: one line, not a dump
        # Under the cap an import fails as an ImportError (a library could not be mapped), or as a
        # MemoryError inside it: the cap's refusal, not a failure of the fit.
        if message["max_address_space"] and out_of_memory(err):
            payload = pickle.dumps({"error": memory_message(message["max_address_space"], what, fewer)})
        else:
            payload = pickle.dumps({"error": f"{what} could not be fitted ({type(err).__name__})"})
    if len(payload) > MAX_REPLY_BYTES:
        payload = pickle.dumps({"error": f"{what}'s result is larger than this app returns"})
    sys.stdout.buffer.write(payload)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
