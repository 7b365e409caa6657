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
inside it; layers whose TFLite layout is more than a split ask
:func:`in_tflite_layout`. Dense layers on token grids go through
:func:`on_flat_tokens` (2D products, no ``tf.tensordot`` shape arithmetic
on the batch) in every trace.

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
from collections.abc import Callable, Iterator, Sequence

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


def on_flat_tokens(function: Callable, x):
    """`function` of the (tokens, C) rows of `x`, reshaped back to the tokens' shape.

    For channel-wise layers (Dense, an MLP): with static non-batch
    dimensions the token axes are flattened by constant-shape reshapes, so
    each Dense is one 2D matmul. A Dense on a rank > 2 tensor goes through
    ``tf.tensordot``, whose shape arithmetic on the dynamic batch (SHAPE,
    GATHER, REDUCE_PROD, PACK) stays in exported TFLite graphs, outside
    XNNPACK. Otherwise (a rank <= 2 `x`, or a length unknown until run time)
    `function` gets `x` as it is.

    Args:
        function: maps (N, C) to (N, C') and acts on each row alone.
        x: a tensor with channels last.

    Returns:
        ``function`` of `x`, of the shape of `x` with C' channels.

    Example:
        >>> on_flat_tokens(lambda rows: rows[:, :2], ops.ones((2, 3, 4, 5))).shape
        TensorShape([2, 3, 4, 2])
    """
    shape = x.shape
    if len(shape) <= 2 or None in shape[1:]:
        return function(x)
    out = function(ops.reshape(x, (-1, shape[-1])))
    return ops.reshape(out, (-1, *shape[1:-1], out.shape[-1]))


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
