"""Who is asking: the visitor a request comes from, for the job queue's ownership.

A visitor is a Gradio session: the browser tab's page and its timers share one `session_hash`,
and so does one `gradio_client.Client` across its calls. Jobs belong to the session that queued
them; another session (another visitor, or the same person after a reload) neither sees nor
cancels them. The operator (AppSettings.operator_view: the desktop app, or --operator) is
`None` here and sees everything.
"""

from __future__ import annotations

import secrets
from typing import Any

from demo.settings import AppSettings


def visitor_id(request: Any, settings: AppSettings) -> str | None:
    """The job owner for a request: None for the operator, else the Gradio session's id.

    A request without a session (a call Gradio made outside any session) gets a fresh random
    id: it owns only what it queues now, never anybody else's jobs and never the operator's view."""
    if settings.operator_view:
        return None
    session = getattr(request, "session_hash", None) if request is not None else None
    return f"session:{session}" if session else f"anonymous:{secrets.token_urlsafe(16)}"
