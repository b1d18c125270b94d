"""Who is asking: the visitor a request comes from, for the job queue's ownership.

A visitor is a Gradio session: the browser tab's page and its timers share one `session_hash`,
and so does one `gradio_client.Client` across its calls. Jobs belong to the session that queued
them; another session (another visitor, or the same person after a reload) neither sees nor
cancels them. The operator (AppSettings.operator_view: the desktop app, or --operator) is
`None` here and sees everything.

Sessions are free, though: a script opens a new one per call. So the bounds meant to be fair
between people (jobs per client, the job queue's round-robin, one SQL query at a time, downloads
and uploads per visitor) are keyed by the client's address (`client_key`). Behind a proxy (a
Hugging Face Space) the socket's peer is the proxy, and the visitor's address is the one the proxy
appended to `X-Forwarded-For`: the last address, or the N-th from the end behind N trusted
proxies (AppSettings.trusted_proxy_hops). Never the first: an appending proxy keeps whatever the
visitor sent, so the first address is the visitor's to choose, and a client forging a new one per
session escaped every per-client cap. Elsewhere the socket's peer (`request.client.host`) counts,
since anyone may write that header where no proxy rewrites it (AppSettings.trust_forwarded_for).

Names a visitor writes into the store carry who wrote them: a person's labels uploaded by a
visitor are stored under `visitor <tag>: <name>` (labels_judge), the tag a keyed hash of the
visitor, never its address.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import secrets
from typing import Any

from demo.settings import AppSettings
from engine.bounds import MAX_MODEL_CHARS, check_name


def visitor_id(request: Any, settings: AppSettings) -> str | None:
    """The job owner for a request: None for the operator, else the Gradio session's id.

    A request without a session (a call Gradio made outside any session) gets a fresh random
    id: it owns only what it queues now, never anybody else's jobs and never the operator's view."""
    if settings.operator_view:
        return None
    session = getattr(request, "session_hash", None) if request is not None else None
    return f"session:{session}" if session else f"anonymous:{secrets.token_urlsafe(16)}"


def forwarded_address(values: list[str], hops: int) -> str | None:
    """The address the nearest of `hops` trusted proxies saw connecting, from the X-Forwarded-For
    header lines `values` (in order): the `hops`-th from the end. Each trusted proxy appends the
    address it saw, so what lies before them was written by the visitor. A chain shorter than
    `hops` was written by trusted proxies alone, and its first address is the earliest they saw.
    None when the header holds no address."""
    entries = [part.strip() for value in values for part in str(value).split(",")]
    entries = [entry for entry in entries if entry]
    if not entries:
        return None
    return entries[-hops] if len(entries) >= hops else entries[0]


def address_of(forwarded: list[str], peer: str | None, settings: AppSettings) -> str | None:
    """The client address of a request from its X-Forwarded-For lines and its socket's peer."""
    if settings.trust_forwarded_for:
        address = forwarded_address(forwarded, settings.trusted_proxy_hops)
        if address:
            return address
    return peer or None


def _header_lines(headers: Any, name: str) -> list[str]:
    """Every line of header `name`: a client may send it twice, and a proxy that adds its own line
    instead of appending puts it last, which `get` (the first line) would miss."""
    if headers is None:
        return []
    getlist = getattr(headers, "getlist", None)
    if callable(getlist):
        return [str(value) for value in getlist(name)]
    value = headers.get(name)
    return [str(value)] if value else []


def client_key(request: Any, settings: AppSettings) -> str | None:
    """The client address a request comes from, as "client:<address>", for bounds that must hold
    across sessions; None for the operator, or where Gradio gives no address (the caller then
    falls back on the session)."""
    if settings.operator_view or request is None:
        return None
    forwarded = _header_lines(getattr(request, "headers", None), "x-forwarded-for")
    address = address_of(forwarded, getattr(getattr(request, "client", None), "host", None), settings)
    return f"client:{address}" if address else None


def scope_client_key(scope: dict, settings: AppSettings) -> str | None:
    """client_key for a raw ASGI request (a middleware's `scope`, before Gradio sees it)."""
    if settings.operator_view:
        return None
    forwarded = [value.decode("latin-1") for name, value in scope.get("headers") or () if name.lower() == b"x-forwarded-for"]
    client = scope.get("client")
    address = address_of(forwarded, client[0] if client else None, settings)
    return f"client:{address}" if address else None


# A visitor's tag in the names it writes: a keyed hash of its key, so that the store (which anyone
# reads through the SQL console) never holds a visitor's address. The key is random per process
# unless the operator sets PATTRIEVAL_VISITOR_SECRET, which keeps a visitor's tag across restarts.
VISITOR_TAG_CHARS = 10
VISITOR_JUDGE = "visitor {tag}: {name}"


@functools.cache
def _tag_key() -> bytes:
    configured = os.environ.get("PATTRIEVAL_VISITOR_SECRET", "")
    return configured.encode() if configured else secrets.token_bytes(32)


def visitor_tag(owner: str | None) -> str:
    """A short, stable stand-in for a visitor (`owner`: demo.visitors.fair_key): the same visitor
    gets the same tag, and no one can tell its address from it."""
    key = owner or f"anonymous:{secrets.token_urlsafe(16)}"
    return hmac.new(_tag_key(), key.encode(), hashlib.sha256).hexdigest()[:VISITOR_TAG_CHARS]


def labels_judge(settings: AppSettings, owner: str | None, typed: str) -> str:
    """The judge an upload's labels are stored under. Judge names are the operator's: where
    strangers are served, a visitor's labels go under `visitor <tag>: <typed>`, which carries who
    gave them, so that no visitor takes a model judge's name first (verify would then have its
    verdicts refused) or adds labels to another person's. The operator's name is kept as typed."""
    if settings.operator_view:
        return typed

    prefix = VISITOR_JUDGE.format(tag="x" * VISITOR_TAG_CHARS, name="")
    check_name(typed, "the judge's name", MAX_MODEL_CHARS - len(prefix))
    return VISITOR_JUDGE.format(tag=visitor_tag(owner), name=typed)


def fair_key(request: Any, settings: AppSettings) -> str:
    """Whom a per-person bound counts a request for: the client address where strangers are
    served, else the Gradio session (the operator's tabs, each their own)."""
    return client_key(request, settings) or getattr(request, "session_hash", None) or "no session"
