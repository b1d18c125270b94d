"""What a face offers and opens around a comparison (engine.usecases.compare.compare): the metrics it can
compare, the run a reference names, one item of two runs side by side, and a pair of stored runs
worth comparing, and a comparison made JSON-ready. The app's Compare and SQL tabs read them here; reads only the store.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.errors import UserError
from engine.statistics.asymptotic import ASYMPTOTIC_ABOVE

if TYPE_CHECKING:
    from store.db import DbLike
    from store.queries import ModeDetail, QueryDetail
    from store.queries._read import Readable
    from store.queries.compare import CompareRun

# Of the newest runs, how many an example pair is looked for among (each pair is compared in Python).
EXAMPLE_RUNS = 200


def metric_choices() -> tuple[tuple[str, str], ...]:
    """(label, name) of every metric `compare` knows, in its table order."""
    from engine.statistics.compare_stats import METRICS

    return tuple((spec.label, name) for name, spec in METRICS.items())


def default_metrics() -> tuple[str, ...]:
    """The metrics a comparison covers when none are chosen (CompareRequest's default)."""
    from engine.statistics.compare_stats import DEFAULT_METRICS

    return tuple(DEFAULT_METRICS)


def large_sample_above() -> int:
    """How many differing pairs a metric needs before `compare` tests it with the paired t-test or
    McNemar's chi-square (unless asked for the exact tests): what the faces' help says."""
    return ASYMPTOTIC_ABOVE


def t_test_beside(test: str) -> bool:
    """Whether the paired t-test's p is shown beside a metric's test: it is for the permutation
    test (continuous metrics), a second opinion; McNemar's (0/1 metrics) has none."""
    from engine.statistics.compare_stats import PERMUTATION

    return test == PERMUTATION


def stored_run(db: Readable, reference: str) -> CompareRun | None:
    """The run that `reference` names when it names one run by its id; None when it names an
    experiment, a mode of one, or nothing."""
    from store.queries.compare import resolve_side

    side = resolve_side(db, reference)
    if side is None or side.kind != "run":
        return None
    (run,) = side.runs.values()
    return run


@dataclass(frozen=True)
class RunItem:
    """One item as one run answered it: the item in every mode of the run's experiment, and the
    run's own mode (None when the run does not hold the item)."""

    run: CompareRun
    detail: QueryDetail | None  # None: no run of the experiment holds the item
    mode: ModeDetail | None


class UnknownRun(UserError):
    """A reference that names no run (by id)."""

    def __init__(self, reference: str) -> None:
        super().__init__(f"unknown run '{reference}'")
        self.reference = reference


def item_of_runs(db: Readable, references: Sequence[str], item_id: str) -> tuple[RunItem, ...]:
    """The item `item_id` as each run (by id) answered it, in the order given; UnknownRun for a
    reference that names no run."""
    from store import queries

    found = []
    with queries.reading(db) as conn:  # one open for every read: each open costs more than a read
        for ref in references:
            run = stored_run(conn, ref)
            if run is None:
                raise UnknownRun(ref)
            detail = queries.query_detail(conn, run.experiment_id, item_id)
            mode = next((m for m in detail.modes if m.run_id == run.run_id), None) if detail else None
            found.append(RunItem(run, detail, mode))
    return tuple(found)


def example_pair(db: DbLike) -> tuple[str, str] | None:
    """(run A, run B) of one dataset and mode most likely to share many items, among the newest
    runs with answers: complete ones first, then the most answers in the smaller run; the older
    run is A. None when the store holds no such pair (or cannot be read)."""
    from store.queries import run_listing

    try:
        runs = [r for r in run_listing(db) if r.n_done]
    except UserError:
        return None
    runs = runs[:EXAMPLE_RUNS]
    pairs = [(x, y) for i, y in enumerate(runs) for x in runs[i + 1:]
             if (x.dataset_sha, x.mode) == (y.dataset_sha, y.mode)]
    if not pairs:
        return None
    x, y = max(pairs, key=lambda p: (p[0].status == p[1].status == "complete", min(p[0].n_done, p[1].n_done)))
    return x.run_id, y.run_id


def json_ready(value: Any) -> Any:
    """JSON has no NaN or Infinity: undefined statistics become None (recursively)."""
    import numpy as np

    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value
