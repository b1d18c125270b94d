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
from engine.prompting.citations import parse_citations
from engine.statistics.stats import sign_flip_test
from tests.support.metrics_oracle import citation_scores

ROOT = Path(__file__).resolve().parents[3]
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
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    got = {(r["measure"], r["metric"]): r for r in report["results"]}
    base, cf = _precision(items, answers["base"]), _precision(items, answers["cf"])
    ids = sorted(base)
    b = [100 * base[i].precision for i in ids]
    c = [100 * cf[i].precision for i in ids]
    cab = got[("CAB", "precision")]
    assert cab["value"] == pytest.approx(sum(x - y for x, y in zip(b, c, strict=True)) / len(ids))
    # CAB's p: the sign-flip permutation test of the differences (scipy's, within its Monte Carlo error).
    diffs = [x - y for x, y in zip(b, c, strict=True)]
    assert cab["p"] == sign_flip_test(diffs).p
    reference = scipy.stats.permutation_test(([d for d in diffs if d],), lambda x, axis: x.mean(axis=axis),
                                             permutation_type="samples", vectorized=True, n_resamples=20_000,
                                             rng=0).pvalue
    assert cab["p"] == pytest.approx(reference, abs=0.02)
    assert cab["n"] == N_ITEMS and cab["ci_low"] <= cab["value"] <= cab["ci_high"]
    word = "favours Woman" if cab["value"] > 0 else "favours Man"
    assert cab["direction"] == (f"{word} (sign-flip p < 0.05)" if cab["p"] < 0.05
                                else "no significant difference (sign-flip p >= 0.05)")
    assert got[("CAS", "recall")]["direction"] is None and "not of CAS" in got[("CAS", "recall")]["test"]
    assert report["runs"].keys() == {"vanilla", "base", "cf"} and report["label_a"] == "Woman"
    assert "hint: the paper's tables for this experiment: python -m engine report --experiment exp1" in captured.err
    assert main(["bias", "--experiment", "exp1", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "CAB      precision" in text and "sign-flip" in text and "citation confidence" in text
    assert "dataset data.jsonl (" in text and str(db.parent) not in text


def test_report_cli(experiment, capsys):
    _, db, items, answers = experiment
    assert main(["report", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    base = _precision(items, answers["base"])
    mean_p = 100 * sum(s.precision for s in base.values()) / N_ITEMS
    assert f"| sys-A | Woman | Man | {mean_p:.1f} |" in text
    assert "| sys-A | - | - |" in text and "| Gender | Woman vs Man | sys-A |" in text
    assert text.startswith("Dataset: data.jsonl (") and "> 0 favours label A, the first of each row's labels" in text
    assert main(["report", "--db", str(db), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(r["relevant"], r["non_relevant"]) for r in data["table1"]] == [("-", "-"), ("Woman", "Man"), ("Man", "Woman")]
    assert data["table1"][1]["precision"] == pytest.approx(mean_p)
    row = data["table2"][0]
    assert row["metadata_type"] == "gender" and row["n"] == N_ITEMS
    assert main(["report", "--db", str(db), "--format", "csv", "--table", "2"]) == 0
    csv_text = capsys.readouterr().out.splitlines()
    star = "*" if row["precision_p"] < 0.05 else ""
    assert csv_text[0].startswith("Metadata type,Labels (A vs B),")
    assert csv_text[1].startswith(f"Gender,Woman vs Man,sys-A,{row['precision']:+.1f}{star},")


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
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no experiment 'nope'" in err
    # The known ones, newest first, with model, metadata type and modes.
    assert "newest: exp2 (sys-A, race, base+cf); exp1 (sys-A, gender, vanilla+base+cf)" in err
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


def _stored_run(db: Path, run_id: str, experiment: str, mode: str, items: list[dict], meta=None, hit=0.8) -> None:
    """A run as `python -m engine run` stores it (not imported), written straight through the store."""
    from engine.prompting.citations import parse_citations as parse
    from engine.prompting.prompts import PromptConfig
    from engine.types import Citation, Document, Generation, Item, RunSpec
    from store.run_store import RunStore

    store = RunStore(db)
    objs = [Item(it["id"], it["question"], tuple(it["answers"]),
                 tuple(Document(d["id"], d["text"], d["relevant"]) for d in it["documents"])) for it in items]
    store.put_items("sha-cli", objs)
    config = {"prompt": PromptConfig(mode=mode, metadata=meta if mode != "vanilla" else None).to_dict()}
    store.start_run(RunSpec(run_id, experiment, f"h-{run_id}", "org/model-7b", None, "4bit", "bfloat16", "cuda",
                            "/home/someone/data/nq_top10.jsonl", "sha-cli", meta.name if meta else None, mode, 0,
                            "v1", None, {}, config, len(items)))
    rng = random.Random(run_id)
    gens = []
    for it in objs:
        answer = "x " + "".join(f"[{j + 1}]" for j, d in enumerate(it.documents) if d.relevant and rng.random() < hit)
        cites = tuple(Citation(i, n, it.documents[n - 1].id, it.documents[n - 1].relevant, 0.5)
                      for i, n in enumerate(parse(answer)))
        gens.append(Generation(it.id, "p", answer, tuple(d.id for d in it.documents), "stop", 5, (), cites))
    store.write_batch(run_id, gens)
    store.finish_run(run_id, "complete")


def test_bias_names_missing_modes_and_the_command_that_adds_them(experiment, tmp_path, capsys):
    from engine.prompting.prompts import METADATA_TYPES, metadata_type

    items = experiment[2]
    db = tmp_path / "modes.duckdb"
    _stored_run(db, "v-only", "e-vanilla", "vanilla", items, METADATA_TYPES["gender"])
    assert main(["bias", "--experiment", "e-vanilla", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has complete runs for vanilla only" in err
    assert ("add base, cf with: python -m engine run --experiment e-vanilla --model org/model-7b "
            f"--dataset /home/someone/data/nq_top10.jsonl --modes base,cf --metadata gender --db {db}") in err

    # A custom type: the hint carries its labels; with one measure possible, bias runs and hints.
    custom = metadata_type("expertise", "an expert", "a novice", "Some are experts.")
    _stored_run(db, "b", "e-custom", "base", items, custom, hit=0.9)
    _stored_run(db, "c", "e-custom", "cf", items, custom, hit=0.4)
    assert main(["bias", "--experiment", "e-custom", "--db", str(db), "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # stdout stays pure JSON; the hint is on stderr
    assert {r["measure"] for r in report["results"]} == {"CAB"} and report["label_a"] == "an expert"
    assert report["dataset"].startswith("nq_top10.jsonl (") and "/home/someone" not in report["dataset"]
    assert captured.err.startswith("hint: no CAS without vanilla; add it with: python -m engine run --experiment e-custom")
    assert "--modes vanilla --metadata expertise --label-a 'an expert' --label-b 'a novice'" in captured.err


def test_bias_text_columns_never_run_together(experiment, tmp_path, capsys):
    from engine.prompting.prompts import metadata_type

    items = experiment[2]
    db = tmp_path / "long.duckdb"
    long = metadata_type("longlabels", "a very experienced senior domain expert", "a novice", "Some are experts.")
    for run_id, mode, hit in (("v", "vanilla", 0.7), ("b", "base", 0.9), ("c", "cf", 0.5)):
        _stored_run(db, run_id, "e-long", mode, items, long, hit=hit)
    assert main(["bias", "--experiment", "e-long", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    table = text[text.index("citation confidence"):].splitlines()[1:]
    header = table[0]
    for line in table[1:]:
        # Every cell starts where its header does, whatever the label's length.
        assert line[header.index("mean p")] != " " and line[header.index("mean p") - 2:header.index("mean p")] == "  "
    assert "a very experienced senior domain expert  0.500" in text
    favours = [line for line in text.splitlines() if line.startswith("CAB  ")]
    assert len(favours) == 3 and all(line.endswith("favours a very experienced senior domain expert (sign-flip p < 0.05)")
                                     or line.endswith("favours a novice (sign-flip p < 0.05)") for line in favours)


def test_bias_help_shows_a_plain_percent_sign():
    done = subprocess.run([sys.executable, "-m", "engine", "bias", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "95% intervals" in " ".join(done.stdout.split()) and "%%" not in done.stdout


@pytest.fixture(scope="module")
def labelled_db(experiment, tmp_path_factory):
    """Two experiments of a stored (not imported) model: gender, and a custom type."""
    from engine.prompting.prompts import METADATA_TYPES, metadata_type

    items = experiment[2]
    db = tmp_path_factory.mktemp("labelled") / "filters.duckdb"
    for run_id, mode, hit in (("b1", "base", 0.9), ("c1", "cf", 0.3)):
        _stored_run(db, run_id, "e-gender", mode, items, METADATA_TYPES["gender"], hit=hit)
    custom = metadata_type("expertise", "an expert", "a novice", "Some are experts.")
    for run_id, mode, hit in (("b2", "base", 0.6), ("c2", "cf", 0.6)):
        _stored_run(db, run_id, "e-custom", mode, items, custom, hit=hit)
    return db


def test_report_names_labels_and_datasets_alike(labelled_db, capsys):
    assert main(["report", "--db", str(labelled_db)]) == 0
    captured = capsys.readouterr()
    assert "| Gender | Woman vs Man | org/model-7b |" in captured.out
    assert "| expertise | an expert vs a novice | org/model-7b |" in captured.out
    assert "Dataset: nq_top10.jsonl (sha-cli)" in captured.out and "/home/someone" not in captured.out
    assert "Woman / White / Human" not in captured.out
    assert captured.err.startswith("hint: intervals, CAS and citation confidence of one experiment: python -m engine bias")

    assert main(["report", "--db", str(labelled_db), "--experiment", "e-custom", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["experiment_id"] for r in data["table2"]] == ["e-custom"]
    assert {r["relevant"] for r in data["table1"]} == {"an expert", "a novice"}
    assert data["table2"][0]["label_a"] == "an expert" and data["table2"][0]["dataset"] == "nq_top10.jsonl (sha-cli)"


def test_report_filters_by_dataset_and_model(experiment, labelled_db, capsys):
    # --dataset by file name (a path to the file works too) or content hash prefix; --model exactly.
    assert main(["report", "--db", str(labelled_db), "--dataset", "elsewhere/nq_top10.jsonl", "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["table2"]) == 2
    db = experiment[1]
    con = duckdb.connect(str(db), read_only=True)
    try:
        sha = con.execute("SELECT any_value(dataset_sha) FROM runs").fetchone()[0]
    finally:
        con.close()
    assert main(["report", "--db", str(db), "--dataset", sha[:6], "--model", "sys-A", "--format", "json",
                 "--table", "1"]) == 0
    assert {r["model"] for r in json.loads(capsys.readouterr().out)["table1"]} == {"sys-A"}


@pytest.mark.parametrize("args, message", [
    (["--experiment", "nope"], "no experiment 'nope' in"),
    (["--model", "nope"], "no complete run of model 'nope' in"),
    (["--dataset", "nope.jsonl"], "datasets with complete runs: nq_top10.jsonl (sha-cli)"),
], ids=["experiment", "model", "dataset"])
def test_report_filter_matching_nothing_is_one_line(labelled_db, capsys, args, message):
    assert main(["report", "--db", str(labelled_db), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_report_type_names_cover_the_built_in_types():
    from engine.presentation.formatting import TYPE_NAMES
    from engine.prompting.prompts import METADATA_TYPES

    assert set(TYPE_NAMES) == set(METADATA_TYPES)


def test_bias_reads_the_store_without_pandas(experiment):
    # pandas alone takes longer to import than the whole bias command (scripts/bench_bias.py).
    db = experiment[1]
    code = f"""
import sys
from engine.__main__ import main
rc = main(["bias", "--experiment", "exp1", "--db", {str(db)!r}, "--json"])
print("RESULT", rc, "pandas" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "RESULT 0 False" in done.stdout, done.stderr


@pytest.mark.parametrize("args, message", [
    (["--seed", "-1"], "--seed must be 0 or more, not -1"),
    (["--resamples", "99"], "--resamples must be between 100 and 100,000, not 99"),
    (["--resamples", "1000000000"], "--resamples must be between 100 and 100,000"),
], ids=["negative seed", "few resamples", "huge resamples"])
def test_bias_bounds_its_bootstrap_flags(experiment, capsys, args, message):
    assert main(["bias", "--experiment", "exp1", "--db", str(experiment[1]), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
