"""Experiments and runs as listings: `python -m engine list`, `import`'s checks, the app's
choosers and its Run tab's runs in progress."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from engine.types import MODES
from store.db import DbLike
from store.queries._read import DONE, RESOLVE_EXPERIMENT, Readable, fetch, not_rerun, reading


@dataclass(frozen=True)
class ExperimentSummary:
    """One experiment as `list` shows it: its runs' shared settings, modes and progress."""

    experiment_id: str
    name: str | None  # `run --experiment NAME`; None when unnamed
    model: str
    dataset: str | None
    dataset_sha: str
    dataset_label: str  # file name and content hash, as every table names a dataset
    metadata_type: str | None
    modes: tuple[str, ...]  # distinct, in display order (vanilla, base, cf)
    # running if a live process generates any of its runs, else interrupted if a run's process is
    # gone (the same command resumes it), else failed if any run failed, else complete
    status: str
    n_runs: int
    n_done: int  # answers stored, summed over the runs
    n_total: int  # items planned, summed over the runs
    created_utc: Any  # when its first run started
    # A served experiment's usage, summed over its runs (config_json's `served`); None when local.
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class RunSummary:
    """One run as `list --runs` shows it."""

    run_id: str
    experiment_id: str
    mode: str
    model: str
    dataset: str | None
    dataset_sha: str
    dataset_label: str
    metadata_type: str | None
    status: str  # as stored, or interrupted: running, but its process is gone
    n_done: int
    n_total: int
    created_utc: Any
    finished_utc: Any
    prompt_tokens: int | None = None  # a served run's usage (config_json's `served`); None when local
    completion_tokens: int | None = None


_PROMPT_TOKENS = "TRY_CAST(json_extract_string(r.config_json, '$.served.prompt_tokens') AS BIGINT)"
_COMPLETION_TOKENS = "TRY_CAST(json_extract_string(r.config_json, '$.served.completion_tokens') AS BIGINT)"


def experiment_listing(db: DbLike) -> tuple[ExperimentSummary, ...]:
    """Every experiment, newest first (the SQL that `list` and the app's run list share)."""
    with reading(db) as conn:
        gone = interrupted_runs(conn)
        rows = conn.execute(
            f"""
            SELECT r.experiment_id,
                   any_value(e.name),
                   arg_min(r.model, r.created_utc),
                   arg_min(r.dataset, r.created_utc),
                   arg_min(r.dataset_sha, r.created_utc),
                   dataset_label(arg_min(r.dataset, r.created_utc), arg_min(r.dataset_sha, r.created_utc)),
                   max(r.metadata_type),
                   list(r.rag_mode ORDER BY list_position($modes, r.rag_mode), r.created_utc),
                   CASE WHEN bool_or(r.status = 'running' AND NOT list_contains($gone, r.run_id)) THEN 'running'
                        WHEN bool_or(r.status = 'running') THEN 'interrupted'
                        WHEN bool_or(r.status = 'failed') THEN 'failed'
                        ELSE 'complete' END,
                   count(*),
                   CAST(sum(coalesce(d.n_done, 0)) AS BIGINT),
                   CAST(sum(coalesce(r.n_items, 0)) AS BIGINT),
                   min(r.created_utc),
                   CAST(sum({_PROMPT_TOKENS}) AS BIGINT), CAST(sum({_COMPLETION_TOKENS}) AS BIGINT)
            FROM runs r LEFT JOIN {DONE} d USING (run_id) LEFT JOIN experiments e USING (experiment_id)
            WHERE {not_rerun('r')}
            GROUP BY r.experiment_id
            ORDER BY min(r.created_utc) DESC, r.experiment_id DESC
            """,
            {"modes": list(MODES), "gone": sorted(gone)},
        ).fetchall()
    return tuple(
        ExperimentSummary(exp, name, model, dataset, sha, label, meta, tuple(dict.fromkeys(modes)), status, n_runs, done,
                          total, created, pt, ct)
        for exp, name, model, dataset, sha, label, meta, modes, status, n_runs, done, total, created, pt, ct in rows
    )


def run_listing(db: DbLike) -> tuple[RunSummary, ...]:
    """Every run, newest first, with how many of its items are stored."""
    with reading(db) as conn:
        gone = interrupted_runs(conn)
        rows = conn.execute(
            f"""
            SELECT r.run_id, r.experiment_id, r.rag_mode, r.model, r.dataset, r.dataset_sha,
                   dataset_label(r.dataset, r.dataset_sha), r.metadata_type,
                   CASE WHEN list_contains($gone, r.run_id) THEN 'interrupted' ELSE r.status END,
                   coalesce(d.n_done, 0), coalesce(r.n_items, 0), r.created_utc, r.finished_utc,
                   {_PROMPT_TOKENS}, {_COMPLETION_TOKENS}
            FROM runs r LEFT JOIN {DONE} d USING (run_id)
            ORDER BY r.created_utc DESC, r.run_id DESC
            """,
            {"gone": sorted(gone)},
        ).fetchall()
    return tuple(RunSummary(*row) for row in rows)


def interrupted_runs(conn: duckdb.DuckDBPyConnection) -> set[str]:
    """Runs still marked running whose process is gone (kill -9, a crash): the same command resumes them."""
    from store.owners import ProcessIdentity, owner_alive

    rows = conn.execute(
        "SELECT r.run_id, o.host, o.pid, o.process_start, o.heartbeat_utc "
        "FROM runs r LEFT JOIN run_owners o USING (run_id) WHERE r.status = 'running'"
    ).fetchall()
    # No owner row: a run killed before owners were recorded (migration 004), equally stopped.
    return {
        run_id
        for run_id, host, pid, start, heartbeat in rows
        if host is None or not owner_alive(ProcessIdentity(host, pid, start), heartbeat)
    }


@dataclass(frozen=True)
class ExperimentRun:
    """What `import` checks before it adds a run to an existing experiment."""

    run_id: str
    mode: str
    status: str
    model: str
    dataset_sha: str
    metadata_type: str | None
    config_hash: str
    citation_syntax: str  # how its citations were read (engine.prompting.citations); 'ours' unless recorded


def experiment_runs(db: DbLike, experiment_id: str) -> tuple[ExperimentRun, ...]:
    """The runs of one experiment, oldest first; empty when there is no such experiment."""
    return fetch(
        db,
        "SELECT run_id, rag_mode, status, model, dataset_sha, metadata_type, config_hash, "
        "coalesce(json_extract_string(config_json, '$.citation_syntax'), 'ours') "
        "FROM runs WHERE experiment_id = ? ORDER BY created_utc, run_id",
        [experiment_id],
        into=ExperimentRun,
    )


def resolve_experiment(db: Readable, reference: str) -> str | None:
    """The id of the experiment that `reference` names, by id or by its `run --experiment` name."""
    rows = fetch(db, RESOLVE_EXPERIMENT, {"ref": reference})
    return rows[0][0] if rows else None


def newest_experiments(db: DbLike, limit: int = 5) -> tuple[int, tuple[ExperimentSummary, ...]]:
    """How many experiments there are, and the newest `limit` of them (for messages naming them)."""
    listing = experiment_listing(db)
    return len(listing), listing[:limit]


def count_runs(db: DbLike) -> int:
    """How many runs the store holds (the app's first screen offers a run when none)."""
    return fetch(db, "SELECT count(*) FROM runs")[0][0]


@dataclass(frozen=True)
class ExperimentChoice:
    """One experiment as the Bias tab offers it."""

    experiment_id: str
    name: str | None
    model: str
    metadata_type: str | None
    complete_modes: tuple[str, ...]  # modes with a complete run, in MODES order
    created_utc: Any


def experiment_choices(db: DbLike) -> tuple[ExperimentChoice, ...]:
    """Every experiment, newest first, read from runs alone (no answer is counted)."""
    def choice(exp, name, model, meta, modes, created) -> ExperimentChoice:
        return ExperimentChoice(exp, name, model, meta, tuple(m for m in MODES if m in (modes or ())), created)

    return fetch(
        db,
        "SELECT r.experiment_id, any_value(e.name), arg_min(r.model, r.created_utc), max(r.metadata_type), "
        "list(DISTINCT r.rag_mode) FILTER (WHERE r.status = 'complete'), min(r.created_utc) "
        f"FROM runs r LEFT JOIN experiments e USING (experiment_id) WHERE {not_rerun('r')} "
        "GROUP BY r.experiment_id ORDER BY min(r.created_utc) DESC, r.experiment_id DESC",
        into=choice,
    )


def experiment_dataset_paths(db: DbLike, experiment_id: str) -> tuple[str, ...]:
    """The dataset paths (as typed when each run started) of one experiment's runs: the app takes
    them out of the CLI's messages, which name them in commands to copy."""
    return fetch(
        db,
        "SELECT DISTINCT dataset FROM runs WHERE experiment_id = ? AND dataset IS NOT NULL ORDER BY dataset",
        [experiment_id],
        into=lambda dataset: dataset,
    )


@dataclass(frozen=True)
class ActiveRun:
    """A run marked running in the store, by this app's worker or by any other process."""

    run_id: str
    experiment_id: str
    model: str
    mode: str
    status: str  # running, or interrupted: its process is gone (the same settings resume it)
    n_done: int
    n_total: int
    created_utc: Any


def active_runs(db: DbLike) -> tuple[ActiveRun, ...]:
    """The runs marked running, newest first, with their progress: what the Run tab shows beside
    its own jobs, so that a run started from the command line on the same store shows up too."""
    with reading(db) as conn:
        gone = interrupted_runs(conn)
        rows = conn.execute(
            """
            WITH active AS (SELECT run_id, experiment_id, model, rag_mode, n_items, created_utc
                            FROM runs WHERE status = 'running')
            SELECT a.run_id, a.experiment_id, a.model, a.rag_mode, coalesce(d.n, 0), coalesce(a.n_items, 0),
                   a.created_utc
            FROM active a
            LEFT JOIN (SELECT run_id, count(*) AS n FROM generations
                       WHERE run_id IN (SELECT run_id FROM active) GROUP BY run_id) d USING (run_id)
            ORDER BY a.created_utc DESC, a.run_id DESC
            """
        ).fetchall()
    return tuple(
        ActiveRun(run_id, experiment_id, model, mode, "interrupted" if run_id in gone else "running", done, total,
                  created)
        for run_id, experiment_id, model, mode, done, total, created in rows
    )
