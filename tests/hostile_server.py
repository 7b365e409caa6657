"""A hostile release mirror on 127.0.0.1: each route misbehaves in one way a real server can.

`serve_hostile(content)` starts ``http.server`` in a thread; every route serves
`content` (or a body derived from it) under any file name:

* ``/good/NAME``: the file, with its Content-Length;
* ``/slow/NAME``: its Content-Length, then one byte every 0.1 s;
* ``/endless/NAME``: no Content-Length, 64 KiB chunks until the client leaves;
* ``/html/NAME``: a login page with status 200 (``/html-binary/NAME``: the same
  labelled application/octet-stream);
* ``/gzip/NAME``: the file gzip-compressed, with ``Content-Encoding: gzip``;
* ``/longer/NAME``: the file followed by 100 bytes its Content-Length omits;
* ``/flaky/NAME``: 503 (``Retry-After: 0``) to the first request of each NAME, then
  the file;
* ``/resume/NAME``: its first response is cut off half-way; a request with
  ``Range: bytes=N-`` gets 206 and the rest;
* ``/stall/NAME``: its first response stops half-way for 3 s; later ones are whole;
* ``/reset/NAME``: its first connection is reset (TCP RST) before any response;
* ``/auth/NAME``: 401 unless the request has Basic credentials ``user:p@ss word``.

The server records each request's path and headers (`requests`).
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import http.server
import re
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from tests.release_server import running

CREDENTIALS = ("user", "p@ss word")


@dataclass
class HostileServer:
    """What the server serves, and what it was asked for."""

    content: bytes
    url: str = ""
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def count(self, route: str) -> int:
        """How many requests asked for `route` (the first path segment)."""
        return sum(1 for path, _ in self.requests if path.split("/")[1] == route)


@contextlib.contextmanager
def serve_hostile(content: bytes) -> Iterator[HostileServer]:
    """Serves the hostile routes of `content` on 127.0.0.1 (a free port) until the block ends."""
    state = HostileServer(content)
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _send(self, status: int, body: bytes, length: int | None, **headers: str) -> None:
            self.send_response(status)
            if length is not None:
                self.send_header("Content-Length", str(length))
            for name, value in headers.items():
                self.send_header(name.replace("_", "-"), value)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            with lock:
                state.requests.append((self.path, dict(self.headers.items())))
                seen = sum(1 for path, _ in state.requests if path == self.path)
            route = self.path.split("/")[1]
            data = state.content
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                getattr(self, f"route_{route.replace('-', '_')}")(data, seen)

        def route_good(self, data, seen):
            self._send(200, data, len(data))

        def route_slow(self, data, seen):
            self._send(200, b"", len(data))
            for byte in data:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.1)

        def route_endless(self, data, seen):
            self._send(200, b"", None, Content_Type="application/octet-stream")
            chunk = b"\0" * 65536
            while True:
                self.wfile.write(chunk)

        def route_html(self, data, seen, kind="text/html; charset=utf-8"):
            page = b"<!DOCTYPE html>\n<html><body>Please sign in</body></html>\n"
            self._send(200, page, len(page), Content_Type=kind)

        def route_html_binary(self, data, seen):
            self.route_html(data, seen, "application/octet-stream")

        def route_gzip(self, data, seen):
            body = gzip.compress(data)
            self._send(200, body, len(body), Content_Encoding="gzip")

        def route_longer(self, data, seen):
            self._send(200, data + b"x" * 100, len(data))

        def route_flaky(self, data, seen):
            if seen == 1:
                self._send(503, b"busy", 4, Retry_After="0")
            else:
                self._send(200, data, len(data))

        def route_resume(self, data, seen):
            ranged = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
            if ranged is None:
                self._send(200, data[: len(data) // 2], len(data), ETag='"v1"')
                return
            start = int(ranged.group(1))
            self._send(
                206,
                data[start:],
                len(data) - start,
                Content_Range=f"bytes {start}-{len(data) - 1}/{len(data)}",
                ETag='"v1"',
            )

        def route_stall(self, data, seen):
            self._send(200, data[: len(data) // 2], len(data))
            if seen == 1:
                self.wfile.flush()
                time.sleep(3)
            else:
                self.wfile.write(data[len(data) // 2 :])

        def route_reset(self, data, seen):
            if seen == 1:
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.close_connection = True
                self.connection.close()
                raise ConnectionResetError
            self._send(200, data, len(data))

        def route_auth(self, data, seen):
            token = base64.b64encode(":".join(CREDENTIALS).encode()).decode()
            if self.headers.get("Authorization") != f"Basic {token}":
                self._send(401, b"", 0, WWW_Authenticate='Basic realm="releases"')
            elif self.path.endswith("/missing.pth"):
                self._send(404, b"", 0)
            else:
                self._send(200, data, len(data))

        def log_message(self, *args):
            pass

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            pass  # a reset or abandoned connection is what these routes are for

    httpd = Server(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    with running(httpd) as url:
        state.url = url
        yield state
