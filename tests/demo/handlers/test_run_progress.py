"""The Run tab's table of runs in progress in the store: the app's own and a command line's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from demo.handlers.run import STORE_PROGRESS_COLUMNS, store_progress
from demo.settings import AppSettings
from store import RunStore
from tests.engine.commands.test_cli_list import _answers, _items, _spec


def test_running_runs_with_progress_newest_first_complete_ones_left_out(tmp_path):
    path = tmp_path / "s.duckdb"
    store = RunStore(path)
    store.put_items("a" * 64, _items(4))
    store.start_run(_spec("done", "old", "vanilla"))
    store.write_batch("done", _answers(["q0", "q1", "q2", "q3"]))
    store.finish_run("done", "complete")
    store.start_run(_spec("half", "new", "base"))
    store.write_batch("half", _answers(["q0", "q1"]))
    rows = store_progress(AppSettings(db_path=path))
    assert len(rows) == 1 and len(rows[0]) == len(STORE_PROGRESS_COLUMNS)
    assert rows[0][:6] == ["new", "base", "org/model-a", "running", "2/4", "half"]


def test_a_run_whose_process_died_shows_as_interrupted(tmp_path):
    # Another process (a command-line run) starts a run, writes one batch and dies without finishing.
    path = tmp_path / "s.duckdb"
    script = textwrap.dedent(f"""
        import os

        from store import RunStore
        from tests.engine.commands.test_cli_list import _answers, _items, _spec
        store = RunStore({str(path)!r})
        store.put_items("a" * 64, _items(4))
        store.start_run(_spec("cli", "from-cli", "cf"))
        store.write_batch("cli", _answers(["q0"]))
        os._exit(0)
    """)
    root = Path(__file__).resolve().parents[3]
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120, env={**os.environ, "PYTHONPATH": str(root)})
    rows = store_progress(AppSettings(db_path=path))
    assert [r[:6] for r in rows] == [["from-cli", "cf", "org/model-a", "interrupted", "1/4", "cli"]]


def test_no_store_yet_no_rows_and_no_file(tmp_path):
    path = tmp_path / "none.duckdb"
    assert store_progress(AppSettings(db_path=path)) == [] and not path.exists()
