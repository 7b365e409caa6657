"""Ceilings on what untrusted files and requests may make the package allocate, keras-free.

Every size that comes from outside (a checkpoint's headers, a preset's or a
``.keras`` archive's configuration, an image header, a tokenizer file, a
command's ``--sequence-length``, ``--image-size`` or ``--batch-size``) is
compared with a ceiling here before any memory is committed; past one, a
one-line ValueError names the argument or tensor, the value, what it would
need, and the setting that raises the ceiling:

* ``KERAS_FOURIER_MAX_PARAMETERS`` (default 300,000,000; FNet-Large, the
  catalog's largest model, has 237 million): the parameters a model built
  from a file's description (a preset, a checkpoint's headers, a ``.keras``
  configuration) may have;
* ``KERAS_FOURIER_MAX_MEMORY`` (default 8 GiB; a number of bytes, or with a
  suffix: ``32GiB``, ``500MB``): what one request may need, estimated from
  the model's activations, size-dependent weights and DFT tables
  (:func:`vision_request_bytes`, :func:`text_request_bytes`), and the
  uncompressed size of a ``.keras`` archive's members and a tokenizer file.

A request refused here would otherwise reach the allocator and fail, if at
all, after gigabytes with an out-of-memory traceback.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
import os
import re
import zipfile
from collections.abc import Iterator, Sequence
from typing import IO

MAX_PARAMETERS_ENV = "KERAS_FOURIER_MAX_PARAMETERS"
MAX_MEMORY_ENV = "KERAS_FOURIER_MAX_MEMORY"
DEFAULT_MAX_PARAMETERS = 300_000_000
DEFAULT_MAX_MEMORY = 8 * 2**30
# Largest image (height * width) decoded by serving_bytes, predict and image data, and the
# largest a COCO JSON may declare.
MAX_IMAGE_PIXELS = 40_000_000
# `bench --threads` takes at most this many threads per CPU of the machine.
MAX_THREADS_PER_CPU = 4
# Bytes of one float32 value.
_FLOAT = 4
# Tensors of a block's width kept per token for the backward pass: the norms, the mixer's
# input, spectrum (complex: 2) and output, the FFN's input, hidden layer (4x: 4) and output,
# the residuals.
_ACTIVATIONS_PER_BLOCK = 16
_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_bytes(text: str) -> int:
    """A byte count: ``"8589934592"``, ``"8GiB"``, ``"500MB"``, ``"1.5G"``.

    Raises:
        ValueError: not a positive amount with a known unit.

    Example:
        >>> parse_bytes("2GiB"), parse_bytes("500MB"), parse_bytes("1024")
        (2147483648, 500000000, 1024)
    """
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS or float(match.group(1)) <= 0:
        raise ValueError(
            "expected a positive number of bytes, optionally with a unit (KB, MB, GB, KiB, "
            f"MiB, GiB, ...). Received: {text!r}"
        )
    return int(float(match.group(1)) * _UNITS[unit])


def _setting(name: str, default: int) -> int:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        return parse_bytes(text)
    except ValueError as error:
        raise ValueError(f"The setting {name} is not valid: {error}") from None


def max_parameters() -> int:
    """The ceiling on the parameters of a model a file describes (``KERAS_FOURIER_MAX_PARAMETERS``).

    Example:
        >>> max_parameters() >= 300_000_000
        True
    """
    return _setting(MAX_PARAMETERS_ENV, DEFAULT_MAX_PARAMETERS)


def max_memory() -> int:
    """The ceiling on the bytes one request may need (``KERAS_FOURIER_MAX_MEMORY``).

    Example:
        >>> max_memory() >= 2**30
        True
    """
    return _setting(MAX_MEMORY_ENV, DEFAULT_MAX_MEMORY)


def format_bytes(count: float) -> str:
    """Bytes in the largest binary unit that keeps the number at least 1.

    Example:
        >>> format_bytes(3 * 2**30), format_bytes(512)
        ('3.0 GiB', '512 bytes')
    """
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{int(count)} bytes"


def check_parameters(what: str, count: int, received: str) -> None:
    """Raises ValueError when `count` parameters exceed :func:`max_parameters`.

    Args:
        what: the model or file, for the message.
        count: the parameters its description declares.
        received: the ``name=value`` the message ends with.

    Example:
        >>> check_parameters("the preset 'p'", 1000, "hidden_dim=8")
    """
    ceiling = max_parameters()
    if count > ceiling:
        raise ValueError(
            f"{what} declares {count:,} parameters ({format_bytes(count * _FLOAT)} in float32), "
            f"above the ceiling of {ceiling:,}; set {MAX_PARAMETERS_ENV} to allow it. "
            f"Received: {received}"
        )


def check_memory(what: str, needed: int, received: str) -> None:
    """Raises ValueError when a request needing `needed` bytes exceeds :func:`max_memory`.

    Args:
        what: the request, for the message (e.g. "model 'fnet_tiny' at 100000 tokens").
        needed: its estimated bytes.
        received: the ``name=value`` the message ends with.

    Example:
        >>> check_memory("a request", 1000, "--batch-size=1")
    """
    ceiling = max_memory()
    if needed > ceiling:
        raise ValueError(
            f"{what} would need about {format_bytes(needed)} of memory, above the ceiling of "
            f"{format_bytes(ceiling)}; set {MAX_MEMORY_ENV} (e.g. {MAX_MEMORY_ENV}=64GiB) to "
            f"allow it. Received: {received}"
        )


def vision_request_bytes(
    dims: Sequence[int],
    depths: Sequence[int],
    patch_size: int,
    image_size: tuple[int, int],
    batch_size: int = 1,
    *,
    spectral_weights: bool = True,
) -> int:
    """Estimated bytes of one vision model call: activations and size-dependent weights.

    Each stage ``i`` has ``(H / (p 2^i)) (W / (p 2^i))`` tokens of ``dims[i]``
    channels; training keeps about 16 block-width tensors per token and
    block. Global filters (``spectral_weights``) hold ``tokens / 2`` complex
    weights per channel and block, whatever the batch.

    Example:
        >>> vision_request_bytes((256,), (12,), 16, (224, 224), 1) // 2**20
        39
    """
    height, width = image_size
    total = batch_size * height * width * 3 * _FLOAT
    for stage, (dim, depth) in enumerate(zip(dims, depths, strict=True)):
        stride = patch_size * 2**stage
        tokens = math.ceil(height / stride) * math.ceil(width / stride)
        total += batch_size * tokens * dim * depth * _ACTIVATIONS_PER_BLOCK * _FLOAT
        if spectral_weights:
            total += (tokens // 2 + 1) * dim * depth * 2 * _FLOAT
    return total


def text_request_bytes(
    hidden_size: int,
    num_layers: int,
    intermediate_size: int,
    sequence_length: int,
    batch_size: int = 1,
    *,
    dft_table: bool = False,
) -> int:
    """Estimated bytes of one FNet call: activations and, on the matmul path, the DFT table.

    Per token and layer: the block's hidden-width tensors (the Fourier
    mixing is complex) and its intermediate layer; the DFT-as-matmul path
    (TFLite export, ``fft_impl="matmul"``) also holds an L x L complex table.

    Example:
        >>> text_request_bytes(64, 2, 128, 512, 1) // 2**20
        4
        >>> text_request_bytes(64, 2, 128, 100_000, 32) // 2**30
        24
    """
    per_token = num_layers * (12 * hidden_size + 2 * intermediate_size) * _FLOAT
    table = sequence_length * sequence_length * 2 * _FLOAT if dft_table else 0
    return batch_size * sequence_length * per_token + table


def dft_table_bytes(height: int, width: int) -> int:
    """Bytes of the tables the matmul DFT of a height x width grid builds (export, TFLite).

    Up to 256 tokens, one dense 2D matrix per direction, (2 H K, H W) with
    K = W // 2 + 1; beyond, per axis: H x H (cos, sin) along the height and
    W x K forward and K x W inverse along the width. Each in float64 (built
    with NumPy) and float32 (the graph's constant).

    Example:
        >>> dft_table_bytes(8, 25_000) // 2**30
        13
    """
    k = width // 2 + 1
    if height * width <= 256:
        values = 2 * (2 * height * k) * (height * width)
    else:
        values = 2 * height * height + 4 * width * k
    return values * (8 + _FLOAT)


def check_count(name: str, value: int, ceiling: int, why: str) -> None:
    """Raises ValueError for an integer argument above a fixed ceiling (e.g. threads).

    Example:
        >>> check_count("--threads", 4, 64, "16 times the CPUs")
    """
    if value > ceiling:
        raise ValueError(f"{name} must be at most {ceiling:,} ({why}). Received: {name}={value}")


# Deepest nesting of [] and {} accepted in a JSON document read from a file (Keras configs of
# the package's models nest about 12 deep).
MAX_JSON_DEPTH = 100
# Largest JSON document (a preset's or a .keras archive's config.json, a run's record).
MAX_JSON_BYTES = 64 * 2**20
# Largest compression ratio of a member of a zip archive larger than a mebibyte.
MAX_ZIP_RATIO = 100
# json_depth keeps only these bytes: brackets, and quotes to find the strings.
_JSON_NOT_MARKS = bytes(byte for byte in range(256) if byte not in b'[]{}"')
_JSON_DEPTH_STEP = [0] * 256
for _byte in b"[{":
    _JSON_DEPTH_STEP[_byte] = 1
for _byte in b"]}":
    _JSON_DEPTH_STEP[_byte] = -1


def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON document, strings skipped.

    Byte operations only (about a second for a 500 MB document): escaped
    backslashes and quotes are removed, then everything but brackets and
    quotes, then what lies between quotes.

    Example:
        >>> json_depth(b'{"a": [1, {"b": "[[["}]}')
        3
    """
    data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = data.translate(None, _JSON_NOT_MARKS)
    outside = b"".join(marks.split(b'"')[::2])
    return max(itertools.accumulate(map(_JSON_DEPTH_STEP.__getitem__, outside)), default=0)


def loads_json(data: bytes | str, what: str, limit: int = MAX_JSON_BYTES) -> object:
    """`json.loads` of an untrusted document, its size and nesting checked before parsing.

    Args:
        data: the document.
        what: the file or member, for the message.
        limit: the largest document accepted, in bytes. Default
            :data:`MAX_JSON_BYTES`.

    Raises:
        ValueError: larger than `limit`, nested deeper than
            :data:`MAX_JSON_DEPTH`, or not JSON: one line naming `what`.

    Example:
        >>> loads_json(b'{"a": 1}', "x.json")
        {'a': 1}
    """
    data = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if len(data) > limit:
        raise ValueError(
            f"{what} is a JSON document of {format_bytes(len(data))}, above the limit of "
            f"{format_bytes(limit)}. Received: size={len(data)}"
        )
    depth = json_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(
            f"{what} nests JSON {depth} levels deep, above the limit of {MAX_JSON_DEPTH}. "
            f"Received: depth={depth}"
        )
    try:
        return json.loads(data)
    except ValueError as error:
        raise ValueError(f"{what} is not valid JSON: {error}") from None


def read_file_bounded(path: str | os.PathLike, limit: int, what: str) -> bytes:
    """The bytes of a file of at most `limit` bytes, refused before reading when larger.

    The size is checked from the file's metadata, and the read stops at
    `limit` + 1 bytes (a file growing meanwhile, a device): a sparse or
    endless file never enters memory whole.

    Raises:
        ValueError: larger than `limit`, naming `what` and the size.
        OSError: the file cannot be read.

    Example:
        >>> read_file_bounded("config.json", MAX_JSON_BYTES, "The config")  # doctest: +SKIP
    """
    with open(os.fspath(path), "rb") as file:
        size = os.fstat(file.fileno()).st_size
        data = file.read(limit + 1) if size <= limit else b""
    if size > limit or len(data) > limit:
        size = max(size, len(data))
        raise ValueError(
            f"{what} {os.fspath(path)!r} has {format_bytes(size)}, above the limit of "
            f"{format_bytes(limit)}. Received: size={size}"
        )
    return data


def check_zip_ratio(info: zipfile.ZipInfo, what: str) -> None:
    """Refuses a zip member larger than a mebibyte inflating more than :data:`MAX_ZIP_RATIO` times.

    Raises:
        ValueError: naming `what`, the member and its sizes.

    Example:
        >>> check_zip_ratio(zipfile.ZipInfo("data/0"), "model.pth")
    """
    ratio = info.file_size / max(info.compress_size, 1)
    if info.file_size > 2**20 and ratio > MAX_ZIP_RATIO:
        raise ValueError(
            f"{what} member {info.filename!r} expands {info.compress_size:,} bytes to "
            f"{info.file_size:,} (ratio {ratio:,.0f}, limit {MAX_ZIP_RATIO}): a zip bomb or a "
            f"damaged file. Received: {info.filename}={info.file_size}"
        )


def check_zip_members(archive: zipfile.ZipFile, what: str) -> None:
    """Refuses a zip archive whose members would expand beyond bounds, from its directory.

    Each member's declared size counts against :func:`max_memory` (all
    together), and one larger than a mebibyte may be at most
    :data:`MAX_ZIP_RATIO` times its compressed size.

    Raises:
        ValueError: naming the member and its sizes.

    Example:
        >>> with zipfile.ZipFile("model.keras") as archive:  # doctest: +SKIP
        ...     check_zip_members(archive, "model.keras")
    """
    total = 0
    ceiling = max_memory()
    for info in archive.infolist():
        total += info.file_size
        check_zip_ratio(info, what)
        if total > ceiling:
            raise ValueError(
                f"{what} declares {format_bytes(total)} of members, above the ceiling of "
                f"{format_bytes(ceiling)}; set {MAX_MEMORY_ENV} to allow it. Received: "
                f"{info.filename}={info.file_size}"
            )


def read_zip_json(archive: zipfile.ZipFile, member: str, what: str) -> object:
    """A JSON member of a zip archive, its declared size and nesting checked before parsing.

    Raises:
        KeyError: no such member.
        ValueError: too large, too deep, or not JSON.

    Example:
        >>> with zipfile.ZipFile("model.keras") as archive:  # doctest: +SKIP
        ...     read_zip_json(archive, "config.json", "model.keras")["class_name"]
        'Functional'
    """
    info = archive.getinfo(member)
    label = f"{what} member {member!r}"
    if info.file_size > MAX_JSON_BYTES:
        raise ValueError(
            f"{label} is a JSON document of {format_bytes(info.file_size)}, above the limit of "
            f"{format_bytes(MAX_JSON_BYTES)}. Received: size={info.file_size}"
        )
    with archive.open(info) as file:
        data = file.read(MAX_JSON_BYTES + 1)
    return loads_json(data, label)


class _StoredMember(io.RawIOBase):
    """Random access to the bytes of an uncompressed zip member, straight from its file."""

    def __init__(self, file: IO[bytes], start: int, size: int) -> None:
        super().__init__()
        self._file, self._start, self._size, self._position = file, start, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = min(max(base + offset, 0), self._size)
        return self._position

    def readinto(self, buffer) -> int:
        count = min(len(buffer), self._size - self._position)
        if count <= 0:
            return 0
        self._file.seek(self._start + self._position)
        read = self._file.readinto(memoryview(buffer)[:count])
        self._position += read
        return read


@contextlib.contextmanager
def open_zip_member(archive: zipfile.ZipFile, member: str) -> Iterator[IO[bytes]]:
    """A seekable binary file of a zip member, fast to seek when the member is stored.

    `zipfile` seeks backwards in a member by reading it again from its start
    (Python 3.11), so a reader that jumps about (an HDF5 library reading a
    400 MB `.keras` file's weights) rereads it for every jump: 46 s for one
    such file's dataset headers. A stored (uncompressed) member, as Keras
    writes them, is read straight from the archive's file instead; a
    compressed one opens as `zipfile` opens it.

    Args:
        archive: an open archive, of a file on disk.
        member: the member's name.

    Raises:
        KeyError: no such member.
        ValueError: a member whose local header does not fit the archive.

    Example:
        >>> with zipfile.ZipFile("model.keras") as archive:  # doctest: +SKIP
        ...     with open_zip_member(archive, "model.weights.h5") as file:
        ...         header = file.read(8)
    """
    info = archive.getinfo(member)
    if info.compress_type != zipfile.ZIP_STORED or not isinstance(archive.filename, str):
        with archive.open(info) as file:
            yield file
        return
    with open(archive.filename, "rb") as file:
        file.seek(info.header_offset)
        header = file.read(30)
        if len(header) < 30 or header[:4] != b"PK\x03\x04":
            raise ValueError(f"Zip member {member!r} of {archive.filename!r} has no local header")
        name_length, extra_length = (
            int.from_bytes(header[26:28], "little"),
            int.from_bytes(header[28:30], "little"),
        )
        if file.read(name_length) != info.orig_filename.encode("utf-8"):
            raise ValueError(
                f"Zip member {member!r} of {archive.filename!r} has another name in its local "
                "header"
            )
        start = info.header_offset + 30 + name_length + extra_length
        if start + info.file_size > os.fstat(file.fileno()).st_size:
            raise ValueError(f"Zip member {member!r} of {archive.filename!r} ends past its file")
        with io.BufferedReader(_StoredMember(file, start, info.file_size)) as member_file:
            yield member_file
