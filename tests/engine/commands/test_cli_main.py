"""The top-level CLI: --help describes the tool and lists every command, --version, closed pipes."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import engine
from engine.__main__ import BROKEN_PIPE_EXIT, COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[3]


def test_help_describes_the_tool_and_lists_every_command(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "cite the right sources" in out and "CAS and CAB" in out
    for command in ("quickstart", "run", "list", "bias", "report", "import", "tiny-model"):
        line = next((ln for ln in out.splitlines() if ln.strip().startswith(command + " ")), None)
        assert line is not None and len(line.split()) > 2, f"{command} has no one-line help"
    assert "python -m engine quickstart" in out


def test_every_command_module_is_registered():
    # Modules named _x are shared helpers of the commands (e.g. _field_words), not commands.
    names = {p.stem for p in (ROOT / "engine" / "commands").glob("*.py") if not p.stem.startswith("_")}
    assert names == set(COMMANDS)
    build_parser()  # each module's add_parser works


def test_version_has_one_value(capsys):
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"pattrieval {engine.__version__}"
    # pyproject.toml spells the version too (packaging reads it there): the two must agree.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == engine.__version__


@pytest.mark.parametrize("argv", [["list", "--runs", "--db", "{db}"], ["--help"], ["list", "--help"]])
def test_a_closed_pipe_ends_quietly(tmp_path, argv):
    from store import connect

    db = tmp_path / "e.duckdb"
    with connect(db):
        pass
    # A pipe whose reader is gone before the command writes: what `cmd | head -1` does to the
    # rest of a long output, without the race of waiting for head to exit.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "engine", *(a.format(db=db) for a in argv)], cwd=ROOT,
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode in (0, BROKEN_PIPE_EXIT)


def test_head_of_a_long_listing(tmp_path):
    from store import connect

    db = tmp_path / "many.duckdb"
    with connect(db) as conn:  # more than a pipe buffer of output, so the writer meets the closed pipe
        conn.execute(
            "INSERT INTO runs (run_id, experiment_id, config_hash, created_utc, status, model, dataset_sha, rag_mode) "
            "SELECT 'run-' || i || repeat('x', 100), 'exp-' || i, 'h' || i, TIMESTAMP '2024-01-01' + i * INTERVAL 1 minute, "
            "'complete', 'm', 's', 'vanilla' FROM range(2000) t(i)"
        )
    done = subprocess.run(f"{sys.executable} -m engine list --runs --db {db} | head -1", shell=True, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith("run ") and done.stdout.count("\n") == 1
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


def test_tiny_model_offers_every_architecture():
    from engine.generation.tiny_model import ARCHS

    assert "qwen2" in ARCHS
    for arch in ARCHS:
        assert build_parser().parse_args(["tiny-model", "out", "--arch", arch]).arch == arch


def test_no_command_help_shows_a_doubled_percent_sign():
    """argparse formats `help=` with %, not `description=`: "95%%" there printed as it is (why-cited
    and propensity did, until their --help was read)."""
    import argparse

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    doubled = [name for name, command in sub.choices.items() if "%%" in command.format_help()]
    assert len(sub.choices) == len(COMMANDS) and doubled == []
