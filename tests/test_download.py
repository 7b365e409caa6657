"""Release downloads: whole and verified, or nothing kept (served from 127.0.0.1)."""

import hashlib
import http.server
import threading
from pathlib import Path

import pytest

from keras_fourier.models.download import download, sha256_of

CONTENT = bytes(range(256)) * 64


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path != "/missing" else 404)
        announced = len(CONTENT) * (2 if self.path == "/cut" else 1)
        self.send_header("Content-Length", str(announced))
        self.end_headers()
        if self.path != "/missing":
            self.wfile.write(CONTENT)  # "/cut" closes the connection half-way

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_downloads_once_and_checks_the_sha256(server, tmp_path):
    digest = hashlib.sha256(CONTENT).hexdigest()
    path = download(f"{server}/file", "release.pth", digest, folder=tmp_path)
    assert Path(path).read_bytes() == CONTENT
    assert sha256_of(path) == digest
    assert [p.name for p in tmp_path.iterdir()] == ["release.pth"]
    # Cached: no request is made for a file that is already complete.
    assert (
        download("http://127.0.0.1:9/unreachable", "release.pth", digest, folder=tmp_path) == path
    )


@pytest.mark.parametrize(
    "route, sha256, cause",
    [
        ("/cut", None, r"cut off at 16384 of 32768 bytes|IncompleteRead|Connection"),
        ("/missing", None, r"HTTP Error 404"),
        ("/file", "0" * 64, r"its sha256 is [0-9a-f]{64}, the release's is 0{64}"),
    ],
)
def test_failed_downloads_keep_nothing_and_say_what_to_do_offline(
    server, tmp_path, route, sha256, cause
):
    url = f"{server}{route}"
    with pytest.raises(ValueError, match=rf"Could not download {url} \(.*({cause})") as info:
        download(url, "release.pth", sha256, folder=tmp_path)
    assert "nothing was kept" in str(info.value)
    assert "pass the file's path as `weights`" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_a_cached_file_with_another_sha256_is_refused(tmp_path):
    (tmp_path / "release.pth").write_bytes(b"truncated")
    with pytest.raises(ValueError, match=r"does not have the published sha256 .* delete it"):
        download("http://127.0.0.1:9/x", "release.pth", "0" * 64, folder=tmp_path)
