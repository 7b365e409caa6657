"""Downloading release files into the Keras cache: whole and verified, or not at all.

Files go to ``$KERAS_HOME/keras_fourier`` (``~/.keras/keras_fourier`` when
``KERAS_HOME`` is not set), where Keras keeps its own downloads. Setting
``KERAS_FOURIER_MIRROR`` to a base URL fetches every release file from
``<mirror>/<file name>`` instead of its official link (a local copy of the
releases, or a server inside a network without access to the official hosts).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import urllib.request
from typing import TextIO

from keras_fourier.fileio import atomic_save

CACHE_SUBDIR = "keras_fourier"
MIRROR_VARIABLE = "KERAS_FOURIER_MIRROR"
_CHUNK = 1 << 20
_BAR_WIDTH = 30
# Lines a download prints when stderr is not a terminal: at these fractions of the file.
_LOG_STEPS = (0.25, 0.5, 0.75)


def keras_home() -> str:
    """Keras's folder: ``$KERAS_HOME``, else ``~/.keras`` (``/tmp/.keras`` if ``~`` is read-only).

    The rule Keras applies to its downloads and ``keras.json`` (Keras 3 has no
    public accessor for it), read at each call so that a ``KERAS_HOME`` set
    after Keras was imported counts too.

    Returns:
        The folder's path, user-expanded.

    Example:
        >>> keras_home()  # doctest: +SKIP
        '/home/me/.keras'
    """
    if "KERAS_HOME" in os.environ:
        return os.path.expanduser(os.environ["KERAS_HOME"])
    base = os.path.expanduser("~")
    if not os.access(base, os.W_OK):
        base = tempfile.gettempdir()
    return os.path.join(base, ".keras")


def cache_dir() -> str:
    """The folder of downloaded checkpoints: ``$KERAS_HOME/keras_fourier`` (``~/.keras/...``)."""
    return os.path.join(keras_home(), CACHE_SUBDIR)


def source_url(url: str, file_name: str) -> str:
    """Where a release file is fetched from: `url`, or ``$KERAS_FOURIER_MIRROR/<file_name>``.

    Args:
        url: the official link.
        file_name: the file's release name, e.g. "gfnet-ti.pth".

    Returns:
        The URL to download.

    Example:
        >>> os.environ["KERAS_FOURIER_MIRROR"] = "http://10.0.0.5/weights/"
        >>> source_url("https://cloud.tsinghua.edu.cn/f/3d0c/?dl=1", "gfnet-ti.pth")
        'http://10.0.0.5/weights/gfnet-ti.pth'
    """
    mirror = os.environ.get(MIRROR_VARIABLE, "").strip()
    if not mirror:
        return url
    return f"{mirror.rstrip('/')}/{file_name}"


class Progress:
    """Download progress on a stream: a bar redrawn in place on a terminal, a few lines in a log.

    Args:
        name: the file's name, shown on every line.
        total: its size in bytes, or None when the server did not say.
        stream: where to write. Default None: ``sys.stderr``.

    Example:
        >>> progress = Progress("gfnet-ti.pth", 2**20)
        >>> progress.update(2**20)
        >>> progress.close()
    """

    def __init__(self, name: str, total: int | None, stream: TextIO | None = None):
        self.name = name
        self.total = total
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.terminal = bool(isatty and isatty())
        self.received = 0
        self._steps = list(_LOG_STEPS)
        size = "" if total is None else f" ({_megabytes(total)})"
        if not self.terminal:
            self._write(f"Downloading {name}{size}\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def update(self, count: int) -> None:
        """Counts `count` more bytes received and redraws the bar (or logs a passed quarter)."""
        self.received += count
        if self.terminal:
            if self.total:
                done = min(self.received / self.total, 1.0)
                bar = ("=" * int(done * _BAR_WIDTH)).ljust(_BAR_WIDTH)
                text = f"[{bar}] {done:4.0%} of {_megabytes(self.total)}"
            else:
                text = _megabytes(self.received)
            self._write(f"\r{self.name} {text}")
            return
        while self.total and self._steps and self.received >= self._steps[0] * self.total:
            step = self._steps.pop(0)
            self._write(f"  {self.name}: {step:.0%} ({_megabytes(self.received)})\n")

    def close(self) -> None:
        """Ends the bar's line, or logs the complete size."""
        if self.terminal:
            self._write("\n")
        else:
            self._write(f"  {self.name}: done ({_megabytes(self.received)})\n")


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.1f} MB"


def sha256_of(path: str | os.PathLike) -> str:
    """The hex sha256 of a file, read in 1 MiB chunks.

    Args:
        path: the file.

    Returns:
        64 lowercase hex digits.

    Example:
        >>> sha256_of("gfnet-ti.pth")[:8]
        '4b2c8a1e'
    """
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(
    url: str,
    file_name: str,
    sha256: str | None = None,
    *,
    folder: str | None = None,
    timeout: float = 60,
) -> str:
    """Downloads `url` into `folder` as `file_name` once; returns its path.

    The file comes from `url`, or from ``$KERAS_FOURIER_MIRROR/<file_name>``
    when that variable is set (:func:`source_url`), with a progress bar on
    stderr (:class:`Progress`). It is streamed to a temporary name in the cache folder, checked
    (the length the server announced, and `sha256` when known), fsynced and
    only then renamed to `file_name` (:func:`keras_fourier.fileio.atomic_save`):
    an interrupted, cut-off or wrong download leaves nothing behind under
    `file_name`, so the next call downloads again. A cached file is checked
    against `sha256` before use.

    Args:
        url: where the file is published.
        file_name: its name in :func:`cache_dir`.
        sha256: expected hex digest, or None (default) where none is recorded.
        folder: where to keep it. Default None: :func:`cache_dir`.
        timeout: seconds to wait for the server per read. Default 60.

    Returns:
        The path of the complete file.

    Raises:
        ValueError: the download failed, was cut off, or does not match
            `sha256` (nothing is kept); or a cached file does not match
            `sha256`. The message says how to proceed offline: download the
            file by other means and pass its path as `weights`.

    Example:
        >>> download("https://example.org/gfnet-ti.pth", "gfnet-ti.pth")
        '/home/me/.keras/keras_fourier/gfnet-ti.pth'
    """
    folder = cache_dir() if folder is None else os.fspath(folder)
    target = os.path.join(folder, file_name)
    url = source_url(url, file_name)
    offline = (
        f"To work offline, download {url} by other means and pass the file's path as "
        "`weights` (it loads without network)."
    )
    if os.path.exists(target):
        if sha256 is not None and sha256_of(target) != sha256:
            raise ValueError(
                f"The cached {target!r} does not have the published sha256 {sha256}; delete it "
                f"to download it again. {offline}"
            )
        return target
    os.makedirs(folder, exist_ok=True)

    def write(temporary: str) -> None:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            announced = response.headers.get("Content-Length")
            progress = Progress(file_name, None if announced is None else int(announced))
            with open(temporary, "wb") as out:
                for chunk in iter(lambda: response.read(_CHUNK), b""):
                    out.write(chunk)
                    progress.update(len(chunk))
            progress.close()
        received = os.path.getsize(temporary)
        if announced is not None and received != int(announced):
            raise ValueError(f"the download was cut off at {received} of {announced} bytes")
        if sha256 is not None:
            actual = sha256_of(temporary)
            if actual != sha256:
                raise ValueError(f"its sha256 is {actual}, the release's is {sha256}")

    try:
        atomic_save(target, write)
    except Exception as error:
        raise ValueError(
            f"Could not download {url} ({error}); nothing was kept. {offline}"
        ) from error
    return target
