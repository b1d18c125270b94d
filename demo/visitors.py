"""Who is asking: the visitor a request comes from, for the job queue's ownership.

A visitor is a Gradio session: the browser tab's page and its timers share one `session_hash`,
and so does one `gradio_client.Client` across its calls. Jobs belong to the session that queued
them; another session (another visitor, or the same person after a reload) neither sees nor
cancels them. The operator (AppSettings.operator_view: the desktop app, or --operator) is
`None` here and sees everything.

Sessions are free, though: a script opens a new one per call. So the bounds meant to be fair
between people (jobs per client, the job queue's round-robin, one SQL query at a time) are keyed
by the client's address (`client_key`): on a Hugging Face Space the first address of the
`X-Forwarded-For` header that HF's proxy sets (the socket's peer is the proxy there), elsewhere
the socket's peer (`request.client.host`), since anyone may write that header where no proxy
rewrites it (AppSettings.trust_forwarded_for).
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


def client_key(request: Any, settings: AppSettings) -> str | None:
    """The client address a request comes from, as "client:<address>", for bounds that must hold
    across sessions; None for the operator, or where Gradio gives no address (the caller then
    falls back on the session)."""
    if settings.operator_view or request is None:
        return None
    address = None
    if settings.trust_forwarded_for:
        headers = getattr(request, "headers", None)
        forwarded = headers.get("x-forwarded-for") if headers is not None else None
        if forwarded:
            # HF's proxy puts the visitor's address first; later ones are proxies on the way.
            address = str(forwarded).split(",")[0].strip() or None
    if address is None:
        address = getattr(getattr(request, "client", None), "host", None)
    return f"client:{address}" if address else None


def fair_key(request: Any, settings: AppSettings) -> str:
    """Whom a per-person bound counts a request for: the client address where strangers are
    served, else the Gradio session (the operator's tabs, each their own)."""
    return client_key(request, settings) or getattr(request, "session_hash", None) or "no session"
