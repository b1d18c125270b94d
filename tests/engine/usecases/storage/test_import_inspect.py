"""`import --inspect LOG` and engine.api.import_inspect on logs that do not fit or are hostile: each
is refused in one line naming the sample and the field, and nothing is written. Another task's
log (one answer per sample, in its output) imports as one run. Without inspect-ai the CLI runs
and says what to install."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai")

from inspect_ai.model import ModelOutput, ModelUsage, get_model  # noqa: E402

import engine.inspect_tasks.registry  # noqa: E402,F401
from engine import api  # noqa: E402
from engine.errors import UserError  # noqa: E402
from tests.support.inspect_runner import inspect_eval  # noqa: E402  (Inspect in a thread of its own)

ROOT = Path(__file__).resolve().parents[4]


def _said(*args: object) -> ModelOutput:
    output = ModelOutput.from_content(model="mockllm/model", content="Jane Austen [1]")
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return output


@pytest.fixture(scope="module")
def log_path(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("logs")
    [log] = inspect_eval("pattrieval/gender", model=get_model("mockllm/model", custom_outputs=_said),
                         task_args={"limit": 3}, log_dir=str(folder), display="none")
    assert log.status == "success", log.error
    return Path(log.location)


def rewrite(src: Path, out: Path, edit: Callable[[dict], object] | None = None, raw: bytes | None = None) -> Path:
    """A copy of the log whose first sample is edited (as JSON) or replaced by raw bytes."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        first = next(n for n in zin.namelist() if n.startswith("samples/"))
        for name in zin.namelist():
            data = zin.read(name)
            if name == first:
                if raw is not None:
                    data = raw
                elif edit is not None:
                    sample = json.loads(data)
                    edit(sample)
                    data = json.dumps(sample).encode()
            zout.writestr(name, data)
    return out


def refused(path: Path, db: Path, match: str) -> str:
    with pytest.raises(UserError, match=match) as caught:
        api.import_inspect(path, db)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    assert not db.exists(), "a refused log must write nothing"
    return message


def _drop_documents(sample: dict) -> None:
    del sample["metadata"]["documents"]


def _relevant_yes(sample: dict) -> None:
    sample["metadata"]["documents"][0]["relevant"] = "yes"


def _huge_text(sample: dict) -> None:
    sample["metadata"]["documents"][1]["text"] = "x" * 200_000


def _answers_number(sample: dict) -> None:
    sample["metadata"]["answers"]["base"] = 42


def _shown_unknown(sample: dict) -> None:
    sample["metadata"]["shown_doc_ids"]["cf"] = ["no-such-document"]


@pytest.mark.parametrize(("edit", "match"), [
    (_drop_documents, r"sample 'nq-00\d': missing metadata.documents"),
    (_relevant_yes, r"sample 'nq-00\d': metadata.documents\[1\].relevant must be true or false, got string"),
    (_huge_text, r"sample 'nq-00\d': metadata.documents\[2\].text is 200,000 characters long \(at most 100,000\)"),
    (_answers_number, r"sample 'nq-00\d': metadata.answers.base must be text, got number"),
    (_shown_unknown, r"sample 'nq-00\d': metadata.shown_doc_ids.cf must list ids of metadata.documents"),
])
def test_a_sample_that_does_not_fit_is_named_with_its_field(log_path, tmp_path, edit, match):
    bad = rewrite(log_path, tmp_path / "bad.eval", edit)
    refused(bad, tmp_path / "s.duckdb", match)


@pytest.mark.parametrize(("depth", "match"), [
    (100_000, "JSON nested too deeply to read"),  # Inspect's own reader took 23 GB on this one
    (500, "JSON nested more than 200 levels deep"),
])
def test_deep_json_is_refused_in_one_line_before_inspect_reads_it(log_path, tmp_path, depth, match):
    with zipfile.ZipFile(log_path) as z:
        sample = json.loads(z.read(next(n for n in z.namelist() if n.startswith("samples/"))))
    sample["metadata"]["deep"] = "DEEP"
    raw = json.dumps(sample).replace('"DEEP"', "[" * depth + "]" * depth).encode()
    bad = rewrite(log_path, tmp_path / "deep.eval", raw=raw)
    refused(bad, tmp_path / "s.duckdb", rf"samples/nq-00\d_epoch_1.json: {match}")


def test_a_member_over_the_bound_is_refused_before_it_is_read(log_path, tmp_path, monkeypatch):
    import engine.usecases.storage.import_inspect as reader

    monkeypatch.setattr(reader, "MAX_SAMPLE_BYTES", 10_000)
    refused(log_path, tmp_path / "s.duckdb", r"samples/nq-00\d_epoch_1.json is [\d,]+ bytes \(at most 10,000\)")


def test_not_a_log(tmp_path):
    junk = tmp_path / "junk.eval"
    junk.write_bytes(b"PK\x03\x04 not really a zip")
    refused(junk, tmp_path / "s.duckdb", "not a readable .eval log")
    other = tmp_path / "answers.csv"
    other.write_text("a,b\n")
    refused(other, tmp_path / "s.duckdb", r"not an Inspect log \(.eval or .json\)")


def test_another_tasks_log_imports_its_output_as_one_mode(log_path, tmp_path):
    def plain(sample: dict) -> None:
        for key in ("answers", "shown_doc_ids", "metadata_type", "index"):
            sample["metadata"].pop(key)

    with zipfile.ZipFile(log_path) as z:
        names = [n for n in z.namelist() if n.startswith("samples/")]
    out = tmp_path / "plain.eval"
    with zipfile.ZipFile(log_path) as zin, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for name in zin.namelist():
            data = zin.read(name)
            if name in names:
                sample = json.loads(data)
                plain(sample)
                data = json.dumps(sample).encode()
            zout.writestr(name, data)
    db = tmp_path / "s.duckdb"
    result = api.import_inspect(out, db, mode="vanilla", name="another-task")
    assert list(result.run_ids) == ["vanilla"] and result.n_cited == {"vanilla": 3}
    items = api.evaluate(db, run=result.run_ids["vanilla"]).items
    assert len(items) == 3 and set(items["item_id"]) == {"nq-001", "nq-002", "nq-003"}
    with pytest.raises(UserError, match="base answers need a label type"):
        api.import_inspect(out, tmp_path / "other.duckdb", mode="base")


def test_the_cli_refuses_in_one_line_without_a_traceback(log_path, tmp_path):
    bad = rewrite(log_path, tmp_path / "bad.eval", _relevant_yes)
    db = tmp_path / "s.duckdb"
    done = subprocess.run([sys.executable, "-m", "engine", "import", "--inspect", str(bad), "--db", str(db)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "relevant must be true or false" in done.stderr
    assert not db.exists()
    done = subprocess.run([sys.executable, "-m", "engine", "import", "--inspect", str(log_path), "--db", str(db)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "imported 3 samples of task pattrieval/gender" in done.stdout


def test_without_inspect_ai_the_cli_runs_and_names_the_extra(tmp_path):
    blocked = ("import sys\nsys.modules['inspect_ai'] = None\nsys.modules['inspect_ai.log'] = None\n"
               "from engine.__main__ import main\n")
    help_run = subprocess.run([sys.executable, "-c", blocked + "sys.argv = ['engine', 'import', '--help']\nmain()\n"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert help_run.returncode == 0 and "--inspect LOG" in help_run.stdout
    log = tmp_path / "x.eval"
    log.write_bytes(b"")
    code = blocked + f"sys.argv = ['engine', 'import', '--inspect', {str(log)!r}, '--db', {str(tmp_path / 's.duckdb')!r}]\n"
    done = subprocess.run([sys.executable, "-c", code + "sys.exit(main())\n"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "pip install 'pattrieval[inspect]'" in done.stderr and done.stderr.strip().count("\n") == 0


def test_only_the_inspect_modules_import_inspect_ai_and_only_they_at_load():
    """The CLI and the app load without inspect-ai: it is imported at module level only by
    engine/inspect_tasks (which Inspect alone loads) and inside functions by the import."""
    at_load, anywhere = set(), set()
    for path in [*ROOT.glob("engine/**/*.py"), *ROOT.glob("demo/**/*.py"), *ROOT.glob("store/**/*.py")]:
        tree = ast.parse(path.read_text())
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "inspect_ai" for n in names):
                anywhere.add(rel)
                if node in tree.body:
                    at_load.add(rel)
    assert {p for p in at_load if not p.startswith("engine/inspect_tasks/")} == set()
    assert {p for p in anywhere if not p.startswith("engine/inspect_tasks/")} == {"engine/usecases/storage/import_inspect.py"}


def test_a_json_log_imports_as_an_eval_log_does(tmp_path):
    [log] = inspect_eval("pattrieval/hai", model=get_model("mockllm/model", custom_outputs=_said),
                         task_args={"limit": 2}, log_dir=str(tmp_path / "logs"), log_format="json", display="none")
    assert log.location.endswith(".json")
    result = api.import_inspect(log.location, tmp_path / "s.duckdb")
    assert set(result.run_ids) == {"vanilla", "base", "cf"} and result.n_samples == 2 and result.n_cited["cf"] == 2
