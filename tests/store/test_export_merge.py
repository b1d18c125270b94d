"""`engine export` and `engine merge`: per-item results to CSV/Parquet, and runs copied between stores."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from engine.__main__ import main
from engine.errors import UserError
from engine.types import Citation, Document, Generation, Item, RunSpec, TokenLogprob
from store import RunStore, connect
from store.export import export_results
from store.merge import MergeRefused, merge_stores
from store.queries import EXPORT_COLUMNS, UnknownExperiment, export_results_frame
from tests.support.helpers import digest, rows

ROOT = Path(__file__).resolve().parents[2]
SHA = "sha-em"


def items(n: int = 3, *, question: str = "Who wrote book {i}?") -> list[Item]:
    return [
        Item(
            id=f"q{i}",
            question=question.format(i=i),
            answers=(f"Author {i}", f"A. {i}"),
            documents=(
                Document(id=f"q{i}-d1", text="A poet, \"quoted\", wrote it.", relevant=False, title="Poets"),
                Document(id=f"q{i}-d2", text=f"Author {i} wrote it.", relevant=True),
            ),
        )
        for i in range(n)
    ]


def generation(item_id: str, answer: str, cites: tuple[int, ...]) -> Generation:
    shown = (f"{item_id}-d1", f"{item_id}-d2")
    return Generation(
        item_id=item_id,
        prompt=f"Prompt, {item_id}",
        answer=answer,
        shown_doc_ids=shown,
        finish_reason="stop",
        n_prompt_tokens=10,
        tokens=(TokenLogprob(1, "x", -0.5, ()),),
        citations=tuple(
            Citation(index=k, position=p, doc_id=shown[p - 1] if p <= 2 else None,
                     relevant=(p == 2) if p <= 2 else None, probability=0.25 * (k + 1) if p <= 2 else None)
            for k, p in enumerate(cites)
        ),
    )


_EMPTY: list[Path] = []  # a migrated store holding items(3) only, made once: creating one costs ~0.5 s
_WITH_ITEMS: set[Path] = set()


def add_run(db: Path, run_id: str, experiment: str, mode: str, *, status: str = "complete", n: int = 3,
            config_hash: str | None = None, name: str | None = None) -> None:
    """A run written through the RunStore as a real run writes it (no model needed)."""
    if not db.exists() and _EMPTY and n == 3:
        shutil.copy(_EMPTY[0], db)  # holds items(3) already
        _WITH_ITEMS.add(db)
    store = RunStore(db, timeout_s=10)
    if db not in _WITH_ITEMS:
        store.put_items(SHA, items(n))
        _WITH_ITEMS.add(db)
    meta = None if mode == "vanilla" else {"prompt": {"metadata": {"short_a": "Woman", "short_b": "Man"}}}
    store.start_run(RunSpec(run_id, experiment, config_hash or f"h-{run_id}", "org/model", None, "4bit", "bfloat16",
                            "cpu", "/somewhere/data/tiny.jsonl", SHA, None if mode == "vanilla" else "gender", mode,
                            0, "v1", None, {}, meta or {}, n))
    answers = [("Author 0 wrote it [2].", (2,)), ("Nobody [1][2][7].", (1, 2, 7)), ("No idea.", ())]
    store.write_batch(run_id, [generation(f"q{i}", *answers[i % 3]) for i in range(n)])
    if status != "running":
        store.finish_run(run_id, status)
    if name is not None:
        with connect(db) as conn:
            conn.execute("UPDATE experiments SET name = ? WHERE experiment_id = ?", [name, experiment])


@pytest.fixture(scope="module", autouse=True)
def empty_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("empty") / "empty.duckdb"
    RunStore(path).put_items(SHA, items(3))
    _EMPTY[:] = [path]
    yield path
    _EMPTY.clear()


@pytest.fixture(scope="module")
def built_db(empty_store, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("built") / "runs.duckdb"
    add_run(path, "r-van", "exp-a", "vanilla", name="pilot")
    add_run(path, "r-base", "exp-a", "base")
    add_run(path, "r-cf", "exp-a", "cf", status="running")
    add_run(path, "r-other", "exp-b", "base", n=2)
    add_run(path, "r-third", "exp-c", "base")
    return path


@pytest.fixture
def db(built_db, tmp_path: Path) -> Path:
    return Path(shutil.copy(built_db, tmp_path / "runs.duckdb"))


# ---------------------------------------------------------------- export


def view_rows(db: Path, run_ids: list[str]) -> pd.DataFrame:
    with connect(db, read_only=True) as conn:
        frame = conn.execute("SELECT * FROM query_metrics WHERE list_contains(?, run_id) ORDER BY run_id, item_id",
                             [run_ids]).df()
    return frame


def same_metrics(exported: pd.DataFrame, view: pd.DataFrame) -> None:
    exported = exported.sort_values(["run_id", "item_id"]).reset_index(drop=True)
    assert list(exported["run_id"]) == list(view["run_id"]) and list(exported["item_id"]) == list(view["item_id"])
    for column in ("precision", "recall", "f1", "exact_match", "squad_em", "token_f1", "answer_recall",
                   "n_citations", "out_of_range_citations", "p_relevant", "p_nonrelevant"):
        for a, b in zip(exported[column], view[column], strict=True):
            assert (pd.isna(a) and pd.isna(b)) or math.isclose(float(a), float(b)), column
    for column in ("cited", "gold"):
        assert [list(map(int, v)) for v in exported[column]] == [list(map(int, v)) for v in view[column]]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_round_trips_through_pandas(db, tmp_path, fmt):
    out = tmp_path / f"results.{fmt}"
    assert main(["export", "--experiment", "exp-a", "--format", fmt, "--out", str(out), "--db", str(db)]) == 0
    if fmt == "csv":
        back = pd.read_csv(out)
        for column in ("gold_answers", "cited", "gold"):
            back[column] = [json.loads(v) for v in back[column]]
    else:
        back = pd.read_parquet(out)
    assert tuple(back.columns) == EXPORT_COLUMNS
    # Every run of the experiment, the unfinished one too, with its status; modes in order.
    assert list(dict.fromkeys(back["run_id"])) == ["r-van", "r-base", "r-cf"]
    assert set(back["status"]) == {"complete", "running"}
    same_metrics(back, view_rows(db, ["r-van", "r-base", "r-cf"]))
    first = back[(back["run_id"] == "r-base") & (back["item_id"] == "q1")].iloc[0]
    assert first["question"] == "Who wrote book 1?" and first["answer"] == "Nobody [1][2][7]."
    assert list(first["gold_answers"]) == ["Author 1", "A. 1"]
    assert first["experiment_name"] == "pilot" and first["mode"] == "base"
    assert first["label_relevant"] == "Woman" and first["label_nonrelevant"] == "Man"
    assert first["dataset"] == "tiny.jsonl (sha-em)" and first["metadata_type"] == "gender"
    assert not list(tmp_path.glob(".results*"))  # no temporary file left behind


def test_export_selects_several_experiments_by_id_or_name_in_order(db, tmp_path):
    frame = export_results_frame(db, ["exp-c", "pilot", "exp-a"])  # exp-a twice: once
    assert list(dict.fromkeys(frame["experiment_id"])) == ["exp-c", "exp-a"]
    assert len(frame) == 3 + 9
    out = tmp_path / "two.parquet"
    result = export_results(db, ["pilot", "exp-b"], "parquet", out)
    assert (result.n_rows, result.n_runs, result.experiment_ids) == (9 + 2, 4, ("exp-a", "exp-b"))
    assert set(pd.read_parquet(out)["experiment_id"]) == {"exp-a", "exp-b"}


def test_export_refusals_write_nothing(db, tmp_path, capsys):
    out = tmp_path / "x.csv"
    assert main(["export", "--experiment", "exp-a", "--experiment", "nope", "--out", str(out), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no experiment 'nope'") and "exp-c" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(UnknownExperiment, match="no experiment 'nope'$"):
        export_results(db, ["nope"], "csv", out)
    with pytest.raises(UserError, match="unknown export format 'xlsx'"):
        export_results(db, ["exp-a"], "xlsx", tmp_path / "x.xlsx")
    assert main(["export", "--experiment", "exp-a", "--out", str(tmp_path / "x.txt"), "--db", str(db)]) == 2
    assert "give --format csv or parquet" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["export", "--experiment", "exp-a", "--format", "xlsx", "--out", str(out), "--db", str(db)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.duckdb", "runs.duckdb.lock"]  # the store's own lock

    out.write_text("keep me")
    assert main(["export", "--experiment", "exp-a", "--out", str(out), "--db", str(db)]) == 2
    assert "exists" in capsys.readouterr().err and out.read_text() == "keep me"
    assert main(["export", "--experiment", "exp-a", "--out", str(out), "--db", str(db), "--force"]) == 0
    assert len(pd.read_csv(out)) == 9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.duckdb", "runs.duckdb.lock", "x.csv"]


def test_export_of_an_experiment_without_answers_has_typed_columns(tmp_path):
    db = tmp_path / "e.duckdb"
    shutil.copy(_EMPTY[0], db)
    store = RunStore(db)
    store.start_run(RunSpec("r0", "empty", "h0", "m", None, None, None, None, "d.jsonl", SHA, None, "vanilla",
                            0, "v1", None, {}, {}, 3))
    out = tmp_path / "e.parquet"
    assert export_results(db, ["empty"], "parquet", out).n_rows == 0
    back = pd.read_parquet(out)
    assert tuple(back.columns) == EXPORT_COLUMNS and len(back) == 0
    assert str(back["f1"].dtype) == "float64"


# ---------------------------------------------------------------- merge


@pytest.fixture(scope="module")
def built_two(empty_store, tmp_path_factory):
    """A target with one experiment, and a source with a new experiment, incomplete runs and a copy of one target run."""
    folder = tmp_path_factory.mktemp("two")
    target, source = folder / "target.duckdb", folder / "source.duckdb"
    add_run(target, "t-base", "exp-t", "base", name="mine")
    add_run(source, "t-base", "exp-t", "base", name="mine")  # the same run, e.g. merged before
    add_run(source, "s-van", "exp-s", "vanilla", name="theirs")
    add_run(source, "s-base", "exp-s", "base")
    add_run(source, "s-cf", "exp-s", "cf", status="failed")
    add_run(source, "s-run", "exp-u", "base", status="running")
    return target, source


@pytest.fixture
def two(built_two, tmp_path):
    return tuple(Path(shutil.copy(p, tmp_path / p.name)) for p in built_two)


def test_merge_copies_complete_runs_once(two, capsys):
    target, source = two
    before = digest(source)
    assert main(["merge", "--from", str(source), "--db", str(target)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"merged 2 runs from {source} into {target}: 6 generations, 8 citations, 0 items new, "
                          "1 experiment new\n")
    assert "already in the target, skipped: 1 run (t-base)" in out
    assert "skipped run s-cf (experiment exp-s, cf): failed, not complete" in out
    assert "skipped run s-run (experiment exp-u, base): running, not complete" in out
    assert rows(target, "SELECT run_id, experiment_id, status FROM runs ORDER BY run_id") == [
        ("s-base", "exp-s", "complete"), ("s-van", "exp-s", "complete"), ("t-base", "exp-t", "complete")]
    assert rows(target, "SELECT experiment_id, name FROM experiments ORDER BY 1") == [("exp-s", "theirs"), ("exp-t", "mine")]
    # The merged runs read as in the source: same per-item metrics, generations and citations.
    for table in ("query_metrics", "generations", "citations"):
        ordered = f"SELECT * FROM {table} WHERE run_id IN ('s-van', 's-base') ORDER BY ALL"
        assert rows(target, ordered) == rows(source, ordered)
    assert digest(source) == before and not Path(f"{source}.wal").exists()

    after = digest(target)
    assert main(["merge", "--from", str(source), "--db", str(target)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"nothing to merge from {source}") and "3 runs (t-base, s-van, s-base)" in out
    assert rows(target, "SELECT count(*) FROM generations") == [(9,)]
    assert digest(source) == before
    del after  # a transaction that wrote nothing may still touch the file's header


def test_new_items_are_counted_and_the_merge_is_queryable(tmp_path):
    target, source = tmp_path / "t.duckdb", tmp_path / "s.duckdb"
    add_run(target, "a", "e1", "base", n=2)
    add_run(source, "b", "e2", "base", n=3)
    result = merge_stores(target, source)
    assert (result.merged, result.n_items_new, result.n_generations) == (("b",), 1, 3)
    assert rows(target, "SELECT count(*) FROM items") == [(3,)]
    assert export_results_frame(target, ["e2"])["question"].tolist() == [f"Who wrote book {i}?" for i in range(3)]


def test_item_clash_refuses_the_whole_merge_and_writes_nothing(tmp_path, capsys):
    target, source = tmp_path / "t.duckdb", tmp_path / "s.duckdb"
    add_run(target, "a", "e1", "base")
    add_run(source, "ok", "e2", "vanilla")  # would merge on its own: shares the items unchanged...
    with connect(source) as conn:  # ...until the source's item q2 says something else
        conn.execute("UPDATE items SET question = 'Changed?' WHERE item_id = 'q2'")
    add_run(source, "b", "e3", "base")
    before, source_before = digest(target), digest(source)
    assert main(["merge", "--from", str(source), "--db", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("error: merge refused, nothing written: run b: item 'q2' of dataset sha-em differs between "
                           "the stores; run ok: item 'q2' of dataset sha-em differs between the stores")
    assert digest(target) == before and digest(source) == source_before


def test_a_run_the_target_holds_unfinished_is_not_replaced(tmp_path):
    target, source = tmp_path / "t.duckdb", tmp_path / "s.duckdb"
    add_run(target, "r", "e1", "base", status="running")
    add_run(source, "r", "e1", "base")
    result = merge_stores(target, source)
    assert result.merged == () and result.already == ()
    assert [(s.run_id, s.reason) for s in result.skipped] == [
        ("r", "the target holds it as running; finish or remove it there first")]
    assert rows(target, "SELECT status FROM runs") == [("running",)]


def test_config_clash_is_refused_naming_the_run(tmp_path):
    target, source = tmp_path / "t.duckdb", tmp_path / "s.duckdb"
    add_run(target, "same-id", "e1", "base", config_hash="one")
    add_run(source, "same-id", "e1", "base", config_hash="two")
    add_run(source, "fine", "e9", "base")
    before = digest(target)
    with pytest.raises(MergeRefused, match="run same-id exists in the target with another configuration"):
        merge_stores(target, source)
    assert digest(target) == before
    assert rows(target, "SELECT run_id FROM runs") == [("same-id",)]


def test_a_taken_mode_puts_the_run_in_an_experiment_of_its_own(tmp_path, capsys):
    target, source = tmp_path / "t.duckdb", tmp_path / "s.duckdb"
    add_run(target, "t-cf", "shared", "cf", name="pilot")
    add_run(source, "s-cf", "shared", "cf", name="pilot")  # another machine ran the same experiment's cf
    add_run(source, "s-base", "shared", "base")
    add_run(source, "x", "other", "base", name="pilot2")
    with connect(target) as conn:
        conn.execute("INSERT INTO experiments (experiment_id, name, created_utc) VALUES ('z', 'pilot2', now())")
    assert main(["merge", "--from", str(source), "--db", str(target)]) == 0
    out = capsys.readouterr().out
    assert "run s-cf (cf) went into experiment shared~s-cf: experiment shared already has cf run t-cf" in out
    assert "experiment other merged without its name 'pilot2', which the target already uses" in out
    assert rows(target, "SELECT experiment_id, rag_mode, run_id FROM runs ORDER BY ALL") == [
        ("other", "base", "x"), ("shared", "base", "s-base"), ("shared", "cf", "t-cf"), ("shared~s-cf", "cf", "s-cf")]
    assert rows(target, "SELECT experiment_id, name FROM experiments ORDER BY 1") == [
        ("other", None), ("shared", "pilot"), ("shared~s-cf", None), ("z", "pilot2")]
    # The store's own rule still holds afterwards: no second cf run in `shared`.
    assert rows(target, "SELECT count(*) FROM runs GROUP BY experiment_id, rag_mode HAVING count(*) > 1") == []


@pytest.mark.parametrize("kind", ["missing", "text", "foreign", "older", "newer", "same"])
def test_a_bad_source_is_one_line(tmp_path, capsys, kind):
    target = tmp_path / "t.duckdb"
    add_run(target, "a", "e1", "base")
    source = tmp_path / "s.duckdb"
    if kind == "text":
        source.write_text("not a database\n" * 100)
    elif kind == "foreign":
        import duckdb

        with duckdb.connect(str(source)) as conn:
            conn.execute("CREATE TABLE t AS SELECT 1 AS x")
    elif kind == "older":
        add_run(source, "b", "e2", "base")
        with connect(source) as conn:
            conn.execute("DELETE FROM schema_migrations WHERE version = 4")
    elif kind == "newer":
        add_run(source, "b", "e2", "base")
        with connect(source) as conn:
            conn.execute("INSERT INTO schema_migrations VALUES (999, 'future', now())")
    elif kind == "same":
        source = target
    before = digest(target)
    source_before = digest(source) if source.exists() else None
    assert main(["merge", "--from", str(source), "--db", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    expected = {"missing": "no database at", "text": "not a DuckDB database file", "newer": "schema version 999",
                "foreign": "is not a PAttriEval store", "older": "has an older schema; upgrade it first with",
                "same": "the same database"}[kind]
    assert expected in err
    assert digest(target) == before
    assert (digest(source) if source.exists() else None) == source_before


def test_export_and_merge_never_import_torch(db, tmp_path):
    out = tmp_path / "x.parquet"
    other = tmp_path / "other.duckdb"
    code = f"""
import sys
from engine.__main__ import main
rcs = [main(["export", "--experiment", "exp-a", "--out", {str(out)!r}, "--db", {str(db)!r}]),
       main(["merge", "--from", {str(db)!r}, "--db", {str(other)!r}])]
heavy = sorted(m for m in ("torch", "transformers", "gradio", "bitsandbytes") if m in sys.modules)
print("RESULT", rcs, heavy)
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "RESULT [0, 0] []" in done.stdout
