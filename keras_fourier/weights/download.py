"""Downloading release files into the Keras cache: whole, bounded and verified, or not at all.

Files go to ``$KERAS_HOME/keras_fourier`` (``~/.keras/keras_fourier`` when
``KERAS_HOME`` is not set), where Keras keeps its own downloads. Settings,
read at each download:

* ``KERAS_FOURIER_MIRROR``: a base URL to fetch every release file from,
  as ``<mirror>/<file name>``, instead of its official link (a local copy of
  the releases, or a server inside a network without access to the official
  hosts). Credentials in it (``http://user:password@host/...``) are sent as
  HTTP Basic authentication, never to another host after a redirect, and
  never printed (:func:`redact`).
* ``KERAS_FOURIER_MAX_DOWNLOAD_BYTES``: the largest file accepted where the
  release records no exact size, instead of the row's own ceiling (for a
  checkpoint: :meth:`keras_fourier.weights.releases.Release.ceiling`, derived
  from the parameters of its architecture; 4 GiB for a file without one); a
  release with a recorded size must have exactly that size.
* ``KERAS_FOURIER_DOWNLOAD_DEADLINE``: seconds a whole download may take,
  retries included (default 3600).
* ``KERAS_FOURIER_DOWNLOAD_TIMEOUT``: seconds to wait for the server per read
  (default 60): a download ends at most this long after its deadline.
* ``KERAS_FOURIER_DOWNLOAD_MIN_RATE`` and ``KERAS_FOURIER_DOWNLOAD_RATE_WINDOW``:
  a download slower than this many bytes per second (default 1000) over
  that many seconds (default 30) is abandoned, as curl's ``--speed-limit``
  and ``--speed-time`` do (0 turns it off): a server that drips bytes keeps
  every read within its timeout, and would otherwise hold the download
  until its deadline.
* ``KERAS_FOURIER_DOWNLOAD_RETRIES``: further attempts after a transient
  failure (a reset connection, a timeout, HTTP 429 or 5xx, a cut-off body),
  waiting 1, 2, 4... seconds (or the server's ``Retry-After``, up to 30 s);
  an attempt resumes the bytes already received with an HTTP ``Range``
  request where the server supports it (status 206). Default 3.

Before a file enters the cache it is verified: not an HTML page, not a
compressed (``Content-Encoding``) body, not longer than its
``Content-Length``, within the size cap, in its format's own header
(:data:`VERIFIERS`: a zip for ``.pth``, a MessagePack map for Flax, a
SentencePiece model proto), and of the recorded sha256; a file that fails is
not kept. A cached file that fails the same checks is downloaded again.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import errno
import hashlib
import http.client
import os
import re
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable
from typing import TextIO

from keras_fourier.fileio import atomic_save, remove_stale_temporaries, warn

CACHE_SUBDIR = "keras_fourier"
MIRROR_VARIABLE = "KERAS_FOURIER_MIRROR"
MAX_BYTES_VARIABLE = "KERAS_FOURIER_MAX_DOWNLOAD_BYTES"
DEADLINE_VARIABLE = "KERAS_FOURIER_DOWNLOAD_DEADLINE"
TIMEOUT_VARIABLE = "KERAS_FOURIER_DOWNLOAD_TIMEOUT"
RETRIES_VARIABLE = "KERAS_FOURIER_DOWNLOAD_RETRIES"
MIN_RATE_VARIABLE = "KERAS_FOURIER_DOWNLOAD_MIN_RATE"
RATE_WINDOW_VARIABLE = "KERAS_FOURIER_DOWNLOAD_RATE_WINDOW"
DEFAULT_MAX_BYTES = 4 << 30
DEFAULT_DEADLINE = 3600.0
DEFAULT_TIMEOUT = 60.0
DEFAULT_RETRIES = 3
DEFAULT_MIN_RATE = 1000.0
DEFAULT_RATE_WINDOW = 30.0
# HTTP statuses worth another attempt: rate limiting and server-side failures.
_TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
_TRANSIENT_ERRORS = (
    TimeoutError,
    ConnectionResetError,
    ConnectionAbortedError,
    http.client.IncompleteRead,
    http.client.RemoteDisconnected,
)
_MAX_RETRY_AFTER = 30.0
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


def redact(text: str) -> str:
    """`text` with the password of every URL in it replaced by ``***``.

    Args:
        text: a URL or a message that may hold URLs with credentials.

    Returns:
        The text, with ``scheme://user:password@`` written ``scheme://user:***@``.

    Example:
        >>> redact("Could not download http://me:secret@10.0.0.5/a.pth (HTTP Error 404)")
        'Could not download http://me:***@10.0.0.5/a.pth (HTTP Error 404)'
    """
    return re.sub(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*):[^/\s@]*@", r"\1:***@", text)


def _split_credentials(url: str) -> tuple[str, str | None]:
    """`url` without its ``user:password@`` part, and the Basic authorization it stands for."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    user = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), f"Basic {token}"


def _setting(name: str, default: float, kind: type = float) -> float:
    """A number from the environment variable `name` (positive; retries, min rate may be 0)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    least = 0 if name in (RETRIES_VARIABLE, MIN_RATE_VARIABLE) else 1e-9
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not value >= least:
        sign = "non-negative" if least == 0 else "positive"
        what = f"a {sign} {'number' if kind is float else 'integer'}"
        raise ValueError(
            f"The environment variable {name} must be {what}. Received: {name}={text!r}"
        )
    return value


def size_cap(size: int | None = None, max_size: int | None = None) -> int:
    """The most bytes a download may have.

    Args:
        size: the release's exact size in bytes, or None where none is recorded.
        max_size: the release's own ceiling (for a checkpoint, derived from
            its architecture: ``Release.ceiling``), or None.

    Returns:
        `size` when recorded; otherwise ``$KERAS_FOURIER_MAX_DOWNLOAD_BYTES``
        when set, else `max_size`, else :data:`DEFAULT_MAX_BYTES`.

    Example:
        >>> size_cap(1234), size_cap(None, 5678)
        (1234, 5678)
    """
    if size is not None:
        return size
    if os.environ.get(MAX_BYTES_VARIABLE, "").strip():
        return int(_setting(MAX_BYTES_VARIABLE, DEFAULT_MAX_BYTES, int))
    return DEFAULT_MAX_BYTES if max_size is None else max_size


class DownloadError(ValueError):
    """A download that failed (network, server, disk or a file that fails verification).

    A `ValueError` (callers that take a bad name or URL catch it as one), but
    a failure of the environment rather than of the arguments: the command
    line exits 1 for it (`exit_status`), not 2.
    """

    exit_status = 1


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


def _check_zip(head: bytes, path: str) -> None:
    if not head.startswith(b"PK\x03\x04") or not zipfile.is_zipfile(path):
        raise ValueError("it is not a complete zip archive (what torch.save writes)")


def _check_msgpack_map(head: bytes, path: str) -> None:
    del path
    is_map = bool(head) and (0x80 <= head[0] <= 0x8F or head[0] in (0xDE, 0xDF))
    if not is_map:
        raise ValueError("it does not begin with a MessagePack map (what Flax writes)")


def _check_sentencepiece(head: bytes, path: str) -> None:
    # A ModelProto begins with its first piece: field 1, length-delimited (0x0a), a varint
    # length that fits in the file, and the piece's own field 1 (0x0a), its text.
    length, shift, index = 0, 0, 1
    while index < min(len(head), 6) and head[index] & 0x80:
        length |= (head[index] & 0x7F) << shift
        shift, index = shift + 7, index + 1
    valid = len(head) > index + 1 and head[0] == 0x0A
    if valid:
        length |= head[index] << shift
        valid = head[index + 1] == 0x0A and index + 1 + length <= os.path.getsize(path)
    if not valid:
        raise ValueError("it is not a SentencePiece model (a ModelProto of pieces)")


# A release's format -> a check of the downloaded file's own header: (first bytes, path) ->
# None, or ValueError saying what the file is not.
VERIFIERS: dict[str, Callable[[bytes, str], None]] = {
    "pth": _check_zip,
    "flax": _check_msgpack_map,
    "sentencepiece": _check_sentencepiece,
}
_HTML = re.compile(rb"\s*(<!doctype\s+html|<html|<head|<body|<!--)", re.IGNORECASE)


def verify(
    path: str, file_format: str | None = None, sha256: str | None = None, size: int | None = None
) -> None:
    """Checks a downloaded file before it enters the cache (or is used from it).

    Args:
        path: the file.
        file_format: a key of :data:`VERIFIERS` whose header check applies,
            or None (default) for the generic checks only.
        sha256: the expected hex digest, or None.
        size: the expected size in bytes, or None.

    Raises:
        ValueError: saying what is wrong: an HTML page, another size, another
            format, another sha256.

    Example:
        >>> verify("gfnet-ti.pth", "pth")  # doctest: +SKIP
    """
    if file_format is not None and file_format not in VERIFIERS:
        raise ValueError(
            f"`file_format` must be one of {sorted(VERIFIERS)} or None. "
            f"Received: file_format={file_format!r}"
        )
    with open(path, "rb") as file:
        head = file.read(512)
    if _HTML.match(head):
        raise ValueError("it is an HTML page, not the file (a login or error page?)")
    actual_size = os.path.getsize(path)
    if size is not None and actual_size != size:
        raise ValueError(f"it has {actual_size} bytes, the release {size}")
    if file_format is not None:
        VERIFIERS[file_format](head, path)
    if sha256 is not None:
        actual = sha256_of(path)
        if actual != sha256:
            raise ValueError(f"its sha256 is {actual}, the release's is {sha256}")


class _Transient(Exception):
    """A failure worth another attempt; `wait` is the server's Retry-After, if any."""

    def __init__(self, message: str, wait: float | None = None):
        super().__init__(message)
        self.wait = wait


def _retry_after(headers) -> float | None:
    value = (headers or {}).get("Retry-After")
    if value is None:
        return None
    with contextlib.suppress(ValueError):
        return min(max(float(value), 0.0), _MAX_RETRY_AFTER)
    moment = email.utils.parsedate_to_datetime(value) if value else None
    if moment is None:
        return None
    return min(max(moment.timestamp() - time.time(), 0.0), _MAX_RETRY_AFTER)


class _Transfer:
    """One download into a temporary file: attempts, resumption, limits."""

    def __init__(
        self, url: str, name: str, cap: int, expected: int | None, timeout: float, deadline: float
    ):
        self.url, self.authorization = _split_credentials(url)
        self.name = name
        self.cap = cap
        self.expected = expected
        self.timeout = timeout
        self.deadline_seconds = deadline
        self.deadline = time.monotonic() + deadline
        self.min_rate = _setting(MIN_RATE_VARIABLE, DEFAULT_MIN_RATE)
        self.rate_window = _setting(RATE_WINDOW_VARIABLE, DEFAULT_RATE_WINDOW)
        self.received = 0
        self.validator: str | None = None
        self.progress: Progress | None = None

    def _request(self) -> urllib.request.Request:
        request = urllib.request.Request(
            self.url, headers={"Accept-Encoding": "identity", "User-Agent": "keras-fourier"}
        )
        if self.authorization is not None:
            request.add_unredirected_header("Authorization", self.authorization)
        if self.received:
            request.add_header("Range", f"bytes={self.received}-")
            if self.validator is not None:
                request.add_header("If-Range", self.validator)
        return request

    def _remaining(self) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise ValueError(
                f"it did not finish within {self.deadline_seconds:g} s ({self.received} bytes "
                f"received; {DEADLINE_VARIABLE} allows more time)"
            )
        return remaining

    def _open(self):
        timeout = min(self.timeout, self._remaining())
        try:
            return urllib.request.urlopen(self._request(), timeout=timeout)
        except urllib.error.HTTPError as error:
            error.close()
            if error.code == 416 and self.received:
                self.received = 0  # the partial file is not a prefix of this one: start over
                raise _Transient("HTTP Error 416 on resuming", 0.0) from None
            message = f"HTTP Error {error.code}: {error.reason}"
            if error.code in _TRANSIENT_STATUSES:
                raise _Transient(message, _retry_after(error.headers)) from None
            raise ValueError(message) from None
        except urllib.error.URLError as error:
            if isinstance(error.reason, _TRANSIENT_ERRORS):
                raise _Transient(str(error.reason)) from None
            raise ValueError(str(error.reason)) from None
        except _TRANSIENT_ERRORS as error:
            raise _Transient(f"{type(error).__name__}: {error}") from None

    def _announced_total(self, response) -> int | None:
        """The file's whole size as the response announces it; sets `received` to the offset."""
        headers = response.headers
        encoding = headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise ValueError(
                f"the server sent a compressed body (Content-Encoding: {encoding}), not the file"
            )
        if headers.get_content_type() == "text/html":
            raise ValueError("the server sent an HTML page (Content-Type: text/html), not the file")
        length = headers.get("Content-Length")
        length = int(length) if length is not None and length.strip().isdigit() else None
        ranged = re.fullmatch(
            r"bytes (\d+)-(\d+)/(\d+|\*)", headers.get("Content-Range", "").strip()
        )
        if response.status == 206:
            if ranged and int(ranged.group(1)) == self.received:
                total = ranged.group(3)
                return int(total) if total != "*" else None
            self.received = 0  # another part than asked for: ask for the whole file
            raise _Transient("the server resumed at another offset", 0.0)
        self.received = 0  # a whole body: the server did not resume
        return length

    def attempt(self, temporary: str) -> None:
        """One request; raises `_Transient` for a failure worth retrying, ValueError otherwise."""
        with self._open() as response:
            total = self._announced_total(response)
            self.validator = response.headers.get("ETag") or response.headers.get("Last-Modified")
            if total is not None:
                if self.expected is not None and total != self.expected:
                    raise ValueError(
                        f"the server announces {total} bytes, the release has {self.expected}"
                    )
                if total > self.cap:
                    raise ValueError(self._too_large(f"the server announces {total} bytes"))
            if self.progress is None:
                self.progress = Progress(self.name, total)
            with open(temporary, "r+b" if os.path.exists(temporary) else "wb") as out:
                out.truncate(self.received)
                out.seek(self.received)
                self._stream(response, out)
            if total is not None and self.received < total:
                raise _Transient(f"the download was cut off at {self.received} of {total} bytes")
            if total is not None and self._has_more(response):
                raise ValueError(f"the server sent more than the {total} bytes it announced")

    def _stream(self, response, out) -> None:
        window_start, window_bytes = time.monotonic(), self.received
        while True:
            self._remaining()
            try:
                chunk = response.read1(_CHUNK)
            except _TRANSIENT_ERRORS as error:
                raise _Transient(f"{type(error).__name__}: {error}") from None
            if not chunk:
                return
            self.received += len(chunk)
            if self.received > self.cap:
                raise ValueError(self._too_large(f"the body exceeds {self.cap} bytes"))
            out.write(chunk)
            self.progress.update(len(chunk))
            elapsed = time.monotonic() - window_start
            if elapsed >= self.rate_window:
                rate = (self.received - window_bytes) / elapsed
                if rate < self.min_rate:
                    raise ValueError(
                        f"it came at {rate:.0f} bytes/s over {elapsed:.0f} s, below the minimum "
                        f"of {self.min_rate:g} bytes/s over {self.rate_window:g} s "
                        f"({self.received} bytes received; {MIN_RATE_VARIABLE} allows slower)"
                    )
                window_start, window_bytes = time.monotonic(), self.received

    @staticmethod
    def _has_more(response) -> bool:
        """Whether bytes follow the announced body (read once the body is complete)."""
        if response.fp is None:
            return False
        try:
            return bool(response.fp.read1(1))
        except (OSError, ValueError):
            return False

    def _too_large(self, what: str) -> str:
        if self.expected is not None:
            return f"{what}, the release has {self.expected}"
        return f"{what}, more than the {self.cap}-byte ceiling ({MAX_BYTES_VARIABLE} allows more)"

    def run(self, temporary: str, retries: int) -> None:
        """Attempts until the file is whole, a failure is not transient, or retries run out."""
        for attempt in range(retries + 1):
            try:
                self.attempt(temporary)
                break
            except _Transient as error:
                if attempt == retries:
                    raise ValueError(f"{error}; gave up after {attempt + 1} attempts") from None
                wait = error.wait if error.wait is not None else float(2**attempt)
                if time.monotonic() + wait >= self.deadline:
                    raise ValueError(
                        f"{error}; no time left for another attempt within "
                        f"{self.deadline_seconds:g} s ({DEADLINE_VARIABLE} allows more)"
                    ) from None
                time.sleep(wait)
        if self.progress is not None:
            self.progress.close()


def _writable_folder(folder: str) -> None:
    """Creates the cache folder, or raises ValueError naming it and the reason."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as error:
        raise ValueError(
            f"the download cache {folder!r} cannot be created ({error.strerror or error}); "
            "set KERAS_HOME to a writable folder"
        ) from None


def discard(path: str, reason: str) -> None:
    """Removes a damaged cached download, with one warning line saying why.

    Args:
        path: the cached file.
        reason: what is wrong with it.

    Raises:
        ValueError: it cannot be removed (a read-only cache), naming it as a
            cached download and where it is.
    """
    try:
        os.remove(path)
    except FileNotFoundError:
        return
    except OSError as error:
        raise ValueError(
            f"The cached download {os.path.basename(path)!r} in {os.path.dirname(path)!r} is "
            f"damaged ({reason}) and cannot be removed ({error.strerror or error}); delete it, "
            "or set KERAS_HOME to a writable folder."
        ) from None
    warn(f"the cached download {path} was damaged ({reason}); downloading it again")


def download(
    url: str,
    file_name: str,
    sha256: str | None = None,
    *,
    size: int | None = None,
    max_size: int | None = None,
    file_format: str | None = None,
    folder: str | None = None,
    timeout: float | None = None,
    deadline: float | None = None,
) -> str:
    """Downloads `url` into `folder` as `file_name` once; returns its path.

    The file comes from `url`, or from ``$KERAS_FOURIER_MIRROR/<file_name>``
    when that variable is set (:func:`source_url`), with a progress bar on
    stderr (:class:`Progress`). It is streamed to a temporary name in the
    cache folder within the size cap (:func:`size_cap`) and the deadline,
    retried and resumed after transient failures, verified
    (:func:`verify`), fsynced and only then renamed to `file_name`
    (:func:`keras_fourier.fileio.atomic_save`): an interrupted, cut-off or
    wrong download leaves nothing behind under `file_name`, so the next call
    downloads again. A cached file that fails :func:`verify` is removed and
    downloaded again, with one warning line; temporary files that killed
    downloads left in the folder are removed.

    Args:
        url: where the file is published.
        file_name: its name in :func:`cache_dir`.
        sha256: expected hex digest, or None (default) where none is recorded.
        size: its exact size in bytes, or None (default) where none is recorded.
        max_size: a ceiling of its own where no exact size is recorded (see
            :func:`size_cap`). Default None.
        file_format: a key of :data:`VERIFIERS`, whose header check applies.
            Default None: only the generic checks.
        folder: where to keep it. Default None: :func:`cache_dir`.
        timeout: seconds to wait for the server per read. Default None:
            ``$KERAS_FOURIER_DOWNLOAD_TIMEOUT``, else 60.
        deadline: seconds the whole download may take. Default None:
            ``$KERAS_FOURIER_DOWNLOAD_DEADLINE``, else 3600.

    Returns:
        The path of the complete file.

    Raises:
        DownloadError: the download failed, was cut off, was too large or too
            slow, or is not the file (nothing is kept); or the cache cannot be
            written. The message says how to proceed offline (download the
            file by other means and pass its path as `weights`), and shows
            any URL without its password.

    Example:
        >>> download("https://example.org/gfnet-ti.pth", "gfnet-ti.pth", file_format="pth")
        '/home/me/.keras/keras_fourier/gfnet-ti.pth'
    """
    folder = cache_dir() if folder is None else os.fspath(folder)
    target = os.path.join(folder, file_name)
    url = source_url(url, file_name)
    shown = redact(url)
    offline = (
        f"To work offline, download {shown} by other means and pass the file's path as "
        "`weights` (it loads without network)."
    )
    remove_stale_temporaries(folder)
    if os.path.isfile(target):
        try:
            verify(target, file_format, sha256, size)
            return target
        except ValueError as error:
            discard(target, str(error))
    cap = size_cap(size, max_size)
    timeout = _setting(TIMEOUT_VARIABLE, DEFAULT_TIMEOUT) if timeout is None else timeout
    deadline = _setting(DEADLINE_VARIABLE, DEFAULT_DEADLINE) if deadline is None else deadline
    retries = int(_setting(RETRIES_VARIABLE, DEFAULT_RETRIES, int))
    try:
        _writable_folder(folder)

        def write(temporary: str) -> None:
            _Transfer(url, file_name, cap, size, timeout, deadline).run(temporary, retries)
            verify(temporary, file_format, sha256, size)

        atomic_save(target, write)
    except (ValueError, OSError) as error:
        reason = str(error)
        if isinstance(error, OSError):
            full = error.errno in (errno.ENOSPC, errno.EDQUOT)
            reason = f"{'the disk is full: ' if full else ''}{error.strerror or error}"
            if error.filename:
                reason += f": {os.path.dirname(os.fspath(error.filename))}"
        raise DownloadError(
            redact(f"Could not download {shown} ({reason}); nothing was kept. {offline}")
        ) from None
    return target
