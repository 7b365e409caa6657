"""Separable resizing with PyTorch's ``F.interpolate(..., align_corners=True)`` semantics.

Bilinear and bicubic resizing of a 2D grid are separable: each axis is
resized by its own (out, in) matrix, so the whole resize is two matrix
products. :func:`interpolation_matrix` builds those matrices with NumPy,
:func:`resize_2d` applies them to NumPy arrays (checkpoint conversion) and
:func:`resize_2d_tensor` to backend tensors (inside layers, on every Keras
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
from keras_fourier.validation import check_choice, check_positive_int

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
        if in_size != out_size:
            x = contract_axis(x, _cached_matrix(in_size, out_size, mode, True).T, axis)
    return x
