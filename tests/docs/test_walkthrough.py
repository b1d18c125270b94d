"""docs/python.md runs as written, as a notebook, and its CAS and CAB are what `python -m engine bias`
prints.

Every ```python block of the page is a cell of one notebook, run in order in a Jupyter kernel
(nbclient + ipykernel, ipywidgets hidden: tests/support/notebooks.py) from an empty folder, so the page
cannot drift from the API it documents, nor from where its readers run it (in a kernel
every call that opened the store failed).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.notebooks import KERNEL_CASE, run_notebook, shown, stdout

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "python.md"

pytestmark = pytest.mark.slow  # it generates with the smoke model


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def _cli_bias(folder: Path, db: str, experiment: str) -> dict[tuple[str, str], float]:
    out = subprocess.run([sys.executable, "-m", "engine", "bias", "--experiment", experiment, "--db", db, "--json"],
                         cwd=folder, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    return {(r["measure"], r["metric"]): r["value"] for r in json.loads(out.stdout)["results"]}


# The last cell: what the checks below read from the notebook's namespace.
RESULTS = """\
import json as _json
print(_json.dumps({
    "runs": [(r.mode, r.status, r.n_items) for r in outcome.runs],
    "stages": sorted({p.stage for p in done}),
    "per_item": len(per_item),
    "report": [(r["measure"], r["metric"], r["value"]) for r in report["results"]],
    "evaluation": [(r.measure, r.metric, r.value) for r in evaluation.bias.itertuples()],
    "in_memory": [(r.measure, r.metric, r.value) for r in in_memory.bias.itertuples()],
    "kept": [(r.measure, r.metric, r.value) for r in kept.bias.itertuples()],
}))
"""


def _values(rows) -> dict[tuple[str, str], float | None]:
    """(measure, metric) -> value; an undefined one (NaN in a DataFrame, null in JSON) as None."""
    return {(measure, metric): None if value is None or value != value else value for measure, metric, value in rows}


def test_the_python_walkthrough_runs_as_a_notebook_and_agrees_with_the_cli(tmp_path):
    blocks = _blocks()
    assert len(blocks) == 5  # Figures 2-5 and answers from elsewhere
    # Each result at the end of a cell shows as a table, as the CLI prints it.
    outputs = run_notebook([KERNEL_CASE, *blocks, "outcome", "evaluation", "api.bias_report(store, 'walkthrough')",
                            RESULTS], tmp_path, ipywidgets=False)
    assert stdout(outputs[0]).split()[:2] == ["ipywidgets", "False"]
    for cell in outputs[-4:-1]:
        assert "<table>" in shown(cell, "text/html") and len(shown(cell, "text/plain").splitlines()) <= 15
    namespace = json.loads(stdout(outputs[-1]))

    # Figure 3: three complete runs of four items.
    assert [tuple(r) for r in namespace["runs"]] == [
        ("vanilla", "complete", 4), ("base", "complete", 4), ("cf", "complete", 4)]
    assert set(namespace["stages"]) >= {"planned", "stored"}
    # Figure 4: one row per answer.
    assert namespace["per_item"] == 12

    # Figure 5: the API's CAS and CAB are the CLI's, on the same store.
    report = _values(namespace["report"])
    assert report == _cli_bias(tmp_path, "walkthrough.duckdb", "walkthrough")
    assert _values(namespace["evaluation"]) == pytest.approx(report)

    # Answers from elsewhere: in memory and in a file give the same numbers, which the CLI prints too.
    in_memory, kept = _values(namespace["in_memory"]), _values(namespace["kept"])
    assert in_memory == pytest.approx(kept)
    assert _cli_bias(tmp_path, "mine.duckdb", "mine") == pytest.approx(kept)
    # By hand: base cites a relevant document on both items, cf on one only, so CAB(precision) > 0.
    assert kept[("CAB", "precision")] > 0
