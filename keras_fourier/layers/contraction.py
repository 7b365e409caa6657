"""One tensor contraction for every constant- or weight-matrix product along an axis.

The matmul DFT of :mod:`keras_fourier.layers.spectral`, the resize matrices
of :mod:`keras_fourier.layers.interpolation`, AFNO's block-diagonal complex
MLP and AFBO's slot matmul all contract one axis of an activation with a
matrix, optionally batched over a second, "group" axis. They share
:func:`contract_axis`, which lowers to transpose, reshape and a 2D (or one
batched 3D) matmul: plain `keras.ops`, so it runs on every backend, compiles
under XLA, and a TFLite converter restricted to builtin ops accepts it.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops


def inferred_shape(dims) -> tuple:
    """`dims` for ``ops.reshape``, the one length known only at run time (if one) as -1.

    A run-time length (a scalar tensor of ``ops.shape``, the batch of a
    traced model) makes the target shape a computed tensor; -1 lets the
    reshape infer it, so that the shape stays a constant (a TFLite RESHAPE
    that LiteRT's XNNPACK runs, with no SHAPE, STRIDED_SLICE and PACK
    beside it). With two or more run-time lengths `dims` is returned as is.

    Args:
        dims: ints and scalar tensors.

    Returns:
        A tuple of the same lengths.

    Example:
        >>> inferred_shape((keras.ops.convert_to_tensor(2), 4, 3))
        (-1, 4, 3)
    """
    dynamic = [i for i, size in enumerate(dims) if not isinstance(size, (int, np.integer))]
    if len(dynamic) != 1:
        return tuple(dims)
    return tuple(-1 if i == dynamic[0] else size for i, size in enumerate(dims))


def contract_axis(x, matrix, axis: int, group_axis: int | None = None):
    """Contracts `axis` of `x` with `matrix`; every other axis keeps its place.

    Without `group_axis`, `matrix` is (n, m) and ``out[..., j, ...] =
    sum_i x[..., i, ...] * matrix[i, j]`` along `axis`. With `group_axis`,
    `matrix` is (g, n, m) and group ``k`` of `x` (index k on `group_axis`,
    length g) is contracted with ``matrix[k]``: a block-diagonal product.

    Args:
        x: tensor; `group_axis`, if given, must have a static length.
        matrix: (n, m) or (g, n, m) tensor or NumPy array; a NumPy array is
            converted to the dtype of `x`. n and m may be known only at run
            time (tables built in the graph for any-size models).
        axis: the contracted axis of `x`, length n; it becomes length m.
        group_axis: optional axis of `x` of length g paired with the
            leading axis of `matrix`. Default None.

    Returns:
        Tensor of the shape of `x` with `axis` resized to m.

    Example:
        >>> contract_axis(keras.ops.ones((2, 5, 3)), np.ones((5, 4)), axis=1).shape
        (2, 4, 3)
    """
    if isinstance(matrix, np.ndarray):
        matrix = ops.convert_to_tensor(matrix, dtype=keras.backend.standardize_dtype(x.dtype))
    rank = len(x.shape)
    axis %= rank
    rest = [i for i in range(rank) if i != axis]
    if group_axis is not None:
        group_axis %= rank
        rest.remove(group_axis)
        rest.insert(0, group_axis)
    perm = [*rest, axis]
    moved = x if perm == list(range(rank)) else ops.transpose(x, perm)
    shape = ops.shape(moved)
    n, m = (
        size if size is not None else ops.shape(matrix)[i]
        for i, size in ((-2, matrix.shape[-2]), (-1, matrix.shape[-1]))
    )
    flat_shape = (-1, n) if group_axis is None else (matrix.shape[0], -1, n)
    out = ops.matmul(ops.reshape(moved, flat_shape), matrix)
    out = ops.reshape(out, inferred_shape((*shape[:-1], m)))
    if perm == list(range(rank)):
        return out
    return ops.transpose(out, np.argsort(perm).tolist())
