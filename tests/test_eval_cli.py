"""`python -m engine import / bias / report` end to end, bad answer rows, and the no-torch rule."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import scipy.stats

from engine.__main__ import main
from engine.metrics import citation_scores
from engine.citations import parse_citations

ROOT = Path(__file__).resolve().parent.parent
N_ITEMS = 40


def _dataset(path: Path) -> list[dict]:
    rng = random.Random(1)
    items = []
    for i in range(N_ITEMS):
        relevant = set(rng.sample(range(4), rng.choice((1, 2))))
        docs = [{"id": f"q{i}-d{j}", "title": "", "text": f"text {j}", "relevant": j in relevant} for j in range(4)]
        items.append({"id": f"q{i}", "question": f"question {i}?", "answers": [f"answer {i}"], "documents": docs})
    path.write_text("".join(json.dumps(x) + "\n" for x in items))
    return items


def _answers(path: Path, items: list[dict], hit: float, seed: int, n: int | None = None) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for item in items[:n]:
        cited = [j + 1 for j, d in enumerate(item["documents"]) if d["relevant"] and rng.random() < hit]
        cited += [j + 1 for j, d in enumerate(item["documents"]) if not d["relevant"] and rng.random() < 0.3]
        rows.append({"item_id": item["id"], "answer": f"It is answer {item['id'][1:]} " + "".join(f"[{c}]" for c in cited)})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    items = _dataset(tmp / "data.jsonl")
    db = tmp / "eval.duckdb"
    answers = {}
    for seed, (mode, hit) in enumerate((("vanilla", 0.7), ("base", 0.9), ("cf", 0.5))):
        answers[mode] = _answers(tmp / f"{mode}.jsonl", items, hit, seed)
        rc = main(["import", "--dataset", str(tmp / "data.jsonl"), "--answers", str(tmp / f"{mode}.jsonl"),
                   "--mode", mode, "--metadata", "gender", "--experiment", "exp1", "--name", "sys-A", "--db", str(db)])
        assert rc == 0
    return tmp, db, items, answers


def _precision(items, rows):
    by_id = {it["id"]: it for it in items}
    return {r["item_id"]: citation_scores(parse_citations(r["answer"]), [d["relevant"] for d in by_id[r["item_id"]]["documents"]])
            for r in rows}


def test_import_stores_runs(experiment):
    _, db, _, _ = experiment
    con = duckdb.connect(str(db), read_only=True)
    try:
        runs = con.execute("SELECT rag_mode, status, quantization, model, metadata_type, n_items FROM runs ORDER BY rag_mode").fetchall()
        probs = con.execute("SELECT count(*), count(probability) FROM citations").fetchone()
    finally:
        con.close()
    assert runs == [("base", "complete", "imported", "sys-A", "gender", N_ITEMS),
                    ("cf", "complete", "imported", "sys-A", "gender", N_ITEMS),
                    ("vanilla", "complete", "imported", "sys-A", "gender", N_ITEMS)]
    assert probs[0] > 0 and probs[1] == 0


def test_bias_cli(experiment, capsys):
    _, db, items, answers = experiment
    assert main(["bias", "--experiment", "exp1", "--db", str(db), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    got = {(r["measure"], r["metric"]): r for r in report["results"]}
    base, cf = _precision(items, answers["base"]), _precision(items, answers["cf"])
    ids = sorted(base)
    b = [100 * base[i].precision for i in ids]
    c = [100 * cf[i].precision for i in ids]
    cab = got[("CAB", "precision")]
    assert cab["value"] == pytest.approx(sum(x - y for x, y in zip(b, c)) / len(ids))
    assert cab["p"] == pytest.approx(scipy.stats.ttest_rel(b, c).pvalue, rel=1e-9)
    assert cab["n"] == N_ITEMS and cab["ci_low"] <= cab["value"] <= cab["ci_high"]
    assert cab["direction"] == ("favours Woman" if cab["value"] > 0 else "favours Man")
    assert got[("CAS", "recall")]["direction"] is None and "one-sample" in got[("CAS", "recall")]["test"]
    assert report["runs"].keys() == {"vanilla", "base", "cf"} and report["label_a"] == "Woman"
    assert main(["bias", "--experiment", "exp1", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "CAB     precision" in text and "favours" in text and "citation confidence" in text


def test_report_cli(experiment, capsys):
    _, db, items, answers = experiment
    assert main(["report", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    base = _precision(items, answers["base"])
    mean_p = 100 * sum(s.precision for s in base.values()) / N_ITEMS
    assert f"| sys-A | Woman | Man | {mean_p:.1f} |" in text
    assert "| sys-A | - | - |" in text and "| Gender | sys-A |" in text
    assert main(["report", "--db", str(db), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(r["relevant"], r["non_relevant"]) for r in data["table1"]] == [("-", "-"), ("Woman", "Man"), ("Man", "Woman")]
    assert data["table1"][1]["precision"] == pytest.approx(mean_p)
    row = data["table2"][0]
    assert row["metadata_type"] == "gender" and row["n"] == N_ITEMS
    assert main(["report", "--db", str(db), "--format", "csv", "--table", "2"]) == 0
    csv_text = capsys.readouterr().out.splitlines()
    star = "*" if row["precision_p"] < 0.05 else ""
    assert csv_text[0].startswith("Metadata type,") and csv_text[1].startswith(f"Gender,sys-A,{row['precision']:+.1f}{star},")


def test_reimport_and_conflicts(experiment, capsys):
    tmp, db, items, _ = experiment
    args = ["import", "--dataset", str(tmp / "data.jsonl"), "--mode", "cf", "--metadata", "gender",
            "--experiment", "exp1", "--name", "sys-A", "--db", str(db)]
    assert main(args + ["--answers", str(tmp / "cf.jsonl")]) == 0
    assert "already imported" in capsys.readouterr().out
    _answers(tmp / "cf2.jsonl", items, 0.2, 99)
    assert main(args + ["--answers", str(tmp / "cf2.jsonl")]) == 2
    assert "already has a complete cf run" in capsys.readouterr().err
    assert main(["import", "--dataset", str(tmp / "data.jsonl"), "--answers", str(tmp / "cf.jsonl"), "--mode", "base",
                 "--db", str(db)]) == 2
    assert "needs --metadata" in capsys.readouterr().err


def test_bias_refuses_mismatched_items(experiment, capsys):
    tmp, db, items, _ = experiment
    _answers(tmp / "short.jsonl", items, 0.5, 7, n=N_ITEMS - 3)
    for mode, f in (("base", "base.jsonl"), ("cf", "short.jsonl")):
        assert main(["import", "--dataset", str(tmp / "data.jsonl"), "--answers", str(tmp / f), "--mode", mode,
                     "--metadata", "race", "--experiment", "exp2", "--name", "sys-A", "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["bias", "--experiment", "exp2", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "do not cover the same items" in err
    assert f"has {N_ITEMS}" in err and f"has {N_ITEMS - 3}" in err and "missing from cf: q37, q38, q39" in err
    assert main(["bias", "--experiment", "nope", "--db", str(db)]) == 2
    assert "no experiment 'nope'" in capsys.readouterr().err
    assert main(["bias", "--experiment", "exp1", "--db", str(tmp / "missing.duckdb")]) == 2
    assert "no database at" in capsys.readouterr().err


BAD_ROWS = [
    ("invalid JSON", '{"item_id": "q0", "answer": "x"\n', "line 1: invalid JSON"),
    ("not an object", '["q0", "x"]\n', "line 1: expected a JSON object, got array"),
    ("missing item_id", '{"answer": "x"}\n', "line 1: missing item_id"),
    ("empty item_id", '{"item_id": " ", "answer": "x"}\n', "line 1: empty item_id"),
    ("item_id not a string", '{"item_id": ["q0"], "answer": "x"}\n', "line 1: item_id must be a string, got array"),
    ("unknown item_id", '{"item_id": "q0", "answer": "x"}\n\n{"item_id": "zz", "answer": "x"}\n', "line 3: unknown item_id 'zz'"),
    ("duplicate item_id", '{"item_id": "q0", "answer": "x"}\n{"item_id": "q0", "answer": "y"}\n',
     "line 2: duplicate item_id 'q0' (first at line 1)"),
    ("missing answer", '{"item_id": "q0"}\n', "line 1: missing answer"),
    ("answer not a string", '{"item_id": "q0", "answer": 3}\n', "line 1: answer must be a string, got number"),
    ("shown not a list", '{"item_id": "q0", "answer": "x", "shown_doc_ids": "q0-d1"}\n', "shown_doc_ids must be a list"),
    ("shown unknown doc", '{"item_id": "q0", "answer": "x", "shown_doc_ids": ["q0-d1", "q1-d1"]}\n',
     "shown_doc_ids: 'q1-d1' is not a document of item 'q0'"),
    ("shown repeated", '{"item_id": "q0", "answer": "x", "shown_doc_ids": ["q0-d1", "q0-d1"]}\n', "shown_doc_ids repeats 'q0-d1'"),
    ("shown empty", '{"item_id": "q0", "answer": "x", "shown_doc_ids": []}\n', "shown_doc_ids is empty"),
    ("no rows", "\n\n", "no answers"),
]


@pytest.mark.parametrize("case, content, message", BAD_ROWS, ids=[c[0] for c in BAD_ROWS])
def test_import_bad_rows_write_nothing(experiment, tmp_path, capsys, case, content, message):
    data = experiment[0] / "data.jsonl"
    answers = tmp_path / "answers.jsonl"
    # A valid first row proves that nothing is written before the bad one is found.
    good = '{"item_id": "q5", "answer": "fine [1]"}\n' if case not in ("duplicate item_id", "no rows") else ""
    answers.write_text(good + content)
    line_shift = 1 if good else 0
    db = tmp_path / "fresh.duckdb"
    assert main(["import", "--dataset", str(data), "--answers", str(answers), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {answers}")
    expected = message
    if line_shift and message.startswith("line "):
        n, rest = message[5:].split(":", 1)
        expected = f"line {int(n) + 1}:{rest}"
    assert expected in err
    assert not db.exists()


def test_shown_order_changes_gold(experiment, tmp_path, capsys):
    tmp, _, items, _ = experiment
    item = items[0]
    shown = [d["id"] for d in reversed(item["documents"])]
    (tmp_path / "a.jsonl").write_text(json.dumps({"item_id": item["id"], "answer": "x [1]", "shown_doc_ids": shown}) + "\n")
    db = tmp_path / "o.duckdb"
    assert main(["import", "--dataset", str(tmp / "data.jsonl"), "--answers", str(tmp_path / "a.jsonl"), "--db", str(db)]) == 0
    con = duckdb.connect(str(db), read_only=True)
    try:
        gold, precision = con.execute("SELECT gold, precision FROM query_metrics").fetchone()
    finally:
        con.close()
    flags = [d["relevant"] for d in reversed(item["documents"])]
    assert gold == [i + 1 for i, f in enumerate(flags) if f]
    assert precision == (1.0 if flags[0] else 0.0)


def test_read_only_commands_never_import_torch(experiment, tmp_path):
    tmp, db, _, _ = experiment
    other = tmp_path / "n.duckdb"
    code = f"""
import sys
from engine.__main__ import main
rcs = [main(["bias", "--experiment", "exp1", "--db", {str(db)!r}, "--json"]),
       main(["report", "--db", {str(db)!r}]),
       main(["import", "--dataset", {str(tmp / "data.jsonl")!r}, "--answers", {str(tmp / "base.jsonl")!r}, "--db", {str(other)!r}])]
heavy = sorted(m for m in ("torch", "transformers", "gradio", "bitsandbytes") if m in sys.modules)
print("RESULT", rcs, heavy)
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "RESULT [0, 0, 0] []" in done.stdout


def test_cli_process_error_has_no_traceback(tmp_path):
    done = subprocess.run([sys.executable, "-m", "engine", "bias", "--experiment", "x", "--db", str(tmp_path / "none.duckdb")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.startswith("error: no database at")
