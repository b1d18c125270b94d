"""A visitor's mistake (an unknown id, a bad value) as the toast they see and one line in the log.

gr.Error prints a full traceback to the server's log by default; for a typo that is noise, and
the design asks for no traceback for user errors. Bugs are other exceptions and keep theirs.
"""

from __future__ import annotations

import sys

_LOGGED_CHARS = 300


def refuse(message: object, where: str = "app"):
    """A gr.Error to raise for a user error: shown in one line, logged in one line, no traceback."""
    import gradio as gr

    line = " ".join(str(message).split())  # one line, whatever the message held
    # Cut in the log only: a visitor's text must not fill the server's log.
    logged = line if len(line) <= _LOGGED_CHARS else line[: _LOGGED_CHARS - 1] + "…"
    print(f"{where}: refused: {logged}", file=sys.stderr, flush=True)
    return gr.Error(line, print_exception=False)
