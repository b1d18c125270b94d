"""The DuckDB sink: persists experiments, runs, dataset items and generations, one short transaction each.

Every method opens the database, runs one transaction and closes it again (see store.db for
why), so a CLI run never holds the file while the GPU works and the app can read in between.

Reads never create the file: a run that cannot start (unknown model, prompt too long) must
leave no database behind. Two invariants are checked inside the transaction that creates
runs, where no other process can interleave (DuckDB admits one writer per file): an
experiment holds at most one run per mode, and a run that a
live process is generating is not taken over by another (store.run_plans). The owner (host,
pid, process start time) is recorded in `run_owners` while a run is generated; after kill -9 the
owner is gone, so the run is resumable again. A run is marked complete only if it holds every
answer it plans; one short of answers is left failed, so that a resume fills the gap.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from engine.types import (
    RUN_STATUSES,
    ExperimentSpec,
    Generation,
    Item,
    Mode,
    RunSpec,
    RunStatus,
    StoredExperiment,
)
from store.answer_metrics import keep_answers
from store.db import DEFAULT_TIMEOUT_S, Database, utc_now
from store.owners import this_process
from store.rows import (
    CITATION_ROW,
    GENERATION_ROW,
    ROWS_PER_STATEMENT,
    citation_row,
    generation_row,
    insert_items,
    json_text,
)
from store.run_plans import (  # RunConflict and StoreLostAnswers are part of this module's surface
    RunConflict,
    StoreLostAnswers,
    check_plan_holds,
    create_or_resume,
    resolve_experiment,
    short_of_answers,
)
from store.run_scores import store_scores

__all__ = ["FINAL_STATUSES", "ResumableRun", "RunConflict", "RunStore", "StoreLostAnswers"]

FINAL_STATUSES: tuple[RunStatus, ...] = tuple(s for s in RUN_STATUSES if s != "running")


class ResumableRun(NamedTuple):
    """The newest run with a given configuration hash."""

    run_id: str
    experiment_id: str
    status: str


class RunStore:
    """Implements engine.sink.Sink over a DuckDB file; safe to use from several processes."""

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 on_finished: Callable[[str], None] | None = None):
        """`on_finished(run_id)`: called after a run's final status is committed (finish_run),
        outside its transaction; the use cases keep the Bias page's values with it."""
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
            return resolve_experiment(conn, spec)

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
            current = resolve_experiment(conn, spec)
            check_plan_holds(current, experiment_id, expected)
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
                create_or_resume(conn, run, owner, check=False)
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
            create_or_resume(conn, spec, this_process(), check=True)

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
            for start in range(0, len(fresh), ROWS_PER_STATEMENT):  # one transaction, however split
                part = fresh[start:start + ROWS_PER_STATEMENT]
                conn.execute(
                    "INSERT INTO generations SELECT ?, r.item_id, r.prompt, r.answer, r.shown_doc_ids, "
                    "r.n_prompt_tokens, r.n_tokens, r.finish_reason, r.token_ids, r.tokens, r.logprobs, "
                    f"r.top_logprobs::JSON, ?, r.shown_labels FROM (SELECT unnest(?::{GENERATION_ROW}) AS r)",
                    [run_id, now, [generation_row(g) for g in part]],
                )
                citations = [citation_row(g.item_id, c) for g in part for c in g.citations]
                if citations:
                    conn.execute(
                        "INSERT INTO citations SELECT ?, r.item_id, r.citation_index, r.position, "
                        f"r.doc_id, r.relevant, r.probability FROM (SELECT unnest(?::{CITATION_ROW}) AS r)",
                        [run_id, citations],
                    )
            # Their precision, recall and F1, in the same transaction: the Bias report reads them
            # for a run whose rows kept at completion are not current (store.answer_metrics).
            keep_answers(conn, run_id, [g.item_id for g in fresh])

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
        short: tuple[int, int] | None = None
        with self.database.connect() as conn:
            if status == "complete":
                short = short_of_answers(conn, run_id)
                if short is not None:
                    status = "failed"
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
        if short is not None:
            held, planned = short
            raise StoreLostAnswers(
                f"run {run_id}: the database {self.path} holds {held} of its {planned} answers although "
                "every batch was written; the run is marked failed, and the same command resumes it "
                "and generates the missing answers"
            )
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
            keep_answers(conn, run_id, todo)  # as write_batch does
            return len(todo)
