"""`--citation-syntax paper` reads and scores citations as the seed library does.

The oracle is the seed's own evaluate_prec_recall, cab_evaluation and cas_evaluation
(tests/support/seed_evaluation.py, transcribed from github aminvenv/attrieval). Imported answers in the
paper syntax must give the seed's per-answer precision and recall in query_metrics, its run means
in run_metrics, and its CAB and CAS in the bias view and `python -m engine bias`; the default
reading ("ours") must keep its own, documented, differences on the same answers.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import duckdb
import pytest

from engine.__main__ import main
from engine.prompting.citations import parse_citations
from tests.support.helpers import write_one_answer
from tests.support.seed_evaluation import cab_evaluation, cas_evaluation, evaluate_prec_recall, quietly, seed_row


@pytest.mark.parametrize("text, ours, paper", [
    ("Paris [1].", [1], [1]),
    ("Paris [1][2].", [1, 2], [1, 2]),
    ("Paris [1, 2].", [1, 2], []),
    ("Paris [1;2].", [1, 2], []),
    ("Paris [1 2].", [1, 2], []),
    ("Paris [ 1 ].", [1], []),
    ("Paris [1-3].", [1, 2, 3], []),
    ("Paris [1–3].", [1, 2, 3], []),
    ("Paris [01].", [1], [1]),
    ("Paris [2] and [2].", [2, 2], [2, 2]),
    ("Paris [[1]].", [1], [1]),
    ("Paris [٣].", [3], [3]),  # \d matches every decimal digit, in the seed's pattern too
    ("Paris [1a] [a].", [], []),
    ("Paris [0] [7].", [0, 7], [0, 7]),  # read in both; 'paper' runs leave them out of precision
])
def test_the_two_readings(text, ours, paper):
    assert parse_citations(text) == ours
    assert parse_citations(text, "ours") == ours
    assert parse_citations(text, "paper") == paper


def test_paper_reading_is_the_seeds_pattern_on_random_text():
    rng = random.Random(7)
    pieces = ["[", "]", "1", "2", "12", " ", ",", ";", "-", "a", "[3]", "[ 4 ]", "[5,6]", "[07]"]
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        seed = [int(m[1:-1]) for m in re.findall(r"\[\d+\]", text)]
        assert parse_citations(text, "paper") == seed, text


def test_an_unknown_syntax_is_refused():
    from engine.errors import UserError

    with pytest.raises(UserError, match="--citation-syntax must be one of ours, paper"):
        parse_citations("[1]", "seed")


# ---------------------------------------------------------------- imported answers against the seed

FORMS = ["[{a}]", "[{a}][{b}]", "[{a}, {b}]", "[{a};{b}]", "[ {a} ]", "[{a}-{b}]", "[{a}] [{a}]", "[0]",
         "[{out}]", "[{a}][{out}]", "", "[{a} {b}]", "[0{a}]"]


def _answer(rng: random.Random, k: int) -> str:
    """An answer citing in one of the forms models write, in and out of range."""
    a, b = sorted(rng.sample(range(1, k + 1), 2)) if k > 1 else (1, 1)
    form = rng.choice(FORMS)
    return f"answer {form.format(a=a, b=b, out=k + rng.randint(1, 3))}".strip()


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> dict:
    """60 items of 2-6 documents, three modes of answers, imported twice: in each syntax."""
    rng = random.Random(26)
    tmp = tmp_path_factory.mktemp("syntax")
    items: list[dict] = []
    answers: dict[str, list[dict]] = {"vanilla": [], "base": [], "cf": []}
    for i in range(60):
        k = rng.randint(2, 6)
        relevant = [rng.random() < 0.35 for _ in range(k)]
        if not any(relevant):
            relevant[rng.randrange(k)] = True
        items.append({"id": f"q{i:02d}", "question": f"question {i}?", "answers": [f"gold {i}"],
                      "documents": [{"id": f"q{i:02d}-d{j}", "text": f"text {j}", "relevant": r}
                                    for j, r in enumerate(relevant)]})
        for mode in answers:
            answers[mode].append({"item_id": f"q{i:02d}", "answer": _answer(rng, k)})
    (tmp / "data.jsonl").write_text("".join(json.dumps(x) + "\n" for x in items))
    for mode, rows in answers.items():
        (tmp / f"{mode}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for syntax in ("ours", "paper"):
        for mode in answers:
            code = main(["import", "--dataset", str(tmp / "data.jsonl"), "--answers", str(tmp / f"{mode}.jsonl"),
                         "--mode", mode, "--metadata", "hai", "--experiment", f"x-{syntax}", "--name", "m",
                         "--citation-syntax", syntax, "--db", str(tmp / "s.duckdb")])
            assert code == 0
    shown = {x["id"]: [d["relevant"] for d in x["documents"]] for x in items}
    return {"db": tmp / "s.duckdb", "answers": answers, "relevant": shown}


def _rows(db: Path, sql: str, params=()):
    conn = duckdb.connect(str(db), read_only=True)
    try:
        return conn.execute(sql, list(params)).fetchall()
    finally:
        conn.close()


def _seed_rows(study: dict, mode: str) -> list[dict]:
    return [seed_row(r["answer"], study["relevant"][r["item_id"]]) for r in study["answers"][mode]]


def _per_item(db: Path, experiment: str, mode: str) -> list[tuple]:
    return _rows(db, "SELECT q.precision, q.recall, q.f1 FROM query_metrics q JOIN runs r USING (run_id) "
                     "WHERE r.experiment_id = ? AND r.rag_mode = ? ORDER BY q.item_id", [experiment, mode])


@pytest.mark.parametrize("mode", ["vanilla", "base", "cf"])
def test_paper_syntax_gives_the_seeds_precision_and_recall_per_answer_and_per_run(study, mode):
    rows = _seed_rows(study, mode)
    summary = quietly(evaluate_prec_recall, rows)
    seed = [tuple(row["eval_results"]["all_classes"][m] for m in ("precision", "recall", "f1-score")) for row in rows]
    stored = _per_item(study["db"], "x-paper", mode)
    assert [v for row in stored for v in row] == pytest.approx([v for row in seed for v in row], abs=1e-12)
    (precision, recall), = _rows(study["db"], "SELECT m.precision, m.recall FROM run_metrics m "
                                              "WHERE experiment_id = 'x-paper' AND rag_mode = ?", [mode])
    assert (round(precision * 100, 1), round(recall * 100, 1)) == (summary["precision"], summary["recall"])


def test_our_syntax_differs_from_the_seed_on_these_answers(study):
    # The two documented differences: more forms read, and a number not shown counts against precision.
    rows = _seed_rows(study, "base")
    quietly(evaluate_prec_recall, rows)
    seed = [row["eval_results"]["all_classes"]["precision"] for row in rows]
    ours = [p for p, _, _ in _per_item(study["db"], "x-ours", "base")]
    assert ours != pytest.approx(seed)


def test_paper_syntax_gives_the_seeds_cab_and_cas_in_the_view_and_the_cli(study, capsys):
    vanilla, base, cf = (_seed_rows(study, m) for m in ("vanilla", "base", "cf"))
    cab = quietly(cab_evaluation, base, cf)  # h: label A (Human) on the relevant documents, as base
    cas = quietly(cas_evaluation, vanilla, base)
    view = {(measure, metric): value for measure, metric, value in _rows(
        study["db"], "SELECT measure, metric, value FROM bias WHERE experiment_id = 'x-paper'")}
    expected = {("CAB", "precision"): cab[0], ("CAB", "recall"): cab[1],
                ("CAS", "precision"): cas[0], ("CAS", "recall"): cas[1]}
    assert {key: round(view[key], 2) for key in expected} == expected
    capsys.readouterr()
    assert main(["bias", "--experiment", "x-paper", "--db", str(study["db"]), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    cli = {(r["measure"], r["metric"]): r["value"] for r in report["results"]}
    assert {key: round(cli[key], 2) for key in expected} == expected


def test_a_paper_run_records_its_syntax_and_keeps_out_of_range_counts(study):
    rows = _rows(study["db"], "SELECT r.experiment_id, json_extract_string(r.config_json, '$.citation_syntax'), "
                              "sum(q.n_citations), sum(q.out_of_range_citations) FROM runs r JOIN query_metrics q "
                              "USING (run_id) WHERE r.rag_mode = 'base' GROUP BY ALL ORDER BY 1")
    (_, ours_syntax, ours_n, ours_oor), (_, paper_syntax, paper_n, paper_oor) = rows
    assert (ours_syntax, paper_syntax) == (None, "paper")  # the default's config (and hash) is as before
    assert ours_n > paper_n and paper_oor > 0  # fewer forms read; out-of-range numbers still counted


def test_an_experiment_takes_one_syntax(study, tmp_path):
    from engine.errors import UserError

    db = tmp_path / "mixed.duckdb"
    data = study["db"].parent / "data.jsonl"
    args = ["import", "--dataset", str(data), "--metadata", "hai", "--experiment", "x", "--name", "m", "--db", str(db)]
    assert main([*args, "--answers", str(study["db"].parent / "base.jsonl"), "--mode", "base"]) == 0
    with pytest.raises(UserError, match="reads citations as 'ours', not 'paper'"):
        from engine.datasets.data import load_dataset
        from engine.prompting.prompts import metadata_type
        from engine.usecases.storage.import_answers import ImportRequest, import_answers

        import_answers(ImportRequest(load_dataset(data), study["db"].parent / "cf.jsonl", db, "m", "cf", "x",
                                     metadata_type("hai"), citation_syntax="paper"))


# ---------------------------------------------------------------- run: the request, the write loop


def test_run_option_reaches_the_request_and_the_runs_identity():
    import argparse

    from engine.commands.run import add_parser, build_request
    from engine.running.experiment import experiment_settings
    from engine.running.run_request import run_config

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    default = build_request(parser.parse_args(["run", "--dataset", "d.jsonl"]), "m", None)
    paper = build_request(parser.parse_args(["run", "--dataset", "d.jsonl", "--citation-syntax", "paper"]), "m", None)
    assert default.citation_syntax == "ours" and paper.citation_syntax == "paper"
    assert "citation_syntax" not in run_config(default, "base")  # older runs keep their hashes
    assert run_config(paper, "base")["citation_syntax"] == "paper"
    assert experiment_settings(run_config(paper, "base"))["citation_syntax"] == "paper"


def test_a_generated_paper_run_stores_the_seeds_reading(tmp_path):
    text = "a [1] [1, 2] [5]"
    db = write_one_answer(tmp_path, text, citation_syntax="paper")
    assert _rows(db, "SELECT position FROM citations ORDER BY citation_index") == [(1,), (5,)]
    # [5] of two shown documents is left out, as the seed leaves it; [1, 2] is no citation there.
    assert _rows(db, "SELECT cited, precision, recall, n_citations, out_of_range_citations FROM query_metrics") == [
        ([1], 1.0, 1.0, 2, 1)]
    seed = seed_row(text, [True, False])
    assert quietly(evaluate_prec_recall, [seed]) == {"precision": 100.0, "recall": 100.0}


def test_migration_016_drops_kept_numbers_of_paper_runs_only(tmp_path):
    from store.migrations import apply_migrations, available_migrations

    conn = duckdb.connect(str(tmp_path / "old.duckdb"))
    try:
        apply_migrations(conn, [m for m in available_migrations() if m.version < 16])
        for run_id, config in (("ours", "{}"), ("paper", '{"citation_syntax": "paper"}')):
            conn.execute("INSERT INTO runs (run_id, experiment_id, config_hash, created_utc, status, model, "
                         "dataset_sha, rag_mode, config_json) VALUES (?, 'e', 'h', now(), 'complete', 'm', 's', "
                         "'base', ?)", [run_id, config])
            conn.execute("INSERT INTO run_scores VALUES (?, 1, 0.5, 0.5, 0.5, NULL, now())", [run_id])
            conn.execute("INSERT INTO run_metric_rows (run_id, n_answers) VALUES (?, 1)", [run_id])
        apply_migrations(conn)
        assert conn.execute("SELECT run_id FROM run_scores").fetchall() == [("ours",)]
        assert conn.execute("SELECT run_id FROM run_metric_rows").fetchall() == [("ours",)]
    finally:
        conn.close()


def test_the_api_evaluates_in_either_syntax(study):
    from engine.datasets.data import load_dataset
    from engine.usecases.runs.evaluate import evaluate_answers

    data = load_dataset(study["db"].parent / "data.jsonl")
    answers = {"vanilla": [{"item_id": "q00", "answer": "x [1] [1, 2] [9]"}]}
    relevant = study["relevant"]["q00"]
    seed = seed_row("x [1] [1, 2] [9]", relevant)
    quietly(evaluate_prec_recall, [seed])
    paper = evaluate_answers(data, answers, citation_syntax="paper").items
    assert paper["precision"].tolist() == [seed["eval_results"]["all_classes"]["precision"]]
    ours = evaluate_answers(data, answers).items
    assert list(ours["cited"].iloc[0]) == [1, 2, 9] and list(paper["cited"].iloc[0]) == [1]
