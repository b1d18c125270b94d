"""Error, warning and info toasts whose text is shown literally.

Gradio renders a toast's message (gr.Error, gr.Warning, gr.Info) as HTML, and what a message
quotes is often stored or visitor text: an experiment or metadata name holding a link, an image
or a form would show live in another visitor's toast (and the image would be fetched). Every
toast goes through here, so that every message is escaped the same way. Quotes stay as they are:
text inside an element needs only &, < and > escaped, and API callers read the message too.
"""

from __future__ import annotations

import html


def toast_text(message: object) -> str:
    """The message as HTML text that shows literally."""
    return html.escape(str(message), quote=False)


def error(message: object):
    """gr.Error with the message escaped: raise it from a handler (`raise error(err) from None`)."""
    import gradio as gr

    return gr.Error(toast_text(message))


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
