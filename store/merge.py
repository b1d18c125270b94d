"""Copy complete runs from another store into this one: `python -m engine merge --from OTHER.duckdb`.

This is how results from several GPU machines, or a published results file, come together.
The source is attached READ_ONLY inside one transaction on the target, so the source is never
modified and the target gets all of the merge or none of it. Rules:

- a run is identified by its run id: one the target already holds with the same config hash
  is skipped (merging twice adds nothing); one it holds with another config hash refuses the
  merge, as does a run whose items (same dataset hash and item id) differ between the stores;
- runs that are not complete (running, failed) are skipped and listed;
- an experiment holds at most one run per mode (see run_store.py): a run whose mode is taken
  in its experiment in the target goes into an experiment of its own, `EXPERIMENT~RUN_ID`, the
  name migration 004 gave such runs;
- an experiment's name stays unique: where the target already uses it, the copy is unnamed;
- each merged run's cached averages (run_scores, store/run_scores.py) are computed in the target;
- the explanations and verifications of the runs it copies, and of complete runs the target
  holds already, come along, for the answers the target holds as the source does (same answer,
  same documents shown): what they explain or judge. One the target holds already (same key) is
  kept; one held with another prompt refuses the merge, as a run held with another configuration;
- the judges (migration 019) whose verifications or imported labels come along, and those
  labels, as the explanations and verifications are; a judge the target names as another judge
  (kind, model or mapping), or a label it holds otherwise, refuses the merge;
- the necessity and sufficiency of the documents those runs showed (document_use, migration 020,
  `python -m engine used`), as the explanations are: for the answers the target holds as the
  source does. One the target holds already (same key) is kept: the same answer read again by
  the same model is the same measurement (its numbers may differ in the last digits between
  machines), so it never refuses the merge;
- the studies that group the experiments it copies into (or finds in the target, holding runs
  the target holds already) come along with those memberships. A study name the target has
  already keeps the target's axes and gains the memberships, as `run --study` does when a name
  is used again. A run moved into an experiment of its own leaves its study behind;
- a study's fitted label effects (study_label_effects, migration 021) never come along: see
  _studies_to_refit.

So a second merge of the same source adds nothing.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb

from engine.errors import UserError
from store.db import DEFAULT_TIMEOUT_S, DbLike, as_database, file_lock, open_with_retry
from store.db_errors import read_error
from store.db_lock import store_lock
from store.migrations import applied_versions, pending_migrations, refuse_newer_schema
from store.run_scores import store_scores

_SOURCE = "merge_source"  # the attached source's catalog name
_MAX_NAMED = 5  # runs named in a refusal; the rest are counted
_RUN_MAP = "STRUCT(run_id VARCHAR, experiment_id VARCHAR)[]"


class MergeRefused(UserError):
    """The merge would break a rule of the store; nothing was written."""


@dataclass(frozen=True)
class SkippedRun:
    """A source run that was not merged, and why."""

    run_id: str
    experiment_id: str
    mode: str
    reason: str


@dataclass(frozen=True)
class MovedRun:
    """A merged run that went into an experiment of its own, as its mode was taken."""

    run_id: str
    mode: str
    from_experiment: str
    to_experiment: str
    taken_by: str  # the target's run of that mode in from_experiment


@dataclass(frozen=True)
class MergeResult:
    """What a merge copied, and what it left out."""

    merged: tuple[str, ...]  # run ids, oldest first
    n_generations: int
    n_citations: int
    n_items_new: int
    n_experiments_new: int
    already: tuple[str, ...]  # complete source runs the target held already
    skipped: tuple[SkippedRun, ...]  # source runs that are not complete
    moved: tuple[MovedRun, ...]
    unnamed: tuple[tuple[str, str], ...]  # (experiment id, name) copied without its name, taken in the target
    # What came along with the runs; last, with defaults, so that older readers keep working.
    n_explanations: int = 0
    n_verifications: int = 0
    n_studies_new: int = 0
    n_study_experiments: int = 0  # memberships (study, experiment) new in the target
    n_left_out: int = 0  # explanations and verifications of answers that differ between the stores
    n_propensities: int = 0  # citation_propensities rows
    n_judges_new: int = 0  # judges rows (migration 019) the target lacked
    n_judge_labels: int = 0  # imported human labels (judge_labels) copied
    n_document_use: int = 0  # document_use rows (migration 020) copied
    refit: tuple[str, ...] = ()  # studies whose label effects (migration 021) to refit after this merge


def check_source(path: str | os.PathLike[str], *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Path:
    """The source path, or a one-line UserError: missing, a folder, not DuckDB, another schema."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"no database at {path}")
    if path.is_dir():
        raise UserError(f"cannot open database {path}: it is a folder")
    deadline = time.monotonic() + timeout_s
    with file_lock(path, deadline), store_lock(path, shared=True, deadline=deadline):
        conn = open_with_retry(path, read_only=True, deadline=deadline)
        try:
            if not applied_versions(conn):
                raise UserError(f"database {path} is not a PAttriEval store (it has no schema_migrations table)")
            refuse_newer_schema(conn, f"database {path}")
            if pending_migrations(conn):
                # Migrating it here would modify the source, which a merge never does.
                raise UserError(
                    f"database {path} has an older schema; upgrade it first with: python -m engine list --db {path}"
                )
        except duckdb.IOException as err:
            raise read_error(path, err) from err
        finally:
            conn.close()
    return path


def merge_stores(target: DbLike, source: str | os.PathLike[str]) -> MergeResult:
    """Copy the complete runs of `source` (with experiments, items, generations, citations) into
    `target` in one transaction; MergeRefused (nothing written) on a clash."""
    database = as_database(target)
    source = check_source(source, timeout_s=database.timeout_s)
    if database.path.exists() and os.path.samefile(database.path, source):
        raise UserError("the source and the target are the same database")
    deadline = time.monotonic() + database.timeout_s
    with database.connect() as conn, file_lock(source, deadline), store_lock(source, shared=True, deadline=deadline):
        _attach(conn, source)
        try:
            return _merge(conn)
        finally:
            # Closing the connection would detach it, but a session's stays open (store.db). After
            # a failed statement the transaction refuses even this; its rollback ends the merge.
            with contextlib.suppress(duckdb.Error):
                conn.execute(f"DETACH {_SOURCE}")


def _attach(conn: duckdb.DuckDBPyConnection, source: Path) -> None:
    """Attach the source read-only inside the target's transaction (it detaches when the connection closes)."""
    literal = str(source).replace("'", "''")
    try:
        conn.execute(f"ATTACH '{literal}' AS {_SOURCE} (READ_ONLY)")
    except duckdb.IOException as err:
        if "Could not set lock" in str(err):
            raise UserError(f"database {source} is locked by another process; try again when it is done") from err
        raise read_error(source, err) from err


def _merge(conn: duckdb.DuckDBPyConnection) -> MergeResult:
    """Check every source run against the target, refuse on a clash, then copy; inside one transaction."""
    src = _SOURCE
    runs = conn.execute(
        f"SELECT run_id, experiment_id, rag_mode, status, config_hash FROM {src}.runs ORDER BY created_utc, run_id"
    ).fetchall()
    held = {
        run_id: (config_hash, status)
        for run_id, config_hash, status in conn.execute(
            f"SELECT run_id, config_hash, status FROM runs WHERE run_id IN (SELECT run_id FROM {src}.runs)"
        ).fetchall()
    }
    skipped: list[SkippedRun] = []
    already: list[str] = []
    clashes: list[str] = []
    candidates: list[tuple[str, str, str]] = []  # run_id, experiment_id, mode
    for run_id, experiment_id, mode, status, config_hash in runs:
        if status != "complete":
            skipped.append(SkippedRun(run_id, experiment_id, mode, f"{status}, not complete"))
        elif run_id in held:
            if held[run_id][0] != config_hash:
                clashes.append(f"run {run_id} exists in the target with another configuration")
            elif held[run_id][1] != "complete":
                # Replacing a run a process may still be generating would break its resume.
                skipped.append(SkippedRun(run_id, experiment_id, mode,
                                          f"the target holds it as {held[run_id][1]}; finish or remove it there first"))
            else:
                already.append(run_id)
        else:
            candidates.append((run_id, experiment_id, mode))
    ids = [c[0] for c in candidates]
    for run_id, item_id, sha in conn.execute(
        f"""
        SELECT g.run_id, min(g.item_id), any_value(r.dataset_sha)
        FROM {src}.generations g
        JOIN {src}.runs r USING (run_id)
        JOIN {src}.items s ON s.dataset_sha = r.dataset_sha AND s.item_id = g.item_id
        JOIN items t ON t.dataset_sha = s.dataset_sha AND t.item_id = s.item_id
        WHERE g.run_id IN (SELECT unnest($ids))
          AND (s.question IS DISTINCT FROM t.question OR s.answers IS DISTINCT FROM t.answers
               OR s.documents IS DISTINCT FROM t.documents)
        GROUP BY g.run_id ORDER BY g.run_id
        """,
        {"ids": ids},
    ).fetchall():
        clashes.append(f"run {run_id}: item '{item_id}' of dataset {sha[:8]} differs between the stores")
    carried = ids + already  # the runs whose explanations and verifications come along
    clashes += _annotation_clashes(conn, carried)
    clashes += _judge_clashes(conn, carried)
    if clashes:
        more = f"; and {len(clashes) - _MAX_NAMED} more" if len(clashes) > _MAX_NAMED else ""
        raise MergeRefused("merge refused, nothing written: " + "; ".join(clashes[:_MAX_NAMED]) + more)

    placement, moved = _place(conn, candidates)
    experiments_new, unnamed = _create_experiments(conn, candidates, placement)
    run_map = [{"run_id": r, "experiment_id": placement[r]} for r in ids]
    conn.execute(
        f"INSERT INTO runs BY NAME SELECT r.* REPLACE (m.experiment_id AS experiment_id) "
        f"FROM {src}.runs r JOIN (SELECT unnest(?::{_RUN_MAP}, recursive := true)) m ON m.run_id = r.run_id",
        [run_map],
    )
    n_items = _count(conn.execute(
        f"""
        INSERT INTO items BY NAME
        SELECT s.* FROM {src}.items s
        WHERE EXISTS (
                SELECT 1 FROM {src}.generations g JOIN {src}.runs r USING (run_id)
                WHERE g.run_id IN (SELECT unnest($ids)) AND r.dataset_sha = s.dataset_sha AND g.item_id = s.item_id)
          AND NOT EXISTS (SELECT 1 FROM items t WHERE t.dataset_sha = s.dataset_sha AND t.item_id = s.item_id)
        """,
        {"ids": ids},
    ))
    n_generations = _count(conn.execute(
        f"INSERT INTO generations BY NAME SELECT * FROM {src}.generations WHERE run_id IN (SELECT unnest($ids))",
        {"ids": ids},
    ))
    n_citations = _count(conn.execute(
        f"INSERT INTO citations BY NAME SELECT * FROM {src}.citations WHERE run_id IN (SELECT unnest($ids))",
        {"ids": ids},
    ))
    for run_id in ids:
        # Recomputed here rather than copied: the source's row may be stale or missing (a store
        # written by older code), and the items are the target's now (checked equal above).
        store_scores(conn, run_id)
    n_explanations, n_verifications, n_left_out = _copy_annotations(conn, carried)
    n_judges, n_judge_labels, n_labels_left_out = _copy_judges(conn, carried)
    n_use, n_use_left_out = _copy_same_answers(conn, "document_use", _USE_KEY, carried)
    n_studies, n_memberships, related, gained = _copy_studies(conn, carried)
    n_propensities = _copy_propensities(conn, carried)
    return MergeResult(tuple(ids), n_generations, n_citations, n_items, experiments_new, tuple(already),
                       tuple(skipped), tuple(moved), tuple(unnamed), n_explanations, n_verifications, n_studies,
                       n_memberships, n_left_out + n_labels_left_out + n_use_left_out, n_propensities, n_judges,
                       n_judge_labels, n_use, _studies_to_refit(conn, ids, related, gained))


# Explanations and verifications, keyed as in migrations 008, 010 and 027 (a judge's verdicts on
# a base run's sentences under either label, for its own label bias). Each explains or judges one
# stored answer: copied only where the target holds that answer as the source does.
_ANNOTATIONS = (
    ("explanations", ("run_id", "item_id", "explainer_model"), "the explanation of item '{1}' by {2}"),
    ("verifications", ("run_id", "item_id", "sentence_index", "position", "judge_model"),
     "the verification of item '{1}', sentence {2}, document [{3}] by {4}"),
    ("judge_label_verdicts", ("run_id", "item_id", "sentence_index", "position", "judge_model", "label_from",
                              "label_shown"),
     "the label-bias verdict of item '{1}', sentence {2}, document [{3}] by {4} ({5}, shown {6})"),
)


def _annotation_clashes(conn: duckdb.DuckDBPyConnection, carried: list[str]) -> list[str]:
    """A line for each explanation or verification both stores hold under one key but with
    another prompt (or document, for a verification): not the same thing, so never merged."""
    clashes = []
    for table, key, what in _ANNOTATIONS:
        same_key = " AND ".join(f"t.{k} = s.{k}" for k in key)
        differs = "s.prompt IS DISTINCT FROM t.prompt" + (
            " OR s.doc_id IS DISTINCT FROM t.doc_id" if table != "explanations" else "")
        for row in conn.execute(
            f"SELECT {', '.join(f's.{k}' for k in key)} FROM {_SOURCE}.{table} s JOIN {table} t ON {same_key} "
            f"WHERE s.run_id IN (SELECT unnest($ids)) AND ({differs}) ORDER BY ALL LIMIT {_MAX_NAMED + 1}",
            {"ids": carried},
        ).fetchall():
            clashes.append(f"run {row[0]}: {what.format(*row)} exists in the target with another prompt")
    return clashes


def _copy_annotations(conn: duckdb.DuckDBPyConnection, carried: list[str]) -> tuple[int, int, int]:
    """(explanations copied, verifications copied (label-bias verdicts among them), rows left out
    as their answer differs)."""
    (n_explanations, left_explanations), (n_verifications, left_verifications), (n_label, left_label) = (
        _copy_same_answers(conn, table, key, carried) for table, key, _ in _ANNOTATIONS)
    return n_explanations, n_verifications + n_label, left_explanations + left_verifications + left_label


def _copy_same_answers(conn: duckdb.DuckDBPyConnection, table: str, key: tuple[str, ...],
                       carried: list[str]) -> tuple[int, int]:
    """(rows copied, rows left out as their answer differs) of a table of rows about one stored
    answer of the carried runs: copied where the target holds that answer as the source does and
    lacks the row's key; a row the target holds under that key is kept."""
    same_key = " AND ".join(f"t.{k} = s.{k}" for k in key)
    # The answer as explained, judged or read: its text and the documents it was shown, numbered.
    same_answer = "sg.answer IS NOT DISTINCT FROM tg.answer AND sg.shown_doc_ids IS NOT DISTINCT FROM tg.shown_doc_ids"
    todo = (f"FROM {_SOURCE}.{table} s "
            f"JOIN {_SOURCE}.generations sg ON sg.run_id = s.run_id AND sg.item_id = s.item_id "
            "LEFT JOIN generations tg ON tg.run_id = s.run_id AND tg.item_id = s.item_id "
            "WHERE s.run_id IN (SELECT unnest($ids)) "
            f"AND NOT EXISTS (SELECT 1 FROM {table} t WHERE {same_key})")
    copied = _count(conn.execute(
        f"INSERT INTO {table} BY NAME SELECT s.* {todo} AND tg.run_id IS NOT NULL AND {same_answer}", {"ids": carried}))
    left_out = _count(conn.execute(
        f"SELECT count(*) {todo} AND (tg.run_id IS NULL OR NOT ({same_answer}))", {"ids": carried}))
    return copied, left_out


# Imported human labels (judge_labels, migration 019) of the answers the target holds as the
# source does, and the judges (their kind, model and provenance) whose verdicts come along.
_LABEL_KEY = ("run_id", "item_id", "position", "judge")
_JUDGED_BY = (f"SELECT judge_model FROM {_SOURCE}.verifications WHERE run_id IN (SELECT unnest($ids)) "
              f"UNION SELECT judge_model FROM {_SOURCE}.judge_label_verdicts WHERE run_id IN (SELECT unnest($ids)) "
              f"UNION SELECT judge FROM {_SOURCE}.judge_labels WHERE run_id IN (SELECT unnest($ids))")


def _judge_clashes(conn: duckdb.DuckDBPyConnection, carried: list[str]) -> list[str]:
    """A line for each judge both stores name but as another judge (kind, model or mapping), and
    each label both hold under one key with another label or document."""
    clashes = [f"judge '{judge}' exists in the target as another judge (kind, model or mapping)"
               for judge, in conn.execute(
                   f"SELECT s.judge FROM {_SOURCE}.judges s JOIN judges t USING (judge) "
                   f"WHERE s.judge IN ({_JUDGED_BY}) AND (s.kind IS DISTINCT FROM t.kind "
                   "OR s.model_id IS DISTINCT FROM t.model_id OR s.mapping IS DISTINCT FROM t.mapping) "
                   f"ORDER BY ALL LIMIT {_MAX_NAMED + 1}", {"ids": carried}).fetchall()]
    same_key = " AND ".join(f"t.{k} = s.{k}" for k in _LABEL_KEY)
    for run_id, item_id, position, judge in conn.execute(
        f"SELECT s.run_id, s.item_id, s.position, s.judge FROM {_SOURCE}.judge_labels s JOIN judge_labels t "
        f"ON {same_key} WHERE s.run_id IN (SELECT unnest($ids)) "
        f"AND (s.label IS DISTINCT FROM t.label OR s.doc_id IS DISTINCT FROM t.doc_id) ORDER BY ALL LIMIT {_MAX_NAMED + 1}",
        {"ids": carried},
    ).fetchall():
        clashes.append(f"run {run_id}: the label of item '{item_id}', document [{position}] by {judge} "
                       "exists in the target with another label")
    return clashes


def _copy_judges(conn: duckdb.DuckDBPyConnection, carried: list[str]) -> tuple[int, int, int]:
    """(judges new, labels copied, labels left out as their answer differs)."""
    n_judges = _count(conn.execute(
        f"INSERT INTO judges BY NAME SELECT s.* FROM {_SOURCE}.judges s WHERE s.judge IN ({_JUDGED_BY}) "
        "AND NOT EXISTS (SELECT 1 FROM judges t WHERE t.judge = s.judge)", {"ids": carried}))
    return n_judges, *_copy_same_answers(conn, "judge_labels", _LABEL_KEY, carried)


# document_use (migration 020): one row per (run, item, shown position, model that read it).
_USE_KEY = ("run_id", "item_id", "position", "model")


def _copy_studies(conn: duckdb.DuckDBPyConnection,
                  carried: list[str]) -> tuple[int, int, frozenset[str], frozenset[str]]:
    """(studies new, memberships new, the studies they are of, those that gained one): the
    source's memberships of every experiment that holds a carried run in both stores under the
    same id, and the studies they name."""
    experiments = [row[0] for row in conn.execute(
        f"SELECT DISTINCT s.experiment_id FROM {_SOURCE}.runs s JOIN runs t USING (run_id) "
        "WHERE s.run_id IN (SELECT unnest($ids)) AND t.experiment_id = s.experiment_id",
        {"ids": carried},
    ).fetchall()]
    if not experiments:
        return 0, 0, frozenset(), frozenset()
    params = {"experiments": experiments}
    memberships = (f"SELECT * FROM {_SOURCE}.study_experiments m WHERE m.experiment_id IN (SELECT unnest($experiments))")
    new = "NOT EXISTS (SELECT 1 FROM study_experiments t WHERE t.study = m.study AND t.experiment_id = m.experiment_id)"
    related = frozenset(row[0] for row in conn.execute(f"SELECT DISTINCT study FROM ({memberships})", params).fetchall())
    gained = frozenset(row[0] for row in conn.execute(
        f"SELECT DISTINCT study FROM ({memberships}) m WHERE {new}", params).fetchall())
    n_studies = _count(conn.execute(
        f"INSERT INTO studies BY NAME SELECT s.* FROM {_SOURCE}.studies s "
        f"WHERE s.name IN (SELECT study FROM ({memberships})) "
        "AND NOT EXISTS (SELECT 1 FROM studies t WHERE t.name = s.name)",
        params,
    ))
    n_memberships = _count(conn.execute(
        f"INSERT INTO study_experiments BY NAME SELECT m.* FROM ({memberships}) m WHERE {new}", params))
    return n_studies, n_memberships, related, gained


def _studies_to_refit(conn: duckdb.DuckDBPyConnection, ids: list[str], related: frozenset[str],
                      gained: frozenset[str]) -> tuple[str, ...]:
    """The studies whose label effects (study_label_effects) to refit after this merge: every
    study of the target that this merge changed (gained an experiment, or a run in one of its
    experiments) and that either store holds a fit of, and every study the merge relates to
    whose fit the source holds and the target does not.

    The effects are never copied. They are one model fitted over all of a study's experiments,
    so a copy is right only where the target's study ends up with exactly the source's
    experiments and runs, and checking that (every experiment, run and answer of the study on
    both sides) is more code and more reading than the refit, which needs no model
    (`why-cited --study NAME --save` reads only the store). A fit the target holds of a study
    this merge changed is stale likewise, and kept as it is: a refit of the same modes replaces it."""
    touched = set(gained) | {row[0] for row in conn.execute(
        "SELECT DISTINCT m.study FROM study_experiments m JOIN runs r USING (experiment_id) "
        "WHERE r.run_id IN (SELECT unnest($ids))", {"ids": ids}).fetchall()}
    fitted_source = {row[0] for row in conn.execute(f"SELECT DISTINCT study FROM {_SOURCE}.study_label_effects").fetchall()}
    fitted_target = {row[0] for row in conn.execute("SELECT DISTINCT study FROM study_label_effects").fetchall()}
    return tuple(sorted(
        {s for s in touched if s in fitted_source | fitted_target}
        | {s for s in related - touched if s in fitted_source and s not in fitted_target}))


def _copy_propensities(conn: duckdb.DuckDBPyConnection, carried: list[str]) -> int:
    """Rows new in the target: the citation propensities of every source experiment whose
    vanilla, base and cf runs the target now holds in that same experiment, so that the answers
    and prompts the probe read are the target's too."""
    return _count(conn.execute(
        f"INSERT OR IGNORE INTO citation_propensities BY NAME SELECT p.* FROM {_SOURCE}.citation_propensities p "
        "WHERE p.experiment_id IN ("
        f"  SELECT s.experiment_id FROM {_SOURCE}.runs s JOIN runs t USING (run_id) "
        "   WHERE s.run_id IN (SELECT unnest($ids)) AND t.experiment_id = s.experiment_id "
        "     AND s.rag_mode IN ('vanilla', 'base', 'cf') "
        "   GROUP BY s.experiment_id HAVING count(DISTINCT s.rag_mode) = 3)",
        {"ids": carried},
    ))


def _place(conn, candidates: list[tuple[str, str, str]]) -> tuple[dict[str, str], list[MovedRun]]:
    """The target experiment of each run: its own, or EXPERIMENT~RUN_ID where its mode is taken."""
    taken = {(e, m): r for r, e, m in conn.execute("SELECT run_id, experiment_id, rag_mode FROM runs").fetchall()}
    placement: dict[str, str] = {}
    moved: list[MovedRun] = []
    for run_id, experiment_id, mode in candidates:
        where = experiment_id
        if (experiment_id, mode) in taken:
            where = f"{experiment_id}~{run_id}"
            if (where, mode) in taken:
                raise MergeRefused(f"merge refused, nothing written: experiment {where} already has a {mode} run")
            moved.append(MovedRun(run_id, mode, experiment_id, where, taken[(experiment_id, mode)]))
        taken[(where, mode)] = run_id
        placement[run_id] = where
    return placement, moved


def _create_experiments(conn, candidates, placement: dict[str, str]) -> tuple[int, list[tuple[str, str]]]:
    """Insert the experiments rows the merged runs need and the target lacks (copied from the source)."""
    existing = {row[0] for row in conn.execute("SELECT experiment_id FROM experiments").fetchall()}
    names = {row[0]: row[1] for row in conn.execute(
        "SELECT name, experiment_id FROM experiments WHERE name IS NOT NULL").fetchall()}
    created = 0
    unnamed: list[tuple[str, str]] = []
    for run_id, experiment_id, _ in candidates:
        where = placement[run_id]
        if where in existing:
            continue
        row = conn.execute(f"SELECT name FROM {_SOURCE}.experiments WHERE experiment_id = ?", [experiment_id]).fetchone()
        own = where == experiment_id  # a moved run's experiment is new: no name, no key
        name = row[0] if row and own else None
        if name is not None and name in names:
            unnamed.append((where, name))
            name = None
        if row:
            conn.execute(
                "INSERT INTO experiments (experiment_id, name, experiment_key, created_utc, model, dataset, "
                f"dataset_sha, settings_json) SELECT ?, ?, CASE WHEN ? THEN experiment_key END, created_utc, model, "
                f"dataset, dataset_sha, settings_json FROM {_SOURCE}.experiments WHERE experiment_id = ?",
                [where, name, own, experiment_id],
            )
        else:  # a source run without its experiments row: made as start_run makes one
            conn.execute(
                "INSERT INTO experiments (experiment_id, created_utc, model, dataset, dataset_sha) "
                f"SELECT ?, created_utc, model, dataset, dataset_sha FROM {_SOURCE}.runs WHERE run_id = ?",
                [where, run_id],
            )
        if name is not None:
            names[name] = where
        existing.add(where)
        created += 1
    return created, unnamed


def _count(cursor: duckdb.DuckDBPyConnection) -> int:
    """Rows an INSERT wrote, or a SELECT count(*)."""
    row = cursor.fetchone()
    return int(row[0]) if row else 0
