"""Run code as a notebook does: cells in a Jupyter kernel (ipykernel), driven by nbclient.

A kernel is not plain Python: DuckDB, for one, notices it and changes its progress bar setting
(without ipywidgets it refused `SET enable_progress_bar` and every store call failed).
`ipywidgets=False` hides ipywidgets from the kernel, installed or not, by a module of that name
that refuses to import, placed first on its path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

HIDE_IPYWIDGETS = 'raise ImportError("ipywidgets is hidden from this kernel (tests/support/notebooks.py)")\n'


def run_notebook(cells: list[str], folder: Path, *, ipywidgets: bool, timeout_s: int = 600) -> list[list[dict[str, Any]]]:
    """Run `cells` in order in a fresh python3 kernel working in `folder`, with the checkout on its
    path; the outputs of each cell (nbformat dicts). A cell that raises fails the test with the
    kernel's traceback."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    paths = [str(ROOT)]
    if ipywidgets:
        import importlib.util

        if importlib.util.find_spec("ipywidgets") is None:
            pytest.skip("ipywidgets is not installed here (requirements-dev.txt pins it)")
    else:
        hidden = folder / ".hide-ipywidgets"
        hidden.mkdir(exist_ok=True)
        (hidden / "ipywidgets.py").write_text(HIDE_IPYWIDGETS)
        paths.insert(0, str(hidden))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = NotebookClient(notebook, kernel_name="python3", timeout=timeout_s,
                            resources={"metadata": {"path": str(folder)}})
    try:
        client.execute(env=env)
    except CellExecutionError as err:
        pytest.fail(f"a notebook cell failed:\n{err}", pytrace=False)
    return [[dict(o) for o in cell.outputs] for cell in notebook.cells]


def stdout(outputs: list[dict[str, Any]]) -> str:
    return "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stdout")


def shown(outputs: list[dict[str, Any]], mime: str) -> str:
    """What the cell's last value displayed as `mime` (text/plain, text/html), or ""."""
    for o in outputs:
        if o.get("output_type") in ("execute_result", "display_data") and mime in o.get("data", {}):
            value = o["data"][mime]
            return "".join(value) if isinstance(value, list) else value
    return ""


# The first cell of every notebook here: which case the kernel is (DuckDB's own view of it).
KERNEL_CASE = """\
import duckdb, importlib
try:
    importlib.import_module("ipywidgets")
    widgets = True
except ImportError:
    widgets = False
print("ipywidgets", widgets, "progress bar", duckdb.connect().execute("SELECT current_setting('enable_progress_bar')").fetchone()[0])
"""
