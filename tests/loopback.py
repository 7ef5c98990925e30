"""Servers on 127.0.0.1 for the tests that download or talk to a server: nothing leaves the machine."""
from __future__ import annotations

import contextlib
import functools
import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    """A port nothing listens on now, for a server a test starts in another process."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files without a log line per request (a test's output is its own)."""

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


@contextlib.contextmanager
def serving(folder: Path) -> Iterator[str]:
    """Serves `folder`'s files over HTTP on loopback, as a file host would; yields the base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
