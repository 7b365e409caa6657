"""Reading Flax msgpack checkpoints without JAX, Flax or the msgpack package.

Flax's (pre-Orbax) ``checkpoints.save_checkpoint`` writes
``flax.serialization.to_bytes(state)``: the state dict as one MessagePack
map, with every array as an extension record. Flax's extension codes are
1 (ndarray: the msgpack of ``[shape, dtype name, C-order bytes]``), 2 (a
native complex: ``[real, imag]``) and 3 (a NumPy scalar, as an ndarray of
shape ``()``). An optimizer checkpoint is ``{"target": params, "state":
{"step": ..., "param_states": {... moments ...}}}``; Adam's two moments are
two thirds of the file.

:func:`read_flax_checkpoint` parses the file as a stream: the entries named
in `skip` (default ``"state"``) are walked and checked but their payloads
are skipped with ``seek``, never read, and each kept array is one read of
its bytes viewed as a NumPy array (no second copy), so a 1 GB checkpoint
needs about one copy of its parameters in memory. Only what ``to_bytes``
writes for arrays and plain containers is accepted; anything else raises
:class:`FlaxCheckpointError` (a ValueError) naming the offset: other
extension types, raw binary outside an array record, non-string or
repeated keys, containers of more than :data:`MAX_ENTRIES` entries or
nested deeper than :data:`MAX_DEPTH`, sizes larger than what is left of
the file (a huge declared size or a truncated file), unknown dtypes, and
array records whose byte count does not match their shape.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterable, Mapping
from typing import Any, BinaryIO, NamedTuple

import numpy as np

EXT_NDARRAY = 1
EXT_NATIVE_COMPLEX = 2
EXT_NPSCALAR = 3
MAX_DEPTH = 32
MAX_ENTRIES = 1 << 20
MAX_NDIM = 32
DTYPES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
        "bfloat16",
    }
)
_FIXED = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i"}
_FIXED.update({0xD3: ">q", 0xCA: ">f", 0xCB: ">d"})
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}


class FlaxCheckpointError(ValueError):
    """A file that is not a Flax msgpack checkpoint of arrays and plain containers."""


class _View:
    """A bytes buffer with the file methods the parser uses; reads are zero-copy views."""

    def __init__(self, data: memoryview):
        self._data = data
        self._position = 0

    def read(self, size: int) -> memoryview:
        chunk = self._data[self._position : self._position + size]
        self._position += len(chunk)
        return chunk

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = 0) -> None:
        self._position = offset + (self._position if whence == 1 else 0)


class ArrayShape(NamedTuple):
    """What :func:`read_flax_checkpoint` gives for an array with ``shapes_only``."""

    shape: tuple[int, ...]
    dtype: str


# The most bytes an ndarray record's [shape, dtype, data header] can take (MAX_NDIM sizes).
_ARRAY_HEADER_BYTES = 1 + 5 + MAX_NDIM * 9 + 1 + 16 + 5


class _Parser:
    def __init__(
        self, stream: BinaryIO | _View, size: int, base: int = 0, shapes_only: bool = False
    ):
        self._stream = stream
        self._size = size
        self._base = base
        self._shapes_only = shapes_only

    def _where(self) -> str:
        return f"at byte {self._base + self._stream.tell()}"

    def _fail(self, message: str) -> FlaxCheckpointError:
        return FlaxCheckpointError(f"{message} ({self._where()})")

    def _check_length(self, length: int, what: str) -> None:
        remaining = self._size - self._stream.tell()
        if length > remaining:
            raise self._fail(
                f"{what} declares {length:,} bytes but only {remaining:,} remain: "
                "the file is truncated or corrupt"
            )

    def read(self, length: int, what: str):
        self._check_length(length, what)
        data = self._stream.read(length)
        if len(data) != length:
            raise self._fail(f"{what}: the file ended early (truncated)")
        return data

    def _skip(self, length: int, what: str) -> None:
        self._check_length(length, what)
        self._stream.seek(length, 1)

    def _unpack(self, fmt: str, what: str):
        return struct.unpack(fmt, self.read(struct.calcsize(fmt), what))[0]

    def _count(self, count: int, what: str) -> int:
        if count > MAX_ENTRIES:
            raise self._fail(f"{what} of {count:,} entries exceeds the limit of {MAX_ENTRIES:,}")
        # Every entry takes at least one byte.
        self._check_length(count, what)
        return count

    def value(self, depth: int = 0, keep: bool = True, skip: Iterable[str] = ()) -> Any:
        """One msgpack object; `keep=False` checks it and returns None without reading payloads."""
        if depth > MAX_DEPTH:
            raise self._fail(f"containers nested deeper than {MAX_DEPTH}")
        tag = self.read(1, "a value")[0]
        if tag <= 0x7F:
            return tag
        if tag >= 0xE0:
            return tag - 0x100
        if 0x80 <= tag <= 0x8F or tag in (0xDE, 0xDF):
            count = (
                tag & 0x0F if tag <= 0x8F else self._unpack(">H" if tag == 0xDE else ">I", "map")
            )
            return self._map(self._count(count, "a map"), depth, keep, skip)
        if 0x90 <= tag <= 0x9F or tag in (0xDC, 0xDD):
            count = (
                tag & 0x0F if tag <= 0x9F else self._unpack(">H" if tag == 0xDC else ">I", "list")
            )
            items = [self.value(depth + 1, keep) for _ in range(self._count(count, "a list"))]
            return items if keep else None
        if 0xA0 <= tag <= 0xBF or tag in (0xD9, 0xDA, 0xDB):
            return self._string(tag, keep)
        if tag in (0xC0, 0xC2, 0xC3):
            return {0xC0: None, 0xC2: False, 0xC3: True}[tag]
        if tag in _FIXED:
            return self._unpack(_FIXED[tag], "a number")
        if tag in _FIXEXT or tag in (0xC7, 0xC8, 0xC9):
            return self._extension(tag, keep)
        if tag in (0xC4, 0xC5, 0xC6):
            raise self._fail("raw binary data outside an array record is not a Flax checkpoint")
        raise self._fail(f"byte 0x{tag:02x} is not a MessagePack type")

    def _string(self, tag: int, keep: bool) -> str | None:
        if tag <= 0xBF:
            length = tag & 0x1F
        else:
            length = self._unpack({0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}[tag], "a string")
        if not keep:
            self._skip(length, "a string")
            return None
        try:
            return bytes(self.read(length, "a string")).decode("utf-8")
        except UnicodeDecodeError as error:
            raise self._fail(f"a string is not UTF-8 ({error})") from None

    def _map(self, count: int, depth: int, keep: bool, skip: Iterable[str]) -> dict | None:
        skip = set(skip)
        result: dict[str, Any] = {}
        seen: set[str] = set()
        for _ in range(count):
            tag = self.read(1, "a key")[0]
            if not (0xA0 <= tag <= 0xBF or tag in (0xD9, 0xDA, 0xDB)):
                raise self._fail(f"a map key of type byte 0x{tag:02x} is not a string")
            key = self._string(tag, True)
            if key in seen:
                raise self._fail(f"the key {key!r} appears twice in one map")
            seen.add(key)
            item = self.value(depth + 1, keep and key not in skip)
            if keep and key not in skip:
                result[key] = item
        return result if keep else None

    def _extension(self, tag: int, keep: bool) -> Any:
        if tag in _FIXEXT:
            length = _FIXEXT[tag]
        else:
            length = self._unpack({0xC7: ">B", 0xC8: ">H", 0xC9: ">I"}[tag], "an extension")
        code = self._unpack(">b", "an extension type")
        if code not in (EXT_NDARRAY, EXT_NATIVE_COMPLEX, EXT_NPSCALAR):
            raise self._fail(
                f"MessagePack extension type {code} is not a Flax array record "
                f"({EXT_NDARRAY} ndarray, {EXT_NATIVE_COMPLEX} complex, {EXT_NPSCALAR} scalar)"
            )
        if not keep:
            self._skip(length, "an array record")
            return None
        start = self._base + self._stream.tell()
        if self._shapes_only and code == EXT_NDARRAY:
            head = memoryview(self.read(min(length, _ARRAY_HEADER_BYTES), "an array record"))
            inner = _Parser(_View(head), len(head), start)
            shape, dtype_name, _, data_length = inner.array_header()
            if inner._stream.tell() + data_length != length:
                raise self._fail("an array record's data does not fill the record")
            self._skip(length - len(head), "array data")
            return ArrayShape(tuple(shape), dtype_name)
        payload = memoryview(self.read(length, "an array record"))
        inner = _Parser(_View(payload), length, start)
        if code == EXT_NATIVE_COMPLEX:
            parts = inner.value(MAX_DEPTH - 1)
            if not (
                isinstance(parts, list)
                and len(parts) == 2
                and all(isinstance(part, (int, float)) for part in parts)
            ):
                raise self._fail("a complex record is not [real, imag]")
            return complex(*parts)
        array = inner.array()
        if code == EXT_NPSCALAR and array.shape != ():
            raise self._fail(f"a scalar record has shape {array.shape}")
        return array

    def array(self) -> np.ndarray:
        """The ``[shape, dtype, bytes]`` of an ndarray record, viewed without a copy."""
        shape, dtype_name, storage, length = self.array_header()
        data = np.frombuffer(self.read(length, "array data"), dtype=storage).reshape(shape)
        if dtype_name == "bfloat16":
            return (data.astype(np.uint32) << 16).view(np.float32)
        return data

    def array_header(self) -> tuple[list[int], str, np.dtype, int]:
        """The shape, dtype name, storage dtype and data length of an ndarray record."""
        header = self.read(1, "an array header")[0]
        if header != 0x93:
            raise self._fail("an array record is not [shape, dtype, data]")
        shape = self.value(MAX_DEPTH - 1)
        if not (
            isinstance(shape, list)
            and len(shape) <= MAX_NDIM
            and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)
        ):
            raise self._fail(f"an array shape {shape!r} is not a list of sizes")
        dtype_name = self.value(MAX_DEPTH - 1)
        if dtype_name not in DTYPES:
            raise self._fail(f"array dtype {dtype_name!r} is not one of {sorted(DTYPES)}")
        tag = self.read(1, "array data")[0]
        if tag not in (0xC4, 0xC5, 0xC6):
            raise self._fail("array data is not binary")
        length = self._unpack({0xC4: ">B", 0xC5: ">H", 0xC6: ">I"}[tag], "array data")
        storage = np.dtype("uint16" if dtype_name == "bfloat16" else dtype_name)
        if math.prod(shape) * storage.itemsize != length:
            raise self._fail(
                f"an array of shape {tuple(shape)} and dtype {dtype_name} needs "
                f"{math.prod(shape) * storage.itemsize:,} bytes, its record holds {length:,}"
            )
        return shape, dtype_name, storage, length


def read_flax_checkpoint(
    path: str | os.PathLike, *, skip: Iterable[str] = ("state",), shapes_only: bool = False
) -> dict[str, Any]:
    """Reads a Flax msgpack checkpoint into nested dicts of NumPy arrays.

    Args:
        path: a file written by ``flax.serialization.to_bytes`` (Flax's
            ``checkpoints.save_checkpoint`` before Orbax).
        skip: top-level entries checked but not loaded. Default
            ``("state",)``: an optimizer checkpoint's moments.
        shapes_only: give each array's :class:`ArrayShape` (its header
            checked, its data skipped unread) instead of the array. Default
            False.

    Returns:
        The top-level map without the skipped entries; arrays are read-only
        NumPy arrays (bfloat16 ones as float32), complex records Python
        complex numbers.

    Raises:
        FlaxCheckpointError: the file is not a MessagePack map of arrays and
            plain containers (see the module docstring), naming the offset.
        OSError: the file cannot be opened.

    Example:
        >>> tree = read_flax_checkpoint("f_net_checkpoint")  # doctest: +SKIP
        >>> tree["target"]["encoder"]["embedder"]["word"]["embedding"].shape  # doctest: +SKIP
        (32000, 768)
    """
    path = os.fspath(path)
    size = os.path.getsize(path)
    with open(path, "rb", buffering=1 << 16) as stream:
        parser = _Parser(stream, size, shapes_only=shapes_only)
        try:
            first = stream.read(1)
            if not first or not (0x80 <= first[0] <= 0x8F or first[0] in (0xDE, 0xDF)):
                raise FlaxCheckpointError(
                    f"{path!r} is not a Flax msgpack checkpoint: it does not start with a map"
                )
            stream.seek(0)
            tree = parser.value(skip=skip)
            if stream.tell() != size:
                raise FlaxCheckpointError(
                    f"{size - stream.tell():,} bytes follow the checkpoint's map"
                )
        except FlaxCheckpointError as error:
            raise FlaxCheckpointError(f"{path!r}: {error}") from None
    return tree


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": x}}`` -> ``{"a/b": x}``.

    Args:
        tree: nested string-keyed maps.
        prefix: prepended to every key. Default "".

    Returns:
        One level: slash-joined keys to leaves.

    Example:
        >>> flatten({"encoder": {"pooler": {"bias": 0}}})
        {'encoder/pooler/bias': 0}
    """
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _parameters(tree: Mapping[str, Any]) -> Mapping[str, Any]:
    """The parameter tree of a checkpoint: its ``target`` or ``params`` if it has one."""
    return next(
        (tree[key] for key in ("target", "params") if isinstance(tree.get(key), Mapping)), tree
    )


def read_flax_params(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The parameters of a Flax msgpack checkpoint, flattened to slash-joined keys.

    An optimizer checkpoint (``{"target": params, "state": moments}``, what
    Flax's ``save_checkpoint`` wrote for ``flax.optim`` optimizers) gives its
    ``target``, its ``state`` skipped unread; a bare parameter tree (or
    ``{"params": ...}``) is read whole.

    Args:
        path: the checkpoint file.

    Returns:
        ``"encoder/pooler/kernel"`` -> array, for every array of the parameters.

    Raises:
        FlaxCheckpointError: not a Flax msgpack checkpoint of arrays
            (see the module docstring).

    Example:
        >>> read_flax_params("f_net_checkpoint")["encoder/pooler/kernel"].shape  # doctest: +SKIP
        (768, 768)
    """
    return flatten(_parameters(read_flax_checkpoint(path, skip=("state",))))


def read_flax_shapes(path: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """The shapes of a Flax msgpack checkpoint's parameters, without reading their data.

    The parameters of :func:`read_flax_params` (the ``target`` of an
    optimizer checkpoint), each array's header checked and its data skipped.

    Args:
        path: the checkpoint file.

    Returns:
        ``"encoder/pooler/kernel"`` -> shape, for every array of the parameters.

    Raises:
        FlaxCheckpointError: not a Flax msgpack checkpoint of arrays.

    Example:
        >>> read_flax_shapes("f_net_checkpoint")["encoder/pooler/kernel"]  # doctest: +SKIP
        (768, 768)
    """
    tree = _parameters(read_flax_checkpoint(path, skip=("state",), shapes_only=True))
    return {
        key: value.shape if isinstance(value, ArrayShape) else np.shape(value)
        for key, value in flatten(tree).items()
    }
