"""How layers are traced for LiteRT: with ops its CPU delegate, XNNPACK, runs, and in float
where int8 would lose what matters.

LiteRT hands the ops XNNPACK supports to XNNPACK and runs the others in its
own kernels; every op it keeps cuts the XNNPACK graph in two, and in a
full-integer file each cut is also where int8 tensors leave the fast
kernels. Some ops Keras lowers to are not taken: an uneven split of the
channel axis (SPLIT_V) and ``ops.stack`` (PACK). Layers write such steps
with :func:`split_channels`, which splits as usual for training (a split's
gradient is one concatenation, while each slice's gradient pads a
full-size zero tensor) but, traced inside :func:`tflite_layout`, slices:
STRIDED_SLICE, which XNNPACK runs. The TFLite export traces every file
inside it.

A full-integer file gives every op's output one int8 scale. The complex
products of a spectral filter, ``re = a*c - b*d``, add or subtract two
products whose ranges differ by orders of magnitude (XNNPACK refuses such
an int8 ADD, and its small side rounds to nothing). Layers trace such steps
inside :func:`keep_float`: the export keeps the ops under its name scope
float32 (between DEQUANTIZE and QUANTIZE, which XNNPACK runs) and
quantizes the rest.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Sequence

import keras
from keras import ops

_TFLITE = {"value": False}
# The name scope whose ops a full-integer TFLite file keeps in float32 (see `keep_float`).
KEEP_FLOAT_SCOPE = "keep_float"


@contextlib.contextmanager
def tflite_layout() -> Iterator[None]:
    """Inside: layers trace their channel splits as slices, which XNNPACK runs.

    Example:
        >>> with tflite_layout():
        ...     parts = split_channels(ops.ones((1, 2, 2, 6)), [2, 4])
        >>> [tuple(part.shape) for part in parts]
        [(1, 2, 2, 2), (1, 2, 2, 4)]
    """
    previous = _TFLITE["value"]
    _TFLITE["value"] = True
    try:
        yield
    finally:
        _TFLITE["value"] = previous


def in_tflite_layout() -> bool:
    """Whether layers are traced for a TFLite file, inside :func:`tflite_layout`.

    For layers whose TFLite layout is more than a split: AFBO's channel
    mappings, for one, gather input groups (GATHER) for a block-diagonal
    product (BATCH_MATMUL, which XNNPACK runs in float32 only); traced for
    TFLite they slice each group's window and multiply it by its block
    (STRIDED_SLICE and FULLY_CONNECTED, which XNNPACK runs in int8 too).

    Example:
        >>> in_tflite_layout()
        False
    """
    return _TFLITE["value"]


def split_channels(x, sizes: Sequence[int]) -> list:
    """Splits the last axis of `x` into parts of `sizes` channels (one part: `x` itself).

    Args:
        x: a tensor whose last axis has ``sum(sizes)`` channels.
        sizes: the channels of each part, in order.

    Returns:
        The parts, a list; an ``ops.split`` outside :func:`tflite_layout`,
        slices inside it (the same values).

    Example:
        >>> [tuple(p.shape) for p in split_channels(ops.ones((2, 7)), [1, 2, 4])]
        [(2, 1), (2, 2), (2, 4)]
    """
    if len(sizes) == 1:
        return [x]
    if not _TFLITE["value"]:
        return ops.split(x, list(itertools.accumulate(sizes))[:-1], axis=-1)
    ends = list(itertools.accumulate(sizes))
    return [x[..., end - size : end] for size, end in zip(sizes, ends, strict=True)]


def keep_float() -> keras.name_scope:
    """A name scope: the ops traced inside stay float32 in full-integer TFLite files.

    Only the names change elsewhere: every backend computes as it would
    without it.

    Example:
        >>> with keep_float():
        ...     product = ops.ones((2, 3)) * 2.0
    """
    return keras.name_scope(KEEP_FLOAT_SCOPE)
