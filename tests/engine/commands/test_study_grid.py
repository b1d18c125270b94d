"""`run` with comma lists: a study grid, one experiment per configuration, the vanilla run
generated once per model and configuration and copied to the other metadata types; resume over
the whole grid; `report --study --layout xai`; one-line errors for bad lists."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from engine.__main__ import main
from engine.commands.report import render_xai
from engine.usecases.bias.tables import xai_blocks
from tests.support.engine_process import kill_once_stored, run_engine

N_ITEMS = 3


def _dataset(path: Path) -> Path:
    items = []
    for i in range(N_ITEMS):
        # Relevant documents first and third: every item keeps one under a cut-off of 2.
        docs = [{"id": f"q{i}-d{j}", "title": f"t{j}", "text": f"text {i} {j}", "relevant": j in (0, 2)}
                for j in range(4)]
        items.append({"id": f"q{i}", "question": f"question {i}?", "answers": [f"answer {i}"], "documents": docs})
    path.write_text("".join(json.dumps(x) + "\n" for x in items))
    return path


def _counts(db: Path) -> dict[str, int]:
    with duckdb.connect(str(db), read_only=True) as conn:
        one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        return {
            "experiments": one("SELECT count(*) FROM experiments"),
            "runs": one("SELECT count(*) FROM runs"),
            "shared": one("SELECT count(*) FROM runs WHERE json_extract_string(config_json, '$.shared_from') IS NOT NULL"),
            "generations": one("SELECT count(*) FROM generations"),
            "citations": one("SELECT count(*) FROM citations"),
            "in_study": one("SELECT count(*) FROM study_experiments WHERE study = 'grid1'"),
        }


@pytest.fixture(scope="module")
def grid(tmp_path_factory, tiny_llama_dir, tiny_mistral_dir):
    tmp = tmp_path_factory.mktemp("grid")
    data, db = _dataset(tmp / "data.jsonl"), tmp / "grid.duckdb"
    common = ["--dataset", str(data), "--db", str(db), "--max-new-tokens", "3", "--batch-size", "4"]
    single = ["run", "--model", str(tiny_llama_dir), "--metadata", "gender", "--top-k", "2", *common]
    command = ["run", "--study", "grid1", "--model", f"{tiny_llama_dir},{tiny_mistral_dir}",
               "--metadata", "gender,race", "--top-k", "2,4", *common]
    return tmp, db, single, command


@pytest.mark.slow  # a whole grid generated twice over
def test_a_grid_runs_as_one_study_sharing_vanilla_and_resumes_without_duplicates(grid, capsys):
    tmp, db, single, command = grid
    # One configuration of the grid exists already, from a single-experiment run: the grid joins it.
    assert main(single) == 0
    single_experiment = re.search(r"experiment (\w+)", capsys.readouterr().out).group(1)

    assert main(command) == 0
    out = capsys.readouterr().out
    # 2 models x 2 metadata x 2 cut-offs = 8 experiments, 24 runs; 4 vanilla runs copied, not
    # generated; 3 runs (9 answers) were there already.
    assert "study grid1: 8 experiment(s) (2 model x 2 metadata x 2 top_k), 4 vanilla run(s) to share" in out
    assert f"plan: 24 runs x {N_ITEMS} items = 72 generations; 51 to generate, 12 vanilla answers shared (copied)" in out
    counts = _counts(db)
    assert counts["experiments"] == 8 and counts["in_study"] == 8
    assert counts["runs"] == 24 and counts["shared"] == 4  # generated: 2 x 2 x (1 + 2 x 2) = 20
    assert counts["generations"] == 24 * N_ITEMS
    assert single_experiment in out  # joined, not duplicated

    with duckdb.connect(str(db), read_only=True) as conn:
        # Each copy holds exactly its source's answers and citations, and its source is the vanilla
        # run of the same model and configuration under the other metadata type.
        pairs = conn.execute(
            "SELECT c.run_id, s.run_id, c.metadata_type, s.metadata_type, c.model = s.model, "
            "json_extract(c.config_json, '$.prompt.top_k') = json_extract(s.config_json, '$.prompt.top_k') "
            "FROM runs c JOIN runs s ON s.run_id = json_extract_string(c.config_json, '$.shared_from')"
        ).fetchall()
        assert len(pairs) == 4
        for copy, source, copy_type, source_type, same_model, same_k in pairs:
            assert (copy_type, source_type, same_model, same_k) == ("race", "gender", True, True)
            for table, cols in (("generations", "item_id, prompt, answer, shown_doc_ids, token_ids, logprobs"),
                                ("citations", "item_id, citation_index, position, doc_id, relevant, probability")):
                got = conn.execute(f"SELECT {cols} FROM {table} WHERE run_id = ? ORDER BY ALL", [copy]).fetchall()
                want = conn.execute(f"SELECT {cols} FROM {table} WHERE run_id = ? ORDER BY ALL", [source]).fetchall()
                assert got == want and (table == "citations" or len(got) == N_ITEMS)
        # The bias view pairs every experiment's vanilla with its base: CAS for all 8.
        assert conn.execute("SELECT count(DISTINCT experiment_id) FROM bias WHERE measure = 'CAS'").fetchone()[0] == 8

    # The same command again: nothing to do, nothing added.
    assert main(command) == 0
    again = capsys.readouterr().out
    assert f"plan: 24 runs x {N_ITEMS} items = 72 generations; nothing left to do" in again
    assert _counts(db) == counts

    assert main(["list", "--db", str(db), "--studies"]) == 0
    listed = capsys.readouterr().out
    assert re.search(r"^grid1\s+8\s+metadata=gender,race\s+model=\S+,\S+\s+top_k=2,4", listed, re.M), listed
    assert main(["list", "--db", str(db), "--study", "grid1"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 1 + 8


def test_report_layout_xai_prints_the_study(grid, capsys):
    tmp, db, single, command = grid
    if not db.exists() or _counts(db)["in_study"] != 8:
        assert main(command) == 0
    capsys.readouterr()
    assert main(["report", "--db", str(db), "--study", "grid1", "--layout", "xai"]) == 0
    out = capsys.readouterr().out
    assert out.count("XAI none, 0-shot: ") == 2  # one block per model
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| cut-off")]
    # Per model: 2 cut-offs x (vanilla once + 2 types x base, cf) = 10 rows; the copies are not repeated.
    assert len(rows) == 20
    assert sum(1 for r in rows if "| vanilla |" in r) == 4
    assert {r.split(" | ")[0] for r in rows} == {"| 2", "| 4"}
    assert main(["report", "--db", str(db), "--study", "grid1", "--layout", "xai", "--format", "json"]) == 0
    blocks = json.loads(capsys.readouterr().out)["blocks"]
    assert [(b["xai"], b["few_shot"], len(b["rows"])) for b in blocks] == [("none", 0, 10)] * 2
    # The paper layout (the default) is today's Tables 1 and 2.
    assert main(["report", "--db", str(db), "--study", "grid1"]) == 0
    assert "Table 1:" in capsys.readouterr().out
    assert main(["report", "--db", str(db), "--study", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: no study 'nope' in ")


def _rec(run_id, mode, top_k, order, recall, precision, *, meta="gender", xai="none", shots=0, shared=None):
    run = {"run_id": run_id, "experiment_id": "e", "model": "m", "rag_mode": mode, "metadata_type": meta,
           "n": 10, "answer_recall": recall, "precision": precision, "recall": 0.5, "f1": float("nan"),
           "dataset_sha": "x"}
    settings = {"run_id": run_id, "top_k": top_k, "order": order, "few_shot": shots, "xai": xai, "shared_from": shared}
    return run, settings


def test_xai_blocks_bold_the_best_per_block_and_order_rows():
    recs = [
        _rec("a", "base", 5, "random", 0.30, 0.10),
        _rec("b", "vanilla", 5, "ranked", 0.20, 0.40),
        _rec("c", "vanilla", None, "ranked", 0.10, 0.05),
        _rec("d", "vanilla", 5, "ranked", 0.20, 0.40, meta="race", shared="b"),  # a copy: shown once
        _rec("e", "base", 5, "ranked", 0.90, 0.90, xai="direct"),  # another block
    ]
    blocks = xai_blocks([r for r, _ in recs], [s for _, s in recs])
    assert [(b["xai"], [r["run_id"] for r in b["rows"]]) for b in blocks] == [("none", ["b", "a", "c"]), ("direct", ["e"])]
    text = render_xai(blocks, "markdown")
    assert "| 5 | ranked | vanilla | 20.0 | **40.0** | **50.0** | - | 10 |" in text
    assert "| 5 | random | gender base | **30.0** | 10.0 | **50.0** | - | 10 |" in text
    assert "| all | ranked | vanilla | 10.0 | 5.0 | **50.0** | - | 10 |" in text
    assert "| 5 | ranked | gender base | **90.0** | **90.0** | **50.0** | - | 10 |" in text
    assert render_xai(blocks, "csv").splitlines()[1] == "m,,none,0,5,ranked,vanilla,20.0,40.0,50.0,,10"


@pytest.mark.parametrize("option, value, message", [
    ("--order", "ranked,sideways", "--order: unknown value 'sideways'; choose from ranked,reversed,random"),
    ("--xai", "none,why", "--xai: unknown value 'why'; choose from none,direct,counterfactual"),
    ("--top-k", "2,2", "--top-k lists '2' twice"),
    ("--top-k", "0,2", "--top-k must be at least 1, not 0"),
    ("--top-k", "2,x", "--top-k: 'x' is not a whole number (or 'all')"),
    ("--few-shot", "0,3", "--few-shot must be between 0 and 2, not 3"),
    ("--metadata", "gender,,race", "--metadata: empty entry in 'gender,,race'"),
    ("--metadata", "gender,gender", "--metadata lists 'gender' twice"),
    ("--model", "smoke,smoke", "--model lists 'smoke' twice"),
    ("--experiment", "x", "--experiment names one experiment; this grid has 2 configurations: name it with --study"),
])
def test_bad_lists_are_refused_in_one_line_before_anything_is_written(tmp_path, capsys, option, value, message):
    db = tmp_path / "x.duckdb"
    grid_args = [] if option in ("--top-k", "--model") else ["--top-k", "1,2"]
    args = ["run", "--dataset", str(tmp_path / "missing.jsonl"), "--db", str(db), *grid_args, option, value]
    assert main(args) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    assert not db.exists()


def test_a_partial_grid_is_completed_by_the_same_command(tmp_path, tiny_llama_dir, capsys):
    data, db = _dataset(tmp_path / "data.jsonl"), tmp_path / "partial.duckdb"
    command = ["run", "--model", str(tiny_llama_dir), "--metadata", "gender,race", "--top-k", "2",
               "--dataset", str(data), "--db", str(db), "--max-new-tokens", "2"]
    assert main([*command, "--limit", "2"]) == 0
    first = capsys.readouterr().out
    assert "plan: 6 runs x 2 items = 12 generations; 10 to generate, 2 vanilla answers shared (copied)" in first
    name = re.search(r"^study (study-[0-9a-f]{10}):", first, re.M).group(1)
    assert main(command) == 0  # no --limit: every item; the same experiments, the same study
    second = capsys.readouterr().out
    assert f"study {name}:" in second
    assert f"plan: 6 runs x {N_ITEMS} items = 18 generations; 5 to generate, 1 vanilla answer shared (copied)" in second
    with duckdb.connect(str(db), read_only=True) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT (run_id, item_id)) FROM generations").fetchone() == (18, 18)
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 6
        assert conn.execute("SELECT count(*) FROM study_experiments").fetchone()[0] == 2


def test_a_grid_killed_with_minus_9_is_completed_by_the_same_command(tmp_path, tiny_llama_dir):
    n = 6  # 30 answers to generate, killed after 3: 12 items only made the resume longer
    data, db = tmp_path / "data.jsonl", tmp_path / "killed.duckdb"
    items = []
    for i in range(n):
        docs = [{"id": f"q{i}-d{j}", "title": "", "text": f"text {i} {j}", "relevant": j == 0} for j in range(3)]
        items.append({"id": f"q{i}", "question": f"question {i}?", "answers": [f"a{i}"], "documents": docs})
    data.write_text("".join(json.dumps(x) + "\n" for x in items))
    cmd = ["run", "--model", str(tiny_llama_dir), "--metadata", "gender,race", "--dataset", str(data), "--db", str(db),
           "--batch-size", "1", "--max-new-tokens", "24", "--study", "killed"]
    kill_once_stored(cmd, db, "SELECT count(*) FROM generations", 3)
    done = run_engine(cmd)
    assert done.returncode == 0, done.stderr
    assert f"plan: 6 runs x {n} items = {6 * n} generations; " in done.stdout
    with duckdb.connect(str(db), read_only=True) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT (run_id, item_id)) FROM generations").fetchone() == (6 * n, 6 * n)
        assert {s for (s,) in conn.execute("SELECT status FROM runs").fetchall()} == {"complete"}
        assert conn.execute("SELECT count(*) FROM study_experiments WHERE study = 'killed'").fetchone()[0] == 2
        copy, source = conn.execute(
            "SELECT run_id, json_extract_string(config_json, '$.shared_from') FROM runs "
            "WHERE rag_mode = 'vanilla' AND metadata_type = 'race'").fetchone()
        answers = "SELECT item_id, answer FROM generations WHERE run_id = ? ORDER BY item_id"
        assert source is not None and conn.execute(answers, [copy]).fetchall() == conn.execute(answers, [source]).fetchall()
