"""The command line: `python -m engine COMMAND ...`.

Each command lives in engine/commands/<name>.py with `add_parser(subparsers)` and
`main(args) -> int`. Command modules import torch, transformers or the store only inside
functions (`main` and what it calls), never at import, so `--help` and the read-only commands
(list, bias, report) start without torch. Commands reach the store only through the use cases
and engine.api; the one store module they import themselves is store.csv_safe, the rule for CSV
cells (tests/test_layering.py holds both).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from engine import __version__
from engine.commands._field_words import cli_message
from engine.errors import UserError, interrupted_query, message_line

# Module names under engine/commands, in the order --help lists them.
COMMANDS = ("quickstart", "run", "selfcheck", "validate", "list", "bias", "report", "leaderboard", "compare", "why_cited", "propensity", "used", "explain", "verify", "agreement", "export", "merge", "import_answers", "import_labels", "tiny_model")

DESCRIPTION = """\
PAttriEval: do retrieval-augmented LLMs cite the right sources, and does a label on a source
change what they cite? A model answers questions from retrieved documents and cites them as
[1][2]; this tool measures citation precision and recall against the documents that hold the
answer, exact match, and the attribution bias measures CAS and CAB: how much the citations
change when each document is labelled with who wrote it (a woman or a man, a human or an LLM,
a white or a Black person, or your own pair). Every run is stored in DuckDB as it goes."""

EPILOG = """\
start with:  {prog} quickstart
then:        {prog} list; {prog} bias --experiment ID; {prog} report
help on one command:  {prog} COMMAND --help"""

# The console script pyproject.toml installs; any other start (python -m engine, python -c, a
# test runner) is named as the module, which works wherever the package is importable.
CONSOLE_SCRIPT = "pattrieval"
MODULE_PROG = "python -m engine"

# Exit status of a process killed by SIGPIPE (128 + 13), what `yes | head -1` reports.
BROKEN_PIPE_EXIT = 141


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's line breaks and puts every command's help in one column."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=30)
        # argparse sizes the column without the extra indent of sub-commands, so the longest
        # names (quickstart, tiny-model) would wrap onto a line of their own.
        self._action_max_length = 18


def program_name(argv0: str | None = None) -> str:
    """The program as the user started it, for usage lines: `pattrieval` after `pip install`,
    else `python -m engine`. `argv0` defaults to sys.argv[0]."""
    if argv0 is None:
        argv0 = sys.argv[0] if sys.argv else ""
    name = os.path.basename(argv0)
    name = name[:-4] if name.lower().endswith(".exe") else name  # the launcher pip writes on Windows
    return CONSOLE_SCRIPT if name == CONSOLE_SCRIPT else MODULE_PROG


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI; `prog` defaults to the name it was started by (program_name)."""
    prog = prog or program_name()
    parser = argparse.ArgumentParser(
        prog=prog,
        description=DESCRIPTION,
        epilog=EPILOG.format(prog=prog),
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pattrieval {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for name in COMMANDS:
        module = importlib.import_module(f"engine.commands.{name}")
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit:
            sys.stdout.flush()  # --help and --version print, then exit: flush while we can catch
            raise
        try:
            code = int(args.main(args) or 0)
        except UserError as err:
            print(f"error: {message_line(cli_message(err))}", file=sys.stderr)
            code = 2
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            code = 130
        except RuntimeError as err:
            if not interrupted_query(err):
                raise
            print("interrupted", file=sys.stderr)
            code = 130
        # Flush here, inside the handler: otherwise a closed pipe surfaces at interpreter exit.
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader (`| head`) has gone; stop quietly, as the Python docs recommend: point
        # stdout at devnull so the final flush at exit cannot raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE_EXIT


if __name__ == "__main__":
    sys.exit(main())
