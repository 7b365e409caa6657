"""Separable resizing with PyTorch's ``F.interpolate(..., align_corners=True)`` semantics.

Bilinear and bicubic resizing of a 2D grid are separable: each axis is
resized by its own (out, in) matrix, so the whole resize is two matrix
products. :func:`interpolation_matrix` builds those matrices with NumPy from
static sizes, :func:`interpolation_matrix_tensor` builds the same matrices
in the graph with `keras.ops` from sizes that may be run-time scalars (the
any-size models traced with unknown H and W), :func:`resize_2d` applies them
to NumPy arrays (checkpoint conversion), :func:`resize_2d_tensor` and
:func:`resize_axis_tensor` to backend tensors (inside layers, on every Keras
backend). The tensor version contracts each axis with a constant matrix
through :func:`~keras_fourier.layers.contraction.contract_axis` (transposes,
reshapes and ``matmul`` only), so it is exact, differentiable, and accepted
by XLA and by a TFLite converter restricted to builtin ops.

With ``align_corners=True`` output index ``j`` of an axis reads the input at
``j * (in - 1) / (out - 1)`` (0 when ``out == 1``), so the first and last
samples of both grids coincide. ``"bilinear"`` interpolates linearly between
the two neighbours; ``"bicubic"`` uses the cubic convolution kernel with
``A = -0.75`` on the four neighbours, clamping their indices to the border,
exactly as PyTorch does.
"""

from __future__ import annotations

import functools

import numpy as np
from keras import ops

from keras_fourier.layers.contraction import contract_axis
from keras_fourier.validation import check_choice, check_positive_int, is_static_size

MODES = ("bilinear", "bicubic")
CUBIC_A = -0.75


def _check_axes(axes, rank: int) -> tuple[int, int]:
    if len(axes) != 2 or any(not -rank <= axis < rank for axis in axes):
        raise ValueError(
            f"`axes` must be two axes of a rank-{rank} array. Received: axes={tuple(axes)}"
        )
    first, second = (axis % rank for axis in axes)
    if first == second:
        raise ValueError(f"`axes` must name two different axes. Received: axes={tuple(axes)}")
    return first, second


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    """(n, 4) weights of the neighbours at offsets -1, 0, 1, 2 for fractions t in [0, 1)."""
    a = CUBIC_A

    def near(x):  # |x| <= 1
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a

    return np.stack([far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)], axis=-1)


@functools.lru_cache(maxsize=256)
def _cached_matrix(in_size: int, out_size: int, mode: str, align_corners: bool) -> np.ndarray:
    if align_corners:
        # j * (in - 1) / (out - 1), rounded once so that the last output lands on in - 1 exactly.
        source = np.arange(out_size, dtype=np.float64) * (in_size - 1) / max(out_size - 1, 1)
    else:
        # Half-pixel centres, PyTorch's align_corners=False.
        source = (np.arange(out_size, dtype=np.float64) + 0.5) * in_size / out_size - 0.5
        if mode == "bilinear":
            source = np.maximum(source, 0.0)
    base = np.floor(source).astype(np.int64)
    frac = source - base
    if mode == "bilinear":
        offsets = np.array([0, 1])
        weights = np.stack([1.0 - frac, frac], axis=-1)
    else:
        offsets = np.array([-1, 0, 1, 2])
        weights = _cubic_weights(frac)
    columns = np.clip(base[:, None] + offsets[None, :], 0, in_size - 1)
    rows = np.broadcast_to(np.arange(out_size)[:, None], columns.shape)
    matrix = np.zeros((out_size, in_size), dtype=np.float64)
    np.add.at(matrix, (rows, columns), weights)
    matrix.setflags(write=False)
    return matrix


def interpolation_matrix(
    in_size: int, out_size: int, mode: str = "bilinear", align_corners: bool = True
) -> np.ndarray:
    """(out_size, in_size) float64 matrix resizing one axis like PyTorch.

    ``matrix @ v`` equals ``F.interpolate`` of the 1D signal ``v`` along one
    axis of a bilinear or bicubic resize with the given ``align_corners``.

    Args:
        in_size: length of the input axis, a positive int.
        out_size: length of the output axis, a positive int.
        mode: "bilinear" (default) or "bicubic".
        align_corners: PyTorch's flag. Default True (the HorNet and GFNet
            filter resizes); False gives half-pixel centres (the GFNet
            position-embedding resize).

    Returns:
        A new float64 array of shape (out_size, in_size); its rows sum to 1.

    Example:
        >>> interpolation_matrix(2, 3)
        array([[1. , 0. ],
               [0.5, 0.5],
               [0. , 1. ]])
    """
    in_size = check_positive_int("in_size", in_size)
    out_size = check_positive_int("out_size", out_size)
    return _cached_matrix(
        in_size, out_size, check_choice("mode", mode, MODES), bool(align_corners)
    ).copy()


def interpolation_matrix_tensor(
    in_size, out_size, mode: str = "bilinear", align_corners: bool = True
):
    """(out_size, in_size) float32 tensor equal to :func:`interpolation_matrix`, built in the graph.

    Indices and weights come from ``arange``, ``floor`` and ``clip`` of the
    sizes, so the sizes may be scalar tensors known only at run time (a
    TensorFlow graph traced with unknown height and width). The source
    positions are computed in float32, so entries differ from the float64
    NumPy matrix by float32 rounding (below 1e-6). Source positions are
    kept as integer fractions, so their floors are exact and, when
    ``in_size == out_size``, every fraction is exactly 0, the cubic kernel's
    weights exactly 0, 1, 0, 0, and the matrix exactly the identity.

    Args:
        in_size: length of the input axis, a positive int or int scalar tensor.
        out_size: length of the output axis, a positive int or int scalar tensor.
        mode: "bilinear" (default) or "bicubic".
        align_corners: PyTorch's flag. Default True.

    Returns:
        A float32 tensor of shape (out_size, in_size).

    Example:
        >>> keras.ops.convert_to_numpy(interpolation_matrix_tensor(2, 3))
        array([[1. , 0. ],
               [0.5, 0.5],
               [0. , 1. ]], dtype=float32)
    """
    check_choice("mode", mode, MODES)
    for name, size in (("in_size", in_size), ("out_size", out_size)):
        if is_static_size(size):
            check_positive_int(name, int(size))
    columns = ops.cast(ops.arange(in_size), "float32")
    matrix = 0.0
    for neighbour, weight in _taps(in_size, out_size, mode, align_corners):
        hit = ops.cast(
            ops.equal(ops.cast(neighbour, "float32")[:, None], columns[None, :]), "float32"
        )
        matrix = matrix + hit * weight[:, None]
    return matrix


def _taps(in_size, out_size, mode: str, align_corners: bool) -> list:
    """[(int32 input index, float32 weight) per neighbour], each (out_size,), in the graph."""
    # The source position num / den of each output index, in integers so that its floor is
    # exact on every backend (float division may round 21 / 7 below 3 under XLA).
    index = ops.arange(out_size, dtype="int32")
    in_i = ops.cast(in_size, "int32")
    out_i = ops.cast(out_size, "int32")
    if align_corners:  # j * (in - 1) / (out - 1)
        num = index * (in_i - 1)
        den = ops.maximum(out_i - 1, 1)
    else:  # (j + 0.5) * in / out - 0.5
        num = (2 * index + 1) * in_i - out_i
        den = 2 * out_i
        if mode == "bilinear":
            num = ops.maximum(num, 0)
    base = ops.floor_divide(num, den)
    frac = ops.cast(num - base * den, "float32") / ops.cast(den, "float32")
    if mode == "bilinear":
        offsets = (0, 1)
        weights = [1.0 - frac, frac]
    else:
        offsets = (-1, 0, 1, 2)
        weights = list(ops.unstack(_cubic_weights_tensor(frac), num=4, axis=-1))
    return [
        (ops.clip(base + offset, 0, in_i - 1), weight)
        for offset, weight in zip(offsets, weights, strict=True)
    ]


def _cubic_weights_tensor(t):
    """keras.ops twin of :func:`_cubic_weights`: (n, 4) weights for fractions t."""
    a = CUBIC_A

    def near(x):
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0

    def far(x):
        return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a

    return ops.stack([far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)], axis=-1)


def resize_axis_tensor(x, out_size, axis: int, mode: str = "bilinear", align_corners: bool = True):
    """Resizes one axis of a backend tensor to `out_size`, static or run-time.

    With static lengths (Python ints on both sides) this is the constant
    NumPy matrix of :func:`interpolation_matrix` (skipped when the lengths
    are equal), exactly as :func:`resize_2d_tensor`. When either length is
    known only at run time, the resize is a weighted sum of the two (bilinear)
    or four (bicubic) neighbours gathered with ``take``, indices and weights
    computed in the graph as in :func:`interpolation_matrix_tensor`: no
    matmul, so no reduced-precision matmul on any device, XLA-compatible
    (the sizes fold to constants once the input shape is known), and a
    run-time identity resize returns `x` exactly (weights 0, 1, 0, 0).

    Args:
        x: floating-point tensor.
        out_size: new length of `axis`, a positive int or int scalar tensor.
        axis: the axis to resize.
        mode: "bilinear" (default) or "bicubic".
        align_corners: PyTorch's flag. Default True.

    Returns:
        Tensor of the dtype of `x` with `axis` of length `out_size`.

    Example:
        >>> resize_axis_tensor(keras.ops.zeros((4, 14, 8)), 20, axis=1).shape
        (4, 20, 8)
    """
    x = ops.convert_to_tensor(x)
    check_choice("mode", mode, MODES)
    axis = _check_axis(axis, len(x.shape))
    in_size = x.shape[axis]
    if is_static_size(in_size) and is_static_size(out_size):
        out_size = check_positive_int("out_size", int(out_size))
        if in_size == out_size:
            return x
        matrix = _cached_matrix(in_size, out_size, mode, bool(align_corners))
        return contract_axis(x, matrix.T, axis)
    if in_size is None:
        in_size = ops.shape(x)[axis]
    out = 0.0
    broadcast = [1] * len(x.shape)
    broadcast[axis] = -1
    for neighbour, weight in _taps(in_size, out_size, mode, align_corners):
        out = out + ops.take(x, neighbour, axis=axis) * ops.reshape(
            ops.cast(weight, x.dtype), broadcast
        )
    return out


def _check_axis(axis: int, rank: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, int) or not -rank <= axis < rank:
        raise ValueError(f"`axis` must be an axis of a rank-{rank} tensor. Received: {axis=}")
    return axis % rank


def _check_resize_args(size, mode: str) -> tuple[int, int]:
    if len(size) != 2:
        raise ValueError(f"`size` must be (height, width). Received: size={tuple(size)}")
    check_choice("mode", mode, MODES)
    return check_positive_int("size[0]", size[0]), check_positive_int("size[1]", size[1])


def resize_2d(
    x: np.ndarray, size: tuple[int, int], axes: tuple[int, int] = (0, 1), mode: str = "bilinear"
) -> np.ndarray:
    """Resizes two axes of a NumPy array like ``F.interpolate(align_corners=True)``.

    Args:
        x: array of any rank >= 2.
        size: (out_0, out_1), the new lengths of ``axes[0]`` and ``axes[1]``.
        axes: the two axes to resize. Default (0, 1).
        mode: "bilinear" (default) or "bicubic".

    Returns:
        Resized array, computed in float64 and returned in the dtype of
        ``x`` when that is floating point, else float64.

    Example:
        >>> resize_2d(np.zeros((8, 14, 8, 2)), (24, 13), axes=(1, 2)).shape
        (8, 24, 13, 2)
    """
    x = np.asarray(x)
    out_sizes = _check_resize_args(size, mode)
    dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64
    out = x.astype(np.float64)
    for axis, out_size in zip(_check_axes(axes, x.ndim), out_sizes, strict=True):
        matrix = _cached_matrix(x.shape[axis], out_size, mode, True)
        out = np.moveaxis(np.tensordot(matrix, out, axes=([1], [axis])), 0, axis)
    return out.astype(dtype)


def resize_2d_tensor(
    x, size: tuple[int, int], axes: tuple[int, int] = (0, 1), mode: str = "bilinear"
):
    """Backend-tensor version of :func:`resize_2d`: two matmuls with constant matrices.

    Args:
        x: floating-point tensor whose two resized axes have static lengths.
        size: (out_0, out_1), the new lengths of ``axes[0]`` and ``axes[1]``.
        axes: the two axes to resize. Default (0, 1).
        mode: "bilinear" (default) or "bicubic".

    Returns:
        Tensor of the dtype of ``x``; an axis whose length already equals
        its target is left untouched (the resize is the identity there).

    Example:
        >>> resize_2d_tensor(keras.ops.zeros((8, 14, 8, 2)), (24, 13), axes=(1, 2)).shape
        (8, 24, 13, 2)
    """
    x = ops.convert_to_tensor(x)
    out_sizes = _check_resize_args(size, mode)
    for axis, out_size in zip(_check_axes(axes, len(x.shape)), out_sizes, strict=True):
        in_size = x.shape[axis]
        if in_size is None:
            raise ValueError(
                f"resize_2d_tensor needs static lengths on `axes`; received shape {x.shape} "
                f"with axes={tuple(axes)}."
            )
        x = resize_axis_tensor(x, out_size, axis, mode, align_corners=True)
    return x
