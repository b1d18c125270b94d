"""Every Python file compiles with warnings as errors: an invalid escape such as '\\w' in a
non-raw string is a SyntaxWarning on Python 3.12 (printed at every import, seen on the GPU
machine) and will become an error."""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_python_file_has_an_invalid_escape():
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    assert len(files) > 100
    bad = []
    for name in files:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                compile((ROOT / name).read_text(encoding="utf-8"), name, "exec")
            except SyntaxError as err:
                bad.append(f"{name}: {err.msg}")
    assert bad == []
