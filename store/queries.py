"""All read-side SQL: the app and the CLI read runs, generations and citations through here.

Every function takes a database (a path, a store.db.Database or a RunStore), opens one
short read-only transaction (see store.db) and returns a pandas DataFrame, a frozen
dataclass or a plain value. `run_readonly_sql` runs a visitor's SQL in a sandbox.

pandas is imported only by the functions that build DataFrames: importing it takes longer
than the whole `python -m engine bias` command, which reads through plain tuples here
(scripts/bench_bias.py measures it). The sandbox's modules load with run_readonly_sql, for
the same reason.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

import duckdb
import numpy as np

from engine.errors import UserError
from engine.types import MODES
from store.db import DbLike, as_database
from store.run_scores import live_scores

if TYPE_CHECKING:
    import pandas as pd

# Columns shown in run listings; the full record (provenance, config) comes from get_run.
_RUN_COLUMNS = """
  r.run_id, r.experiment_id, r.created_utc, r.finished_utc, r.status, r.model,
  r.quantization, r.dataset, r.metadata_type, r.rag_mode, r.seed, r.prompt_version,
  r.n_items, coalesce(d.n_done, 0) AS n_done
"""
# An experiment by id, or by the name `run --experiment NAME` gave it.
_RESOLVE_EXPERIMENT = (
    "SELECT experiment_id FROM runs WHERE experiment_id = $ref "
    "UNION ALL SELECT experiment_id FROM experiments WHERE name = $ref LIMIT 1"
)
_DONE = "(SELECT run_id, count(*) AS n_done FROM generations GROUP BY run_id)"

def _mode_order(column: str) -> str:
    """A SQL expression sorting modes in engine.types.MODES order (unknown modes last)."""
    cases = " ".join(f"WHEN '{mode}' THEN {i}" for i, mode in enumerate(MODES))
    return f"CASE {column} {cases} ELSE {len(MODES)} END"


_MODE_ORDER = _mode_order("r.rag_mode")

# The parent's only checks on visitor SQL (parsing happens in the sandboxed child): a query
# longer than this, or nesting brackets deeper, is refused before a process is started.
SQL_MAX_CHARS = 100_000
SQL_MAX_DEPTH = 64


@dataclass(frozen=True)
class RunInfo:
    """One run's full record, with its JSON columns parsed and its count of stored items."""

    run_id: str
    experiment_id: str
    config_hash: str
    created_utc: Any
    finished_utc: Any
    status: str
    model: str
    model_revision: str | None
    quantization: str | None
    dtype: str | None
    device: str | None
    dataset: str | None
    dataset_sha: str
    metadata_type: str | None
    rag_mode: str
    seed: int | None
    prompt_version: str | None
    git_sha: str | None
    library_versions: dict[str, Any]
    config: dict[str, Any]
    n_items: int | None
    n_done: int


@dataclass(frozen=True)
class GenerationDetail:
    """Everything about one answer: prompt, shown documents, tokens and citations."""

    run_id: str
    item_id: str
    question: str | None
    gold_answers: tuple[str, ...]
    prompt: str | None
    answer: str
    finish_reason: str | None
    n_prompt_tokens: int | None
    n_tokens: int | None
    documents: pd.DataFrame  # position (1-based, as shown), doc_id, title, text, relevant, cited
    tokens: pd.DataFrame  # step (from 0), token_id, token, logprob, probability, top
    citations: pd.DataFrame  # citation_index, position, doc_id, relevant, probability


@dataclass(frozen=True)
class SqlResult:
    """A visitor's query result, cut at max_rows."""

    frame: pd.DataFrame
    truncated: bool
    elapsed_s: float


def list_runs(db: DbLike) -> pd.DataFrame:
    """All runs, newest first, with how many items each has stored (n_done)."""
    return _query(
        db,
        f"SELECT {_RUN_COLUMNS} FROM runs r LEFT JOIN {_DONE} d USING (run_id) "
        "ORDER BY r.created_utc DESC, r.run_id DESC",
    )


def get_run(db: DbLike, run_id: str) -> RunInfo | None:
    """One run's full record, or None if there is no such run."""
    frame = _query(
        db,
        f"SELECT r.*, coalesce(d.n_done, 0) AS n_done FROM runs r LEFT JOIN {_DONE} d "
        "USING (run_id) WHERE r.run_id = ?",
        [run_id],
    )
    if frame.empty:
        return None
    row = {k: _plain(v) for k, v in frame.iloc[0].items()}
    row["library_versions"] = json.loads(row["library_versions"] or "{}")
    row["config"] = json.loads(row.pop("config_json") or "{}")
    return RunInfo(**row)


def list_experiments(db: DbLike) -> pd.DataFrame:
    """One row per experiment, newest first: its modes, runs, progress and overall status."""
    return _query(
        db,
        f"""
        SELECT r.experiment_id,
               min(r.created_utc) AS created_utc,
               max(r.finished_utc) AS finished_utc,
               CASE WHEN bool_or(r.status = 'running') THEN 'running'
                    WHEN bool_or(r.status = 'failed') THEN 'failed'
                    ELSE 'complete' END AS status,
               any_value(r.model) AS model,
               any_value(r.dataset) AS dataset,
               any_value(r.metadata_type) AS metadata_type,
               list(r.rag_mode ORDER BY {_MODE_ORDER}) AS modes,
               list(r.run_id ORDER BY {_MODE_ORDER}) AS run_ids,
               count(*) AS n_runs,
               max(r.n_items) AS n_items,
               CAST(sum(coalesce(d.n_done, 0)) AS BIGINT) AS n_done
        FROM runs r LEFT JOIN {_DONE} d USING (run_id)
        GROUP BY r.experiment_id
        ORDER BY min(r.created_utc) DESC, r.experiment_id DESC
        """,
    )


def runs_for_experiment(db: DbLike, experiment_id: str) -> pd.DataFrame:
    """The runs of one experiment in mode order (vanilla, base, cf)."""
    return _query(
        db,
        f"SELECT {_RUN_COLUMNS} FROM runs r LEFT JOIN {_DONE} d USING (run_id) "
        f"WHERE r.experiment_id = ? ORDER BY {_MODE_ORDER}, r.created_utc, r.run_id",
        [experiment_id],
    )


def done_counts(db: DbLike) -> pd.DataFrame:
    """Progress per run: run_id, status, n_items and n_done (items stored so far)."""
    return _query(
        db,
        f"SELECT r.run_id, r.status, r.n_items, coalesce(d.n_done, 0) AS n_done "
        f"FROM runs r LEFT JOIN {_DONE} d USING (run_id) ORDER BY r.created_utc DESC, r.run_id",
    )


def generations_for_run(db: DbLike, run_id: str) -> pd.DataFrame:
    """One row per stored answer of a run, in the order written, with its item and citations.

    shown_relevant is aligned with shown_doc_ids; cited_positions are the numbers n as
    written in the answer (1-based as shown) and cited_doc_ids the documents they name
    (None where n was out of range); relevant_doc_ids come from the dataset item.
    """
    return _query(
        db,
        """
        WITH cites AS (
          SELECT item_id,
                 list(position ORDER BY citation_index) AS cited_positions,
                 list(doc_id ORDER BY citation_index) AS cited_doc_ids,
                 list(probability ORDER BY citation_index) AS citation_probabilities
          FROM citations WHERE run_id = $run GROUP BY item_id)
        SELECT g.item_id,
               i.question,
               i.answers AS gold_answers,
               g.answer,
               g.shown_doc_ids,
               list_transform(g.shown_doc_ids,
                 lambda s: list_filter(i.documents, lambda d: d.id = s)[1].relevant
               ) AS shown_relevant,
               list_transform(list_filter(i.documents, lambda d: d.relevant), lambda d: d.id)
                 AS relevant_doc_ids,
               coalesce(c.cited_positions, []) AS cited_positions,
               coalesce(c.cited_doc_ids, []) AS cited_doc_ids,
               coalesce(c.citation_probabilities, []) AS citation_probabilities,
               g.n_prompt_tokens, g.n_tokens, g.finish_reason, g.created_utc
        FROM generations g
        JOIN runs r ON r.run_id = g.run_id
        LEFT JOIN items i ON i.dataset_sha = r.dataset_sha AND i.item_id = g.item_id
        LEFT JOIN cites c ON c.item_id = g.item_id
        WHERE g.run_id = $run
        ORDER BY g.created_utc, g.rowid
        """,
        {"run": run_id},
    )


def citations_for_run(db: DbLike, run_id: str) -> pd.DataFrame:
    """Every citation of a run: item_id, citation_index, position, doc_id, relevant, probability."""
    return _query(
        db,
        "SELECT item_id, citation_index, position, doc_id, relevant, probability "
        "FROM citations WHERE run_id = ? ORDER BY item_id, citation_index",
        [run_id],
    )


def generation_detail(db: DbLike, run_id: str, item_id: str) -> GenerationDetail | None:
    """Prompt, answer, shown documents, tokens and citations of one answer; None if absent."""
    with as_database(db).connect(read_only=True) as conn:
        head = conn.execute(
            """
            SELECT g.prompt, g.answer, g.finish_reason, g.n_prompt_tokens, g.n_tokens,
                   i.question, i.answers, g.top_logprobs
            FROM generations g
            JOIN runs r ON r.run_id = g.run_id
            LEFT JOIN items i ON i.dataset_sha = r.dataset_sha AND i.item_id = g.item_id
            WHERE g.run_id = ? AND g.item_id = ?
            """,
            [run_id, item_id],
        ).fetchone()
        if head is None:
            return None
        documents = _frame(
            conn.execute(
                """
                WITH shown AS (
                  SELECT unnest(g.shown_doc_ids) AS doc_id,
                         unnest(range(1, len(g.shown_doc_ids) + 1)) AS position,
                         r.dataset_sha
                  FROM generations g JOIN runs r USING (run_id)
                  WHERE g.run_id = $run AND g.item_id = $item),
                docs AS (
                  SELECT unnest(documents) AS d FROM items i, (SELECT DISTINCT dataset_sha FROM shown) s
                  WHERE i.dataset_sha = s.dataset_sha AND i.item_id = $item)
                SELECT s.position, s.doc_id, docs.d.title AS title, docs.d.text AS text,
                       docs.d.relevant AS relevant,
                       s.position IN (SELECT position FROM citations
                                      WHERE run_id = $run AND item_id = $item) AS cited
                FROM shown s LEFT JOIN docs ON docs.d.id = s.doc_id
                ORDER BY s.position
                """,
                {"run": run_id, "item": item_id},
            )
        )
        tokens = _frame(
            conn.execute(
                "SELECT step, token_id, token, logprob, exp(logprob) AS probability "
                "FROM tokens WHERE run_id = ? AND item_id = ? ORDER BY step",
                [run_id, item_id],
            )
        )
        citations = _frame(
            conn.execute(
                "SELECT citation_index, position, doc_id, relevant, probability FROM citations "
                "WHERE run_id = ? AND item_id = ? ORDER BY citation_index",
                [run_id, item_id],
            )
        )
    prompt, answer, finish_reason, n_prompt, n_tokens, question, gold, top_json = head
    top = json.loads(top_json) if top_json else None
    tokens["top"] = [top[i] if top and i < len(top) else None for i in range(len(tokens))]
    return GenerationDetail(
        run_id=run_id,
        item_id=item_id,
        question=question,
        gold_answers=tuple(gold or ()),
        prompt=prompt,
        answer=answer,
        finish_reason=finish_reason,
        n_prompt_tokens=n_prompt,
        n_tokens=n_tokens,
        documents=documents,
        tokens=tokens,
        citations=citations,
    )


def table_columns(db: DbLike) -> pd.DataFrame:
    """The tables and views a user can query, with their columns, for the app's SQL tab."""
    return _query(
        db,
        """
        SELECT c.table_name, CASE WHEN v.view_name IS NULL THEN 'table' ELSE 'view' END AS kind,
               c.column_name, c.data_type
        FROM duckdb_columns() c
        LEFT JOIN duckdb_views() v
          ON v.database_name = c.database_name AND v.schema_name = c.schema_name
         AND v.view_name = c.table_name
        WHERE c.database_name = current_database() AND c.schema_name = 'main'
          AND c.table_name <> 'schema_migrations'
        ORDER BY c.table_name, c.column_index
        """,
    )


def run_readonly_sql(
    db: DbLike,
    sql: str,
    max_rows: int = 1000,
    timeout_s: float = 10.0,
    *,
    memory_limit: str = "256MB",
    threads: int = 1,
    max_result_bytes: int = 16_000_000,
    max_address_space: int | None = 2 * 1024**3,
) -> SqlResult:
    """Run one read-only query from a visitor, sandboxed; bad or blocked SQL raises UserError.

    Only one SELECT-like statement passes (SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW,
    SUMMARIZE, EXPLAIN without ANALYZE), with nothing nested that writes, and no file
    reading. Here the text is only bounded (length, bracket depth, valid Unicode); parsing
    and checking happen in a child process (store.sandbox) that then runs it on a read-only
    connection with no file system or external access, bounded memory, threads and address
    space, a locked configuration and a scrubbed environment; the child is killed if it
    outlives its limits. Rows are cut at max_rows or max_result_bytes (`truncated` says so).
    Server paths never appear in rows or messages.
    """
    import pickle
    import subprocess

    from store.sandbox import SandboxReply, SandboxRequest, child_environment

    _guard_statement(sql)
    database = as_database(db)
    request = SandboxRequest(
        path=str(database.path),
        sql=sql,
        max_rows=max_rows,
        timeout_s=timeout_s,
        lock_timeout_s=min(database.timeout_s, timeout_s),
        memory_limit=memory_limit,
        threads=threads,
        max_result_bytes=max_result_bytes,
        max_address_space=max_address_space,
    )
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-m", "store.sandbox"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=child_environment(os.environ, _sandbox_python_path()),
    )
    # The child stops its query at timeout_s; this hard limit also covers its start, parsing,
    # waiting for the file lock, and work DuckDB cannot interrupt (building huge rows).
    hard_limit = request.lock_timeout_s + timeout_s + 5.0
    try:
        out, _ = child.communicate(json.dumps(dataclasses.asdict(request)).encode(), hard_limit)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise UserError(f"query stopped after {timeout_s:g} s (time limit)") from None
    elapsed = time.monotonic() - started
    try:
        reply = SandboxReply(**pickle.loads(out))
    except Exception:  # noqa: BLE001 - the child died (memory limit, signal) before replying
        raise UserError("query stopped: it needed more memory than allowed, or crashed") from None
    if reply.error:
        raise UserError(reply.error)
    import pandas as pd

    frame = pd.DataFrame.from_records(list(reply.rows), columns=list(reply.columns))
    return SqlResult(frame=frame, truncated=reply.truncated, elapsed_s=elapsed)


def _sandbox_python_path() -> str:
    """PYTHONPATH for the child: this package's root, then the parent's own PYTHONPATH."""
    package_root = str(Path(__file__).resolve().parent.parent)
    return os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)


def _guard_statement(sql: str) -> None:
    """Cheap checks before a process is started: non-empty, valid text, bounded size and depth.

    O(n) and parse-free on purpose: parsing visitor SQL can crash or exhaust memory, so it
    happens only in the sandboxed child. Brackets inside quotes and comments are not counted.
    """
    if not sql or not sql.strip():
        raise UserError("empty query")
    if len(sql) > SQL_MAX_CHARS:
        raise UserError(f"query too long: {len(sql):,} characters (at most {SQL_MAX_CHARS:,})")
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as err:
        raise UserError(f"query is not valid text: a lone surrogate at character {err.start}") from None
    depth = _bracket_depth(sql)
    if depth > SQL_MAX_DEPTH:
        raise UserError(f"query nested too deeply: {depth} brackets (at most {SQL_MAX_DEPTH})")


def _bracket_depth(sql: str) -> int:
    """The deepest nesting of (), [] and {} outside strings, quoted names and comments."""
    depth = deepest = 0
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"":
            end = sql.find(ch, i + 1)  # a doubled quote just closes and reopens: same effect
            i = n if end < 0 else end + 1
            continue
        if ch == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if ch == "/" and sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth = max(0, depth - 1)
        i += 1
    return deepest


def _marks(values: list[Any] | tuple[Any, ...]) -> str:
    """One `?` per value, for `x IN (?, ?, ...)`: a constant list DuckDB pushes into scans."""
    return ", ".join("?" * len(values))


def _query(db: DbLike, sql: str, params: Any = None) -> pd.DataFrame:
    """Run one query in a short read-only transaction and return a DataFrame."""
    with as_database(db).connect(read_only=True) as conn:
        return _frame(conn.execute(sql, params))


def _frame(cursor: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The cursor's result as a DataFrame whose list cells are Python lists, not numpy arrays."""
    frame = cursor.df()  # imports pandas
    for column in frame.columns:
        if frame[column].dtype == object:
            frame[column] = [_plain(v) for v in frame[column]]
    return frame


def _plain(value: Any) -> Any:
    """Numpy and pandas scalars and arrays as plain Python values (None for missing)."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    pd = sys.modules.get("pandas")  # pandas values exist only where pandas was loaded
    if pd is not None:
        if value is pd.NA or value is pd.NaT:
            return None
        if isinstance(value, pd.Timestamp):
            return value.to_pydatetime()
    return value


def _one_line(err: BaseException) -> str:
    """A DuckDB error as one line, without the hint paragraphs that follow it."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


# ---------------------------------------------------------------- evaluation (issue 3)
# Read by `python -m engine bias` and `report`; the views are defined in migrations/002 and 003.
# The bias functions return tuples and dataclasses, never DataFrames, so `bias` runs without
# pandas.


@dataclass(frozen=True)
class BiasRun:
    """One run of an experiment, as `bias` reads it."""

    run_id: str
    rag_mode: str
    status: str
    model: str
    quantization: str | None
    metadata_type: str | None
    config: dict[str, Any]
    dataset: str | None
    dataset_sha: str
    dataset_label: str  # file name and content hash prefix, e.g. "sample_nq.jsonl (3f2a9c1d)"


@dataclass(frozen=True)
class BiasInputs:
    """Everything `bias` needs of one experiment, read in one transaction."""

    experiment_id: str
    runs: tuple[BiasRun, ...]  # every run, oldest first
    chosen: dict[str, BiasRun]  # per mode (MODES order), the newest complete run
    metrics: tuple[tuple[str, str, float, float, float], ...]  # run_id, item_id, precision, recall, f1
    confidence: tuple[tuple[Any, ...], ...]  # rag_mode, cited_docs, label, mean_probability, n_with_probability, n_citations


def bias_inputs(db: DbLike, reference: str) -> BiasInputs | None:
    """Runs, per-item metrics and citation confidence of one experiment, given by id or name;
    None if there is no such experiment."""
    with as_database(db).connect(read_only=True) as conn:
        # Resolved in the same connection: each open costs more than all of bias's queries.
        found = conn.execute(_RESOLVE_EXPERIMENT, {"ref": reference}).fetchone()
        if not found:
            return None
        experiment_id = found[0]
        runs = tuple(
            BiasRun(*row[:6], json.loads(row[6]) if row[6] else {}, *row[7:])
            for row in conn.execute(
                "SELECT run_id, rag_mode, status, model, quantization, metadata_type, config_json, "
                "dataset, dataset_sha, dataset_label(dataset, dataset_sha) "
                "FROM runs WHERE experiment_id = ? ORDER BY created_utc, run_id",
                [experiment_id],
            ).fetchall()
        )
        if not runs:
            return None
        newest = {run.rag_mode: run for run in runs if run.status == "complete"}  # oldest first: newest wins
        chosen = {mode: newest[mode] for mode in MODES if mode in newest}
        ids = [run.run_id for run in chosen.values()]
        if not ids:  # no complete run: bias says so; `IN ()` is not SQL
            return BiasInputs(experiment_id, runs, chosen, (), ())
        # One placeholder per run: DuckDB pushes `run_id IN (?, ?, ?)` into the views' scans;
        # `IN (SELECT unnest(?))` is a semi-join above the view, which then reads the whole store.
        # Ordered: the bootstrap draws items by position, so an order that followed the plan
        # (parallel hash tables) would give other intervals for the same seed now and then.
        metrics = conn.execute(
            f"SELECT run_id, item_id, precision, recall, f1 FROM query_metrics WHERE run_id IN ({_marks(ids)}) "
            "ORDER BY run_id, item_id",
            ids,
        ).fetchall()
        confidence = conn.execute(
            "SELECT rag_mode, cited_docs, label, mean_probability, n_with_probability, n_citations "
            f"FROM citation_confidence WHERE run_id IN ({_marks(ids)}) "
            f"ORDER BY {_mode_order('rag_mode')}, cited_docs DESC",
            ids,
        ).fetchall()
    return BiasInputs(experiment_id, runs, chosen, tuple(metrics), tuple(confidence))


def newest_experiments(db: DbLike, limit: int = 5) -> tuple[int, tuple[ExperimentSummary, ...]]:
    """How many experiments there are, and the newest `limit` of them (for messages naming them)."""
    listing = experiment_listing(db)
    return len(listing), listing[:limit]


def resolve_experiment(db: DbLike, reference: str) -> str | None:
    """The id of the experiment that `reference` names, by id or by its `run --experiment` name."""
    with as_database(db).connect(read_only=True) as conn:
        row = conn.execute(_RESOLVE_EXPERIMENT, {"ref": reference}).fetchone()
    return row[0] if row else None


def metrics_for_run(db: DbLike, run_id: str) -> pd.DataFrame:
    """The query_metrics rows of one run (one per stored answer), ordered by item_id."""
    return _query(db, "SELECT * FROM query_metrics WHERE run_id = ? ORDER BY item_id", [run_id])


def run_metric_table(db: DbLike, status: str | None = "complete") -> pd.DataFrame:
    """run_metrics rows (one per run, oldest first) with dataset_name and dataset_label; only runs
    with `status` unless it is None."""
    where = "WHERE status = ?" if status else ""
    return _query(
        db,
        f"SELECT *, dataset_name(dataset) AS dataset_name, dataset_label(dataset, dataset_sha) AS dataset_label "
        f"FROM run_metrics {where} "
        "ORDER BY created_utc, run_id",
        [status] if status else None,
    )


def bias_table(db: DbLike, experiment_id: str | None = None) -> pd.DataFrame:
    """bias view rows (CAS and CAB per experiment and metric) with the base run's start time,
    dataset hash, name and label, and the short names of label A and B."""
    where = "WHERE b.experiment_id = ?" if experiment_id else ""
    return _query(
        db,
        "SELECT b.*, r.created_utc, r.dataset_sha, dataset_name(r.dataset) AS dataset_name, "
        "dataset_label(r.dataset, r.dataset_sha) AS dataset_label, "
        "label_short_a(r.config_json, r.metadata_type) AS label_a, "
        "label_short_b(r.config_json, r.metadata_type) AS label_b "
        "FROM bias b "
        "JOIN runs r ON r.run_id = CASE b.measure WHEN 'CAS' THEN b.run_b ELSE b.run_a END "
        f"{where} ORDER BY r.created_utc, b.experiment_id, b.measure DESC, b.metric",
        [experiment_id] if experiment_id else None,
    )


def citation_confidence_table(db: DbLike) -> pd.DataFrame:
    """citation_confidence rows: mean probability of citations to relevant / non-relevant docs."""
    return _query(db, "SELECT * FROM citation_confidence ORDER BY experiment_id, run_id, cited_docs DESC")


def run_summaries(db: DbLike, run_ids: list[str]) -> pd.DataFrame:
    """The short table `run` prints: per run, citation precision/recall/F1 (x100) and EM."""
    ids = list(dict.fromkeys(run_ids))
    # One `run_id = ?` per run: DuckDB pushes an equality through run_metrics into the tables,
    # but neither list_contains nor an IN list (at 1M generations: 0.3 s a run against 12-16 s).
    runs = " UNION ALL ".join("SELECT * FROM run_metrics WHERE run_id = ?" for _ in ids)
    return _query(
        db,
        "SELECT run_id, rag_mode AS mode, coalesce(label_relevant, '-') AS relevant_label, n, "
        "round(100 * precision, 1) AS precision, round(100 * recall, 1) AS recall, "
        "round(100 * f1, 1) AS f1, round(exact_match, 3) AS em "
        f"FROM ({runs or 'SELECT * FROM run_metrics WHERE false'}) ORDER BY created_utc",
        ids,
    )


# ---------------------------------------------------------------- listing (`python -m engine list`)


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


def experiment_listing(db: DbLike) -> tuple[ExperimentSummary, ...]:
    """Every experiment, newest first (the SQL that `list` and the app's run list share)."""
    from engine.types import MODES

    with as_database(db).connect(read_only=True) as conn:
        gone = _interrupted_runs(conn)
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
                   min(r.created_utc)
            FROM runs r LEFT JOIN {_DONE} d USING (run_id) LEFT JOIN experiments e USING (experiment_id)
            GROUP BY r.experiment_id
            ORDER BY min(r.created_utc) DESC, r.experiment_id DESC
            """,
            {"modes": list(MODES), "gone": sorted(gone)},
        ).fetchall()
    return tuple(
        ExperimentSummary(exp, name, model, dataset, sha, label, meta, tuple(dict.fromkeys(modes)), status, n_runs, done,
                          total, created)
        for exp, name, model, dataset, sha, label, meta, modes, status, n_runs, done, total, created in rows
    )


def run_listing(db: DbLike) -> tuple[RunSummary, ...]:
    """Every run, newest first, with how many of its items are stored."""
    with as_database(db).connect(read_only=True) as conn:
        gone = _interrupted_runs(conn)
        rows = conn.execute(
            f"""
            SELECT r.run_id, r.experiment_id, r.rag_mode, r.model, r.dataset, r.dataset_sha,
                   dataset_label(r.dataset, r.dataset_sha), r.metadata_type,
                   CASE WHEN list_contains($gone, r.run_id) THEN 'interrupted' ELSE r.status END,
                   coalesce(d.n_done, 0), coalesce(r.n_items, 0), r.created_utc, r.finished_utc
            FROM runs r LEFT JOIN {_DONE} d USING (run_id)
            ORDER BY r.created_utc DESC, r.run_id DESC
            """,
            {"gone": sorted(gone)},
        ).fetchall()
    return tuple(RunSummary(*row) for row in rows)


def _interrupted_runs(conn: duckdb.DuckDBPyConnection) -> set[str]:
    """Runs still marked running whose process is gone (kill -9, a crash): the same command resumes them."""
    from store.run_store import ProcessIdentity, owner_alive

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


def experiment_runs(db: DbLike, experiment_id: str) -> tuple[ExperimentRun, ...]:
    """The runs of one experiment, oldest first; empty when there is no such experiment."""
    with as_database(db).connect(read_only=True) as conn:
        rows = conn.execute(
            "SELECT run_id, rag_mode, status, model, dataset_sha, metadata_type, config_hash "
            "FROM runs WHERE experiment_id = ? ORDER BY created_utc, run_id",
            [experiment_id],
        ).fetchall()
    return tuple(ExperimentRun(*row) for row in rows)


# ---------------------------------------------------------------- query drill-down (issue 7, /query_detail)
# One item of one experiment across its modes, for the app's drill-down and its navigation.
# Every lookup is keyed by run_id (and item_id) first, so its cost does not grow with the store:
# generations, citations and items are read through their primary keys, and query_metrics is
# filtered with `run_id IN (subquery)` and `item_id = ?`, which DuckDB pushes into the view.

# Navigation filters of `item_ids`: citations changed between any two modes, or base vs cf.
CHANGED_FILTERS = ("modes", "base_cf")


@dataclass(frozen=True)
class QueryDocument:
    """One document of the item, in the dataset's ranked order."""

    rank: int  # 1-based position in the dataset's ranked list
    doc_id: str
    title: str | None
    text: str
    relevant: bool  # a missing flag counts as not relevant, as in query_metrics


@dataclass(frozen=True)
class QueryCitation:
    """One [n] mark of an answer, in order of appearance."""

    index: int  # from 0
    position: int  # n, 1-based as shown
    doc_id: str | None  # None when n was not shown
    relevant: bool | None
    probability: float | None  # None when not recorded (imported answers)


@dataclass(frozen=True)
class TokenAlternative:
    """One of the top alternatives recorded at a generation step."""

    token: str
    logprob: float | None  # None for a zero-probability alternative (JSON has no -inf)


@dataclass(frozen=True)
class QueryToken:
    """One generated token with its raw log-prob and, when recorded, the top alternatives."""

    step: int
    token: str
    logprob: float | None
    top: tuple[TokenAlternative, ...]


@dataclass(frozen=True)
class ModeMetrics:
    """query_metrics of one answer; exact_match is None when the item has no usable gold."""

    precision: float
    recall: float
    f1: float
    exact_match: float | None


@dataclass(frozen=True)
class ModeDetail:
    """One mode's run and its answer to the item (answer None when the run has not reached it)."""

    mode: str
    run_id: str
    status: str
    label_a: str | None  # the metadata labels as the prompt writes them; None without a type
    label_b: str | None
    labels: dict[str, str]  # doc_id -> label shown after the document; empty for vanilla
    positions: dict[str, int]  # doc_id -> 1-based shown position
    answer: str | None
    finish_reason: str | None
    citations: tuple[QueryCitation, ...]
    tokens: tuple[QueryToken, ...]
    metrics: ModeMetrics | None
    # The prompt text the model was given for this item (engine.prompts.build_prompt's, as the
    # runner stored it) and the run's model. Last, with defaults: tests build ModeDetail by keyword.
    prompt: str | None = None
    model: str | None = None

    @property
    def cited_doc_ids(self) -> frozenset[str]:
        """The shown documents this answer cites (out-of-range numbers name none)."""
        return frozenset(c.doc_id for c in self.citations if c.doc_id is not None)

    def citation_probability(self, doc_id: str) -> float | None:
        """The highest recorded probability among this answer's citations of doc_id."""
        values = [c.probability for c in self.citations if c.doc_id == doc_id and c.probability is not None]
        return max(values) if values else None


@dataclass(frozen=True)
class QueryDetail:
    """One item of an experiment side by side across its modes (MODES order)."""

    experiment_id: str
    item_id: str
    question: str
    gold_answers: tuple[str, ...]
    documents: tuple[QueryDocument, ...]  # ranked order
    modes: tuple[ModeDetail, ...]  # per mode, the newest complete-or-running run

    def mode(self, name: str) -> ModeDetail | None:
        """The detail of one mode, or None when the experiment has no such run."""
        return next((m for m in self.modes if m.mode == name), None)


def _shown_runs(conn: duckdb.DuckDBPyConnection, reference: str) -> tuple[str, list[tuple]] | None:
    """The experiment id and, per mode in MODES order, its newest complete-or-running run:
    (run_id, rag_mode, status, dataset_sha, config_json, model)."""
    found = conn.execute(_RESOLVE_EXPERIMENT, {"ref": reference}).fetchone()
    if not found:
        return None
    rows = conn.execute(
        "SELECT run_id, rag_mode, status, dataset_sha, config_json, model FROM runs "
        "WHERE experiment_id = ? AND status IN ('complete', 'running') ORDER BY created_utc, run_id",
        [found[0]],
    ).fetchall()
    newest = {row[1]: row for row in rows}  # oldest first: the newest of each mode wins
    return found[0], [newest[mode] for mode in MODES if mode in newest]


def _metadata_labels(config_json: str | None) -> tuple[str | None, str | None]:
    """label_a and label_b of a run's stored prompt configuration (older runs kept it at the top)."""
    config = json.loads(config_json) if config_json else {}
    meta = (config.get("prompt") or {}).get("metadata") or config.get("metadata") or {}
    return meta.get("label_a"), meta.get("label_b")


def _shown_labels(mode: str, label_a: str | None, label_b: str | None,
                  shown: list[str], relevant: dict[str, bool]) -> dict[str, str]:
    """The label after each shown document, as engine.prompts writes it: relevant documents
    get label A in base and label B in cf, the others the opposite; vanilla shows none."""
    if mode not in ("base", "cf") or label_a is None or label_b is None:
        return {}
    relevant_gets_a = mode == "base"
    return {d: label_a if relevant.get(d, False) == relevant_gets_a else label_b for d in shown}


def query_detail(db: DbLike, experiment: str, item_id: str) -> QueryDetail | None:
    """One item of an experiment (id or name) across its modes; None if either is unknown or
    no shown run of the experiment holds the item."""
    with as_database(db).connect(read_only=True) as conn:
        shown = _shown_runs(conn, experiment)
        if shown is None or not shown[1]:
            return None
        experiment_id, runs = shown
        ids = [run[0] for run in runs]
        generations = {
            row[0]: row[1:]
            for row in conn.execute(
                "SELECT run_id, answer, shown_doc_ids, finish_reason, tokens, logprobs, top_logprobs, prompt "
                f"FROM generations WHERE run_id IN ({_marks(ids)}) AND item_id = ?",
                [*ids, item_id],
            ).fetchall()
        }
        if not generations:
            return None
        sha = next(run[3] for run in runs if run[0] in generations)
        item = conn.execute(
            "SELECT question, answers, documents FROM items WHERE dataset_sha = ? AND item_id = ?",
            [sha, item_id],
        ).fetchone()
        if item is None:
            return None
        citations: dict[str, list[QueryCitation]] = {}
        for run_id, *cite in conn.execute(
            "SELECT run_id, citation_index, position, doc_id, relevant, probability FROM citations "
            f"WHERE run_id IN ({_marks(ids)}) AND item_id = ? ORDER BY run_id, citation_index",
            [*ids, item_id],
        ).fetchall():
            citations.setdefault(run_id, []).append(QueryCitation(*cite))
        metrics = {
            row[0]: ModeMetrics(*row[1:])
            for row in conn.execute(
                # Placeholders, not IN (SELECT unnest(...)): see bias_inputs.
                "SELECT run_id, precision, recall, f1, exact_match FROM query_metrics "
                f"WHERE run_id IN ({_marks(ids)}) AND item_id = ?",
                [*ids, item_id],
            ).fetchall()
        }
    question, answers, documents = item
    docs = tuple(
        QueryDocument(rank, d["id"], d["title"], d["text"], bool(d["relevant"]))
        for rank, d in enumerate(documents, start=1)
    )
    relevant: dict[str, bool] = {}
    for d in docs:  # a repeated id is relevant if any copy is, as in query_metrics
        relevant[d.doc_id] = relevant.get(d.doc_id, False) or d.relevant
    modes = []
    for run_id, mode, status, _sha, config_json, model in runs:
        label_a, label_b = _metadata_labels(config_json)
        answer, shown_ids, finish, tokens, logprobs, top_json, prompt = generations.get(
            run_id, (None, [], None, [], [], None, None))
        shown_ids = list(shown_ids or [])
        modes.append(ModeDetail(
            mode=mode,
            run_id=run_id,
            status=status,
            label_a=label_a,
            label_b=label_b,
            labels=_shown_labels(mode, label_a, label_b, shown_ids, relevant),
            # The first occurrence wins, as a repeated id's [n] resolves to its first position.
            positions={d: n for n, d in reversed(list(enumerate(shown_ids, start=1)))},
            answer=answer,
            finish_reason=finish,
            citations=tuple(citations.get(run_id, ())),
            tokens=_tokens(tokens or [], logprobs or [], top_json),
            metrics=metrics.get(run_id),
            prompt=prompt,
            model=model,
        ))
    return QueryDetail(experiment_id, item_id, question, tuple(answers or ()), docs, tuple(modes))


def _tokens(tokens: list[str], logprobs: list[float | None], top_json: str | None) -> tuple[QueryToken, ...]:
    """Tokens zipped with their log-probs and the per-step alternatives (JSON, or NULL)."""
    top = json.loads(top_json) if top_json else []
    return tuple(
        QueryToken(
            step,
            token,
            logprobs[step] if step < len(logprobs) else None,
            tuple(TokenAlternative(a.get("token", ""), a.get("logprob")) for a in (top[step] or []))
            if step < len(top) else (),
        )
        for step, token in enumerate(tokens)
    )


def item_ids(db: DbLike, experiment: str, search: str | None = None, changed: str | None = None) -> tuple[str, ...] | None:
    """The item ids of an experiment (id or name) in the dataset's order (as its items were stored;
    the order answers are written follows the generator's length-sorted batches); None if
    the experiment is unknown.

    search keeps items whose question or item id contains it (case-insensitive, literal text);
    changed keeps items whose cited document sets differ between any two modes that answered
    them ("modes"), or between base and cf ("base_cf", items both answered).
    """
    if changed is not None and changed not in CHANGED_FILTERS:
        raise UserError(f"unknown filter '{changed}' (choose from {', '.join(CHANGED_FILTERS)})")
    with as_database(db).connect(read_only=True) as conn:
        shown = _shown_runs(conn, experiment)
        if shown is None:
            return None
        runs = shown[1]
        if not runs:
            return ()
        by_mode = {run[1]: run[0] for run in runs}
        rows = conn.execute(
            """
            WITH gens AS (
              SELECT g.run_id, g.item_id
              FROM generations g WHERE g.run_id IN (SELECT unnest($ids))),
            cites AS (
              SELECT run_id, item_id, list_sort(list_distinct(list(doc_id))) AS docs
              FROM citations WHERE run_id IN (SELECT unnest($ids)) GROUP BY run_id, item_id),
            per AS (
              SELECT g.*, coalesce(c.docs, []::VARCHAR[]) AS docs
              FROM gens g LEFT JOIN cites c USING (run_id, item_id))
            SELECT p.item_id
            FROM per p JOIN items i ON i.dataset_sha = $sha AND i.item_id = p.item_id
            GROUP BY p.item_id
            HAVING ($search IS NULL OR contains(lower(any_value(i.question)), lower($search))
                    OR contains(lower(p.item_id), lower($search)))
               AND ($changed IS NULL
                    OR $changed = 'modes' AND count(DISTINCT p.docs) > 1
                    OR $changed = 'base_cf'
                       AND any_value(p.docs) FILTER (WHERE p.run_id = $base) IS NOT NULL
                       AND any_value(p.docs) FILTER (WHERE p.run_id = $cf) IS NOT NULL
                       AND any_value(p.docs) FILTER (WHERE p.run_id = $base)
                           <> any_value(p.docs) FILTER (WHERE p.run_id = $cf))
            ORDER BY min(i.rowid), p.item_id
            """,
            {
                "ids": [run[0] for run in runs],
                "sha": runs[0][3],
                "search": search or None,
                "changed": changed,
                "base": by_mode.get("base"),
                "cf": by_mode.get("cf"),
            },
        ).fetchall()
    return tuple(row[0] for row in rows)


# ---------------------------------------------------------------- export (issue 7: `engine export`, the app's /export)
# One row per stored answer of the chosen experiments: query_metrics joined with its run, its
# experiment and its dataset item. store/export.py writes it as CSV or Parquet.


class UnknownExperiment(UserError):
    """An experiment id or name that is not in the store (the message names no server path)."""

    def __init__(self, reference: str) -> None:
        super().__init__(f"no experiment '{reference}'")
        self.reference = reference


# The column order of an export; list cells (gold_answers, cited, gold) stay lists here.
EXPORT_COLUMNS = (
    "experiment_id", "experiment_name", "run_id", "status", "model", "quantization", "dataset",
    "dataset_sha", "metadata_type", "mode", "label_relevant", "label_nonrelevant", "item_id",
    "question", "gold_answers", "answer", "cited", "gold", "precision", "recall", "f1",
    "exact_match", "squad_em", "token_f1", "answer_recall", "n_citations", "out_of_range_citations",
    "p_relevant", "p_nonrelevant",
)

_EXPORT_SQL = f"""
SELECT r.experiment_id, e.name AS experiment_name, r.run_id, r.status, r.model, r.quantization,
       dataset_label(r.dataset, r.dataset_sha) AS dataset, r.dataset_sha, r.metadata_type,
       r.rag_mode AS mode,
       CASE r.rag_mode WHEN 'base' THEN label_short_a(r.config_json, r.metadata_type)
                       WHEN 'cf' THEN label_short_b(r.config_json, r.metadata_type) END AS label_relevant,
       CASE r.rag_mode WHEN 'base' THEN label_short_b(r.config_json, r.metadata_type)
                       WHEN 'cf' THEN label_short_a(r.config_json, r.metadata_type) END AS label_nonrelevant,
       q.item_id, i.question, i.answers AS gold_answers, g.answer, q.cited, q.gold,
       q.precision, q.recall, q.f1, q.exact_match, q.squad_em, q.token_f1, q.answer_recall,
       q.n_citations, q.out_of_range_citations, q.p_relevant, q.p_nonrelevant
FROM query_metrics q
JOIN runs r USING (run_id)
JOIN generations g USING (run_id, item_id)
LEFT JOIN experiments e USING (experiment_id)
LEFT JOIN items i ON i.dataset_sha = r.dataset_sha AND i.item_id = q.item_id
-- The runs as constants ($run0, $run1, ...), which DuckDB pushes into the view; a subquery here
-- made it compute query_metrics for the whole store (one experiment of a 1M store: 11-15 s).
WHERE q.run_id IN ({{runs}})
ORDER BY list_position($ids, r.experiment_id), {_mode_order("r.rag_mode")}, r.created_utc, r.run_id, q.item_id
"""


def export_experiment_ids(db: DbLike, references: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The ids of the experiments `references` name (ids or names), duplicates dropped, in order;
    UnknownExperiment for the first one the store lacks."""
    with as_database(db).connect(read_only=True) as conn:
        return _resolve_all(conn, references)


def export_results_frame(db: DbLike, references: list[str] | tuple[str, ...]) -> pd.DataFrame:
    """Per-item results (EXPORT_COLUMNS) of the experiments named by id or name, in the order given,
    runs in mode order; UnknownExperiment (nothing read) if one is not in the store."""
    if not references:
        raise UserError("choose at least one experiment to export")
    with as_database(db).connect(read_only=True) as conn:
        ids = _resolve_all(conn, references)
        frame = _frame(_export_cursor(conn, ids))
    return frame[list(EXPORT_COLUMNS)]


# Rows per chunk of a streamed export: a few MB of answers at a time, whatever the total.
EXPORT_CHUNK_ROWS = 2_000


@dataclass(frozen=True)
class ExportChunks:
    """The experiments an export covers and its rows, read chunk by chunk (a one-shot iterator)."""

    experiment_ids: tuple[str, ...]
    frames: Any  # Iterator[pd.DataFrame], each at most EXPORT_CHUNK_ROWS rows of EXPORT_COLUMNS


@contextmanager
def export_results_chunks(db: DbLike, references: list[str] | tuple[str, ...],
                          rows_per_chunk: int = EXPORT_CHUNK_ROWS) -> Iterator[ExportChunks]:
    """export_results_frame's rows, fetched `rows_per_chunk` at a time inside one read
    transaction: the export's memory is one chunk's, not the whole result's (+741 MB for
    180,000 answers when built whole in the app)."""
    if not references:
        raise UserError("choose at least one experiment to export")
    with as_database(db).connect(read_only=True) as conn:
        ids = _resolve_all(conn, references)
        cursor = _export_cursor(conn, ids)

        def frames() -> Iterator[pd.DataFrame]:
            while True:
                chunk = cursor.fetch_df_chunk(max(1, rows_per_chunk // 2048))
                if chunk.empty:
                    return
                for column in chunk.columns:
                    if chunk[column].dtype == object:
                        chunk[column] = [_plain(v) for v in chunk[column]]
                yield chunk[list(EXPORT_COLUMNS)]

        yield ExportChunks(ids, frames())


def _export_cursor(conn: duckdb.DuckDBPyConnection, ids: tuple[str, ...]) -> duckdb.DuckDBPyConnection:
    """The export query over the experiments `ids`, executed, with their runs as constants (see
    _EXPORT_SQL; no runs: no rows)."""
    runs = [row[0] for row in conn.execute(
        "SELECT run_id FROM runs WHERE list_contains($ids, experiment_id)", {"ids": list(ids)}).fetchall()]
    params = {"ids": list(ids), **{f"run{i}": run for i, run in enumerate(runs)}}
    marks = ", ".join(f"$run{i}" for i in range(len(runs))) or "NULL"
    return conn.execute(_EXPORT_SQL.replace("{runs}", marks), params)


def _resolve_all(conn: duckdb.DuckDBPyConnection, references) -> tuple[str, ...]:
    """Experiment ids for ids or names, in order without repeats; UnknownExperiment for a miss."""
    ids: list[str] = []
    for reference in references:
        found = conn.execute(_RESOLVE_EXPERIMENT, {"ref": reference}).fetchone()
        if not found:
            raise UnknownExperiment(reference)
        if found[0] not in ids:
            ids.append(found[0])
    return tuple(ids)


# ---------------------------------------------------------------- the app's Runs tab (issue 7, /runs)
# One page of experiments, filtered in SQL on the runs table (small: one row per run). Progress
# and metrics are then read for the page's runs only, through `run_id IN (subquery)`, which
# DuckDB pushes into generations' scan and the query_metrics view: other experiments cost
# nothing. The metrics cost per stored answer of the page's runs (query_metrics is computed,
# not stored): about 0.1 ms each here, so a page whose runs hold 1M answers takes seconds.


@dataclass(frozen=True)
class PageRun:
    """One run of an experiment on a page, with its progress and mean per-item metrics so far."""

    run_id: str
    mode: str
    status: str  # as stored, or interrupted: running, but its process is gone
    n_done: int
    n_total: int
    created_utc: Any
    # Means over the stored answers; None before the first one, and for a run that is not its
    # mode's newest in the experiment (the table shows the newest only).
    precision: float | None
    recall: float | None
    f1: float | None
    exact_match: float | None  # None also when no item has usable gold


@dataclass(frozen=True)
class ExperimentPage:
    """The experiments matching the filters (their count) and one page of them with their runs."""

    total: int
    experiments: tuple[ExperimentSummary, ...]
    runs: dict[str, tuple[PageRun, ...]]  # experiment_id -> its runs, MODES order, oldest first


# Experiments (one row each, newest first) matching the filters, with the count of all matches.
_EXPERIMENT_PAGE_SQL = """
SELECT r.experiment_id,
       any_value(e.name),
       arg_min(r.model, r.created_utc),
       arg_min(r.dataset, r.created_utc),
       arg_min(r.dataset_sha, r.created_utc),
       dataset_label(arg_min(r.dataset, r.created_utc), arg_min(r.dataset_sha, r.created_utc)) AS label,
       max(r.metadata_type),
       list(r.rag_mode ORDER BY list_position($modes, r.rag_mode), r.created_utc),
       min(r.created_utc) AS created,
       count(*) OVER () AS total
FROM runs r LEFT JOIN experiments e USING (experiment_id)
GROUP BY r.experiment_id
HAVING ($model IS NULL OR contains(lower(arg_min(r.model, r.created_utc)), lower($model)))
   AND ($dataset IS NULL OR contains(lower(label), lower($dataset)))
   AND ($metadata IS NULL OR max(r.metadata_type) = $metadata)
   AND ($mode IS NULL OR bool_or(r.rag_mode = $mode))
   AND ($study IS NULL OR r.experiment_id IN (SELECT experiment_id FROM study_experiments WHERE study = $study))
ORDER BY created DESC, r.experiment_id DESC
"""


def experiment_page(db: DbLike, offset: int, limit: int, *, model: str | None = None, dataset: str | None = None,
                    metadata: str | None = None, mode: str | None = None, study: str | None = None) -> ExperimentPage:
    """Experiments newest first, filtered (model and dataset: substring, any case; metadata type,
    mode and study name: exact), `limit` of them from `offset`, with their runs' progress and metrics."""
    with as_database(db).connect(read_only=True) as conn:
        gone = _interrupted_runs(conn)
        filters = {"modes": list(MODES), "model": model or None, "dataset": dataset or None,
                   "metadata": metadata or None, "mode": mode or None, "study": study or None}
        rows = conn.execute(f"{_EXPERIMENT_PAGE_SQL} LIMIT $limit OFFSET $offset",
                            {**filters, "limit": max(0, limit), "offset": max(0, offset)}).fetchall()
        if rows:
            total = rows[0][-1]
        else:  # past the last page (or nothing matches): count alone
            total = conn.execute(f"SELECT count(*) FROM ({_EXPERIMENT_PAGE_SQL})", filters).fetchone()[0]
        ids = [row[0] for row in rows]
        run_rows = [] if not ids else conn.execute(
            f"""
            WITH page AS (SELECT run_id, experiment_id, rag_mode, status, n_items, created_utc
                          FROM runs WHERE experiment_id IN (SELECT unnest($ids))),
            done AS (SELECT run_id, count(*) AS n_done FROM generations
                     WHERE run_id IN (SELECT run_id FROM page) GROUP BY run_id),
            -- Metrics are shown for each mode's newest run only.
            shown AS (SELECT run_id FROM page
                      QUALIFY row_number() OVER (PARTITION BY experiment_id, rag_mode
                                                 ORDER BY created_utc DESC, run_id DESC) = 1)
            SELECT r.experiment_id, r.run_id, r.rag_mode, r.status, coalesce(d.n_done, 0), coalesce(r.n_items, 0),
                   r.created_utc, s.run_id IS NOT NULL, c.n_answers IS NOT DISTINCT FROM coalesce(d.n_done, 0),
                   c.precision, c.recall, c.f1, c.exact_match
            FROM page r LEFT JOIN done d USING (run_id) LEFT JOIN shown s USING (run_id)
            LEFT JOIN run_scores c USING (run_id)
            ORDER BY r.experiment_id, {_MODE_ORDER}, r.created_utc, r.run_id
            """,
            {"ids": ids},
        ).fetchall()
        # query_metrics costs per answer, so the averages come from run_scores (kept by the
        # writer, store/run_scores.py) where its row covers every answer the run holds now, and
        # are computed live otherwise: a running or extended run, a missing row. One query per
        # such run, as DuckDB pushes `run_id = ?` into the view but not an IN-list.
        scores: dict[str, tuple] = {}
        for row in run_rows:
            run_id, shown, fresh = row[1], row[7], row[8]
            if shown:
                scores[run_id] = tuple(row[9:]) if fresh else tuple(live_scores(conn, run_id))[1:]
    runs: dict[str, list[PageRun]] = {}
    for experiment_id, run_id, mode_, status, done, n_total, created, *_ in run_rows:
        if status == "running" and run_id in gone:
            status = "interrupted"
        p, r, f, em = scores.get(run_id, (None, None, None, None))
        runs.setdefault(experiment_id, []).append(PageRun(run_id, mode_, status, done, n_total, created, p, r, f, em))
    experiments = []
    for exp, name, model_, dataset_, sha, label, meta, modes, created, _total in rows:
        mine = runs.get(exp, [])
        statuses = {run.status for run in mine}
        # The same order of precedence as experiment_listing (`python -m engine list`).
        status = next((s for s in ("running", "interrupted", "failed") if s in statuses), "complete")
        experiments.append(ExperimentSummary(
            exp, name, model_, dataset_, sha, label, meta, tuple(dict.fromkeys(modes)), status, len(mine),
            sum(run.n_done for run in mine), sum(run.n_total for run in mine), created))
    return ExperimentPage(total, tuple(experiments), {k: tuple(v) for k, v in runs.items()})


def count_runs(db: DbLike) -> int:
    """How many runs the store holds (the app's first screen offers a run when none)."""
    with as_database(db).connect(read_only=True) as conn:
        return conn.execute("SELECT count(*) FROM runs").fetchone()[0]


# ---------------------------------------------------------------- the app's Bias tab (issue 7)
# Several experiments at once: the choices of the tab's multiselect, the rows of the paper's
# tables (engine.commands.report) and the distributions of citation probability. The views
# are filtered on run ids given as constants (`run_id = ?`, `run_a = ? AND run_b = ?`), which
# DuckDB pushes into their scans; a filter on experiment_id alone, or on a subquery, makes the
# bias and run_metrics views compute every run in the store first.


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
    with as_database(db).connect(read_only=True) as conn:
        rows = conn.execute(
            "SELECT r.experiment_id, any_value(e.name), arg_min(r.model, r.created_utc), max(r.metadata_type), "
            "list(DISTINCT r.rag_mode) FILTER (WHERE r.status = 'complete'), min(r.created_utc) "
            "FROM runs r LEFT JOIN experiments e USING (experiment_id) "
            "GROUP BY r.experiment_id ORDER BY min(r.created_utc) DESC, r.experiment_id DESC"
        ).fetchall()
    return tuple(
        ExperimentChoice(exp, name, model, meta, tuple(m for m in MODES if m in (modes or ())), created)
        for exp, name, model, meta, modes, created in rows
    )


def report_run_metrics(db: DbLike, experiment_ids: list[str] | tuple[str, ...]) -> pd.DataFrame:
    """run_metric_table's rows (same columns, oldest first) for the complete runs of these experiments."""
    with as_database(db).connect(read_only=True) as conn:
        runs = [row[0] for row in conn.execute(
            "SELECT run_id FROM runs WHERE status = 'complete' AND list_contains(?, experiment_id)",
            [list(experiment_ids)],
        ).fetchall()]
        # One `run_id = ?` per run: DuckDB pushes an equality through run_metrics, not an IN list.
        union = " UNION ALL ".join("SELECT * FROM run_metrics WHERE run_id = ?" for _ in runs)
        return _frame(conn.execute(
            "SELECT *, dataset_name(dataset) AS dataset_name, dataset_label(dataset, dataset_sha) AS dataset_label "
            f"FROM ({union or 'SELECT * FROM run_metrics WHERE false'}) ORDER BY created_utc, run_id",
            runs,
        ))


def table1_runs(db: DbLike, experiment_ids: list[str] | tuple[str, ...]) -> pd.DataFrame:
    """What Table 1 reads of the complete runs of these experiments (report_run_metrics' columns
    it uses, oldest first): provenance, labels, n, and the mean precision, recall and exact match.

    The means come from run_scores where its row covers every answer the run holds, and are
    computed for that run alone otherwise: run_metrics works out every metric's interval for
    each run (0.2 s a run at 1M generations), which Table 1 does not show.
    """
    with as_database(db).connect(read_only=True) as conn:
        rows = conn.execute(
            """
            WITH chosen AS (SELECT * FROM runs WHERE status = 'complete' AND list_contains($ids, experiment_id)),
            done AS (SELECT run_id, count(*) AS n_done FROM generations
                     WHERE run_id IN (SELECT run_id FROM chosen) GROUP BY run_id)
            SELECT r.run_id, r.experiment_id, r.created_utc, r.model, r.dataset, r.dataset_sha,
                   dataset_name(r.dataset), dataset_label(r.dataset, r.dataset_sha), r.metadata_type, r.rag_mode,
                   CASE r.rag_mode WHEN 'base' THEN label_short_a(r.config_json, r.metadata_type)
                                   WHEN 'cf' THEN label_short_b(r.config_json, r.metadata_type) END,
                   CASE r.rag_mode WHEN 'base' THEN label_short_b(r.config_json, r.metadata_type)
                                   WHEN 'cf' THEN label_short_a(r.config_json, r.metadata_type) END,
                   c.n_answers IS NOT DISTINCT FROM coalesce(d.n_done, 0), c.n_answers, c.precision, c.recall,
                   c.exact_match
            FROM chosen r LEFT JOIN done d USING (run_id) LEFT JOIN run_scores c USING (run_id)
            ORDER BY r.created_utc, r.run_id
            """,
            {"ids": list(experiment_ids)},
        ).fetchall()
        records = []
        for *meta, fresh, n, precision, recall, em in rows:
            if not fresh:
                n, precision, recall, _f1, em = live_scores(conn, meta[0])
            records.append((*meta, n or 0, precision, recall, em))
    import pandas as pd

    return pd.DataFrame.from_records(records, columns=[
        "run_id", "experiment_id", "created_utc", "model", "dataset", "dataset_sha", "dataset_name", "dataset_label",
        "metadata_type", "rag_mode", "label_relevant", "label_nonrelevant", "n", "precision", "recall", "exact_match"])


def report_bias_rows(db: DbLike, experiment_ids: list[str] | tuple[str, ...]) -> pd.DataFrame:
    """bias_table's rows (same columns and order) for these experiments."""
    with as_database(db).connect(read_only=True) as conn:
        # The runs the bias view pairs: per experiment and mode, the newest complete one.
        chosen = conn.execute(
            "SELECT experiment_id, rag_mode, arg_max(run_id, created_utc) FROM runs "
            "WHERE status = 'complete' AND list_contains(?, experiment_id) GROUP BY ALL ORDER BY ALL",
            [list(experiment_ids)],
        ).fetchall()
        runs: dict[str, dict[str, str]] = {}
        for experiment_id, mode, run_id in chosen:
            runs.setdefault(experiment_id, {})[mode] = run_id
        pairs = [
            (modes[a], modes[b])
            for modes in runs.values()
            for a, b in (("vanilla", "base"), ("base", "cf"))
            if a in modes and b in modes
        ]
        union = " UNION ALL ".join("SELECT * FROM bias WHERE run_a = ? AND run_b = ?" for _ in pairs)
        return _frame(conn.execute(
            "SELECT b.*, r.created_utc, r.dataset_sha, dataset_name(r.dataset) AS dataset_name, "
            "dataset_label(r.dataset, r.dataset_sha) AS dataset_label, "
            "label_short_a(r.config_json, r.metadata_type) AS label_a, "
            "label_short_b(r.config_json, r.metadata_type) AS label_b "
            f"FROM ({union or 'SELECT * FROM bias WHERE false'}) b "
            "JOIN runs r ON r.run_id = CASE b.measure WHEN 'CAS' THEN b.run_b ELSE b.run_a END "
            "ORDER BY r.created_utc, b.experiment_id, b.measure DESC, b.metric",
            [run for pair in pairs for run in pair],
        ))


@dataclass(frozen=True)
class ProbabilitySummary:
    """The citation probabilities of one run's citations to relevant, or to non-relevant, shown documents."""

    run_id: str
    relevant: bool
    n: int  # citations with a probability
    minimum: float
    q1: float  # quartiles interpolated as quantile_cont (numpy's default) computes them
    median: float
    q3: float
    maximum: float
    mean: float


def citation_probability_summaries(db: DbLike, run_ids: list[str] | tuple[str, ...]) -> tuple[ProbabilitySummary, ...]:
    """Per run and relevance of the cited document, the spread of citation probabilities; out-of-range
    numbers (no document) are left out, as in citation_confidence, and runs without probabilities
    (imported answers) give no row."""
    ids = list(dict.fromkeys(run_ids))
    if not ids:
        return ()
    with as_database(db).connect(read_only=True) as conn:
        rows = conn.execute(
            "SELECT run_id, relevant, count(*), min(probability), quantile_cont(probability, [0.25, 0.5, 0.75]), "
            "max(probability), avg(probability) FROM citations "
            f"WHERE run_id IN ({_marks(ids)}) AND relevant IS NOT NULL AND probability IS NOT NULL "
            "GROUP BY run_id, relevant ORDER BY run_id, relevant DESC",
            ids,
        ).fetchall()
    return tuple(
        ProbabilitySummary(run_id, relevant, n, low, quartiles[0], quartiles[1], quartiles[2], high, mean)
        for run_id, relevant, n, low, quartiles, high, mean in rows
    )


def experiment_dataset_paths(db: DbLike, experiment_id: str) -> tuple[str, ...]:
    """The dataset paths (as typed when each run started) of one experiment's runs: the app takes
    them out of the CLI's messages, which name them in commands to copy."""
    with as_database(db).connect(read_only=True) as conn:
        rows = conn.execute(
            "SELECT DISTINCT dataset FROM runs WHERE experiment_id = ? AND dataset IS NOT NULL ORDER BY dataset",
            [experiment_id],
        ).fetchall()
    return tuple(row[0] for row in rows)


# ---------------------------------------------------------------- the app's Run tab: runs in progress
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
    with as_database(db).connect(read_only=True) as conn:
        gone = _interrupted_runs(conn)
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


# ---------------------------------------------------------------- explanations (Prompt 5)


def explain_runs(db: DbLike, *, experiment: str | None = None, run: str | None = None):
    """The runs `explain` works on: one run by id, or every run of an experiment (id or name),
    in mode order, as engine.explain.ExplainRun; None when the run or experiment is unknown."""
    from engine.explain import ExplainRun

    if (experiment is None) == (run is None):
        raise ValueError("give exactly one of experiment and run")
    with as_database(db).connect(read_only=True) as conn:
        if run is not None:
            where, params = "r.run_id = $ref", {"ref": run}
        else:
            where, params = f"r.experiment_id = ({_RESOLVE_EXPERIMENT})", {"ref": experiment}
        rows = conn.execute(
            "SELECT r.run_id, r.experiment_id, r.model, r.rag_mode, r.metadata_type, r.config_json, "
            f"coalesce(d.n_done, 0) FROM runs r LEFT JOIN {_DONE} d USING (run_id) WHERE {where} "
            f"ORDER BY {_MODE_ORDER}, r.created_utc, r.run_id",
            params,
        ).fetchall()
    if not rows:
        return None
    runs = []
    for run_id, experiment_id, model, mode, metadata_type, config_json, n_done in rows:
        label_a, label_b = _metadata_labels(config_json)
        runs.append(ExplainRun(run_id, experiment_id, model, mode, metadata_type, label_a, label_b, int(n_done)))
    return tuple(runs)


def explain_sources(db: DbLike, run, explainer_model: str, limit: int | None = None):
    """The answers of `run` (an ExplainRun) still to explain by `explainer_model`, as
    engine.explain.ExplainSource, in the order the run stored them.

    `limit` covers the run's first N answers, explained or not, so a larger limit later extends
    the same explanations. Labels are those the answering model saw (see _shown_labels).
    """
    from engine.explain import ExplainSource
    from engine.types import Document, Item

    with as_database(db).connect(read_only=True) as conn:
        rows = conn.execute(
            "WITH g AS (SELECT item_id, answer, shown_doc_ids, created_utc FROM generations "
            "           WHERE run_id = $run ORDER BY created_utc, item_id LIMIT $limit) "
            "SELECT g.item_id, g.answer, g.shown_doc_ids, i.question, i.answers, i.documents "
            "FROM g JOIN runs r ON r.run_id = $run "
            "JOIN items i ON i.dataset_sha = r.dataset_sha AND i.item_id = g.item_id "
            "WHERE NOT EXISTS (SELECT 1 FROM explanations e WHERE e.run_id = $run "
            "                  AND e.item_id = g.item_id AND e.explainer_model = $model) "
            "ORDER BY g.created_utc, g.item_id",
            {"run": run.run_id, "model": explainer_model, "limit": limit if limit is not None else 2**62},
        ).fetchall()
    sources = []
    for item_id, answer, shown, question, answers, documents in rows:
        docs = tuple(Document(d["id"], d["text"], bool(d["relevant"]), d["title"] or "") for d in documents)
        relevant: dict[str, bool] = {}
        for d in docs:  # a repeated id is relevant if any copy is, as in query_metrics
            relevant[d.id] = relevant.get(d.id, False) or d.relevant
        shown_ids = list(shown or [])
        labels = _shown_labels(run.rag_mode, run.label_a, run.label_b, shown_ids, relevant)
        sources.append(ExplainSource(
            run_id=run.run_id,
            item=Item(item_id, question, tuple(answers or ()), docs),
            answer=answer,
            shown_doc_ids=tuple(shown_ids),
            labels=tuple(labels.get(d) for d in shown_ids),
        ))
    return tuple(sources)


def explanation_rates(db: DbLike, run_ids: list[str]) -> tuple[tuple, ...]:
    """Per run and explainer model, from the explanation_rates view: (run_id, explainer_model,
    rag_mode, n_explanations, n_mention_label, label_share), in the order of `run_ids`; empty
    when none of the runs has explanations."""
    return _rows_of_runs(db, "explanation_rates", "run_id, explainer_model, rag_mode, n_explanations, "
                         "n_mention_label, label_share", "explainer_model", run_ids)


def _rows_of_runs(db: DbLike, view: str, columns: str, then: str, run_ids: list[str]) -> tuple[tuple, ...]:
    """The rows of a per-run view (its first column run_id) for these runs, in the order of
    `run_ids`, then by `then`; the runs as constants in an IN list, which DuckDB pushes down."""
    if not run_ids:
        return ()
    with as_database(db).connect(read_only=True) as conn:
        rows = conn.execute(
            f"SELECT {columns} FROM {view} WHERE run_id IN ({_marks(run_ids)}) ORDER BY {then}", list(run_ids)
        ).fetchall()
    order = {run_id: i for i, run_id in enumerate(run_ids)}
    return tuple(sorted(rows, key=lambda r: order[r[0]]))


# ---------------------------------------------------------------- studies (migration 009)


@dataclass(frozen=True)
class StudySummary:
    """One study: a grid run by one `run` command with comma lists."""

    name: str
    n_experiments: int
    axes: dict
    created_utc: Any


def study_listing(db: DbLike) -> tuple[StudySummary, ...]:
    """Every study, newest first, with how many experiments it groups."""
    with as_database(db).connect(read_only=True) as conn:
        rows = conn.execute(
            "SELECT s.name, count(e.experiment_id), s.axes_json, s.created_utc "
            "FROM studies s LEFT JOIN study_experiments e ON e.study = s.name "
            "GROUP BY ALL ORDER BY s.created_utc DESC, s.name"
        ).fetchall()
    return tuple(StudySummary(name, n, json.loads(axes) if axes else {}, created) for name, n, axes, created in rows)


def study_experiment_ids(db: DbLike, study: str) -> list[str] | None:
    """The experiments of a study in grid order; None when there is no such study."""
    with as_database(db).connect(read_only=True) as conn:
        if conn.execute("SELECT 1 FROM studies WHERE name = ?", [study]).fetchone() is None:
            return None
        return [row[0] for row in conn.execute(
            "SELECT experiment_id FROM study_experiments WHERE study = ? ORDER BY position, experiment_id", [study]
        ).fetchall()]


def run_prompt_settings(db: DbLike, run_ids: list[str]) -> pd.DataFrame:
    """Per run: the prompt axes a study varies (top_k, order, few_shot, xai), from config_json,
    and the run its answers were copied from (shared_from; NULL when generated)."""
    return _query(
        db,
        "SELECT run_id, "
        "TRY_CAST(json_extract(config_json, '$.prompt.top_k') AS INTEGER) AS top_k, "
        "coalesce(json_extract_string(config_json, '$.prompt.order'), 'ranked') AS \"order\", "
        "coalesce(TRY_CAST(json_extract(config_json, '$.prompt.few_shot') AS INTEGER), 0) AS few_shot, "
        "coalesce(json_extract_string(config_json, '$.prompt.xai'), 'none') AS xai, "
        "json_extract_string(config_json, '$.shared_from') AS shared_from "
        "FROM runs WHERE list_contains(?, run_id) ORDER BY run_id",
        [list(run_ids)],
    )


# ---------------------------------------------------------------- verifications (migration 010)


def verify_sources(db: DbLike, run, judge_model: str, limit: int | None = None):
    """The answers of `run` (an engine.explain.ExplainRun, from explain_runs) with the
    (sentence, cited document) pairs `judge_model` has not judged yet, as engine.verify.VerifySource,
    in the order the run stored them; answers with nothing left to judge are left out.

    `limit` covers the run's first N answers, as in explain_sources.
    """
    from engine.types import Document, Item
    from engine.verify import VerifySource, claims_of

    params = {"run": run.run_id, "limit": limit if limit is not None else 2**62}
    with as_database(db).connect(read_only=True) as conn:
        rows = conn.execute(
            "WITH g AS (SELECT item_id, answer, shown_doc_ids, created_utc FROM generations "
            "           WHERE run_id = $run ORDER BY created_utc, item_id LIMIT $limit) "
            "SELECT g.item_id, g.answer, g.shown_doc_ids, i.question, i.answers, i.documents "
            "FROM g JOIN runs r ON r.run_id = $run "
            "JOIN items i ON i.dataset_sha = r.dataset_sha AND i.item_id = g.item_id "
            "ORDER BY g.created_utc, g.item_id",
            params,
        ).fetchall()
        done = set(conn.execute(
            "SELECT item_id, sentence_index, position FROM verifications WHERE run_id = $run AND judge_model = $model",
            {"run": run.run_id, "model": judge_model},
        ).fetchall())
    sources = []
    for item_id, answer, shown, question, answers, documents in rows:
        shown_ids = tuple(shown or ())
        claims = tuple(c for c in claims_of(item_id, answer, shown_ids)
                       if (item_id, c.sentence_index, c.position) not in done)
        if not claims:
            continue
        docs = tuple(Document(d["id"], d["text"], bool(d["relevant"]), d["title"] or "") for d in documents)
        sources.append(VerifySource(run.run_id, Item(item_id, question, tuple(answers or ()), docs), answer, shown_ids, claims))
    return tuple(sources)


def verification_shares(db: DbLike, run_ids: list[str]) -> tuple[tuple, ...]:
    """Per run and judge model, from the verification_shares view: (run_id, judge_model, rag_mode,
    n_citations, attributable_share, extrapolatory_share, contradictory_share, unparsed_share), in
    the order of `run_ids`; empty when none of the runs has verifications."""
    return _rows_of_runs(db, "verification_shares", "run_id, judge_model, rag_mode, n_citations, attributable_share, "
                         "extrapolatory_share, contradictory_share, unparsed_share", "judge_model", run_ids)


# ---------------------------------------------------------------- the Explain tab


@dataclass(frozen=True)
class StoredExplanation:
    """One stored Prompt 5 explanation of one answer, with what it mentions."""

    run_id: str
    rag_mode: str
    item_id: str
    explainer_model: str
    text: str
    finish_reason: str | None
    mentioned_docs: tuple[int, ...]  # document numbers as shown to the answering model
    mentioned_labels: tuple[str, ...]  # label texts as configured, then categories
    created_utc: Any

    @property
    def mentions_label(self) -> bool:
        return bool(self.mentioned_labels)


def item_explanations(db: DbLike, run_ids: list[str] | tuple[str, ...], item_id: str) -> tuple[StoredExplanation, ...]:
    """The stored explanations of one item's answers in the given runs, in the order of
    `run_ids`, then by explainer model; empty when there are none."""
    if not run_ids:
        return ()
    with as_database(db).connect(read_only=True) as conn:
        rows = conn.execute(
            "SELECT e.run_id, r.rag_mode, e.item_id, e.explainer_model, e.text, e.finish_reason, "
            "e.mentioned_docs, e.mentioned_labels, e.created_utc "
            "FROM explanations e JOIN runs r USING (run_id) "
            f"WHERE e.item_id = ? AND e.run_id IN ({_marks(list(run_ids))}) ORDER BY e.explainer_model",
            [item_id, *run_ids],
        ).fetchall()
    order = {run_id: i for i, run_id in enumerate(run_ids)}
    return tuple(
        StoredExplanation(run_id, mode, item, model, text, finish, tuple(docs or ()), tuple(labels or ()), created)
        for run_id, mode, item, model, text, finish, docs, labels, created in sorted(rows, key=lambda r: order[r[0]])
    )


# ---------------------------------------------------------------- the app by study, and a run's explanations
# (the Runs, Bias and Explain tabs; issue 8 sections 1 and 3)


def experiment_studies(db: DbLike, experiment_ids: list[str] | tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """experiment id -> the studies it belongs to (one experiment can be in several grids),
    oldest study first; experiments in no study are left out."""
    if not experiment_ids:
        return {}
    with as_database(db).connect(read_only=True) as conn:
        rows = conn.execute(
            "SELECT e.experiment_id, list(s.name ORDER BY s.created_utc, s.name) "
            "FROM study_experiments e JOIN studies s ON s.name = e.study "
            "WHERE list_contains($ids, e.experiment_id) GROUP BY e.experiment_id",
            {"ids": list(experiment_ids)},
        ).fetchall()
    return {experiment_id: tuple(names) for experiment_id, names in rows}


def run_explanations(db: DbLike, run_id: str) -> tuple[StoredExplanation, ...]:
    """Every stored explanation of one run's answers, in the order the run stored its answers,
    then by explainer model; empty when there are none (or no such run)."""
    with as_database(db).connect(read_only=True) as conn:
        rows = conn.execute(
            "SELECT e.run_id, r.rag_mode, e.item_id, e.explainer_model, e.text, e.finish_reason, "
            "e.mentioned_docs, e.mentioned_labels, e.created_utc "
            "FROM explanations e JOIN runs r USING (run_id) "
            "LEFT JOIN generations g ON g.run_id = e.run_id AND g.item_id = e.item_id "
            "WHERE e.run_id = $run ORDER BY g.created_utc, e.item_id, e.explainer_model",
            {"run": run_id},
        ).fetchall()
    return tuple(
        StoredExplanation(run, mode, item, model, text, finish, tuple(docs or ()), tuple(labels or ()), created)
        for run, mode, item, model, text, finish, docs, labels, created in rows
    )
