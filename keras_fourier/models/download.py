"""Downloading release files into the Keras cache: whole and verified, or not at all."""

from __future__ import annotations

import hashlib
import os
import shutil
import urllib.request

import keras

from keras_fourier.fileio import atomic_save

CACHE_SUBDIR = "keras_fourier"
_CHUNK = 1 << 20


def cache_dir() -> str:
    """The folder of downloaded checkpoints: ``$KERAS_HOME/keras_fourier`` (``~/.keras/...``)."""
    return os.path.join(keras.config.keras_home(), CACHE_SUBDIR)


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

    The file is streamed to a temporary name in the cache folder, checked
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
            with open(temporary, "wb") as out:
                shutil.copyfileobj(response, out, _CHUNK)
            announced = response.headers.get("Content-Length")
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
