"""`python -m demo` refuses a store it cannot use in one line, before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _demo(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADIO_ANALYTICS_ENABLED": "False"}
    env.pop("PATTRIEVAL_RESULTS_REPO", None)
    return subprocess.run([sys.executable, "-m", "demo", *args, "--port", "1"], capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.mark.parametrize("make, expected", [
    (lambda tmp: tmp, "it is a folder"),
    (lambda tmp: (tmp / "notes.duckdb").write_text("hello") and tmp / "notes.duckdb", "not a DuckDB database file"),
])
def test_a_store_that_cannot_serve_is_refused_in_one_line(tmp_path, make, expected):
    path = make(tmp_path)
    result = _demo("--db", str(path))
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], result.stderr
