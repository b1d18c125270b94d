"""docs/python.md runs as written, and its CAS and CAB are what `python -m engine bias` prints.

Every ```python block of the page runs, in order, in one namespace, from a folder laid out like
the repository (its data/), so the page cannot drift from the API it documents.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "python.md"

pytestmark = pytest.mark.slow  # it generates with the smoke model


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def _cli_bias(folder: Path, db: str, experiment: str) -> dict[tuple[str, str], float]:
    out = subprocess.run([sys.executable, "-m", "engine", "bias", "--experiment", experiment, "--db", db, "--json"],
                         cwd=folder, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    return {(r["measure"], r["metric"]): r["value"] for r in json.loads(out.stdout)["results"]}


def _values(frame) -> dict[tuple[str, str], float]:
    return {(r.measure, r.metric): r.value for r in frame.itertuples()}


def test_the_python_walkthrough_runs_and_agrees_with_the_cli(tmp_path, monkeypatch):
    blocks = _blocks()
    assert len(blocks) == 5  # Figures 2-5 and answers from elsewhere
    shutil.copytree(ROOT / "data", tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(PAGE), "exec"), namespace)  # noqa: S102 - the page is ours

    # Figure 3: three complete runs of four items.
    assert [(r.mode, r.status, r.n_items) for r in namespace["outcome"].runs] == [
        ("vanilla", "complete", 4), ("base", "complete", 4), ("cf", "complete", 4)]
    assert {p.stage for p in namespace["done"]} >= {"planned", "stored"}
    # Figure 4: one row per answer.
    assert len(namespace["per_item"]) == 12

    # Figure 5: the API's CAS and CAB are the CLI's, on the same store.
    report = {(r["measure"], r["metric"]): r["value"] for r in namespace["report"]["results"]}
    assert report == _cli_bias(tmp_path, "walkthrough.duckdb", "walkthrough")
    assert _values(namespace["evaluation"].bias) == pytest.approx(report)

    # Answers from elsewhere: in memory and in a file give the same numbers, which the CLI prints too.
    in_memory, kept = _values(namespace["in_memory"].bias), _values(namespace["kept"].bias)
    assert in_memory == pytest.approx(kept)
    assert _cli_bias(tmp_path, "mine.duckdb", "mine") == pytest.approx(kept)
    # By hand: base cites a relevant document on both items, cf on one only, so CAB(precision) > 0.
    assert kept[("CAB", "precision")] > 0
