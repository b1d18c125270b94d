"""The DuckDB sink: persists experiments, runs, dataset items and generations, one short transaction each.

Every method opens the database, runs one transaction and closes it again (see store.db for
why), so a CLI run never holds the file while the GPU works and the app can read in between.

Reads never create the file: a run that cannot start (unknown model, prompt too long) must
leave no database behind. Two invariants are checked inside the transaction that creates
runs, where no other process can interleave (DuckDB admits one writer per file): an
experiment holds at most one run per mode, and a run that a
live process is generating is not taken over by another. The owner (host, pid, process start
time) is recorded in `run_owners` while a run is generated; after kill -9 the owner is gone,
so the run is resumable again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from engine.errors import UserError
from engine.types import (
    RUN_STATUSES,
    ExperimentSpec,
    Generation,
    Item,
    Mode,
    RunSpec,
    RunStatus,
    StoredExperiment,
    StoredRun,
)
from store.db import DEFAULT_TIMEOUT_S, Database, utc_now

# Owners are part of this module's surface (callers import ProcessIdentity, owner_alive from here).
from store.owners import ProcessIdentity, owner_alive, this_process
from store.rows import CITATION_ROW, GENERATION_ROW, citation_row, generation_row, insert_items, json_text
from store.run_scores import store_scores

__all__ = ["FINAL_STATUSES", "ResumableRun", "RunConflict", "RunStore"]

FINAL_STATUSES: tuple[RunStatus, ...] = tuple(s for s in RUN_STATUSES if s != "running")


class ResumableRun(NamedTuple):
    """The newest run with a given configuration hash."""

    run_id: str
    experiment_id: str
    status: str


class RunConflict(UserError):
    """A run cannot be created or resumed: the experiment has one of that mode, or a live
    process is generating it."""


class RunStore:
    """Implements engine.sink.Sink over a DuckDB file; safe to use from several processes."""

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 on_finished: Callable[[str], None] | None = None):
        """`on_finished(run_id)`: called after a run's final status is committed (finish_run),
        outside its transaction; the use cases keep the Bias page's values with it (issue 31)."""
        self.database = Database(Path(path), timeout_s)
        self.on_finished = on_finished

    @property
    def path(self) -> Path:
        """The database file."""
        return self.database.path

    def __repr__(self) -> str:
        return f"RunStore({str(self.path)!r})"

    # ------------------------------------------------------------ reads (never create the file)

    def find_experiment(self, spec: ExperimentSpec) -> StoredExperiment | None:
        """The experiment `spec` resolves to now: by name (or id), else the newest with its key."""
        if not self.path.exists():
            return None
        with self.database.connect(read_only=True) as conn:
            return _resolve_experiment(conn, spec)

    def find_resumable(self, config_hash: str) -> ResumableRun | None:
        """(run_id, experiment_id, status) of the newest run with this config hash, if any."""
        if not self.path.exists():
            return None
        with self.database.connect(read_only=True) as conn:
            row = conn.execute(
                "SELECT run_id, experiment_id, status FROM runs WHERE config_hash = ? "
                "ORDER BY created_utc DESC, run_id DESC LIMIT 1",
                [config_hash],
            ).fetchone()
        return ResumableRun(*row) if row else None

    def done_item_ids(self, run_id: str) -> set[str]:
        """Items of this run already stored; the runner skips them on resume."""
        if not self.path.exists():
            return set()
        with self.database.connect(read_only=True) as conn:
            rows = conn.execute(
                "SELECT item_id FROM generations WHERE run_id = ?", [run_id]
            ).fetchall()
        return {row[0] for row in rows}

    # ------------------------------------------------------------ writes

    def claim(
        self,
        spec: ExperimentSpec,
        experiment_id: str,
        expected: Mapping[Mode, str | None],
        runs: Sequence[RunSpec],
        items: Sequence[Item],
    ) -> None:
        """Create or resume `runs` in their experiment and store `items`, in one transaction.

        Refuses (RunConflict, nothing written) when the experiment is no longer as planned:
        another process created it, or a run of a planned mode, meanwhile, or is generating it.
        """
        owner = this_process()
        with self.database.connect() as conn:
            current = _resolve_experiment(conn, spec)
            _check_plan_holds(current, experiment_id, expected)
            if current is None:
                conn.execute(
                    "INSERT INTO experiments (experiment_id, name, experiment_key, created_utc, "
                    "model, dataset, dataset_sha, settings_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [experiment_id, spec.name, spec.key, utc_now(), spec.model, spec.dataset,
                     spec.dataset_sha, json_text(spec.settings)],
                )
            elif current.key is None:
                # An experiment from before keys (or an import) adopts the settings of its first
                # run command, so later commands with the same settings find it.
                conn.execute(
                    "UPDATE experiments SET experiment_key = ?, settings_json = ?, "
                    "model = coalesce(model, ?), dataset = coalesce(dataset, ?), "
                    "dataset_sha = coalesce(dataset_sha, ?) WHERE experiment_id = ?",
                    [spec.key, json_text(spec.settings), spec.model, spec.dataset, spec.dataset_sha,
                     experiment_id],
                )
            for run in runs:
                _create_or_resume(conn, run, owner, check=False)
            insert_items(conn, spec.dataset_sha, items)

    def put_items(self, dataset_sha: str, items: Sequence[Item]) -> None:
        """Store dataset items once per (dataset_sha, item_id); items already stored are kept."""
        with self.database.connect() as conn:
            insert_items(conn, dataset_sha, items)

    def start_run(self, spec: RunSpec) -> None:
        """Create the run with status 'running', or mark an existing one 'running' again.

        Its experiment is created when missing. Refused when the experiment already has another
        run of this mode, or a live process is generating this one.
        """
        with self.database.connect() as conn:
            if conn.execute(
                "SELECT 1 FROM experiments WHERE experiment_id = ?", [spec.experiment_id]
            ).fetchone() is None:
                conn.execute(
                    "INSERT INTO experiments (experiment_id, created_utc, model, dataset, dataset_sha) "
                    "VALUES (?, ?, ?, ?, ?)",
                    [spec.experiment_id, utc_now(), spec.model, spec.dataset, spec.dataset_sha],
                )
            _create_or_resume(conn, spec, this_process(), check=True)

    def write_batch(self, run_id: str, generations: Sequence[Generation]) -> None:
        """Store one finished batch in a single transaction (all or nothing).

        Items this run already holds are skipped whole (generation and citations), so a
        resume after a crash between this commit and the runner's bookkeeping is harmless.
        """
        if not generations:
            return
        with self.database.connect() as conn:
            if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone() is None:
                raise ValueError(f"unknown run {run_id}: call start_run first")
            now = utc_now()
            conn.execute("UPDATE run_owners SET heartbeat_utc = ? WHERE run_id = ?", [now, run_id])
            batch_ids = sorted({g.item_id for g in generations})
            stored = {
                row[0]
                for row in conn.execute(
                    "SELECT item_id FROM generations WHERE run_id = ? AND list_contains(?, item_id)",
                    [run_id, batch_ids],
                ).fetchall()
            }
            fresh: list[Generation] = []
            for generation in generations:
                if generation.item_id not in stored:
                    stored.add(generation.item_id)
                    fresh.append(generation)
            if not fresh:
                return
            conn.execute(
                "INSERT INTO generations SELECT ?, r.item_id, r.prompt, r.answer, r.shown_doc_ids, "
                "r.n_prompt_tokens, r.n_tokens, r.finish_reason, r.token_ids, r.tokens, r.logprobs, "
                f"r.top_logprobs::JSON, ?, r.shown_labels FROM (SELECT unnest(?::{GENERATION_ROW}) AS r)",
                [run_id, now, [generation_row(g) for g in fresh]],
            )
            citations = [citation_row(g.item_id, c) for g in fresh for c in g.citations]
            if citations:
                conn.execute(
                    "INSERT INTO citations SELECT ?, r.item_id, r.citation_index, r.position, "
                    f"r.doc_id, r.relevant, r.probability FROM (SELECT unnest(?::{CITATION_ROW}) AS r)",
                    [run_id, citations],
                )

    def fail_runs(self, run_ids: Sequence[str]) -> None:
        """Mark these runs failed and release them, in ONE transaction: after a full disk, either
        all of them read failed or none changed (still claimed by a dead process: resumable)."""
        ids = list(run_ids)
        if not ids:
            return
        with self.database.connect() as conn:
            conn.execute("UPDATE runs SET status = 'failed', finished_utc = ? "
                         "WHERE list_contains(?, run_id) AND status <> 'complete'", [utc_now(), ids])
            conn.execute("DELETE FROM run_owners WHERE list_contains(?, run_id)", [ids])

    def finish_run(self, run_id: str, status: RunStatus) -> None:
        """Set the final status: 'complete' or 'failed', and release the run."""
        if status not in FINAL_STATUSES:
            raise ValueError(f"final status must be one of {FINAL_STATUSES}, not {status!r}")
        with self.database.connect() as conn:
            updated = conn.execute(
                "UPDATE runs SET status = ?, finished_utc = ? WHERE run_id = ?",
                [status, utc_now(), run_id],
            ).fetchone()
            if not updated or updated[0] == 0:
                raise ValueError(f"unknown run {run_id}")
            conn.execute("DELETE FROM run_owners WHERE run_id = ?", [run_id])
            if status == "complete":
                # The Runs tab's cached averages (store/run_scores.py), in the same transaction
                # as the status so the two cannot disagree: a few ms for a small run, ~0.2 s for
                # 10,000 answers.
                store_scores(conn, run_id)
        if self.on_finished is not None:
            self.on_finished(run_id)


    def update_run_config(self, run_id: str, key: str, update: Callable[[Any], Any]) -> None:
        """Set `key` of a run's config JSON to `update(its value or None)`, in one transaction
        (a served run's token usage, added to what earlier invocations recorded). Never hashed."""
        with self.database.connect() as conn:
            row = conn.execute("SELECT config_json FROM runs WHERE run_id = ?", [run_id]).fetchone()
            if row is None:
                raise ValueError(f"unknown run {run_id}")
            config = json.loads(row[0]) if row[0] else {}
            config[key] = update(config.get(key))
            conn.execute("UPDATE runs SET config_json = ? WHERE run_id = ?", [json_text(config), run_id])

    def record_study(self, name: str, axes: dict[str, Any], experiment_id: str, position: int) -> None:
        """Create the study when new and add the experiment to it (idempotent: a re-run adds nothing)."""
        with self.database.connect() as conn:
            conn.execute(
                "INSERT INTO studies (name, created_utc, axes_json) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                [name, utc_now(), json_text(axes)],
            )
            conn.execute(
                "INSERT INTO study_experiments (study, experiment_id, position) VALUES (?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                [name, experiment_id, position],
            )

    def copy_generations(self, source_run_id: str, run_id: str, item_ids: Sequence[str]) -> int:
        """Copy the source run's generations and citations of these items into `run_id`, in one
        transaction; items the run already holds are skipped. Returns how many were copied.

        This is how a grid shares its vanilla run: the vanilla prompt carries no label, so the
        answers of one metadata type's vanilla run are the answers of every other's.
        """
        if not item_ids:
            return 0
        with self.database.connect() as conn:
            conn.execute("UPDATE run_owners SET heartbeat_utc = ? WHERE run_id = ?", [utc_now(), run_id])
            todo = [row[0] for row in conn.execute(
                "SELECT item_id FROM generations WHERE run_id = ? AND list_contains(?, item_id) "
                "AND item_id NOT IN (SELECT item_id FROM generations WHERE run_id = ?)",
                [source_run_id, list(item_ids), run_id],
            ).fetchall()]
            if not todo:
                return 0
            conn.execute(
                "INSERT INTO generations SELECT * REPLACE (? AS run_id) FROM generations "
                "WHERE run_id = ? AND list_contains(?, item_id)",
                [run_id, source_run_id, todo],
            )
            conn.execute(
                "INSERT INTO citations SELECT * REPLACE (? AS run_id) FROM citations "
                "WHERE run_id = ? AND list_contains(?, item_id)",
                [run_id, source_run_id, todo],
            )
            return len(todo)


# ---------------------------------------------------------------- inside a transaction


_EXPERIMENT_COLUMNS = (
    "experiment_id", "name", "experiment_key", "model", "dataset", "dataset_sha", "settings_json",
)


def _columns(prefix: str = "") -> str:
    return ", ".join(prefix + c for c in _EXPERIMENT_COLUMNS)


def _resolve_experiment(conn, spec: ExperimentSpec) -> StoredExperiment | None:
    """The experiment a run command joins: by name (or id); else, unless --repeat, the newest
    with the same key, or the one holding a run with a requested config hash (older stores)."""
    row = None
    if spec.name is not None:
        for column in ("name", "experiment_id"):
            row = conn.execute(
                f"SELECT {_columns()} FROM experiments WHERE {column} = ?", [spec.name]
            ).fetchone()
            if row is not None:
                break
    elif not spec.new:
        row = conn.execute(
            f"SELECT {_columns()} FROM experiments WHERE experiment_key = ? "
            "ORDER BY created_utc DESC, experiment_id DESC LIMIT 1",
            [spec.key],
        ).fetchone()
        if row is None and spec.run_hashes:
            row = conn.execute(
                f"SELECT {_columns('e.')} "
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
        runs=_stored_runs(conn, experiment_id),
    )


def _stored_runs(conn, experiment_id: str) -> tuple[StoredRun, ...]:
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


def _check_plan_holds(
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


def _create_or_resume(conn, spec: RunSpec, owner: ProcessIdentity, *, check: bool) -> None:
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


