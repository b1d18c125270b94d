"""Process limits for the sandboxed children (store.sandbox's SQL, engine.datasets.load_child's datasets).

A leaf module with no project imports, so that the store may import it too.
"""

from __future__ import annotations


def limit_address_space(limit: int | None) -> None:
    """Cap this process's memory so a runaway child fails in itself, not in the app; no-op for None/0."""
    if not limit:
        return
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass  # not on this platform (Windows, some macOS): the time limit still holds


# What one stored answer costs the store, for quotas checked before a job starts.
# Measured: ~157 KB per answer at 512 new tokens and 5 top log-probs (the Space's limits), ~1.7 MB
# at 4,000 tokens and 20; a token row is ~270 B and each alternative ~9 B more. Rounded up, so
# that the estimate bounds what a job writes (answers stopping early write less).
ANSWER_FIXED_BYTES = 8 * 1024  # the answer's text, citations, prompt digest and row overhead
TOKEN_BYTES = 288  # one generated token: its id, text and log-prob
ALTERNATIVE_BYTES = 10  # each top-n alternative of a token


def estimate_answer_bytes(max_new_tokens: int, top_logprobs: int = 0) -> int:
    """An upper estimate of the store bytes one answer takes, from what bounds its length."""
    return ANSWER_FIXED_BYTES + max(0, max_new_tokens) * (TOKEN_BYTES + ALTERNATIVE_BYTES * max(0, top_logprobs))


def store_quota_problem(answers: int, per_answer: int, *, store_bytes: int,
                        max_job_bytes: int | None, max_store_bytes: int | None) -> str | None:
    """Why a job of `answers` answers (each ~`per_answer` bytes) may not start, in one line, or
    None: it would write more than `max_job_bytes`, or grow the store (`store_bytes` now) past
    `max_store_bytes`. None bounds are not checked."""
    need = answers * per_answer
    mb = 1024 * 1024
    if max_job_bytes is not None and need > max_job_bytes:
        return (f"this job would store about {need / mb:,.0f} MB ({answers:,} answers at ~{per_answer / 1024:,.0f} KB "
                f"each); one job may store at most {max_job_bytes / mb:,.0f} MB here: fewer items, modes, "
                "configurations, new tokens or top log-probs")
    if max_store_bytes is not None and store_bytes + need > max_store_bytes:
        left = max(0, max_store_bytes - store_bytes)
        return (f"this job would store about {need / mb:,.0f} MB and the store has {left / mb:,.0f} MB left of its "
                f"{max_store_bytes / mb:,.0f} MB quota here")
    return None


def available_memory_bytes() -> int | None:
    """The memory this process could still take: Linux's MemAvailable, or less where the cgroup
    it runs in (a container's limit: a Space, a CI job) or its address-space limit (the app's fit
    child, limit_address_space) leaves less; None where none is readable (another OS), and then
    nothing is refused on it."""
    found = []
    headroom = _address_space_headroom()
    if headroom is not None:
        found.append(headroom)
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit_file, encoding="ascii") as f:
                limit = f.read().strip()
            with open(usage_file, encoding="ascii") as f:
                usage = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 2**60:  # "max", or v1's huge number: no limit
            found.append(max(0, int(limit) - usage))
        break
    return min(found) if found else None


def _address_space_headroom() -> int | None:
    """RLIMIT_AS less the address space this process holds now; None without a limit."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY or soft <= 0:
            return None
        with open("/proc/self/status", encoding="ascii") as status:
            size = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    except (ImportError, OSError, ValueError, StopIteration):
        return None
    return max(0, soft - size)
