"""Hostile mirrors, damaged caches and signals: downloads end, verify, heal, or keep nothing.

Every fault is real: a server on 127.0.0.1 that misbehaves (tests/hostile_server.py),
a temporary KERAS_HOME, a cache folder that cannot be written, signals sent to a
`keras-fourier` process. Deadlines and timeouts are set small through their documented
environment variables.
"""

import gc
import io
import os
import re
import signal
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import keras_fourier
from keras_fourier.cli import main
from keras_fourier.weights import download as download_module
from keras_fourier.weights.download import download, redact, verify
from tests.faults import dead_pid, unwritable
from tests.hostile_server import serve_hostile
from tests.test_run_faults import _signal_when


def _zip_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", bytes(range(256)) * 12)
    return buffer.getvalue()


CONTENT = _zip_bytes()


@pytest.fixture(scope="module")
def hostile():
    with serve_hostile(CONTENT) as server:
        yield server


@pytest.fixture(autouse=True)
def quick_limits(monkeypatch):
    """Small deadlines and timeouts, no mirror, one retry."""
    monkeypatch.setenv(download_module.DEADLINE_VARIABLE, "20")
    monkeypatch.setenv(download_module.TIMEOUT_VARIABLE, "5")
    monkeypatch.setenv(download_module.RETRIES_VARIABLE, "1")
    monkeypatch.delenv(download_module.MIRROR_VARIABLE, raising=False)
    monkeypatch.delenv(download_module.MAX_BYTES_VARIABLE, raising=False)


def _fails(url: str, folder: Path, pattern: str, **kwargs) -> str:
    with pytest.raises(ValueError, match=pattern) as info:
        download(url, "release.pth", folder=folder, file_format="pth", **kwargs)
    message = str(info.value)
    assert "\n" not in message and "nothing was kept" in message
    assert [p.name for p in folder.iterdir()] == []
    return message


def test_a_one_byte_at_a_time_server_ends_at_the_deadline(hostile, tmp_path, monkeypatch):
    monkeypatch.setenv(download_module.DEADLINE_VARIABLE, "1.5")
    monkeypatch.setenv(download_module.TIMEOUT_VARIABLE, "1")
    started = time.monotonic()
    _fails(
        f"{hostile.url}/slow/x.pth",
        tmp_path,
        r"did not finish within 1\.5 s \(\d+ bytes received; KERAS_FOURIER_DOWNLOAD_DEADLINE",
    )
    assert time.monotonic() - started < 15  # ends: the deadline plus one read's timeout


def test_an_endless_body_stops_at_the_size_ceiling(hostile, tmp_path, monkeypatch):
    monkeypatch.setenv(download_module.MAX_BYTES_VARIABLE, "300000")
    _fails(
        f"{hostile.url}/endless/x.pth",
        tmp_path,
        r"the body exceeds 300000 bytes, more than the 300000-byte ceiling "
        r"\(KERAS_FOURIER_MAX_DOWNLOAD_BYTES allows more\)",
    )


def test_an_announced_size_above_the_ceiling_is_refused_before_the_body(
    hostile, tmp_path, monkeypatch
):
    monkeypatch.setenv(download_module.MAX_BYTES_VARIABLE, "100")
    _fails(f"{hostile.url}/good/x.pth", tmp_path, rf"announces {len(CONTENT)} bytes, more than")
    _fails(
        f"{hostile.url}/good/x.pth",
        tmp_path,
        rf"announces {len(CONTENT)} bytes, the release has {len(CONTENT) + 1}",
        size=len(CONTENT) + 1,
    )
    monkeypatch.setenv(download_module.MAX_BYTES_VARIABLE, "a lot")
    with pytest.raises(
        ValueError,
        match=r"^The environment variable KERAS_FOURIER_MAX_DOWNLOAD_"
        r"BYTES must be a positive integer\. Received: KERAS_FOURIER_MAX_DOWNLOAD_"
        r"BYTES='a lot'$",
    ):
        download(f"{hostile.url}/good/x.pth", "release.pth", folder=tmp_path)


@pytest.mark.parametrize(
    "route, cause",
    [
        ("html", r"the server sent an HTML page \(Content-Type: text/html\)"),
        ("html-binary", r"it is an HTML page, not the file"),
        ("gzip", r"the server sent a compressed body \(Content-Encoding: gzip\)"),
        ("longer", rf"the server sent more than the {len(CONTENT)} bytes it announced"),
    ],
)
def test_a_body_that_is_not_the_file_is_not_kept(hostile, tmp_path, route, cause):
    _fails(f"{hostile.url}/{route}/x.pth", tmp_path, cause)


def test_a_wrong_format_or_sha256_is_not_kept(hostile, tmp_path):
    url = f"{hostile.url}/good/x.pth"
    with pytest.raises(ValueError, match=r"does not begin with a MessagePack map"):
        download(url, "release", folder=tmp_path, file_format="flax")
    _fails(url, tmp_path, r"its sha256 is [0-9a-f]{64}, the release's is 0{64}", sha256="0" * 64)
    assert list(tmp_path.iterdir()) == []


def test_a_503_is_retried_and_a_cut_off_download_resumes_with_range(hostile, tmp_path):
    path = download(f"{hostile.url}/flaky/x.pth", "flaky.pth", folder=tmp_path, file_format="pth")
    assert Path(path).read_bytes() == CONTENT
    assert hostile.count("flaky") == 2

    path = download(f"{hostile.url}/resume/x.pth", "resume.pth", folder=tmp_path)
    assert Path(path).read_bytes() == CONTENT
    ranges = [headers.get("Range") for p, headers in hostile.requests if p.startswith("/resume")]
    assert ranges == [None, f"bytes={len(CONTENT) // 2}-"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flaky.pth", "resume.pth"]


@pytest.mark.parametrize("route", ["stall", "reset"])
def test_a_timeout_or_a_reset_connection_is_retried(hostile, tmp_path, monkeypatch, route):
    monkeypatch.setenv(download_module.TIMEOUT_VARIABLE, "0.5")
    path = download(f"{hostile.url}/{route}/x.pth", "x.pth", folder=tmp_path, file_format="pth")
    assert Path(path).read_bytes() == CONTENT
    assert hostile.count(route) == 2


def test_retries_give_up_and_keep_nothing(hostile, tmp_path, monkeypatch):
    monkeypatch.setenv(download_module.RETRIES_VARIABLE, "0")
    _fails(f"{hostile.url}/flaky/y.pth", tmp_path, r"HTTP Error 503: .*gave up after 1 attempts")


@pytest.mark.parametrize(
    "file_format, content, problem",
    [
        ("pth", CONTENT, None),
        ("pth", CONTENT[:-30], "not a complete zip archive"),
        ("flax", b"\x81\xa6target\x80", None),
        ("flax", b"\x93\x01\x02\x03", "does not begin with a MessagePack map"),
        ("sentencepiece", b"\x0a\x09\x0a\x05[CLS]\x15\x00", None),
        ("sentencepiece", b"\x0a\x7f\x0a\x05[CLS]", "not a SentencePiece model"),
        (None, b"  <html><head></head></html>", "HTML page"),
    ],
)
def test_each_format_is_checked_by_its_own_header(tmp_path, file_format, content, problem):
    path = tmp_path / "file"
    path.write_bytes(content)
    if problem is None:
        verify(os.fspath(path), file_format)
    else:
        with pytest.raises(ValueError, match=problem):
            verify(os.fspath(path), file_format)


def test_a_damaged_cached_download_is_downloaded_again(hostile, tmp_path, capfd):
    (tmp_path / "release.pth").write_bytes(b"<!doctype html><title>captive portal</title>")
    path = download(f"{hostile.url}/good/x.pth", "release.pth", folder=tmp_path, file_format="pth")
    assert Path(path).read_bytes() == CONTENT
    lines = capfd.readouterr().err.splitlines()
    assert lines[0] == (
        f"keras-fourier: warning: the cached download {path} was damaged (it is an HTML page, "
        "not the file (a login or error page?)); downloading it again"
    )


def test_a_damaged_download_in_a_read_only_cache_is_named(tmp_path):
    (tmp_path / "release.pth").write_bytes(b"PK\x03\x04 cut")
    with unwritable(tmp_path), pytest.raises(ValueError) as info:
        download("http://127.0.0.1:9/x.pth", "release.pth", folder=tmp_path, file_format="pth")
    assert re.fullmatch(
        rf"The cached download 'release\.pth' in '{re.escape(str(tmp_path))}' is damaged \(it "
        r"is not a complete zip archive \(what torch\.save writes\)\) and cannot be removed "
        r"\((Permission denied|Operation not permitted|Read-only file system)\); delete it, or "
        r"set KERAS_HOME to a writable folder\.",
        str(info.value),
    )


def test_credentials_in_the_mirror_are_sent_as_basic_auth_and_never_shown(
    hostile, tmp_path, monkeypatch
):
    host = hostile.url.removeprefix("http://")
    monkeypatch.setenv(download_module.MIRROR_VARIABLE, f"http://user:p%40ss%20word@{host}/auth/")
    path = download("https://official/x.pth", "release.pth", folder=tmp_path, file_format="pth")
    assert Path(path).read_bytes() == CONTENT
    headers = hostile.requests[-1][1]
    assert headers["Host"] == host  # not "user:...@host"
    with pytest.raises(ValueError, match=r"HTTP Error 404") as info:
        download("https://official/missing.pth", "missing.pth", folder=tmp_path)
    assert "p%40ss" not in str(info.value) and "word" not in str(info.value)
    assert f"http://user:***@{host}/auth/missing.pth" in str(info.value)
    assert (
        redact("see http://a:b@h/x and ftp://c:d@e/") == "see http://a:***@h/x and ftp://c:***@e/"
    )


def test_stale_temporaries_of_dead_processes_are_removed(hostile, tmp_path):
    dead = dead_pid()
    stale = tmp_path / f".release.pth.{dead}-0123abcd.tmp.pth"
    converting = tmp_path / f".gfnet-ti_0a1b.weights.h5.{dead}-89abcdef.tmp.weights.h5"
    live = tmp_path / f".other.pth.{os.getpid()}-0123abcd.tmp.pth"
    for path in (stale, converting, live):
        path.write_bytes(b"partial")
    download(f"{hostile.url}/good/x.pth", "release.pth", folder=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "release.pth"])


def test_a_cache_that_cannot_be_created_is_one_line(hostile, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("KERAS_HOME", os.fspath(tmp_path / "file" / "keras"))
    with pytest.raises(
        ValueError,
        match=r"the download cache '.*file/keras/keras_fourier' cannot "
        r"be created \(Not a directory\); set KERAS_HOME to a writable folder",
    ):
        download(f"{hostile.url}/good/x.pth", "release.pth")


# ------------------------------------------- the weights pipeline: a cache that heals itself


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh KERAS_HOME; returns its download cache folder."""
    monkeypatch.setenv("KERAS_HOME", os.fspath(tmp_path / "keras_home"))
    return tmp_path / "keras_home" / "keras_fourier"


def _weights(model) -> list[np.ndarray]:
    return [variable.numpy() for variable in model.weights]


def _same(first, second) -> None:
    for ours, theirs in zip(first, second, strict=True):
        np.testing.assert_array_equal(ours, theirs)


def _warnings(capfd) -> list[str]:
    return [line for line in capfd.readouterr().err.splitlines() if "warning:" in line]


def test_a_damaged_conversion_and_a_damaged_download_are_redone(
    gfnet_ti_pth, cache, monkeypatch, capfd
):
    with serve_hostile(gfnet_ti_pth) as server:
        monkeypatch.setenv(download_module.MIRROR_VARIABLE, f"{server.url}/good")
        expected = _weights(keras_fourier.GFNetTi(weights="imagenet", input_shape=(32, 32, 3)))
        (conversion,) = cache.glob("*.weights.h5")
        size = conversion.stat().st_size
        conversion.write_bytes(conversion.read_bytes()[: size // 2])  # a truncated file
        capfd.readouterr()
        model = keras_fourier.GFNetTi(weights="imagenet", input_shape=(32, 32, 3))
        _same(_weights(model), expected)
        (line,) = _warnings(capfd)
        assert line.startswith(f"keras-fourier: warning: the cached conversion {conversion} is ")
        assert line.endswith("; converting the download again")
        assert "not a readable .weights.h5 file" in line
        assert conversion.stat().st_size == size and server.count("good") == 1

        # A download that is a zip but not a checkpoint: read, refused, downloaded again.
        conversion.unlink()
        (cache / "gfnet-ti.pth").write_bytes(CONTENT)
        model = keras_fourier.GFNetTi(weights="imagenet", input_shape=(32, 32, 3))
        _same(_weights(model), expected)
        (line,) = _warnings(capfd)
        assert line.startswith(f"keras-fourier: warning: the cached download {cache}/gfnet-ti.pth")
        assert line.endswith("; downloading it again") and server.count("good") == 2
        assert sorted(p.name for p in cache.iterdir()) == ["gfnet-ti.pth", conversion.name]


def test_a_read_only_or_full_cache_converts_in_memory(gfnet_ti_pth, cache, monkeypatch, capfd):
    cache.mkdir(parents=True)
    (cache / "gfnet-ti.pth").write_bytes(gfnet_ti_pth)  # a shared cache holding the download
    monkeypatch.setenv(download_module.MIRROR_VARIABLE, "http://127.0.0.1:9/unreachable")
    expected = _weights(keras_fourier.GFNetTi(weights="imagenet", input_shape=(32, 32, 3)))
    conversion = next(cache.glob("*.weights.h5"))
    conversion.unlink()
    capfd.readouterr()
    with unwritable(cache):
        model = keras_fourier.GFNetTi(weights="imagenet", input_shape=(32, 32, 3))
    _same(_weights(model), expected)
    (line,) = _warnings(capfd)
    assert re.fullmatch(
        rf"keras-fourier: warning: cannot cache the converted weights in {cache} \((Permission "
        r"denied|Operation not permitted|Read-only file system)\); they were converted in "
        r"memory, and will be converted again next time",
        line,
    )
    assert [p.name for p in cache.iterdir()] == ["gfnet-ti.pth"]

    # A full cache: writes beyond 1 MB fail (RLIMIT_FSIZE, EFBIG), as on a full disk.
    import resource

    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, limits[1]))
    try:
        model = keras_fourier.GFNetTi(weights="imagenet", input_shape=(32, 32, 3))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)
    _same(_weights(model), expected)
    (line,) = _warnings(capfd)
    assert "cannot cache the converted weights" in line and "converted in memory" in line
    assert [p.name for p in cache.iterdir()] == ["gfnet-ti.pth"]

    # Too little free space for the conversion: not even attempted.
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(1, 1, 1000))
    model = keras_fourier.GFNetTi(weights="imagenet", input_shape=(32, 32, 3))
    _same(_weights(model), expected)
    (line,) = _warnings(capfd)
    assert re.search(r"\(1000 bytes free, \d+ needed\); they were converted in memory", line)
    assert [p.name for p in cache.iterdir()] == ["gfnet-ti.pth"]


# ------------------------------------------------------------- signals during a download


@pytest.mark.parametrize(
    "command, signum, status, word",
    [
        ("predict", signal.SIGTERM, 143, "terminated"),
        ("export", signal.SIGINT, 130, "interrupted"),
    ],
)
def test_a_signal_during_a_download_is_one_line_and_keeps_nothing(
    gfnet_ti_pth,
    cache,
    tmp_path,
    monkeypatch,
    capfd,
    command,
    signum,
    status,
    word,
    terminal_sigint,
):
    image = tmp_path / "cat.png"
    image.write_bytes(_png())
    argv = {
        "predict": ["predict", str(image), "--model", "gfnet_ti"],
        "export": ["export", "gfnet_ti", "--out", str(tmp_path / "out")],
    }[command]
    with serve_hostile(gfnet_ti_pth) as server:
        monkeypatch.setenv(download_module.MIRROR_VARIABLE, f"{server.url}/slow")
        # A real signal to this process while the download runs (one byte per 0.1 s).
        watcher = _signal_when(lambda: server.count("slow") > 0, signum)
        assert main([*argv, "--weights", "imagenet", "--image-size", "32"]) == status
        watcher.join()
    error = capfd.readouterr().err
    assert "Traceback" not in error
    assert error.strip().splitlines()[-1] == f"keras-fourier {command}: {word}"
    assert list(cache.iterdir()) == []
    assert not (tmp_path / "out").exists()


def test_a_signal_inside_a_garbage_collector_callback_still_stops_the_command(
    capfd, terminal_sigint
):
    """Raised there, KeyboardInterrupt would be printed and dropped (JAX's callback, in export)."""
    sent = []

    def callback(phase, info):
        if not sent and signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            sent.append(phase)
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(10000))  # the handler runs here, inside the callback

    gc.callbacks.append(callback)
    try:
        status = main(["flops", "gfnet_ti", "--image-size", "32"])
    finally:
        gc.callbacks.remove(callback)
    error = capfd.readouterr().err
    assert sent and status == 130, error
    assert "Exception ignored" not in error and "Traceback" not in error
    assert error.strip().splitlines()[-1] == "keras-fourier flops: interrupted"


def _png() -> bytes:
    import tensorflow as tf

    pixels = np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    return tf.io.encode_png(pixels).numpy()
