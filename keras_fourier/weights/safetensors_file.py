"""Reading ``.safetensors`` files within bounds, without the `safetensors` package.

The format (https://github.com/huggingface/safetensors, "Format") is an
8-byte little-endian header length N, N bytes of JSON mapping each tensor
name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (plus an
optional ``"__metadata__"`` of strings), then the raw little-endian buffer,
the offsets relative to its start. Reading it is a bounded JSON parse and
one bounded read per tensor, so this module does it instead of adding a
compiled dependency: the header may declare at most 100 MiB (the limit the
reference implementation sets) and no more than the file holds; every
tensor's byte range must lie inside the buffer, hold exactly its shape's
bytes and overlap no other, all checked before any tensor is read. The
tensors are returned unread (:class:`~keras_fourier.weights.stored.StoredTensor`):
each is read when the conversion takes it, so a tensor the model has no
place for is never read, whatever the (sparse) file declares. Nothing in the
file is executed. bfloat16 tensors (which NumPy lacks) are read as float32,
as :mod:`keras_fourier.weights.pth` reads them.
"""

from __future__ import annotations

import itertools
import math
import os
from typing import Any

import numpy as np

from keras_fourier.limits import loads_json
from keras_fourier.weights.stored import StoredTensor

MAX_HEADER_BYTES = 100 * 2**20
_DTYPES: dict[str, Any] = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": "bfloat16",
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U64": np.uint64,
    "U32": np.uint32,
    "U16": np.uint16,
    "U8": np.uint8,
    "BOOL": np.bool_,
    "C64": np.complex64,
}


def _itemsize(dtype: str) -> int:
    return 2 if dtype == "BF16" else np.dtype(_DTYPES[dtype]).itemsize


def _entries(path: str, header: Any, data_size: int) -> dict[str, tuple[str, tuple, int, int]]:
    """The header's tensors as name -> (dtype, shape, begin, end), every bound checked."""
    if not isinstance(header, dict):
        raise ValueError(f"{path!r}: the safetensors header is not a JSON object.")
    entries = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise ValueError(f"{path!r}: tensor {name!r} has no dtype, shape and data_offsets.")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in _DTYPES:
            raise ValueError(
                f"{path!r}: tensor {name!r} has dtype {dtype!r}; readable: {sorted(_DTYPES)}."
            )
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise ValueError(f"{path!r}: tensor {name!r} has shape {shape!r}.")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= data_size
        ):
            raise ValueError(
                f"{path!r}: tensor {name!r} has data_offsets {offsets!r} outside the "
                f"{data_size:,}-byte buffer."
            )
        nbytes = math.prod(shape) * _itemsize(dtype)
        if offsets[1] - offsets[0] != nbytes:
            raise ValueError(
                f"{path!r}: tensor {name!r} of shape {shape} and dtype {dtype} takes {nbytes:,} "
                f"bytes but its data_offsets span {offsets[1] - offsets[0]:,}."
            )
        entries[name] = (dtype, tuple(shape), offsets[0], offsets[1])
    ranges = sorted((begin, end, name) for name, (_, _, begin, end) in entries.items())
    for (_, end, first), (begin, _, second) in itertools.pairwise(ranges):
        if begin < end:
            raise ValueError(f"{path!r}: tensors {first!r} and {second!r} overlap.")
    return entries


def _stored(path: str, dtype: str, shape: tuple, begin: int, end: int) -> StoredTensor:
    """The tensor at bytes [begin, end) of the buffer at `begin` of the file, unread."""

    def read() -> np.ndarray:
        try:
            with open(path, "rb") as file:
                file.seek(begin)
                data = file.read(end - begin)
        except OSError as error:
            raise ValueError(f"Cannot read {path!r}: {error}") from error
        if len(data) != end - begin:
            raise ValueError(f"{path!r}: a tensor of shape {shape} is cut short.")
        if dtype == "BF16":
            bits = np.frombuffer(data, "<u2").astype(np.uint32) << 16
            return bits.view(np.float32).reshape(shape)
        return np.frombuffer(data, np.dtype(_DTYPES[dtype]).newbyteorder("<")).reshape(shape)

    result = np.float32 if dtype == "BF16" else np.dtype(_DTYPES[dtype]).newbyteorder("<")
    return StoredTensor(shape, result, read)


def read_safetensors(path: str | os.PathLike) -> dict[str, StoredTensor]:
    """The tensors of a ``.safetensors`` file, checked from its header and read when used.

    Args:
        path: the file.

    Returns:
        Tensor name -> :class:`~keras_fourier.weights.stored.StoredTensor`
        of its dtype (bfloat16 as float32), in the order of the header;
        ``np.asarray`` reads one.

    Raises:
        ValueError: not a safetensors file (a header that does not fit the
            file or is not the format's JSON), a tensor outside the buffer,
            of the wrong byte count or overlapping another, or an unknown
            dtype; nothing is read past the checks.

    Example:
        >>> read_safetensors("model.safetensors")["pooler.dense.weight"].shape  # doctest: +SKIP
        (768, 768)
    """
    path = os.fspath(path)
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as file:
            prefix = file.read(8)
            length = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
            if not 2 <= length <= min(MAX_HEADER_BYTES, size - 8):
                raise ValueError(
                    f"{path!r} is not a safetensors file: its first 8 bytes declare a "
                    f"{length:,}-byte header in a {size:,}-byte file (at most "
                    f"{MAX_HEADER_BYTES:,})."
                )
            text = file.read(length)
    except OSError as error:
        raise ValueError(f"Cannot read {path!r}: {error}") from error
    try:
        header = loads_json(text, f"the header of {path!r}")
    except ValueError as error:
        raise ValueError(
            f"{path!r} is not a safetensors file: its header is not JSON ({error})."
        ) from error
    start = 8 + length
    return {
        name: _stored(path, dtype, shape, start + begin, start + end)
        for name, (dtype, shape, begin, end) in _entries(path, header, size - start).items()
    }
