"""Error, warning and info toasts whose text is shown literally.

Gradio renders a toast's message (gr.Error, gr.Warning, gr.Info) as HTML, and what a message
quotes is often stored or visitor text: an experiment or metadata name holding a link, an image
or a form would show live in another visitor's toast (and the image would be fetched). Every
toast goes through here, so that every message is escaped the same way. Quotes stay as they are:
text inside an element needs only &, < and > escaped, and API callers read the message too.

An error toast is a visitor's mistake (an unknown id, a bad value): gr.Error would print a full
traceback to the server's log for each typo, so `error` logs one line instead. Bugs are other
exceptions and keep their tracebacks.

Every toast and logged line is also bounded and has its control characters escaped
(engine.errors.message_line): a refusal quoting a 40 MB value was a 40 MB toast, and an escape
code in a label reached the operator's terminal through the log.
"""

from __future__ import annotations

import html
import sys

from demo.field_words import app_message
from engine.errors import message_line

_LOGGED_CHARS = 300  # a visitor's text must not fill the server's log


def toast_text(message: object) -> str:
    """The message as HTML text that shows literally, one bounded line with control characters escaped."""
    return html.escape(message_line(message), quote=False)


def error(message: object, where: str = "app"):
    """gr.Error for a user error, escaped, in one line, logged in one line without a traceback:
    raise it from a handler (`raise error(err, "bias") from None`)."""
    import gradio as gr

    return gr.Error(toast_text(refused(message, where)), print_exception=False)


def refused(message: object, where: str = "app") -> str:
    """A user error as one line, logged in one line as `error` logs it, for a page that shows
    the refusal in place of its results rather than raising (one message, not an "Error" on
    every output)."""
    # A field named by the form's label, not an option; the line bounded and escaped.
    line = message_line(" ".join(app_message(message).split()))
    logged = message_line(line, _LOGGED_CHARS)
    print(f"{where}: refused: {logged}", file=sys.stderr, flush=True)
    return line


def warning(message: object) -> None:
    """A warning toast with the message escaped."""
    import gradio as gr

    gr.Warning(toast_text(message))


def info(message: object) -> None:
    """An info toast with the message escaped."""
    import gradio as gr

    gr.Info(toast_text(message))


def with_request(fn):
    """Mark `fn`'s `request` parameter as gr.Request, so that Gradio passes the caller's request
    (the tabs' modules postpone annotations, and gradio is imported only inside build())."""
    import gradio as gr

    fn.__annotations__["request"] = gr.Request
    return fn
