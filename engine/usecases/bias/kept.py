"""The Bias page's values of an experiment, kept by the writer when its runs change.

The first visitor of the Bias page after new runs used to wait for the experiment's bootstrap
(2,000 resamples), its Table 2 rows through the bias view and its per-item metrics through
query_metrics: 1.4-2.6 s at 1M answers, for values that only change when the runs do. The
writer computes them instead, once, when an experiment's last run ends (`run`, a study,
`import`) or runs are merged in: the report `bias_report` gives for the page's request (the
experiment's id, default resamples and seed) and Table 2's rows (report_bias_rows), through the
very functions a request calls, kept in derived_values with the signature of the store as the
writer left it (store.derived). The bootstrap is seeded, so a later computation gives the same
values; a request that asks for other resamples, or comes after another change, computes on
demand as before.

Keeping is a bonus: any failure is logged and the run, import or merge goes on as if nothing
was kept (the page then computes on demand).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from engine.errors import UserError

log = logging.getLogger(__name__)


def keep_experiments(db: str | Path, experiment_ids: Iterable[str] = (), *, of_runs: Iterable[str] = ()) -> bool:
    """Compute and keep the Bias page's report and Table 2 rows of these experiments and of the
    experiments of the runs `of_runs` (looked up in the same read), each one whose runs are all
    ended (none still running: its last run will keep them); True when everything computed was
    kept. Never raises for a store or computation failure."""
    from engine.usecases.bias.report import kept_or_computed
    from store.queries import keep_pending, read_session, report_bias_rows

    path, ids, runs = Path(db), list(experiment_ids), list(of_runs)
    try:
        with read_session(path) as session:
            if runs:
                ids += [r[0] for r in session.conn.execute(
                    "SELECT DISTINCT experiment_id FROM runs WHERE list_contains(?, run_id) ORDER BY ALL",
                    [runs]).fetchall()]
            for experiment_id in dict.fromkeys(ids):
                if _running(session.conn, experiment_id):
                    continue
                try:  # the page's request: bias_page asks by id, default resamples and seed
                    kept_or_computed(session, experiment_id, None, 0, None, explanations=False, floors=False)
                except UserError:  # nothing to compare yet: the page says so without a bootstrap
                    pass
                report_bias_rows(session, [experiment_id])
    except Exception as err:  # a kept value is a bonus: the run, import or merge must not fail for it
        log.warning("Bias page values of %s not kept in %s: %s", ", ".join(ids or runs), path, err)
        return False
    return keep_pending(session)


def _running(conn: Any, experiment_id: str) -> bool:
    """Whether a run of the experiment is still being written by a live process: its end keeps
    the values. A run whose process was killed is not waited for (it may never be resumed); the
    Bias page reads complete runs only, and its resume changes the experiment's signature and
    keeps the values again when it ends."""
    from store.owners import ProcessIdentity, owner_alive

    rows = conn.execute(
        "SELECT o.host, o.pid, o.process_start, o.heartbeat_utc FROM runs r JOIN run_owners o USING (run_id) "
        "WHERE r.experiment_id = ? AND r.status = 'running'", [experiment_id]).fetchall()
    return any(owner_alive(ProcessIdentity(host, pid, start), heartbeat) for host, pid, start, heartbeat in rows)


def after_run(db: str | Path) -> Callable[[str], None]:
    """What RunStore calls once a run has ended (`on_finished`): keep its experiment's values."""

    def kept(run_id: str) -> None:
        keep_experiments(db, of_runs=[run_id])

    return kept


def after_nothing_to_do(db: str | Path, experiment_ids: Iterable[str]) -> None:
    """A command run again over runs that have all ended (`run` or a study that resumes nothing):
    keep what a process killed between a run's end and its keeping left unkept. Values already
    kept cost one signature and a lookup each (they are read, not computed)."""
    ids = list(experiment_ids)
    if ids:
        keep_experiments(db, ids)


def after_merge(db: str | Path, run_ids: Iterable[str]) -> None:
    """Keep the values of the experiments that merged runs joined."""
    ids = list(run_ids)
    if ids:
        keep_experiments(db, of_runs=ids)
