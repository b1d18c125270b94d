"""One module per CLI command; see engine/__main__.py. Pieces several commands build on live
here: `run`'s battery options (docs/method.md, "Battery"), which a grid and a single run share:
where the relevant documents stand, whether a non-relevant document is shown twice, which
documents carry a label, and a custom type's extra labels.
"""


from __future__ import annotations

import argparse

# engine.types, not engine.prompts: every command builds the run parser (see engine/commands/run.py).
from engine.types import LABEL_SCOPES, RELEVANT_ATS, REPETITIONS


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
