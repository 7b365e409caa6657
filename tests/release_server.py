"""A release mirror on 127.0.0.1 for the download tests: real HTTP, files the test wrote.

`serve(files)` starts ``http.server`` in a thread serving ``{name: bytes}`` at
``/<name>`` (404 for anything else), records every requested path, and
optionally cuts a file off after some bytes while announcing its full length.
`running(httpd)` serves any server in a thread, the other test servers too.
Tests point the package at it with ``KERAS_FOURIER_MIRROR``, its documented
mirror variable, so the package's download code runs unchanged.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class ReleaseServer:
    """What a running mirror serves, and what it was asked for."""

    files: dict[str, bytes]
    url: str = ""
    requests: list[str] = field(default_factory=list)
    cut_at: int | None = None


@contextlib.contextmanager
def serve(files: dict[str, bytes], cut_at: int | None = None) -> Iterator[ReleaseServer]:
    """Serves `files` on 127.0.0.1 (a free port) until the block ends."""
    state = ReleaseServer(dict(files), cut_at=cut_at)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            state.requests.append(self.path)
            content = state.files.get(self.path.lstrip("/"))
            if content is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content[: state.cut_at])

        def log_message(self, *args):
            pass

    with running(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as url:
        state.url = url
        yield state


@contextlib.contextmanager
def running(httpd: http.server.HTTPServer) -> Iterator[str]:
    """Serves `httpd` (bound to 127.0.0.1) in a thread until the block ends; yields its URL."""
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
