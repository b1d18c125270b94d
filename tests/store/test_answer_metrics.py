"""Each answer's precision, recall and F1 kept as it is written (store.answer_metrics, migration
028): by every writer (a batch, a resumed run, copied answers, a merge, an import of each dataset
layout and citation reading, an older store's migration), equal to what query_metrics and the
Python oracle compute now, and read by the Bias report only while they are the run's rows."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from store import RunStore, connect
from store.answer_metrics import current_answer_runs
from store.merge import merge_stores
from tests.demo.handlers.test_app_bias import EXPERIMENTS, ITEMS, _generation, _spec, build_store
from tests.support.helpers import copy_store, make_ranked_dataset, write_jsonl
from tests.support.metrics_oracle import citation_scores

KEPT = "SELECT run_id, item_id, precision, recall, f1, cites_in_range FROM answer_metrics ORDER BY ALL"
FRESH = ("SELECT run_id, item_id, precision, recall, f1, n_citations > out_of_range_citations FROM query_metrics "
         "ORDER BY ALL")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return build_store(tmp_path_factory.mktemp("answers-built") / "answers.duckdb")


@pytest.fixture
def db(built, tmp_path) -> Path:
    return copy_store(built, tmp_path / "answers.duckdb")


def _oracle(db: Path) -> list[tuple]:
    """Every answer's (run, item, precision, recall, f1, cites a shown document) from the stored
    rows by tests/support/metrics_oracle.py, not SQL's metrics."""
    with connect(db, read_only=True) as conn:
        relevant = {(sha, item): {d["id"]: bool(d["relevant"]) for d in docs} for sha, item, docs in conn.execute(
            "SELECT dataset_sha, item_id, documents FROM items").fetchall()}
        answers = conn.execute("SELECT g.run_id, g.item_id, g.shown_doc_ids, r.dataset_sha FROM generations g "
                               "JOIN runs r USING (run_id)").fetchall()
        cited: dict[tuple, list[int]] = {}
        for run_id, item_id, position in conn.execute("SELECT run_id, item_id, position FROM citations").fetchall():
            cited.setdefault((run_id, item_id), []).append(position)
    out = []
    for run_id, item_id, shown, sha in answers:
        scores = citation_scores(cited.get((run_id, item_id), []), [relevant[sha, item_id][d] for d in shown])
        out.append((run_id, item_id, scores.precision, scores.recall, scores.f1,
                    scores.n_citations > scores.out_of_range_citations))
    return sorted(out)


def _check_kept(db: Path) -> list[tuple]:
    """The kept rows equal query_metrics' and the oracle's, every run's rows current; the rows."""
    with connect(db, read_only=True) as conn:
        kept, fresh = conn.execute(KEPT).fetchall(), conn.execute(FRESH).fetchall()
        runs = [r[0] for r in conn.execute("SELECT DISTINCT run_id FROM generations ORDER BY 1").fetchall()]
        assert current_answer_runs(conn, runs) == runs
    assert kept == fresh
    oracle = _oracle(db)
    assert [r[:2] for r in kept] == [r[:2] for r in oracle]
    for mine, theirs in zip(kept, oracle, strict=True):
        assert mine[2:5] == pytest.approx(theirs[2:5], abs=1e-12) and mine[5] == theirs[5]
    return kept


def test_every_batch_keeps_its_answers_metrics_equal_to_a_fresh_computation(db):
    # Beside the complete runs: a run crashed half-way (still 'running', its owner gone), then
    # resumed with the rest in small batches; and answers copied from another run.
    store = RunStore(db, timeout_s=10)
    model, meta, _ = EXPERIMENTS["exp-base"]
    store.start_run(_spec("exp-base-cf", "exp-base", model, meta, "cf"))
    rng = random.Random(3)
    store.write_batch("exp-base-cf", [_generation(item, 0.5, rng) for item in ITEMS[:5]])
    with connect(db) as conn:
        conn.execute("DELETE FROM run_owners WHERE run_id = 'exp-base-cf'")  # kill -9: the owner is gone
    RunStore(db, timeout_s=10).start_run(_spec("exp-base-cf", "exp-base", model, meta, "cf"))
    for start in range(5, len(ITEMS), 3):
        store.write_batch("exp-base-cf", [_generation(item, 0.5, rng) for item in ITEMS[start:start + 3]])
    # A batch repeated after a crash between its commit and the runner's bookkeeping adds nothing.
    store.write_batch("exp-base-cf", [_generation(item, 0.9, rng) for item in ITEMS[:2]])
    store.start_run(_spec("exp-base-vanilla", "exp-base", model, meta, "vanilla"))
    assert store.copy_generations("exp-gender-vanilla", "exp-base-vanilla", [i.id for i in ITEMS[:7]]) == 7
    kept = _check_kept(db)
    assert sum(r[0] == "exp-base-cf" for r in kept) == len(ITEMS)
    assert sum(r[0] == "exp-base-vanilla" for r in kept) == 7


def test_the_bias_report_reads_kept_answer_rows_only_while_they_are_the_runs_rows(db):
    """A run whose rows kept at completion are not current (lost here) is read from its answer
    rows (marked: f1 = -1) until anything it holds changes, by the writer or by hand; then
    through query_metrics."""
    from store.queries.bias_tables import bias_inputs

    def f1s() -> dict[str, set]:
        out: dict[str, set] = {}
        for run_id, metrics in bias_inputs(db, "exp-gender").metrics.items():
            out[run_id] = set(metrics.values[:, 2].tolist())
        return out

    runs = sorted(bias_inputs(db, "exp-gender").metrics)
    before = f1s()
    with connect(db) as conn:
        conn.execute("DELETE FROM item_metric_runs")  # the completion's rows no longer current
        conn.execute("UPDATE answer_metrics SET f1 = -1")
    assert f1s() == {run_id: {-1.0} for run_id in runs}
    with connect(db) as conn:  # by hand: a citation rewritten, the counts of answers unchanged
        conn.execute("UPDATE citations SET position = 4 WHERE run_id = ? AND item_id = (SELECT min(item_id) "
                     "FROM citations WHERE run_id = ?) AND citation_index = 0", [runs[0], runs[0]])
        conn.execute("DELETE FROM answer_metrics WHERE run_id = ? AND item_id = 'q03'", [runs[1]])  # a row lost
    now = f1s()
    assert now[runs[2]] == {-1.0}
    assert -1.0 not in now[runs[0]] | now[runs[1]] and now[runs[1]] == before[runs[1]]


def test_a_merge_carries_the_answers_metrics(db, tmp_path):
    target = tmp_path / "target.duckdb"
    merge_stores(target, db)
    kept = _check_kept(target)
    assert len(kept) == sum(len(modes) for *_, modes in EXPERIMENTS.values()) * len(ITEMS)


def test_an_older_store_is_backfilled_by_its_migration(db):
    with connect(db) as conn:  # the store as migration 027 left it
        conn.execute("DROP TABLE answer_metrics")
        conn.execute("DROP TABLE answer_metric_runs")
        conn.execute("DELETE FROM schema_migrations WHERE version = 28")
    with connect(db):
        pass
    assert len(_check_kept(db)) == sum(len(modes) for *_, modes in EXPERIMENTS.values()) * len(ITEMS)


ASQA = {
    "sample_id": "s1", "question": "Who starred in Breaking Bad?", "answer": "Bryan Cranston.",
    "qa_pairs": [{"context": "", "question": "Who played Walter White?", "short_answers": ["Bryan Cranston"],
                  "wikipage": "Breaking Bad"}],
    "docs": [{"id": f"d{j}", "title": f"Doc {j}", "text": "Walter White was played by Bryan Cranston." if j == 1
              else f"Unrelated {j}."} for j in range(4)],
}


@pytest.mark.parametrize("layout", ["ours", "paper", "seed", "alce"])
def test_an_import_keeps_its_answers_metrics(tmp_path, layout):
    """Imported answers (the JSONL of one answer per item) for a dataset of our layout, under our
    citation reading and the seed's ('paper': only shown numbers count), of the seed's layout,
    and of an ALCE release."""
    from engine.datasets.data import load_dataset
    from engine.usecases.storage.import_answers import ImportRequest, import_answers

    if layout == "alce":
        data = tmp_path / "asqa_eval_gtr_top100.json"
        data.write_text(json.dumps([ASQA, {**ASQA, "sample_id": "s2"}]))
    elif layout == "seed":
        data = write_jsonl(tmp_path / "seed.jsonl", (
            {"query_id": f"s{i}", "query": f"question {i}?", "org_answers": [f"answer {i}"],
             "passages": [{"passage_text": f"passage {j} of {i}", "is_selected": int(j == i % 4)} for j in range(4)]}
            for i in range(5)))
    else:
        data = make_ranked_dataset(tmp_path / "data.jsonl", 6)
    dataset = load_dataset(data)
    assert dataset.layout == {"ours": "native", "paper": "native"}.get(layout, layout.replace("alce", "alce-asqa"))
    answers = write_jsonl(tmp_path / "answers.jsonl", (
        {"item_id": item.id, "answer": f"It is {n} [{n % 4 + 1}][{n % 3 + 1}]" + (" [9]." if n % 2 else ".")}
        for n, item in enumerate(dataset.items)))
    db = tmp_path / "import.duckdb"
    syntax = "paper" if layout == "paper" else "ours"
    result = import_answers(ImportRequest(dataset, answers, db, citation_syntax=syntax))
    kept = _check_kept(db) if syntax == "ours" else None
    with connect(db, read_only=True) as conn:
        assert conn.execute(KEPT).fetchall() == conn.execute(FRESH).fetchall()
        assert current_answer_runs(conn, [result.run_id]) == [result.run_id]
        n = conn.execute("SELECT count(*) FROM answer_metrics").fetchone()[0]
    assert n == len(dataset.items) and (kept is None or len(kept) == n)


def test_answers_written_by_a_writer_that_keeps_nothing_are_not_read_from_kept_rows(db):
    """SQL typed by hand adds an answer: the run's rows are no longer all its answers'."""
    from store.queries.bias_tables import bias_inputs

    runs = sorted(bias_inputs(db, "exp-gender").metrics)
    with connect(db) as conn:
        conn.execute("DELETE FROM item_metric_runs")
        conn.execute("DELETE FROM generations WHERE run_id = ? AND item_id = 'q05'", [runs[0]])
        conn.execute("DELETE FROM citations WHERE run_id = ? AND item_id = 'q05'", [runs[0]])
        assert current_answer_runs(conn, runs) == runs[1:]
    store = RunStore(db, timeout_s=10)
    store.write_batch(runs[0], [_generation(ITEMS[5], 0.5, random.Random(1))])  # the writer keeps it again
    with connect(db, read_only=True) as conn:
        assert current_answer_runs(conn, runs) == runs

