"""The DuckDB store: migrations, the run sink, read queries and the SQL sandbox, on real files."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
from pathlib import Path

import duckdb
import pytest

from engine.errors import UserError
from engine.types import Citation, Document, Generation, Item, RunSpec, TokenLogprob, TopLogprob
from store import RunStore, connect, queries
from store.migrations import Migration, applied_versions, apply_migrations, available_migrations
from store.run_store import StoreLostAnswers

EXPECTED_COLUMNS = {
    "runs": [
        "run_id", "experiment_id", "config_hash", "created_utc", "finished_utc", "status",
        "model", "model_revision", "quantization", "dtype", "device", "dataset", "dataset_sha",
        "metadata_type", "rag_mode", "seed", "prompt_version", "git_sha", "library_versions",
        "config_json", "n_items",
    ],
    "items": ["dataset_sha", "item_id", "question", "answers", "documents"],
    "generations": [
        "run_id", "item_id", "prompt", "answer", "shown_doc_ids", "n_prompt_tokens", "n_tokens",
        "finish_reason", "token_ids", "tokens", "logprobs", "top_logprobs", "created_utc",
        "shown_labels",  # migration 014
    ],
    "citations": [
        "run_id", "item_id", "citation_index", "position", "doc_id", "relevant", "probability",
    ],
    "tokens": ["run_id", "item_id", "step", "token_id", "token", "logprob", "top"],
    "experiments": [
        "experiment_id", "name", "experiment_key", "created_utc", "model", "dataset", "dataset_sha",
        "settings_json",
    ],
    "run_owners": ["run_id", "host", "pid", "process_start", "heartbeat_utc"],
}

SHA = "sha-1"


def make_items(n: int = 3) -> list[Item]:
    return [
        Item(
            id=f"q{i}",
            question=f"Who wrote book {i}?",
            answers=(f"Author {i}", f"A. {i}"),
            documents=(
                Document(id=f"q{i}-d1", text="Book was written by a poet.", relevant=False, title="Poets"),
                Document(id=f"q{i}-d2", text=f"Author {i} wrote it.", relevant=True),
                Document(id=f"q{i}-d3", text="Unrelated.", relevant=False),
            ),
        )
        for i in range(n)
    ]


def make_spec(run_id: str = "run-a", config_hash: str = "hash-a", **changes) -> RunSpec:
    spec = RunSpec(
        run_id=run_id,
        experiment_id="exp-1",
        config_hash=config_hash,
        model="tiny/llama",
        model_revision="abc123",
        quantization="4bit",
        dtype="float16",
        device="cpu",
        dataset="data/tiny.jsonl",
        dataset_sha=SHA,
        metadata_type="hai",
        rag_mode="base",
        seed=7,
        prompt_version="p1",
        git_sha="deadbeef",
        library_versions={"torch": "2.5.0", "transformers": "4.46.0"},
        config={"k": 3, "order": "ranked", "path": Path("/x")},
        n_items=3,
    )
    return dataclasses.replace(spec, **changes)


def make_generation(item_id: str = "q0", **changes) -> Generation:
    """An answer citing [2] (relevant), [1] and [9] (out of range), with top-2 alternatives."""
    tokens = (
        TokenLogprob(11, "Author", -0.25, (TopLogprob(11, "Author", -0.25), TopLogprob(12, "The", -1.5))),
        TokenLogprob(13, " [", -0.01, (TopLogprob(13, " [", -0.01), TopLogprob(14, ".", float("-inf")))),
        TokenLogprob(2, "2", -0.1, (TopLogprob(2, "2", -0.1), TopLogprob(1, "1", -2.4))),
        TokenLogprob(15, "]", -0.0, ()),
    )
    generation = Generation(
        item_id=item_id,
        prompt=f"Prompt for {item_id}",
        answer="Author [2][1][9]",
        shown_doc_ids=(f"{item_id}-d3", f"{item_id}-d2", f"{item_id}-d1"),
        finish_reason="stop",
        n_prompt_tokens=42,
        tokens=tokens,
        citations=(
            Citation(index=0, position=2, doc_id=f"{item_id}-d2", relevant=True, probability=math.exp(-0.1)),
            Citation(index=1, position=1, doc_id=f"{item_id}-d3", relevant=False, probability=0.5),
            Citation(index=2, position=9, doc_id=None, relevant=None, probability=None),
        ),
    )
    return dataclasses.replace(generation, **changes)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "sub" / "runs.duckdb"


@pytest.fixture
def store(db: Path) -> RunStore:
    return RunStore(db, timeout_s=10)


@pytest.fixture
def started(store: RunStore) -> RunStore:
    store.put_items(SHA, make_items())
    store.start_run(make_spec())
    return store


def count(db: Path, sql: str, params=None) -> int:
    with connect(db, read_only=True) as conn:
        return conn.execute(sql, params).fetchone()[0]


# --- migrations --------------------------------------------------------------------------


def test_migrations_create_the_schema_on_an_empty_database(db: Path):
    assert not db.exists()
    with connect(db) as conn:
        versions = conn.execute("SELECT version, name FROM schema_migrations").fetchall()
        for table, columns in EXPECTED_COLUMNS.items():
            found = [r[0] for r in conn.execute(f"DESCRIBE {table}").fetchall()]
            assert found == columns, table
    assert versions == [(m.version, m.name) for m in available_migrations()]
    assert versions[0] == (1, "initial")


def test_reconnecting_does_not_reapply_migrations(db: Path):
    with connect(db) as conn:
        first = conn.execute("SELECT version, applied_utc FROM schema_migrations").fetchall()
    with connect(db) as conn:
        assert apply_migrations(conn) == ()
        again = conn.execute("SELECT version, applied_utc FROM schema_migrations").fetchall()
    with connect(db, read_only=True) as conn:
        assert conn.execute("SELECT version, applied_utc FROM schema_migrations").fetchall() == first
    assert again == first


def test_read_only_connect_on_a_new_path_creates_the_schema(db: Path):
    with connect(db, read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    assert queries.list_runs(db).empty


def test_new_migration_files_are_picked_up_in_order(tmp_path: Path):
    folder = tmp_path / "migrations"
    folder.mkdir()
    shipped = available_migrations()[0]
    (folder / "001_initial.sql").write_text(shipped.sql)
    (folder / "003_more.sql").write_text("CREATE VIEW v3 AS SELECT * FROM v2;")
    (folder / "002_views.sql").write_text("CREATE VIEW v2 AS SELECT run_id FROM runs;")
    (folder / "README.txt").write_text("not a migration")
    found = available_migrations(folder)
    assert [(m.version, m.name) for m in found] == [(1, "initial"), (2, "views"), (3, "more")]
    conn = duckdb.connect(str(tmp_path / "m.duckdb"))
    try:
        assert apply_migrations(conn, found[:1]) == (1,)
        assert apply_migrations(conn, found) == (2, 3)  # only the new ones
        assert apply_migrations(conn, found) == ()
        assert applied_versions(conn) == {1, 2, 3}
        conn.execute("SELECT * FROM v3").fetchall()
    finally:
        conn.close()


def test_a_failing_migration_leaves_nothing_behind(tmp_path: Path):
    bad = [Migration(1, "ok", "CREATE TABLE a(x INTEGER);"),
           Migration(2, "bad", "CREATE TABLE b(x INTEGER); SELECT * FROM missing_table;")]
    conn = duckdb.connect(str(tmp_path / "m.duckdb"))
    try:
        with pytest.raises(duckdb.CatalogException):
            apply_migrations(conn, bad)
        assert applied_versions(conn) == {1}
        tables = {r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert "b" not in tables and "a" in tables
    finally:
        conn.close()


def test_misnamed_migration_file_is_an_error(tmp_path: Path):
    (tmp_path / "2_views.sql").write_text("SELECT 1;")
    with pytest.raises(RuntimeError, match="NNN_name"):
        available_migrations(tmp_path)


def test_a_file_that_is_not_a_database_is_a_user_error(tmp_path: Path):
    path = tmp_path / "data.dat"
    path.write_text('{"not": "duckdb"}\n' * 100)
    for read_only in (False, True):
        with pytest.raises(UserError, match="cannot open database .*: not a DuckDB database file$"):
            with connect(path, read_only=read_only):
                pass


def test_connect_rolls_back_on_error(db: Path):
    with pytest.raises(RuntimeError):
        with connect(db) as conn:
            conn.execute("INSERT INTO items VALUES ('s', 'i', 'q', [], [])")
            raise RuntimeError("boom")
    assert count(db, "SELECT count(*) FROM items") == 0


# --- the sink ----------------------------------------------------------------------------


def test_round_trip_of_a_run(started: RunStore, db: Path):
    before = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    started.write_batch("run-a", [make_generation("q0"), make_generation("q1")])
    started.write_batch("run-a", [make_generation("q2")])
    started.finish_run("run-a", "complete")

    run = queries.get_run(db, "run-a")
    assert run is not None
    assert (run.status, run.model, run.model_revision, run.rag_mode, run.seed) == (
        "complete", "tiny/llama", "abc123", "base", 7)
    assert run.library_versions == {"torch": "2.5.0", "transformers": "4.46.0"}
    assert run.config == {"k": 3, "order": "ranked", "path": "/x"}
    assert (run.n_items, run.n_done) == (3, 3)
    # Stored as naive UTC: compare with UTC now, which differs from local time on most hosts.
    assert before - dt.timedelta(minutes=1) < run.created_utc <= run.finished_utc
    assert run.finished_utc < dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(seconds=5)

    detail = queries.generation_detail(db, "run-a", "q0")
    assert detail is not None
    assert detail.question == "Who wrote book 0?"
    assert detail.gold_answers == ("Author 0", "A. 0")
    assert (detail.prompt, detail.answer, detail.finish_reason) == ("Prompt for q0", "Author [2][1][9]", "stop")
    assert (detail.n_prompt_tokens, detail.n_tokens) == (42, 4)
    docs = detail.documents
    assert docs["position"].tolist() == [1, 2, 3]
    assert docs["doc_id"].tolist() == ["q0-d3", "q0-d2", "q0-d1"]
    assert docs["relevant"].tolist() == [False, True, False]
    assert docs["title"].tolist() == ["", "", "Poets"]
    assert docs["cited"].tolist() == [True, True, False]
    toks = detail.tokens
    assert toks["step"].tolist() == [0, 1, 2, 3]
    assert toks["token"].tolist() == ["Author", " [", "2", "]"]
    assert toks["token_id"].tolist() == [11, 13, 2, 15]
    assert toks["logprob"].tolist() == pytest.approx([-0.25, -0.01, -0.1, 0.0])
    assert toks["top"][0] == [{"id": 11, "token": "Author", "logprob": -0.25},
                              {"id": 12, "token": "The", "logprob": -1.5}]
    assert toks["top"][1][1] == {"id": 14, "token": ".", "logprob": None}  # -inf is not JSON
    assert toks["top"][3] == []
    cites = detail.citations
    assert cites["position"].tolist() == [2, 1, 9]
    assert cites["doc_id"].tolist()[:2] == ["q0-d2", "q0-d3"]
    assert cites["doc_id"].isna().tolist() == [False, False, True]
    assert cites["relevant"].isna().tolist() == [False, False, True]
    assert cites["probability"].tolist()[:2] == pytest.approx([math.exp(-0.1), 0.5])
    assert cites["probability"].isna().tolist() == [False, False, True]

    gens = queries.generations_for_run(db, "run-a")
    assert gens["item_id"].tolist() == ["q0", "q1", "q2"]
    row = gens.iloc[0]
    assert row["question"] == "Who wrote book 0?"
    assert row["gold_answers"] == ["Author 0", "A. 0"]
    assert row["shown_doc_ids"] == ["q0-d3", "q0-d2", "q0-d1"]
    assert row["shown_relevant"] == [False, True, False]
    assert row["relevant_doc_ids"] == ["q0-d2"]
    assert row["cited_positions"] == [2, 1, 9]
    assert row["cited_doc_ids"] == ["q0-d2", "q0-d3", None]
    assert queries.generation_detail(db, "run-a", "q7") is None  # an item the dataset lacks


def test_generation_without_alternatives_stores_null_top_logprobs(started: RunStore, db: Path):
    plain = make_generation("q0", tokens=(TokenLogprob(1, "a", -0.5), TokenLogprob(2, "b", -0.7)))
    imported = make_generation("q1", tokens=(), citations=(Citation(0, 1, "q1-d3", False, None),))
    started.write_batch("run-a", [plain, imported])
    with connect(db, read_only=True) as conn:
        rows = conn.execute(
            "SELECT item_id, top_logprobs, n_tokens, tokens FROM generations ORDER BY item_id").fetchall()
        assert rows == [("q0", None, 2, ["a", "b"]), ("q1", None, 0, [])]
        tokens = conn.execute("SELECT step, token, logprob, top FROM tokens ORDER BY step").fetchall()
        assert tokens == [(0, "a", -0.5, None), (1, "b", -0.7, None)]
        assert conn.execute("SELECT probability FROM citations WHERE item_id='q1'").fetchall() == [(None,)]


def test_duplicates_are_ignored(started: RunStore, db: Path):
    started.write_batch("run-a", [make_generation("q0")])
    # A resume re-sends q0 (committed before a crash) together with a new item, and q1 twice.
    changed = make_generation("q0", answer="different", citations=())
    started.write_batch("run-a", [changed, make_generation("q1"), make_generation("q1", answer="x")])
    assert count(db, "SELECT count(*) FROM generations") == 2
    assert count(db, "SELECT count(*) FROM citations") == 6
    detail = queries.generation_detail(db, "run-a", "q0")
    assert detail.answer == "Author [2][1][9]"
    assert queries.generation_detail(db, "run-a", "q1").answer == "Author [2][1][9]"
    assert started.done_item_ids("run-a") == {"q0", "q1"}
    started.write_batch("run-a", [make_generation("q0")])  # whole batch already stored
    assert count(db, "SELECT count(*) FROM generations") == 2


def test_put_items_is_idempotent(store: RunStore, db: Path):
    store.put_items(SHA, make_items(2))
    store.put_items(SHA, make_items(3))  # one new, two already there
    renamed = [dataclasses.replace(make_items(1)[0], question="changed?")]
    store.put_items(SHA, renamed)
    store.put_items("other-sha", renamed)  # same id under another dataset content is new
    assert count(db, "SELECT count(*) FROM items WHERE dataset_sha = ?", [SHA]) == 3
    assert count(db, "SELECT count(*) FROM items") == 4
    with connect(db, read_only=True) as conn:
        question, docs = conn.execute(  # type: ignore[misc]
            "SELECT question, documents FROM items WHERE dataset_sha = ? AND item_id = 'q0'", [SHA]
        ).fetchone()
    assert question == "Who wrote book 0?"
    assert [d["id"] for d in docs] == ["q0-d1", "q0-d2", "q0-d3"]  # ranked order kept
    assert docs[0] == {"id": "q0-d1", "title": "Poets", "text": "Book was written by a poet.", "relevant": False}


def test_a_batch_with_a_bad_row_stores_nothing(started: RunStore, db: Path):
    bad_answer = make_generation("q1", answer=None)
    with pytest.raises(duckdb.ConstraintException):
        started.write_batch("run-a", [make_generation("q0"), bad_answer])
    assert count(db, "SELECT count(*) FROM generations") == 0
    # The generations insert succeeds here; the citations insert then fails, and both roll back.
    repeated = Citation(index=0, position=1, doc_id="q1-d3", relevant=False, probability=0.1)
    bad_citations = make_generation("q1", citations=(repeated, repeated))
    with pytest.raises(duckdb.ConstraintException):
        started.write_batch("run-a", [make_generation("q0"), bad_citations])
    assert count(db, "SELECT count(*) FROM generations") == 0
    assert count(db, "SELECT count(*) FROM citations") == 0
    started.write_batch("run-a", [make_generation("q0"), make_generation("q1")])
    assert started.done_item_ids("run-a") == {"q0", "q1"}


def test_write_batch_needs_a_started_run(store: RunStore):
    with pytest.raises(ValueError, match="start_run"):
        store.write_batch("nope", [make_generation()])
    store.write_batch("nope", [])  # nothing to do is not an error


def test_a_run_short_of_its_answers_is_left_failed_not_complete(started: RunStore, db: Path):
    # Answers committed earlier and gone from the file (lost under the store, not by this code):
    # marking the run complete would hide the gap from every resume.
    started.write_batch("run-a", [make_generation("q0"), make_generation("q1")])
    with pytest.raises(StoreLostAnswers, match=r"holds 2 of its 3 answers.*marked failed"):
        started.finish_run("run-a", "complete")
    run = queries.get_run(db, "run-a")
    assert (run.status, run.n_done) == ("failed", 2)
    assert count(db, "SELECT count(*) FROM run_owners") == 0  # released: the same command resumes it
    assert started.find_resumable("hash-a").status == "failed"
    assert started.done_item_ids("run-a") == {"q0", "q1"}


def test_status_transitions(started: RunStore, db: Path):
    def status():
        run = queries.get_run(db, "run-a")
        return run.status, run.finished_utc is not None

    assert status() == ("running", False)
    assert started.find_resumable("hash-a") == ("run-a", "exp-1", "running")
    assert count(db, "SELECT count(*) FROM run_owners WHERE run_id = 'run-a' AND pid = ?", [os.getpid()]) == 1
    started.finish_run("run-a", "failed")
    assert status() == ("failed", True)
    assert count(db, "SELECT count(*) FROM run_owners") == 0  # released
    assert started.find_resumable("hash-a").status == "failed"
    started.start_run(make_spec(model="ignored/on-resume"))
    assert status() == ("running", False)
    assert queries.get_run(db, "run-a").model == "tiny/llama"
    started.write_batch("run-a", [make_generation(f"q{i}") for i in range(3)])
    started.finish_run("run-a", "complete")
    assert status() == ("complete", True)
    with pytest.raises(ValueError, match="final status"):
        started.finish_run("run-a", "running")
    with pytest.raises(ValueError, match="unknown run"):
        started.finish_run("missing", "complete")
    with pytest.raises(ValueError, match="configuration hash"):
        started.start_run(make_spec(config_hash="other"))
    assert count(db, "SELECT count(*) FROM runs") == 1


def test_reads_never_create_the_database(store: RunStore, db: Path):
    from engine.types import ExperimentSpec

    spec = ExperimentSpec(key="k", name="n", new=False, model="m", dataset="d", dataset_sha="s", settings={})
    assert store.find_experiment(spec) is None
    assert store.find_resumable("hash-a") is None
    assert store.done_item_ids("run-a") == set()
    assert not db.exists() and not db.parent.exists()


def test_find_resumable_returns_the_newest_run(started: RunStore):
    assert started.find_resumable("unknown") is None
    started.start_run(make_spec(run_id="run-b", experiment_id="exp-2"))
    found = started.find_resumable("hash-a")
    assert found == ("run-b", "exp-2", "running")
    assert (found.run_id, found.experiment_id) == ("run-b", "exp-2")


# --- read queries ------------------------------------------------------------------------


def test_listing_queries(started: RunStore, db: Path):
    started.start_run(make_spec(run_id="run-v", rag_mode="vanilla", config_hash="hash-v"))
    started.start_run(make_spec(run_id="run-c", rag_mode="cf", config_hash="hash-c"))
    started.start_run(make_spec(run_id="run-x", experiment_id="exp-2", config_hash="hash-x", n_items=0))
    started.write_batch("run-a", [make_generation("q0"), make_generation("q1")])
    started.write_batch("run-v", [make_generation("q0")])
    started.finish_run("run-x", "complete")

    runs = queries.list_runs(db)
    assert runs["run_id"].tolist() == ["run-x", "run-c", "run-v", "run-a"]  # newest first
    assert dict(zip(runs["run_id"], runs["n_done"], strict=True)) == {"run-x": 0, "run-c": 0, "run-v": 1, "run-a": 2}

    experiments = queries.list_experiments(db)
    assert experiments["experiment_id"].tolist() == ["exp-2", "exp-1"]
    exp1 = experiments.set_index("experiment_id").loc["exp-1"]
    assert exp1["modes"] == ["vanilla", "base", "cf"]
    assert exp1["run_ids"] == ["run-v", "run-a", "run-c"]
    assert (exp1["n_runs"], exp1["n_done"], exp1["status"]) == (3, 3, "running")
    assert experiments.set_index("experiment_id").loc["exp-2", "status"] == "complete"

    assert queries.runs_for_experiment(db, "exp-1")["rag_mode"].tolist() == ["vanilla", "base", "cf"]
    counts = queries.done_counts(db).set_index("run_id")
    assert counts.loc["run-a", "n_done"] == 2 and counts.loc["run-a", "n_items"] == 3
    cites = queries.citations_for_run(db, "run-a")
    assert cites[["item_id", "citation_index", "position"]].values.tolist() == [
        ["q0", 0, 2], ["q0", 1, 1], ["q0", 2, 9], ["q1", 0, 2], ["q1", 1, 1], ["q1", 2, 9]]
    assert queries.get_run(db, "missing") is None
    assert queries.generations_for_run(db, "missing").empty

    schema = queries.table_columns(db)
    assert set(EXPECTED_COLUMNS) <= set(schema["table_name"])  # later migrations add views
    assert set(schema.loc[schema["table_name"] == "tokens", "kind"]) == {"view"}


def test_queries_accept_a_run_store(started: RunStore):
    assert queries.list_runs(started)["run_id"].tolist() == ["run-a"]


# --- the SQL sandbox ---------------------------------------------------------------------


def test_sandbox_runs_select_like_statements(started: RunStore, db: Path):
    started.write_batch("run-a", [make_generation("q0")])
    result = queries.run_readonly_sql(
        db, "SELECT position, doc_id FROM citations ORDER BY citation_index;")
    assert result.frame["position"].tolist() == [2, 1, 9]
    assert result.frame["doc_id"].tolist()[:2] == ["q0-d2", "q0-d3"]
    assert result.frame["doc_id"].isna().tolist() == [False, False, True]
    assert not result.truncated
    for sql in ["DESCRIBE runs", "SHOW TABLES", "SUMMARIZE citations", "EXPLAIN SELECT 1",
                "FROM tokens", "WITH t AS (SELECT 1 AS x) SELECT * FROM t", "VALUES (1), (2)",
                "SELECT token, exp(logprob) AS p FROM tokens WHERE run_id = 'run-a'"]:
        assert not queries.run_readonly_sql(db, sql).frame.empty, sql


def test_sandbox_bounds_rows(db: Path):
    result = queries.run_readonly_sql(db, "SELECT * FROM range(1000000000)", max_rows=50)
    assert len(result.frame) == 50 and result.truncated
    exact = queries.run_readonly_sql(db, "SELECT * FROM range(50)", max_rows=50)
    assert len(exact.frame) == 50 and not exact.truncated


def test_sandbox_bounds_time(db: Path):
    with pytest.raises(UserError, match="time limit"):
        queries.run_readonly_sql(
            db, "SELECT sum(a.range * b.range) FROM range(200000) a, range(200000) b", timeout_s=0.3)
    assert queries.list_runs(db).empty  # the database is usable again afterwards


def test_sandbox_bounds_memory(db: Path):
    with pytest.raises(UserError, match="(?i)memory"):
        queries.run_readonly_sql(
            db, "SELECT length(list(range)) FROM range(100000000)", memory_limit="64MB")
    # 10 GB of strings: outside DuckDB's memory_limit, caught by the child's address-space cap.
    with pytest.raises(UserError, match="(?i)memory"):
        queries.run_readonly_sql(db, "SELECT repeat('x', 10000000) FROM range(1000)")


def test_sandbox_bounds_result_bytes(db: Path):
    result = queries.run_readonly_sql(
        db, "SELECT repeat('x', 100000) AS s FROM range(1000)", max_result_bytes=1_000_000)
    assert result.truncated and 0 < len(result.frame) < 10


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM read_blob('/etc/hostname')",
        "SELECT * FROM '/etc/passwd'",
        "SELECT * FROM glob('/etc/*')",
        "SELECT * FROM read_parquet('https://example.com/x.parquet')",
        "SELECT * FROM read_json('s3://bucket/x.json')",
        "SELECT * FROM query('COPY runs TO ''/tmp/pattrieval-leak.csv''')",
        "SELECT * FROM duckdb_secrets()",
    ],
)
def test_sandbox_blocks_file_and_network_reads(db: Path, sql: str):
    with pytest.raises(UserError):
        queries.run_readonly_sql(db, sql)


@pytest.mark.parametrize(
    "sql",
    [
        "COPY runs TO '{leak}'",
        "EXPORT DATABASE '{leak_dir}'",
        "ATTACH '{leak}' AS other",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
        "SET lock_configuration = false",
        "SET memory_limit = '100GB'",
        "RESET memory_limit",
        "PRAGMA threads = 8",
        "CALL pragma_version()",
        "CREATE TABLE evil(x INTEGER)",
        "CREATE TEMP TABLE evil AS SELECT 1",
        "INSERT INTO runs (run_id) VALUES ('x')",
        "DELETE FROM runs",
        "DROP TABLE runs",
        "UPDATE runs SET status = 'x'",
        "CHECKPOINT",
        "SELECT 1; SELECT 2",
        "SELECT 1; COPY runs TO '{leak}'",
        "DETACH runs",
        "USE memory",
        "SELEC nonsense",
    ],
)
def test_sandbox_blocks_statements_that_are_not_queries(tmp_path: Path, db: Path, sql: str):
    leak = tmp_path / "leak.csv"
    sql = sql.format(leak=leak, leak_dir=tmp_path / "leak-dir")
    with pytest.raises(UserError) as caught:
        queries.run_readonly_sql(db, sql)
    assert "\n" not in str(caught.value)
    assert not leak.exists() and not (tmp_path / "leak-dir").exists()


def test_sandbox_settings_hold_even_past_the_statement_filter(db: Path):
    """Defence in depth: the connection itself refuses what the statement filter also refuses.

    The filter now refuses current_setting() itself (settings hold server paths), so the settings
    are read past it: on the sandbox's own connection, opened and locked as the child opens it."""
    from store import sandbox
    from store.db import raw_connection

    request = sandbox.SandboxRequest(path=str(db), sql="", max_rows=10, timeout_s=30, lock_timeout_s=5,
                                     memory_limit="256MB", threads=1, max_result_bytes=10_000,
                                     max_address_space=None)
    with pytest.raises(UserError, match="current_setting is not allowed"):
        queries.run_readonly_sql(db, "SELECT current_setting('threads')")

    def setting(name: str):
        with raw_connection(str(db), read_only=True, timeout_s=5, config=sandbox.connection_config(request),
                            yield_to_writers=True) as conn:
            reply = sandbox._fetch(conn, dataclasses.replace(request, sql=f"SELECT current_setting('{name}')"))
        assert reply.error is None, reply.error
        return reply.rows[0][0]

    assert not setting("enable_external_access")
    assert setting("lock_configuration")
    assert not setting("allow_community_extensions")
    assert int(setting("threads")) == 1


def test_sandbox_errors_are_one_line(db: Path):
    with pytest.raises(UserError) as caught:
        queries.run_readonly_sql(db, "SELECT no_such_column FROM runs")
    assert "no_such_column" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(UserError, match="empty"):
        queries.run_readonly_sql(db, "  ")


@pytest.mark.parametrize("name", ["runs.csv", "runs.jsonl"])
def test_a_data_file_is_refused_not_opened_in_memory(tmp_path: Path, name: str):
    # DuckDB 2 opens an existing data file as an in-memory database with a view on it, which
    # would silently drop every write. (A new path with such a name becomes a DuckDB file.)
    path = tmp_path / name
    path.write_text("a,b\n1,2\n" if name.endswith(".csv") else '{"a": 1}\n')
    for read_only in (False, True):
        with pytest.raises(UserError, match="not a DuckDB database file"):
            with connect(path, read_only=read_only):
                pass
