"""Option groups several commands share: the store (--db), the run's progress bar, and `run`'s
battery options (docs/method.md, "Battery"), which a grid and a single run share: where the
relevant documents stand, whether a non-relevant document is shown twice, which documents carry
a label, and a custom type's extra labels.
"""

from __future__ import annotations

import argparse
import sys

from engine.paths import DEFAULT_DB_HELP

# engine.types, not engine.prompting.prompts: every command builds the run parser (see engine/commands/run.py).
from engine.types import LABEL_SCOPES, RELEVANT_ATS, REPETITIONS


def add_db_arg(p, what: str = "DuckDB file") -> None:
    """--db, the store a command reads or writes (`p` a parser or an argument group)."""
    p.add_argument("--db", default=None, help=f"{what} (default: {DEFAULT_DB_HELP})")


def store_path(args: argparse.Namespace):
    """The store --db names, or the default one, with a note when the default has moved."""
    from engine.paths import moved_default_note
    from engine.usecases.run import resolve_db

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


def add_battery_args(g, *, lists: bool) -> None:
    """--relevant-at, --repetition and --label-scope (comma lists with `lists`)."""
    grid = " (a comma list runs each)" if lists else ""
    g.add_argument(
        "--relevant-at", default="ranked", choices=None if lists else RELEVANT_ATS,
        metavar="WHERE[,WHERE...]" if lists else None,
        help=f"move the relevant documents after --order: {', '.join(RELEVANT_ATS)}; ranked leaves them "
        f"where they are{grid} (default: %(default)s)",
    )
    g.add_argument(
        "--repetition", default="none", choices=None if lists else REPETITIONS,
        metavar="REP[,REP...]" if lists else None,
        help=f"{', '.join(REPETITIONS)}; distractor shows the first non-relevant document again as the last "
        f"document{grid} (default: %(default)s)",
    )
    g.add_argument(
        "--label-scope", default="all", choices=None if lists else LABEL_SCOPES,
        metavar="SCOPE[,SCOPE...]" if lists else None,
        help=f"which documents carry a label in base and cf: {', '.join(LABEL_SCOPES)}; relevant or others "
        f"leaves the rest unlabelled{grid} (default: %(default)s)",
    )


def add_extra_label_arg(g) -> None:
    g.add_argument("--extra-label", action="append", default=None, metavar="TEXT",
                   help="custom type: one more label, repeatable; the type is then many-valued, its labels "
                   "(label A, label B, extra ...) rotated over the documents (default: none)")


def battery_fields(args: argparse.Namespace) -> dict:
    """The PromptConfig fields of the battery from parsed arguments (a command without the
    options gets the defaults)."""
    return {"relevant_at": getattr(args, "relevant_at", "ranked"), "repetition": getattr(args, "repetition", "none"),
            "label_scope": getattr(args, "label_scope", "all")}


def extra_labels(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(getattr(args, "extra_label", None) or ())
