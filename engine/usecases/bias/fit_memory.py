"""Whether a fit of the choice or the study model fits in this machine's memory, told from a count
before a decision row is read.

Both fits read the decision rows (one per document shown to each answer) a chunk of runs at a time
(engine.usecases.bias.why_cited.CHUNK_DECISIONS) and keep a few numbers per answer. scripts/bench_stats.py
measured `why-cited` over every experiment at 896 MB for 1M answers (10M rows) and 1,578 MB for 10M
answers (100M rows), and `why-cited --study` at 942 MB and 1,585 MB (docs/figures.md). Held at
once, as they were before, the rows took about 165 bytes each: 16.05 GB at 10M answers. So the
estimate counts at most HELD_DECISIONS rows at that rate, and each answer. Without this check a fit
past the machine's memory read for minutes, then swapped or was killed by the kernel with no word
of why. With it, a fit the machine cannot hold is refused in one line saying so, and
--no-memory-check (memory_check=False) tries anyway.
"""

from __future__ import annotations

from typing import Protocol

from engine import limits
from engine.errors import UserError

FIT_FIXED_BYTES = 350 * 2**20
# A row held, ~165 bytes measured at 100M rows held at once, rounded up: more labels or
# interactions widen the design.
FIT_BYTES_PER_DECISION = 172


# Rows a chunked read holds at its peak, counted at the row rate: a chunk's rows, DuckDB's cache
# of what it read (within its 1 GB limit) and the chunk before it, not yet let go.
HELD_DECISIONS = 3_500_000
# Per answer: its pattern, chosen subset, cluster and why-cited's condition, item and silence (the
# study model's run instead), and the fit's copies of them; (1,578 - 896) MB over 9M answers is ~80,
# rounded up (the study model's (1,585 - 942) MB, ~75).
FIT_BYTES_PER_ANSWER = 88


def fit_memory_bytes(decisions: int, answers: int) -> int:
    """About the peak memory of one fit over this many decision rows and answers, read a chunk at
    a time (HELD_DECISIONS rows at most at once)."""
    held = min(max(0, decisions), HELD_DECISIONS)
    return FIT_FIXED_BYTES + FIT_BYTES_PER_DECISION * held + FIT_BYTES_PER_ANSWER * max(0, answers)


class FitRequest(Protocol):
    """What the check reads of a fit's request (why_cited's, the study model's: frozen, so read-only here)."""

    @property
    def max_answers(self) -> int | None: ...

    @property
    def max_decisions(self) -> int | None: ...

    @property
    def memory_check(self) -> bool: ...


def check_fit_memory(request: FitRequest, answers: int, decisions: int, fewer: str, what: str = "") -> None:
    """Refuse in one line a fit whose rows would not fit in the memory available now (none where
    the OS does not say it, nor where the request turned the check off); `fewer`: how to ask for
    less, `what`: what is fitted, as the line's start. A bounded request is the app's: a visitor
    has no override to give, and is not told of one."""
    if not request.memory_check:
        return
    bounded = request.max_answers is not None or request.max_decisions is not None
    override = "" if bounded else ", or give --no-memory-check (memory_check=False in Python) to try anyway"
    need = fit_memory_bytes(decisions, answers)
    have = limits.available_memory_bytes()
    if have is not None and need > have:
        need_text, have_text = _sizes(need, have)
        raise UserError(f"{what}{answers:,} answers x their shown documents make {decisions:,} citation decisions: "
                        "a fit reads them a chunk of runs at a time and keeps a few numbers per answer, "
                        f"about {need_text} of memory, more than the {have_text} "
                        f"available now; {fewer}{override}")


def _sizes(need: int, have: int) -> tuple[str, str]:
    """The two sizes in one unit, with as many decimals as tell them apart (1.9 GB "more than"
    1.9 GB read as a contradiction)."""
    unit, scale = ("GB", 2**30) if have >= 2**30 else ("MB", 2**20)
    for digits in range(1, 6):
        a, b = f"{need / scale:,.{digits}f} {unit}", f"{have / scale:,.{digits}f} {unit}"
        if a != b:
            break
    return a, b
