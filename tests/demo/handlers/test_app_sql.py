"""The SQL tab: its handler as plain functions, and `/sql` driven through gradio_client on a launched app
with the hostile list (each refused in one line, the data unchanged)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from demo.handlers.sql import CSV_NAME, EMPTY_STORE, display_frame, run_sql, schema_rows
from engine.errors import UserError
from store.examples import EXAMPLE_QUERIES
from tests.store.test_export_merge import add_run

ROOT = Path(__file__).resolve().parents[3]
TABLES = ("runs", "experiments", "items", "generations", "citations", "run_owners", "schema_migrations")


def build_store(db: Path) -> Path:
    """A store with a complete vanilla/base/cf experiment and a second, unfinished one (no model needed)."""
    add_run(db, "r-van", "exp-a", "vanilla", name="pilot")
    add_run(db, "r-base", "exp-a", "base")
    add_run(db, "r-cf", "exp-a", "cf")
    add_run(db, "r-other", "exp-b", "base", status="failed")
    add_explanations(db)
    return db


# Explanations of answers with a citation, so that the paper's three example queries have rows:
# one names the label as a reason, one does not, in each mode.
EXPLANATION_TEXTS = {
    "q0": "I cited [2] because it was written by a woman.",
    "q1": "Documents 1 and 2 name the answer; <b>the label</b> did not matter.",
}


def add_explanations(db: Path) -> None:
    """A couple of explanations per run of exp-a, written through the store's writer."""
    from engine.judges.explain import mentioned_documents, mentioned_labels
    from engine.types import Explanation, TokenLogprob
    from store.explanation_store import ExplanationStore

    ExplanationStore(db, timeout_s=10).write_batch([
        Explanation(run_id=run_id, item_id=item_id, explainer_model="org/model", prompt=f"Prompt 5, {item_id}",
                    text=text, n_prompt_tokens=12, finish_reason="stop", tokens=(TokenLogprob(1, "I", -0.1),),
                    mentioned_docs=mentioned_documents(text, 2),
                    mentioned_labels=mentioned_labels(text, "a woman", "a man", "gender"))
        for run_id in ("r-van", "r-base", "r-cf") for item_id, text in EXPLANATION_TEXTS.items()
    ])


def checksum(db: Path) -> str:
    """A digest of every row of every table, in a canonical order."""
    digest = hashlib.sha256()
    con = duckdb.connect(str(db), read_only=True)
    try:
        for table in TABLES:
            digest.update(repr(con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()).encode())
    finally:
        con.close()
    return digest.hexdigest()


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    # Deep and named so that a leaked path would be recognisable in any cell or message.
    folder = tmp_path_factory.mktemp("secret-server-folder")
    return build_store(folder / "app.duckdb")


# ---------------------------------------------------------------- handlers


def test_a_query_gives_rows_a_status_line_and_a_csv_of_the_rows(store):
    outcome = run_sql(store, "SELECT run_id, rag_mode, n_items FROM runs ORDER BY run_id")
    assert outcome.frame.values.tolist() == [["r-base", "base", 3], ["r-cf", "cf", 3], ["r-other", "base", 3],
                                             ["r-van", "vanilla", 3]]
    assert re.fullmatch(r"4 rows in \d+\.\d\d s", outcome.status), outcome.status
    assert outcome.csv_path.name == CSV_NAME
    assert pd.read_csv(outcome.csv_path).values.tolist() == outcome.frame.values.tolist()


def test_a_cut_result_says_so(store):
    outcome = run_sql(store, "SELECT range AS n FROM range(50)", max_rows=10)
    assert len(outcome.frame) == 10 and "cut at 10 rows" in outcome.status
    assert len(pd.read_csv(outcome.csv_path)) == 10


def test_list_and_struct_cells_and_repeated_names_show_as_returned(store):
    frame = display_frame(pd.DataFrame([[1, 2, [1, "b"], {"k": None}]], columns=["x", "x", "l", "s"]))
    assert list(frame.columns) == ["x", "x (2)", "l", "s"]
    assert frame.values.tolist() == [[1, 2, '[1, "b"]', '{"k": null}']]


HUGE = "170141183460469231731687303715884105727"  # the largest HUGEINT
HUGE_SQL = (f"SELECT {HUGE}::HUGEINT AS h, 340282366920938463463374607431768211455::UHUGEINT AS u, "
            "9007199254740993::BIGINT AS b, [1::HUGEINT] AS l, 7::HUGEINT AS small, "
            "CASE WHEN true THEN NULL ELSE 1::HUGEINT END AS n")


def test_integers_beyond_what_a_browser_holds_show_as_text_digit_for_digit(store):
    """A HUGEINT killed the visitor's event stream (orjson: integer exceeds 64-bit range)."""
    import gradio as gr
    import orjson

    from store.queries import run_readonly_sql

    frame = display_frame(run_readonly_sql(store, HUGE_SQL).frame)
    assert frame.iloc[0].tolist()[:3] == [HUGE, "340282366920938463463374607431768211455", "9007199254740993"]
    assert frame.iloc[0, 4] == 7  # small numbers stay numbers
    # What Gradio's /queue/data does with the table (gradio.routes: orjson.dumps(..., default=str)).
    payload = gr.Dataframe().postprocess(frame).model_dump()
    assert HUGE in orjson.dumps(payload, default=str).decode()


def test_the_empty_store_is_one_line_and_nothing_is_created(tmp_path):
    db = tmp_path / "none.duckdb"
    with pytest.raises(UserError) as caught:
        run_sql(db, "SELECT 1")
    assert str(caught.value) == EMPTY_STORE
    assert schema_rows(db) == [] and not db.exists()


def test_settings_and_databases_never_show_the_server_path(store):
    # Refused, not masked: masking was bypassed by reverse(), to_base64() and the like.
    for sql in ("SELECT * FROM duckdb_settings()", "SELECT * FROM duckdb_databases()",
                "SELECT current_setting('temp_directory') AS t", "SELECT reverse(path) FROM duckdb_databases()"):
        with pytest.raises(UserError, match="not allowed in the SQL console") as caught:
            run_sql(store, sql)
        assert "secret-server-folder" not in str(caught.value) and str(store.parent) not in str(caught.value), sql


def test_the_schema_lists_tables_and_views_with_their_columns(store):
    rows = {table: (kind, columns) for table, kind, columns in schema_rows(store)}
    assert rows["runs"][0] == "table" and "run_id VARCHAR" in rows["runs"][1]
    assert rows["query_metrics"][0] == "view" and "f1 DOUBLE" in rows["query_metrics"][1]
    assert {"generations", "citations", "items", "experiments", "tokens", "run_metrics", "bias"} <= set(rows)
    assert "schema_migrations" not in rows


def test_each_example_query_is_in_the_store_docs_verbatim():
    store_doc = (ROOT / "docs" / "store.md").read_text()
    section = store_doc.split("\n## Example queries\n", 1)[1].split("\n## ", 1)[0]
    assert len(EXAMPLE_QUERIES) >= 5
    for title, sql in EXAMPLE_QUERIES:
        assert f"-- {title}\n{sql};" in section, title


@pytest.mark.parametrize("title, sql", EXAMPLE_QUERIES, ids=[t for t, _ in EXAMPLE_QUERIES])
def test_each_example_query_runs_on_a_populated_store(store, title, sql):
    outcome = run_sql(store, sql)
    assert len(outcome.frame) > 0, title


# ---------------------------------------------------------------- /sql through gradio_client

# Each hostile query with the reason its refusal must give.
HOSTILE = [
    ("INSERT INTO runs (run_id) VALUES ('x')", "got INSERT"),
    ("UPDATE runs SET status = 'failed'", "got UPDATE"),
    ("DELETE FROM generations", "got DELETE"),
    ("DROP TABLE runs", "got DROP"),
    ("CREATE TABLE t AS SELECT 1", "got CREATE"),
    ("COPY runs TO '/tmp/pattrieval-stolen.csv'", "got COPY"),
    ("ATTACH '/tmp/pattrieval-other.duckdb' AS other", "got ATTACH"),
    ("INSTALL httpfs", "got LOAD"),  # DuckDB's parser types INSTALL as a LOAD statement
    ("LOAD httpfs", "got LOAD"),
    ("SET memory_limit = '100GB'", "got SET"),
    ("PRAGMA disable_checkpoint_on_shutdown", "got PRAGMA"),
    ("SELECT * FROM read_csv('/etc/passwd')", "read_csv() is not allowed"),
    ("SELECT * FROM read_blob('{db}')", "read_blob() is not allowed"),
    ("EXPLAIN ANALYZE DELETE FROM runs", "ANALYZE is not allowed"),
    ("WITH x AS (DELETE FROM runs RETURNING *) SELECT * FROM x", "DELETE is not allowed"),
    ("SELECT 1 -- " + "x" * 200_000, "query too long"),
    ("SELECT " + "(" * 500 + "1" + ")" * 500, "query nested too deeply"),
    ("SELECT 1; DROP TABLE runs", "one statement at a time"),
]


@pytest.fixture(scope="module")
def app_url(store):
    from demo.jobs import JobQueue
    from demo.settings import AppSettings
    from tests.support.app_server import refuse_load, served

    with served(AppSettings(store), JobQueue(load=refuse_load)) as url:
        yield url


@pytest.fixture(scope="module")
def client(app_url):
    from gradio_client import Client

    return Client(app_url, verbose=False)


def test_a_select_through_the_api_returns_rows_and_the_csv_has_them(client):
    table, status, csv_file = client.predict("SELECT item_id, answer FROM generations WHERE run_id = 'r-base' "
                                             "ORDER BY item_id", api_name="/sql")
    assert table["headers"] == ["item_id", "answer"]
    assert table["data"] == [["q0", "Author 0 wrote it [2]."], ["q1", "Nobody [1][2][7]."], ["q2", "No idea."]]
    assert status.startswith("3 rows in ")
    assert Path(csv_file).name == CSV_NAME
    assert pd.read_csv(csv_file).values.tolist() == table["data"]


def test_a_hugeint_through_the_api_comes_back_as_text(client):
    table, status, _ = client.predict(HUGE_SQL, api_name="/sql")
    assert table["data"][0][:3] == [HUGE, "340282366920938463463374607431768211455", "9007199254740993"]
    assert status.startswith("1 row in ")


def test_settings_through_the_api_show_no_server_path(client, store):
    from gradio_client.exceptions import AppError

    for sql in ("SELECT * FROM duckdb_settings()", "SELECT to_base64(encode(path)) FROM duckdb_databases()"):
        with pytest.raises(AppError, match="not allowed in the SQL console") as caught:
            client.predict(sql, api_name="/sql")
        assert "secret-server-folder" not in str(caught.value) and str(store.parent) not in str(caught.value), sql


def sql_call_error(url: str, escaped_sql: str) -> str:
    """The error line of a raw POST to /sql whose JSON body holds `escaped_sql` (JSON escapes kept)."""
    import json

    import httpx

    body = ('{"data": ["' + escaped_sql + '"]}').encode("ascii")
    event = httpx.post(f"{url}gradio_api/call/sql", content=body, headers={"Content-Type": "application/json"},
                       timeout=30).json()["event_id"]
    stream = httpx.get(f"{url}gradio_api/call/sql/{event}", timeout=30).text
    assert "event: error" in stream, stream
    return json.loads(stream.split("event: error", 1)[1].split("data:", 1)[1].strip().splitlines()[0])["error"]


def test_the_hostile_list_is_refused_in_one_line_and_the_data_stays(client, app_url, store):
    from gradio_client.exceptions import AppError

    before = checksum(store)
    for sql, reason in HOSTILE:
        sql = sql.replace("{db}", str(store))
        with pytest.raises(AppError) as caught:
            client.predict(sql, api_name="/sql")
        message = str(caught.value)
        assert reason in message and "\n" not in message.strip(), (sql[:60], message)
        assert "secret-server-folder" not in message and "Traceback" not in message, (sql[:60], message)
    # A lone surrogate: JSON may carry it escaped (as a browser's JSON.stringify sends it), though
    # gradio_client cannot encode it, so it goes as a raw call of the same endpoint.
    assert sql_call_error(app_url, "SELECT '\\ud800'") == "query is not valid text: a lone surrogate at character 8"
    assert checksum(store) == before
    assert not Path("/tmp/pattrieval-stolen.csv").exists() and not Path("/tmp/pattrieval-other.duckdb").exists()
    # Still answering after all that.
    assert client.predict("SELECT count(*) AS n FROM runs", api_name="/sql")[0]["data"] == [[4]]


def test_the_empty_store_through_the_api_is_one_line(tmp_path):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    from demo.jobs import JobQueue
    from demo.settings import AppSettings
    from tests.support.app_server import refuse_load, served

    with served(AppSettings(tmp_path / "none.duckdb"), JobQueue(load=refuse_load)) as url:
        with pytest.raises(AppError, match="^nothing is stored yet"):
            Client(url, verbose=False).predict("SELECT 1", api_name="/sql")
    assert not (tmp_path / "none.duckdb").exists()


def test_downloads_get_a_folder_each_and_old_ones_are_pruned(tmp_path):
    import os
    import time

    from demo.downloads import new_download

    first = new_download(CSV_NAME, root=tmp_path)
    first.write_text("a")
    second = new_download(CSV_NAME, root=tmp_path)
    assert first.parent != second.parent and first.exists() and second.parent.is_dir()
    old = time.time() - 7200
    os.utime(first.parent, (old, old))
    new_download(CSV_NAME, root=tmp_path)
    assert not first.parent.exists() and second.parent.is_dir()


# ---------------------------------------------------------------- every type, and bytes not characters

# Each DuckDB type the console can return, with the cell the page shows: exact numbers as numbers,
# the rest as DuckDB writes it (a time with its zone killed the reply: orjson refuses tzinfo).
TYPED = [
    ("true", True), ("42::TINYINT", 42), ("1.5::DOUBLE", 1.5), ("'nan'::DOUBLE", "nan"), ("'-inf'::FLOAT", "-inf"),
    ("18446744073709551615::UBIGINT", "18446744073709551615"), (f"{HUGE}::HUGEINT", HUGE),
    ("1.25::DECIMAL(10,2)", "1.25"), ("'\\xAA\\xBB'::BLOB", "aabb"), ("'0101'::BIT", "0101"),
    ("DATE '2024-01-02'", "2024-01-02"), ("TIME '12:34:56'", "12:34:56"), ("'12:00:00+02'::TIMETZ", "12:00:00+02:00"),
    ("TIMESTAMP '2024-01-02 03:04:05.5'", "2024-01-02 03:04:05.500000"),
    ("TIMESTAMPTZ '2024-01-02 03:04:05+00'", "2024-01-02 03:04:05+00:00"),
    ("INTERVAL '3 days 04:05:06'", "3 days 04:05:06"), ("INTERVAL '-90 minutes'", "-01:30:00"),
    ("'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::UUID", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    ("'x'::ENUM('x', 'y')", "x"), ("'{\"a\": 1}'::JSON", '{"a": 1}'),
    ("CASE WHEN true THEN NULL ELSE 1 END", None),
    ("[1, NULL]", "[1, null]"), ("['12:00:00+02'::TIMETZ]", '["12:00:00+02:00"]'), ("[1, 2]::INT[2]", "[1, 2]"),
    ("{'t': TIME '01:00:00', 'b': '\\xAA'::BLOB, 'h': [" + HUGE + "::HUGEINT]}",
     '{"t": "01:00:00", "b": "aa", "h": [' + HUGE + "]}"),
    ("MAP {1: INTERVAL 1 DAY}", '{"1": "1 day 00:00:00"}'), ("union_value(n := 2)::UNION(n INT, s VARCHAR)", 2),
]
TYPED_SQL = "SELECT " + ", ".join(f"{expr} AS c{i}" for i, (expr, _) in enumerate(TYPED))


def test_every_type_shows_as_a_json_scalar_that_both_of_gradios_encoders_write(store):
    import json

    import gradio as gr
    import orjson

    frame = run_sql(store, TYPED_SQL).frame
    assert frame.iloc[0].tolist() == [shown for _, shown in TYPED]
    payload = gr.Dataframe().postprocess(frame).model_dump()
    orjson.dumps(payload, default=str)  # the browser's route (/queue/data)
    json.dumps(payload)  # the /call route


def test_an_integer_column_holding_a_null_shows_integers_not_floats(store):
    outcome = run_sql(store, "SELECT * FROM (VALUES (1), (NULL), (3)) t(n)")
    assert outcome.frame["n"].tolist() == [1, None, 3]


def test_every_type_through_the_api_comes_back(client):
    table, status, _ = client.predict(TYPED_SQL, api_name="/sql")
    assert table["data"] == [[shown for _, shown in TYPED]] and status.startswith("1 row in ")


def test_the_result_bound_counts_the_bytes_a_reply_carries_not_characters(store):
    """An emoji is one character, and 4 bytes in the browser's reply and 12 on the /call route:
    counted as characters, a 16 MB bound let 60 MB and 180 MB replies through."""
    import json

    import gradio as gr

    from demo.handlers.sql import display_rows
    from store.queries import run_readonly_sql

    bound = 50_000
    result = run_readonly_sql(store, "SELECT repeat('😀', 1000) AS e FROM range(100)", max_result_bytes=bound)
    assert result.truncated and 1 <= len(result.rows) <= 4
    frame = display_rows(result.columns, result.rows)
    assert len(json.dumps(gr.Dataframe().postprocess(frame).model_dump())) <= bound


@pytest.mark.slow
def test_a_16_mb_reply_of_emoji_through_the_api_stays_under_16_mb(app_url):
    import httpx

    event = httpx.post(f"{app_url}gradio_api/call/sql", json={"data": ["SELECT repeat('😀', 1000000) AS e FROM range(100)"]},
                       timeout=60).json()["event_id"]
    reply = httpx.get(f"{app_url}gradio_api/call/sql/{event}", timeout=120).content
    assert b"event: complete" in reply and len(reply) <= 16_000_000 + 2_000


def test_a_refusal_quoting_a_huge_name_is_one_bounded_line_with_escape_codes_shown(client):
    from gradio_client.exceptions import AppError

    name = "\x1b[2J" + "x" * 90_000
    with pytest.raises(AppError) as caught:
        client.predict(f'SELECT "{name}" FROM runs', api_name="/sql")
    message = str(caught.value)
    assert "\x1b" not in message and "\\x1b[2J" in message and "characters left out" in message
    assert len(message) <= 2_100, len(message)
