"""The resolution-dependent tensors of vision models, resized as the official fine-tuning code.

A checkpoint trained at one input size loads into a model of another: its
position embeddings and Fourier filters are interpolated to the model's
token grid or spectrum, every other tensor is kept.

- GFNet filters (h, w, C, 2): bicubic, ``align_corners=True`` over (h, w),
  as the GFNet fine-tuning code;
- position embeddings: bicubic, ``align_corners=False``, as the GFNet and
  AFNO fine-tuning code;
- HorNet global-local filters (C, h, w, 2): bilinear, ``align_corners=True``
  over (h, w). The official layer keeps its 224-pixel filter and resizes it
  to the input's spectrum on every call; here it is resized once, when
  loaded, to the spectrum size of the model's input, which gives the same
  outputs (the same interpolation of the same weights). Fine-tuning then
  trains the resized filter itself.

:func:`resizable_kind` tells, from a Keras variable path, which of these a
variable is; official checkpoints (:mod:`keras_fourier.weights.convert`)
and the package's own files (:mod:`keras_fourier.weights.saved`) both use it.
"""

from __future__ import annotations

import math
import re

import numpy as np

from keras_fourier.layers.interpolation import interpolation_matrix, resize_2d

RESIZABLE = ("pos_embed", "global_filter", "global_local_filter")
# The same tensors in a `.weights.h5`, by dataset name: Keras names a layer's group after
# its class (`global_filter_3`, `position_embedding`) or, inside another layer, after its
# attribute (gnConv's `dwconv`, a GlobalLocalFilter under HorNet's global-filter mixer).
_RESIZABLE_DATASETS = (
    (re.compile(r"(?:^|/)global_filter(?:_\d+)?/vars/0$"), "global_filter"),
    (re.compile(r"(?:^|/)position_embedding(?:_\d+)?/vars/0$"), "pos_embed"),
    (re.compile(r"(?:^|/)dwconv/vars/0$"), "global_local_filter"),
)


def resizable_kind(path: str) -> str | None:
    """The resize of the Keras variable at `path` (one of :data:`RESIZABLE`), or None.

    Args:
        path: a Keras variable path of a keras_fourier vision model.

    Returns:
        "pos_embed", "global_filter" (GFNet), "global_local_filter"
        (HorNet's ``dwconv``), or None for a tensor of fixed size.

    Example:
        >>> resizable_kind("stage2_block0_mixer/dwconv/complex_weight")
        'global_local_filter'
    """
    *owners, name = path.split("/")
    if name == "pos_embed":
        return "pos_embed"
    if name == "complex_weight":
        return "global_local_filter" if owners and owners[-1] == "dwconv" else "global_filter"
    return None


def resizable_dataset_kind(name: str) -> str | None:
    """The resize of a `.weights.h5` dataset (one of :data:`RESIZABLE`), or None.

    Example:
        >>> resizable_dataset_kind("layers/global_filter_3/vars/0")
        'global_filter'
    """
    return next((kind for pattern, kind in _RESIZABLE_DATASETS if pattern.search(name)), None)


def resize_pos_embed(pos_embed: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Official (1, N, C) position embedding -> (1, H, W, C) map of the model's size.

    The checkpoint's N tokens are a square grid (the official models are
    square); when it differs from `size` it is resized bicubically with
    ``align_corners=False``, as the official fine-tuning code of GFNet and
    AFNO does, generalised to non-square targets.

    Args:
        pos_embed: (1, N, C) array with N a perfect square.
        size: (H, W), the model's token grid.

    Returns:
        A float32 array of shape (1, H, W, C).

    Raises:
        ValueError: `pos_embed` is not (1, N, C) with N a perfect square.

    Example:
        >>> resize_pos_embed(np.zeros((1, 196, 8)), (24, 20)).shape
        (1, 24, 20, 8)
    """
    pos_embed = np.asarray(pos_embed)
    side = math.isqrt(pos_embed.shape[1]) if pos_embed.ndim == 3 else 0
    if pos_embed.ndim != 3 or pos_embed.shape[0] != 1 or side * side != pos_embed.shape[1]:
        raise ValueError(
            "A position embedding must be (1, N, C) with N a square number of tokens; "
            f"received shape {pos_embed.shape}."
        )
    return resize_position_map(pos_embed.reshape(1, side, side, pos_embed.shape[2]), size)


def resize_position_map(grid: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(1, h, w, C) position embedding map -> (1, H, W, C): bicubic, align_corners=False.

    The resize of the official GFNet and AFNO fine-tuning code, applied to the
    map a keras_fourier `PositionEmbedding` keeps, per axis where sizes differ.

    Args:
        grid: (1, h, w, C) array.
        size: (H, W), the model's token grid.

    Returns:
        A float32 array of shape (1, H, W, C).

    Example:
        >>> resize_position_map(np.zeros((1, 14, 14, 8)), (24, 20)).shape
        (1, 24, 20, 8)
    """
    grid = np.asarray(grid, dtype=np.float64)
    for axis, out_size in zip((1, 2), size, strict=True):
        if out_size != grid.shape[axis]:
            matrix = interpolation_matrix(
                grid.shape[axis], out_size, "bicubic", align_corners=False
            )
            grid = np.moveaxis(np.tensordot(matrix, grid, axes=([1], [axis])), 0, axis)
    return grid.astype(np.float32)


def resize_global_filter(weight: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """GFNet filter (h, w, C, 2) -> (H', W', C, 2): bicubic, align_corners=True.

    Args:
        weight: official ``complex_weight`` of a GFNet block.
        size: (H', W'), the model's rfft2 size (H, W // 2 + 1).

    Returns:
        A float32 array of shape (H', W', C, 2), `weight` itself resized
        only where the sizes differ.

    Example:
        >>> resize_global_filter(np.zeros((14, 8, 4, 2)), (24, 13)).shape
        (24, 13, 4, 2)
    """
    weight = np.asarray(weight, dtype=np.float32)
    if tuple(weight.shape[:2]) == tuple(size):
        return weight
    return resize_2d(weight, size, axes=(0, 1), mode="bicubic")


def resize_global_local_filter(weight: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """HorNet filter (C, h, w, 2) -> (C, H', W', 2): bilinear, align_corners=True.

    Args:
        weight: official ``complex_weight`` of a HorNet GlobalLocalFilter.
        size: (H', W'), the rfft2 size (H, W // 2 + 1) of its input.

    Returns:
        A float32 array of shape (C, H', W', 2).

    Example:
        >>> resize_global_local_filter(np.zeros((4, 14, 8, 2)), (4, 3)).shape
        (4, 4, 3, 2)
    """
    weight = np.asarray(weight, dtype=np.float32)
    if tuple(weight.shape[1:3]) == tuple(size):
        return weight
    return resize_2d(weight, size, axes=(1, 2), mode="bilinear")


def resize_variable(kind: str | None, value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor saved by keras_fourier (Keras layout) at one input size, for a model of another.

    Resizes the resolution-dependent tensors as the official fine-tuning code
    does (see :func:`resize_global_filter`, :func:`resize_position_map`,
    :func:`resize_global_local_filter`); every other tensor must already have
    `shape`.

    Args:
        kind: the tensor's kind, one of :data:`RESIZABLE` (see
            :func:`resizable_kind`), or None for a tensor of fixed size.
        value: the saved tensor.
        shape: the shape of the model's variable.

    Returns:
        A float32 array of shape `shape`.

    Raises:
        ValueError: the tensor is not resizable or cannot give `shape` (other
            channels, another rank).

    Example:
        >>> resize_variable("global_filter", np.zeros((14, 8, 64, 2)), (24, 13, 64, 2)).shape
        (24, 13, 64, 2)
    """
    out = np.asarray(value, dtype=np.float32)
    shape = tuple(int(d) for d in shape)
    if out.ndim == len(shape) == 4 and kind in RESIZABLE:
        if kind == "pos_embed":
            out = resize_position_map(out, shape[1:3])
        elif kind == "global_filter":
            out = resize_global_filter(out, shape[:2])
        else:
            out = resize_global_local_filter(out, shape[1:3])
    if out.shape != shape:
        raise ValueError(f"saved shape {np.shape(value)} cannot give the model's {shape}")
    return out
