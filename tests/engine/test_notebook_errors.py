"""A user error in a Jupyter notebook cell is one line, as on the command line (the brief: never a
traceback for a user error in a notebook); a bug keeps its traceback."""

from __future__ import annotations

import os

from tests.support.notebooks import ROOT


def test_a_user_error_in_a_notebook_cell_is_one_line_and_a_bug_keeps_its_traceback(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    cells = ["from engine import api",
             f"api.agreement(api.AgreementRequest(db={str(tmp_path / 'none.duckdb')!r}, experiment='nope'))",
             "from engine.errors import FieldError\nraise FieldError('top_k', '{top_k} must be at least 1')",
             "1 / 0"]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = NotebookClient(notebook, kernel_name="python3", timeout=120, allow_errors=True,
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env={**os.environ, "PYTHONPATH": str(ROOT)})
    errors = [[o for o in cell.outputs if o["output_type"] == "error"] for cell in notebook.cells]
    assert errors[0] == []
    for cell in errors[1:3]:
        (error,) = cell
        assert error["ename"] in ("UserError", "FieldError")
        assert len(error["traceback"]) == 1 and "\n" not in error["traceback"][0], error["traceback"]
    assert "none.duckdb" in errors[1][0]["traceback"][0] and "top_k must be at least 1" in errors[2][0]["traceback"][0]
    (bug,) = errors[3]
    assert bug["ename"] == "ZeroDivisionError" and len(bug["traceback"]) > 1
