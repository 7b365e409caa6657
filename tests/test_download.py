"""Release downloads: whole and verified, or nothing kept (served from 127.0.0.1)."""

import hashlib
import http.server
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import keras_fourier
from keras_fourier.cli import main
from keras_fourier.weights.download import (
    Progress,
    cache_dir,
    download,
    keras_home,
    sha256_of,
    source_url,
)
from tests.release_server import running, serve

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
    with running(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)) as url:
        yield url


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
    server, tmp_path, monkeypatch, route, sha256, cause
):
    monkeypatch.setenv("KERAS_FOURIER_DOWNLOAD_RETRIES", "0")
    url = f"{server}{route}"
    with pytest.raises(ValueError, match=rf"Could not download {url} \(.*({cause})") as info:
        download(url, "release.pth", sha256, folder=tmp_path)
    assert "nothing was kept" in str(info.value)
    assert "pass the file's path as `weights`" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_a_cached_file_with_another_sha256_is_downloaded_again(server, tmp_path, capfd):
    (tmp_path / "release.pth").write_bytes(b"truncated")
    digest = hashlib.sha256(CONTENT).hexdigest()
    path = download(f"{server}/file", "release.pth", digest, folder=tmp_path)
    assert Path(path).read_bytes() == CONTENT
    assert "the cached download" in capfd.readouterr().err


# ---------------------------------------------- weights="imagenet" through a mirror on 127.0.0.1


@pytest.fixture
def mirror(gfnet_ti_pth, tmp_path, monkeypatch):
    """A fresh KERAS_HOME and KERAS_FOURIER_MIRROR pointing at a server of gfnet-ti.pth."""
    monkeypatch.setenv("KERAS_HOME", os.fspath(tmp_path / "keras_home"))
    with serve({"gfnet-ti.pth": gfnet_ti_pth}) as server:
        monkeypatch.setenv("KERAS_FOURIER_MIRROR", server.url)
        yield server


def _cached(tmp_path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "keras_home" / "keras_fourier").iterdir())


def test_keras_home_is_where_keras_keeps_its_files(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", os.fspath(tmp_path / "elsewhere"))
    assert cache_dir() == os.fspath(tmp_path / "elsewhere" / "keras_fourier")
    monkeypatch.delenv("KERAS_HOME")
    monkeypatch.setenv("HOME", os.fspath(tmp_path))
    assert keras_home() == os.fspath(tmp_path / ".keras")
    assert cache_dir() == os.fspath(tmp_path / ".keras" / "keras_fourier")


def test_the_mirror_variable_replaces_the_official_host(monkeypatch):
    official = "https://cloud.tsinghua.edu.cn/f/3d0c1579aa524a0a99dd/?dl=1"
    monkeypatch.delenv("KERAS_FOURIER_MIRROR", raising=False)
    assert source_url(official, "gfnet-ti.pth") == official
    monkeypatch.setenv("KERAS_FOURIER_MIRROR", "http://10.1.2.3/releases/")
    assert source_url(official, "gfnet-ti.pth") == "http://10.1.2.3/releases/gfnet-ti.pth"


def test_imagenet_weights_of_the_public_builder_come_from_the_mirror(mirror, tmp_path):
    model = keras_fourier.GFNetTi(weights="imagenet", input_shape=(32, 32, 3))
    assert mirror.requests == ["/gfnet-ti.pth"]
    cached = _cached(tmp_path)
    # The conversion beside the download: its name and a digest of the model's variables.
    assert cached[0] == "gfnet-ti.pth" and cached[1].startswith("gfnet-ti_")
    assert cached[1].endswith(".weights.h5")
    assert len(cached) == 2
    again = keras_fourier.GFNetTi(weights="imagenet", input_shape=(32, 32, 3))
    assert mirror.requests == ["/gfnet-ti.pth"]  # the converted file is read, offline
    for ours, theirs in zip(model.weights, again.weights, strict=True):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    head = model.get_layer("head").bias.numpy()
    assert np.abs(head).max() > 0  # the release's head, not zeros


def test_predict_command_downloads_imagenet_weights_and_logs_progress(mirror, tmp_path):
    image = tmp_path / "cat.png"
    pixels = np.random.default_rng(0).integers(0, 256, (40, 48, 3), dtype=np.uint8)
    image.write_bytes(tf.io.encode_png(pixels).numpy())
    env = {**os.environ, "PYTHONPATH": os.fspath(Path(__file__).parents[1])}
    command = ["predict", str(image), "--model", "gfnet_ti", "--weights", "imagenet"]
    completed = subprocess.run(
        [sys.executable, "-m", "keras_fourier.cli", *command, "--image-size", "32", "--top", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    assert mirror.requests == ["/gfnet-ti.pth"]
    lines = completed.stdout.splitlines()
    assert lines[0] == str(image) and len(lines) == 3
    assert re.fullmatch(r"  1\. +\d+\.\d\d%  .+ \(n\d{8}\)", lines[1])
    # A log (not a terminal) gets a few progress lines, not a redrawn bar.
    progress = [line for line in completed.stderr.splitlines() if "gfnet-ti.pth" in line]
    assert progress[0].startswith("Downloading gfnet-ti.pth (")
    assert progress[-1].startswith("  gfnet-ti.pth: done (") and 3 <= len(progress) <= 6
    assert "\r" not in completed.stderr


def test_export_command_with_imagenet_weights(mirror, tmp_path):
    out = tmp_path / "models"
    argv = ["export", "gfnet_ti", "--weights", "imagenet", "--image-size", "32"]
    assert main([*argv, "--format", "saved_model", "--out", os.fspath(out)]) == 0
    assert mirror.requests == ["/gfnet-ti.pth"]
    assert (out / "gfnet_ti" / "1" / "saved_model.pb").is_file()


def test_progress_is_a_bar_on_a_terminal_and_a_few_lines_in_a_log():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    progress = Progress("f.pth", 4_000_000, terminal)
    for _ in range(4):
        progress.update(1_000_000)
    progress.close()
    frames = terminal.getvalue().split("\r")[1:]
    assert len(frames) == 4
    assert frames[0] == "f.pth [" + "=" * 7 + " " * 23 + "]  25% of 4.0 MB"
    assert frames[-1] == "f.pth [" + "=" * 30 + "] 100% of 4.0 MB\n"

    log = io.StringIO()
    progress = Progress("f.pth", 4_000_000, log)
    for _ in range(8):
        progress.update(500_000)
    progress.close()
    assert log.getvalue().splitlines() == [
        "Downloading f.pth (4.0 MB)",
        "  f.pth: 25% (1.0 MB)",
        "  f.pth: 50% (2.0 MB)",
        "  f.pth: 75% (3.0 MB)",
        "  f.pth: done (4.0 MB)",
    ]


def test_a_command_whose_download_fails_exits_1_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KERAS_HOME", os.fspath(tmp_path / "home"))
    monkeypatch.setenv("KERAS_FOURIER_MIRROR", "http://user:secret@127.0.0.1:9")
    monkeypatch.setenv("KERAS_FOURIER_DOWNLOAD_RETRIES", "0")
    out = tmp_path / "models"
    argv = ["export", "gfnet_ti", "--weights", "imagenet", "--image-size", "32"]
    assert main([*argv, "--format", "saved_model", "--out", os.fspath(out)]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(
        "keras-fourier export: error: weights='imagenet'"
    )
    assert "Could not download http://user:***@127.0.0.1:9/gfnet-ti.pth" in error[0]
    assert "secret" not in error[0] and "user:***@127.0.0.1:9" in error[0]
    assert not out.exists()
