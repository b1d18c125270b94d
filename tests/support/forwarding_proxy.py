"""A reverse proxy that appends each client's address to X-Forwarded-For, as Hugging Face's proxy
in front of a Space does (and nginx's `$proxy_add_x_forwarded_for`): the header lines a client
sent are kept, joined, and the address of the socket it connected from goes last. Not a test
module: the tests put it in front of the launched app, so that the app sees what a Space sees."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
from collections.abc import Iterator

HEAD_LIMIT = 64 * 1024


def _read_head(conn: socket.socket) -> tuple[bytes, bytes]:
    """The request's head (up to its blank line) and whatever of the body came with it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk or len(data) > HEAD_LIMIT:
            raise ConnectionError("no request head")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def rewritten_head(head: bytes, client_address: str) -> bytes:
    """The head with one X-Forwarded-For line (the client's lines joined, then its address) and
    `Connection: close`, so that each connection carries one request through this proxy."""
    request_line, *lines = head.split(b"\r\n")
    forwarded, kept = [], []
    for line in lines:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"x-forwarded-for":
            forwarded.append(value.strip())
        elif name.strip().lower() not in (b"connection", b"keep-alive"):
            kept.append(line)
    forwarded.append(client_address.encode())
    kept += [b"X-Forwarded-For: " + b", ".join(forwarded), b"Connection: close"]
    return b"\r\n".join([request_line, *kept]) + b"\r\n\r\n"


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def appending_proxy(upstream_port: int) -> Iterator[str]:
    """The proxy on a free local port in front of 127.0.0.1:`upstream_port`; its URL."""

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            client = self.request
            try:
                head, rest = _read_head(client)
            except (ConnectionError, OSError):
                return
            with socket.create_connection(("127.0.0.1", upstream_port)) as upstream:
                upstream.sendall(rewritten_head(head, self.client_address[0]) + rest)
                sending = threading.Thread(target=_pump, args=(client, upstream), daemon=True)
                sending.start()
                _pump(upstream, client)

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
