"""The command line: `python -m engine COMMAND ...`.

Each command lives in engine/commands/<name>.py with `add_parser(subparsers)` and
`main(args) -> int`. Command modules import torch, transformers or the store only inside
`main`, so read-only commands (bias, report) start without torch. The CLI is the composition
root: it is the one place in engine/ allowed to reach the store.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from engine.errors import UserError

COMMANDS = ("quickstart", "run", "tiny_model", "import_answers", "bias", "report", "validate")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"engine.commands.{name}")
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.main(args) or 0)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
