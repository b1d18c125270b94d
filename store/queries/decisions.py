"""Citation decisions (the citation_decisions view, migration 014): one row per shown document
per answer of the chosen experiments, for the citation choice model (engine.usecases.bias.why_cited)
and `export --rows decisions`."""

from __future__ import annotations

import uuid
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import duckdb

from engine.types import MODES
from store.db import DbLike
from store.queries._read import execute_over_runs, fetch, frame, mode_order, reading, run_ids_of

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


# The column order of the decision rows (and of `export --rows decisions`).
DECISION_COLUMNS = (
    "experiment_id", "experiment_name", "run_id", "model", "metadata_type", "mode", "item_id",
    "position", "n_shown", "position_group", "doc_id", "label", "relevant", "repeated", "cited",
    "n_cited", "citation_probability", "answer_cites_any", "relevant_at", "repetition", "label_scope",
)

_DECISIONS_SQL = f"""
SELECT d.experiment_id, e.name AS experiment_name, d.run_id, d.model, d.metadata_type,
       d.rag_mode AS mode, d.item_id, d.position, d.n_shown, d.position_group, d.doc_id, d.label,
       d.relevant, d.repeated, d.cited, d.n_cited, d.citation_probability, d.answer_cites_any,
       d.relevant_at, d.repetition, d.label_scope
FROM citation_decisions d
JOIN runs r USING (run_id)
LEFT JOIN experiments e ON e.experiment_id = d.experiment_id
-- The runs as constants (store.queries._read.execute_over_runs).
WHERE d.run_id IN ({{runs}})
ORDER BY list_position($ids, d.experiment_id), {mode_order("d.rag_mode")}, r.created_utc, d.run_id,
         d.item_id, d.position
"""


def decisions_cursor(conn: duckdb.DuckDBPyConnection, experiment_ids: tuple[str, ...] | list[str],
                     modes: tuple[str, ...] | None = None) -> duckdb.DuckDBPyConnection:
    """The decision rows of these experiments (ids, in this order), executed; `modes` keeps only
    those modes' runs (None: every mode). No runs: no rows."""
    return execute_over_runs(conn, _DECISIONS_SQL, experiment_ids, modes)


def decision_frame(db: DbLike, experiment_ids: tuple[str, ...] | list[str],
                   modes: tuple[str, ...] | None = None) -> pd.DataFrame:
    """The decision rows (DECISION_COLUMNS) of these experiment ids, in one read transaction."""
    with reading(db) as conn:
        rows = frame(decisions_cursor(conn, experiment_ids, modes))
    return rows[list(DECISION_COLUMNS)]


# What the choice model reads (engine.usecases.bias.why_cited.chosen_answers): numbers only. At a million
# answers (ten million rows) decision_frame's text columns held 5.9 GB before the fit began. Here
# experiment, run, mode and position group are codes into lists known before the query (SQL's
# list_position), the item and the label codes into the sorted distinct items and labels (numpy,
# not pandas: no text column is built, and pyarrow, which pandas' text columns load, is not needed).
CODED_COLUMNS = ("experiment", "run", "mode", "item", "position", "n_shown", "position_group", "label",
                 "relevant", "repeated", "cited")
POSITION_GROUPS = ("first", "middle", "last")
_QUERY_MEMORY = "1GB"  # DuckDB's memory for the decision rows' queries (decision_codes)

# The runs' codes (run, experiment, mode, with each run's decision rows, which make the chunks)
# are a table made once and joined, and the item codes another (the sorted distinct item ids of
# the request): every chunk needs the whole request's item codes, which a window over one chunk's
# rows cannot give. (The join and list_position over a thousand run ids measured the same, 3.1 s
# for a chunk of 2M rows.) The labels are
# coded by their place in a list read from where the view takes them (the generations' stored
# labels and the runs' label pair): a label outside it is -2, which decision_code_chunks refuses
# rather than code as "no label". DuckDB pushes an equality on run_id through the view into
# citations, not an IN list, which reads every citation of the store: a chunk small beside the
# store goes in run by run (one experiment of a 10M-answer store: 7.0 -> 3.2 s, 1.1 -> 0.5 GB;
# 3.9 -> 0.8 s for its 300k rows with today's view), a large one in one statement. Run by run
# costs ~3 us a row, in one statement ~1 us a row and ~0.35 us a citation of the store, so run
# by run pays where the store holds more than ~6 citations per row of the chunk (2026-12-02: one
# run of 2.5M rows in a store of 1.5M citations took 9.4 s run by run, 3.0 s in one statement;
# before, every experiment of a 1M store 61 s run by run, 23 s in one). No temporary table is made a chunk: one
# dropped inside the read transaction keeps its memory until the transaction ends, and the
# 50th chunk of a 10M-answer store ran out of DuckDB's memory.
_CITATIONS_PER_ROW_RUN_BY_RUN = 6
_ROWS_COLUMNS = "run_id, item_id, position, n_shown, position_group, label, relevant, repeated, cited"
_RUN_CODES_SQL = f"""
CREATE TEMP TABLE {{codes}} AS
SELECT r.run_id, (list_position($runs, r.run_id) - 1)::INTEGER AS run,
       (list_position($ids, r.experiment_id) - 1)::SMALLINT AS experiment,
       (list_position({list(MODES)}, r.rag_mode) - 1)::TINYINT AS mode,
       (SELECT coalesce(sum(len(g.shown_doc_ids)), 0) FROM generations g WHERE g.run_id = r.run_id) AS decisions
FROM runs r WHERE list_contains($runs, r.run_id)
"""
_ITEM_CODES_SQL = """
CREATE TEMP TABLE {items} AS
SELECT item_id, (row_number() OVER (ORDER BY item_id) - 1)::INTEGER AS item
FROM (SELECT DISTINCT item_id FROM generations WHERE list_contains($runs, run_id))
"""
_LABELS_SQL = """
SELECT list(DISTINCT label ORDER BY label) FROM (
  SELECT unnest(shown_labels) AS label FROM generations WHERE list_contains($chunk, run_id)
  UNION ALL SELECT label_a FROM run_labels WHERE list_contains($chunk, run_id)
  UNION ALL SELECT label_b FROM run_labels WHERE list_contains($chunk, run_id)
) WHERE label IS NOT NULL
"""
_CODED_SQL = f"""
SELECT c.experiment, c.run, c.mode, i.item,
       d.position::SMALLINT AS position, d.n_shown::SMALLINT AS n_shown,
       coalesce(list_position({list(POSITION_GROUPS)}, d.position_group) - 1, -1)::TINYINT AS position_group,
       CASE WHEN d.label IS NULL THEN -1 ELSE coalesce(list_position($labels, d.label) - 1, -2) END::INTEGER AS label,
       coalesce(d.relevant, false) AS relevant, coalesce(d.repeated, false) AS repeated,
       coalesce(d.cited, false) AS cited
FROM ({{rows}}) d
JOIN {{codes}} c USING (run_id)
JOIN {{items}} i USING (item_id)
ORDER BY c.experiment, c.mode, c.run, i.item, d.position
"""


@dataclass(frozen=True)
class DecisionCodes:
    """The decision rows as numbers (CODED_COLUMNS, numpy arrays): experiment, mode, position group
    and label are codes into the tuples here (-1: a label-less document; an unknown position
    group), run and item a code per run and per item id."""

    rows: dict[str, np.ndarray]
    experiment_ids: tuple[str, ...]
    experiment_names: tuple[str, ...]  # each experiment's name (its id where it has none)
    modes: tuple[str, ...]
    labels: tuple[str, ...]
    run_ids: tuple[str, ...] = ()  # the run of each run code
    item_ids: tuple[str, ...] = ()  # the item of each item code

    def __len__(self) -> int:
        return len(self.rows["cited"])


def decision_codes(db: DbLike, experiment_ids: tuple[str, ...] | list[str],
                   modes: tuple[str, ...] | None = None) -> DecisionCodes:
    """The decision rows the choice model needs, ordered by experiment (as given), mode, run, item
    and position, as integer and boolean arrays: decision_code_chunks' rows in one piece."""
    chunks = decision_code_chunks(db, experiment_ids, modes)
    try:
        return next(chunks)
    finally:
        chunks.close()  # the read connection closes now, not when the generator is collected


def decision_code_chunks(db: DbLike, experiment_ids: tuple[str, ...] | list[str], modes: tuple[str, ...] | None = None,
                         max_rows: int | None = None) -> Generator[DecisionCodes, None, None]:
    """decision_codes' rows a chunk of whole runs at a time, each chunk at most `max_rows` rows
    (a run with more is a chunk of its own; None: one chunk, empty where there are no rows). The
    chunks in order are decision_codes' rows in order. Run and item codes are the whole request's;
    each chunk's label codes are into its own `labels`. All in one read transaction: a fit of ten
    million answers reads them so and never holds their hundred million rows."""

    ids = list(experiment_ids)
    with reading(db) as conn:
        names = dict(conn.execute("SELECT experiment_id, name FROM experiments WHERE list_contains($ids, experiment_id)",
                                  {"ids": ids}).fetchall())
        run_ids = run_ids_of(conn, ids, modes)
        # The view's joins and the sort of ten million rows took 4.5 GB of DuckDB's memory at a
        # million answers; under this limit DuckDB spills to its temporary folder. The setting is
        # the process's DuckDB instance's (the CLI's, or the app's fit child's): put back after.
        before = conn.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
        # The setting reads back rounded ('2.7 GiB'), so SET with it is not exact; the default
        # is put back exactly by RESET.
        conn.execute("RESET memory_limit")
        default = conn.execute("SELECT current_setting('memory_limit')").fetchall()[0][0] == before
        conn.execute(f"SET memory_limit = '{_QUERY_MEMORY}'")
        suffix = uuid.uuid4().hex  # the caller's connection may hold others
        tables = {"codes": f"decision_runs_{suffix}", "items": f"decision_items_{suffix}"}
        try:
            conn.execute(_RUN_CODES_SQL.format(**tables), {"ids": ids, "runs": run_ids})
            conn.execute(_ITEM_CODES_SQL.format(**tables), {"runs": run_ids})
            ordered = conn.execute(f"SELECT run_id, decisions FROM {tables['codes']} "
                                   "ORDER BY experiment, mode, run").fetchall()
            item_ids = tuple(r[0] for r in conn.execute(f"SELECT item_id FROM {tables['items']} ORDER BY item")
                             .fetchall())
            (n_citations,) = conn.execute("SELECT count(*) FROM citations").fetchall()[0]
            per_run = dict(ordered)
            for chunk in _run_chunks(ordered, max_rows) or [[]]:
                run_by_run = n_citations > _CITATIONS_PER_ROW_RUN_BY_RUN * sum(per_run[r] for r in chunk)
                rows, labels = _coded_rows(conn, chunk, tables, run_by_run)
                yield DecisionCodes(rows, tuple(ids), tuple(names.get(e) or e for e in ids), tuple(MODES), labels,
                                    tuple(run_ids), item_ids)
        finally:
            try:
                for table in tables.values():
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
                conn.execute("RESET memory_limit" if default else f"SET memory_limit = '{before}'")
            except duckdb.Error:
                # A failed read aborts the transaction, which then refuses these too: the error to
                # see is the one that aborted it (the connection's close drops the tables).
                pass


def _run_chunks(ordered: list[tuple[str, int]], max_rows: int | None) -> list[list[str]]:
    """The runs, in order, in consecutive chunks of at most max_rows decision rows each (a run with
    more alone; None: all in one chunk)."""
    chunks: list[list[str]] = []
    size = 0
    for run_id, rows in ordered:
        if not chunks or (max_rows is not None and size + rows > max_rows and chunks[-1]):
            chunks.append([])
            size = 0
        chunks[-1].append(run_id)
        size += rows
    return chunks


def _coded_rows(conn: duckdb.DuckDBPyConnection, chunk: list[str], tables: dict[str, str],
                run_by_run: bool) -> tuple[dict[str, np.ndarray], tuple[str, ...]]:
    """The coded rows of the runs in `chunk` (CODED_COLUMNS) and the labels their codes index: the
    sorted labels the rows carry."""
    import numpy as np

    found = conn.execute(_LABELS_SQL, {"chunk": chunk}).fetchone()
    listed = list((found and found[0]) or [])
    if chunk and run_by_run:
        rows_sql = " UNION ALL ".join(f"SELECT {_ROWS_COLUMNS} FROM citation_decisions WHERE run_id = $run{i}"
                                      for i in range(len(chunk)))
    else:
        rows_sql = f"SELECT {_ROWS_COLUMNS} FROM citation_decisions WHERE run_id IN ({{runs}})"
    # execute_over_runs binds $run0, ... to the chunk's runs in the rows' {runs} (format leaves it).
    got = execute_over_runs(conn, _CODED_SQL.format(rows=rows_sql, **tables), (), run_ids=chunk,
                            params={"labels": listed}).fetchnumpy()
    rows = {c: np.asarray(got[c]) for c in CODED_COLUMNS}
    label = rows["label"]
    if (label == -2).any():
        raise RuntimeError("a shown document's label is in neither its generation's stored labels nor its run's "
                           "label pair: store/queries/decisions.py's _LABELS_SQL no longer reads where the view does")
    # Codes into the labels the rows carry, not into every label listed.
    present = np.unique(label[label >= 0])
    remap = np.full(len(listed) + 1, -1, dtype=label.dtype)  # the last entry: -1 stays -1
    remap[present] = np.arange(len(present), dtype=label.dtype)
    rows["label"] = remap[label]
    return rows, tuple(str(listed[i]) for i in present)


# Per run, the settings the citation_decisions view gives each of its rows, with the view's
# defaults (the study model's axes besides store.queries.study_effects.run_grid_settings').
_RUN_SETTINGS_SQL = """
SELECT run_id, experiment_id, rag_mode, created_utc, model, metadata_type,
       coalesce(json_extract_string(config_json, '$.prompt.relevant_at'), 'ranked'),
       coalesce(json_extract_string(config_json, '$.prompt.repetition'), 'none'),
       coalesce(json_extract_string(config_json, '$.prompt.label_scope'), 'all')
FROM runs WHERE list_contains($runs, run_id)
"""
RUN_SETTINGS = ("experiment_id", "mode", "created_utc", "model", "metadata_type", "relevant_at", "repetition",
                "label_scope")


def run_settings(db: DbLike, run_ids: tuple[str, ...] | list[str]) -> dict[str, dict]:
    """Per run id: RUN_SETTINGS (model and metadata_type None where the run has none)."""
    rows = fetch(db, _RUN_SETTINGS_SQL, {"runs": list(run_ids)})
    return {r[0]: dict(zip(RUN_SETTINGS, r[1:], strict=True)) for r in rows}


def label_pairs(db: DbLike, experiment_ids: tuple[str, ...] | list[str]) -> tuple[tuple[str, str], ...]:
    """(label A, label B) of each metadata type these experiments' labelled runs used, oldest run
    first, once each."""
    rows = fetch(
        db,
        "SELECT json_extract_string(config_json, '$.prompt.metadata.label_a'), "
        "       json_extract_string(config_json, '$.prompt.metadata.label_b') "
        "FROM runs WHERE list_contains($ids, experiment_id) AND rag_mode <> 'vanilla' "
        "ORDER BY list_position($ids, experiment_id), created_utc, run_id",
        {"ids": list(experiment_ids)},
    )
    return tuple(dict.fromkeys((a, b) for a, b in rows if a and b))


class AnswerCount(NamedTuple):
    """Stored answers, and their decision rows (shown documents, summed over the answers)."""

    answers: int
    decisions: int


def count_answers(db: DbLike, experiment_ids: tuple[str, ...] | list[str],
                  modes: tuple[str, ...] | None = None) -> AnswerCount:
    """How many stored answers these experiments hold (in `modes`; None: every mode), and how many
    decision rows they make: what a fit's work and memory grow with, counted without reading them."""
    sql = ("SELECT count(*), coalesce(sum(len(g.shown_doc_ids)), 0) FROM generations g JOIN runs r USING (run_id) "
           "WHERE list_contains($ids, r.experiment_id)")
    params: dict = {"ids": list(experiment_ids)}
    if modes is not None:
        sql += " AND list_contains($modes, r.rag_mode)"
        params["modes"] = list(modes)
    answers, decisions = fetch(db, sql, params)[0]
    return AnswerCount(int(answers), int(decisions))
