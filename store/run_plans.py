"""What RunStore does inside one write transaction: find the experiment a run joins, check that
the runner's plan still holds, create or resume runs, and check a run's answers before it is
marked complete.

These run where no other process can interleave (DuckDB admits one writer per file), which is
what makes the store's invariants hold: an experiment holds at most one run per mode, and a run
that a live process is generating is not taken over by another.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from engine.errors import UserError
from engine.types import ExperimentSpec, Mode, RunSpec, StoredExperiment, StoredRun
from store.db import utc_now
from store.owners import ProcessIdentity, owner_alive
from store.rows import json_text

__all__ = ["RunConflict", "StoreLostAnswers", "check_plan_holds", "create_or_resume", "resolve_experiment",
           "short_of_answers", "stored_runs"]


class RunConflict(UserError):
    """A run cannot be created or resumed: the experiment has one of that mode, or a live
    process is generating it."""


class StoreLostAnswers(UserError):
    """A run about to be marked complete holds fewer answers than it plans: answers committed
    earlier are gone from the file. The run is left failed, so that a resume generates them."""


EXPERIMENT_COLUMNS = (
    "experiment_id", "name", "experiment_key", "model", "dataset", "dataset_sha", "settings_json",
)


def short_of_answers(conn, run_id: str) -> tuple[int, int] | None:
    """(answers held, answers planned) when the run holds fewer answers than it plans, else None.

    A run is only marked complete after its last batch is written, so a shortfall means the
    store lost committed answers; 'complete' would then hide it from every resume."""
    row = conn.execute(
        "SELECT r.n_items, (SELECT count(*) FROM generations g WHERE g.run_id = r.run_id) "
        "FROM runs r WHERE r.run_id = ?", [run_id],
    ).fetchone()
    if row is None or row[0] is None or row[1] >= row[0]:
        return None
    return int(row[1]), int(row[0])


def columns(prefix: str = "") -> str:
    return ", ".join(prefix + c for c in EXPERIMENT_COLUMNS)


def resolve_experiment(conn, spec: ExperimentSpec) -> StoredExperiment | None:
    """The experiment a run command joins: by name (or id); else, unless --repeat, the newest
    with the same key, or the one holding a run with a requested config hash (older stores)."""
    row = None
    if spec.name is not None:
        for column in ("name", "experiment_id"):
            row = conn.execute(
                f"SELECT {columns()} FROM experiments WHERE {column} = ?", [spec.name]
            ).fetchone()
            if row is not None:
                break
    elif not spec.new:
        row = conn.execute(
            f"SELECT {columns()} FROM experiments WHERE experiment_key = ? "
            "ORDER BY created_utc DESC, experiment_id DESC LIMIT 1",
            [spec.key],
        ).fetchone()
        if row is None and spec.run_hashes:
            row = conn.execute(
                f"SELECT {columns('e.')} "
                "FROM runs r JOIN experiments e USING (experiment_id) "
                "WHERE e.experiment_key IS NULL AND list_contains(?, r.config_hash) "
                "ORDER BY r.created_utc DESC, r.run_id DESC LIMIT 1",
                [list(spec.run_hashes)],
            ).fetchone()
    if row is None:
        return None
    experiment_id, name, key, model, dataset, dataset_sha, settings = row
    return StoredExperiment(
        experiment_id=experiment_id,
        name=name,
        key=key,
        model=model,
        dataset=dataset,
        dataset_sha=dataset_sha,
        settings=json.loads(settings) if settings else None,
        runs=stored_runs(conn, experiment_id),
    )


def stored_runs(conn, experiment_id: str) -> tuple[StoredRun, ...]:
    rows = conn.execute(
        "SELECT r.run_id, r.rag_mode, r.config_hash, r.status, r.n_items, r.config_json, "
        "o.host, o.pid, o.process_start, o.heartbeat_utc "
        "FROM runs r LEFT JOIN run_owners o USING (run_id) WHERE r.experiment_id = ? "
        "ORDER BY r.created_utc, r.run_id",
        [experiment_id],
    ).fetchall()
    runs = []
    for run_id, mode, config_hash, status, n_items, config, host, pid, start, heartbeat in rows:
        owner = None
        if status == "running" and host is not None:
            identity = ProcessIdentity(host, pid, start)
            owner = identity.describe() if owner_alive(identity, heartbeat) else None
        runs.append(
            StoredRun(run_id, experiment_id, mode, config_hash, status, n_items,
                      json.loads(config) if config else {}, owner)
        )
    return tuple(runs)


def check_plan_holds(
    current: StoredExperiment | None, experiment_id: str, expected: Mapping[Mode, str | None]
) -> None:
    """Raise RunConflict when what the runner planned no longer matches the store."""
    if current is None:
        gone = [run_id for run_id in expected.values() if run_id is not None]
        if gone:
            raise RunConflict(f"run {gone[0]} no longer exists; run the command again")
        return
    busy = [r for r in current.runs if r.rag_mode in expected and r.owner]
    if busy:
        run = busy[0]
        raise RunConflict(
            f"run {run.run_id} ({run.rag_mode}) of experiment {current.label} is being generated by "
            f"{run.owner}; wait for it to finish, then run this command again"
        )
    if current.experiment_id != experiment_id:
        raise RunConflict(
            f"experiment {current.label} was created by another command while this one was "
            "starting; run this command again to join it"
        )
    for mode, run_id in expected.items():
        stored = current.run_for(mode)
        if (stored.run_id if stored else None) != run_id:
            what = f"run {stored.run_id}" if stored else "no run"
            raise RunConflict(
                f"experiment {current.label} now has {what} for mode {mode}, created by another "
                "command while this one was starting; run this command again"
            )


def create_or_resume(conn, spec: RunSpec, owner: ProcessIdentity, *, check: bool) -> None:
    """Insert the run as 'running', or set an existing one 'running' again; record its owner."""
    existing = conn.execute(
        "SELECT r.config_hash, o.host, o.pid, o.process_start, o.heartbeat_utc "
        "FROM runs r LEFT JOIN run_owners o USING (run_id) WHERE r.run_id = ?",
        [spec.run_id],
    ).fetchone()
    if check:
        same_mode = conn.execute(
            "SELECT run_id FROM runs WHERE experiment_id = ? AND rag_mode = ? AND run_id <> ?",
            [spec.experiment_id, spec.rag_mode, spec.run_id],
        ).fetchone()
        if same_mode is not None:
            raise RunConflict(
                f"experiment {spec.experiment_id} already has a {spec.rag_mode} run ({same_mode[0]}); "
                "an experiment holds one run per mode"
            )
        if existing is not None and existing[1] is not None:
            holder = ProcessIdentity(existing[1], existing[2], existing[3])
            if owner_alive(holder, existing[4]) and holder != owner:
                raise RunConflict(
                    f"run {spec.run_id} ({spec.rag_mode}) is being generated by {holder.describe()}; "
                    "wait for it to finish"
                )
    if existing is not None:
        if existing[0] != spec.config_hash:
            raise ValueError(
                f"run {spec.run_id} exists with another configuration hash; "
                "resuming it would mix two configurations"
            )
        # Provenance stays that of the first start: the items already stored came from it. The
        # item count and what the run recorded about itself (skipped items) may have grown.
        conn.execute(
            "UPDATE runs SET status = 'running', finished_utc = NULL, n_items = ?, config_json = ? "
            "WHERE run_id = ?",
            [spec.n_items, json_text(spec.config), spec.run_id],
        )
    else:
        conn.execute(
            "INSERT INTO runs (run_id, experiment_id, config_hash, created_utc, finished_utc, "
            "status, model, model_revision, quantization, dtype, device, dataset, dataset_sha, "
            "metadata_type, rag_mode, seed, prompt_version, git_sha, library_versions, "
            "config_json, n_items) "
            "VALUES (?, ?, ?, ?, NULL, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                spec.run_id,
                spec.experiment_id,
                spec.config_hash,
                utc_now(),
                spec.model,
                spec.model_revision,
                spec.quantization,
                spec.dtype,
                spec.device,
                spec.dataset,
                spec.dataset_sha,
                spec.metadata_type,
                spec.rag_mode,
                spec.seed,
                spec.prompt_version,
                spec.git_sha,
                json_text(spec.library_versions),
                json_text(spec.config),
                spec.n_items,
            ],
        )
    conn.execute(
        "INSERT INTO run_owners VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET "
        "host = excluded.host, pid = excluded.pid, process_start = excluded.process_start, "
        "heartbeat_utc = excluded.heartbeat_utc",
        [spec.run_id, owner.host, owner.pid, owner.start, utc_now()],
    )


