"""What several commands share: the store (--db) and the run's progress bar. The run's own
options are declared in engine.usecases.runs.run_options and added by engine.commands.run."""

from __future__ import annotations

import argparse
import sys

from engine.paths import DEFAULT_DB_HELP, moved_default_note
from engine.usecases.runs.run import resolve_db


def add_db_arg(p, what: str = "DuckDB file") -> None:
    """--db, the store a command reads or writes (`p` a parser or an argument group)."""
    p.add_argument("--db", default=None, help=f"{what} (default: {DEFAULT_DB_HELP})")


def store_path(args: argparse.Namespace):
    """The store --db names, or the default one, with a note when the default has moved."""
    path = resolve_db(args.db)
    note = None if args.db else moved_default_note(path)
    if note:  # the default store is not where the docs say: said once, before the run
        print(note, file=sys.stderr)
    return path


class RunBar:
    """The use case's progress as one tqdm bar on stderr, made when its total is known."""

    def __init__(self, desc, *, on_planned=None):
        self.desc, self.on_planned, self.bar = desc, on_planned, None

    def __call__(self, event) -> None:
        if event.stage == "planned" and event.message:  # what the work will cost, before it starts
            print(event.message, file=sys.stderr)
        if event.stage == "planned" and event.study is not None:
            if self.on_planned is not None:
                self.on_planned(event.study)
            self._open(event.total, f"study {event.study.name}", disable=event.total == 0)
        elif event.stage == "generating" and self.bar is None:
            self._open(event.total, f"{event.label} {self.desc}")
        elif event.stage == "stored" and self.bar is not None:
            self.bar.update(event.step)

    def _open(self, total, desc, disable=False) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, unit="item", desc=desc, file=sys.stderr, dynamic_ncols=True, disable=disable)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
