"""FNet's baseline token mixers: two matrices along the sequence and the hidden axes.

The "Linear" and "Random" encoders of the FNet paper (Section 4.1) replace
each self-attention sublayer by ``y = S x H`` on a (L, D) sequence: one
(L, L) matrix mixing the tokens and one (D, D) matrix mixing the hidden
units, no bias, no nonlinearity. :class:`LinearMixing` learns both
(initialised N(0, 0.02) as the official ``LinearTransform``);
:class:`RandomMixing` keeps both fixed at LeCun-normal random values drawn
from a seed (as the official ``RandomTransform``), non-trainable weights
saved with the model.

The sequence matrix is sized for ``max_sequence_length`` tokens; a shorter
input of length L uses its leading (L, L) block, so one model takes any
length up to the maximum (the official code builds the matrix at the padded
length and runs there only).

Reference:
    Lee-Thorp, Ainslie, Eckstein, Ontanon, "FNet: Mixing Tokens with Fourier
    Transforms", NAACL 2022, Section 4.1 and Table 2.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_fourier.layers.contraction import contract_axis
from keras_fourier.layers.layout import on_flat_tokens
from keras_fourier.validation import check_positive_int

LINEAR_STDDEV = 0.02


def lecun_normal_matrix(size: int, seed: int) -> np.ndarray:
    """A (size, size) LeCun-normal matrix drawn with NumPy from `seed`: the same on every backend.

    Truncated normal at two standard deviations, scaled to variance 1 / size
    (Flax's ``lecun_normal``, whose truncated normal has its own stddev
    corrected to 1).

    Example:
        >>> lecun_normal_matrix(4, seed=0).shape
        (4, 4)
    """
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((size, size))
    outside = np.abs(values) > 2.0
    while outside.any():
        values[outside] = rng.standard_normal(int(outside.sum()))
        outside = np.abs(values) > 2.0
    # The stddev of a standard normal truncated to [-2, 2].
    truncated_stddev = 0.87962566103423978
    return (values / truncated_stddev / np.sqrt(size)).astype("float32")


class _TwoMatrixMixing(keras.layers.Layer):
    """``y[b, n, k] = sum_ij sequence_kernel[n, i] x[b, i, j] hidden_kernel[j, k]`` on (B, L, D)."""

    _trainable_kernels = True

    def __init__(self, max_sequence_length: int, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("max_sequence_length", max_sequence_length)
        self.max_sequence_length = max_sequence_length

    def _check_shape(self, input_shape) -> int:
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                f"{type(self).__name__} expects (B, L, D) inputs with a static D; received "
                f"input_shape={tuple(input_shape)}."
            )
        length = input_shape[1]
        if length is not None and length > self.max_sequence_length:
            raise ValueError(
                f"{type(self).__name__} takes at most max_sequence_length="
                f"{self.max_sequence_length} tokens; received input_shape={tuple(input_shape)}."
            )
        return int(input_shape[-1])

    def _add_kernels(self, hidden: int, initializer) -> None:
        self.sequence_kernel = self.add_weight(
            shape=(self.max_sequence_length, self.max_sequence_length),
            initializer=initializer,
            trainable=self._trainable_kernels,
            name="sequence_kernel",
        )
        self.hidden_kernel = self.add_weight(
            shape=(hidden, hidden),
            initializer=initializer,
            trainable=self._trainable_kernels,
            name="hidden_kernel",
        )

    def call(self, inputs):
        length = inputs.shape[1] if inputs.shape[1] is not None else ops.shape(inputs)[1]
        hidden_kernel = ops.cast(self.hidden_kernel, inputs.dtype)
        sequence_kernel = ops.cast(self.sequence_kernel, inputs.dtype)[:length, :length]
        mixed = on_flat_tokens(lambda rows: ops.matmul(rows, hidden_kernel), inputs)
        # out[b, n] = sum_i S[n, i] mixed[b, i]: contract the sequence axis with S^T.
        return contract_axis(mixed, ops.transpose(sequence_kernel), axis=1)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "max_sequence_length": self.max_sequence_length}


@keras.saving.register_keras_serializable(package="keras_fourier")
class LinearMixing(_TwoMatrixMixing):
    """The paper's "Linear" mixing: learned (L, L) sequence and (D, D) hidden matrices.

    ``y = S[:L, :L] x H`` for a (B, L, D) input: ``sequence_kernel`` S
    (max_sequence_length, max_sequence_length) mixes the tokens,
    ``hidden_kernel`` H (D, D) the hidden units; no bias. Both are
    initialised N(0, 0.02), as the official ``LinearTransform`` (whose
    ``seq_kernel`` and ``hidden_kernel`` have these layouts). At FNet-Base
    size (512 tokens, D = 768) it learns 512^2 + 768^2 = 851,968 parameters
    per layer, the 93M of the paper's Table 2.

    Args:
        max_sequence_length: rows and columns of the sequence matrix, the
            longest input the layer takes.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, L, D) tensor, L <= max_sequence_length (L may be
            unknown until run time), D static.

    Returns:
        Tensor (B, L, D).

    Example:
        >>> LinearMixing(max_sequence_length=16)(keras.ops.ones((2, 8, 4))).shape
        TensorShape([2, 8, 4])

    Reference:
        Lee-Thorp et al., "FNet: Mixing Tokens with Fourier Transforms",
        NAACL 2022, Section 4.1.
    """

    def build(self, input_shape):
        hidden = self._check_shape(input_shape)
        self._add_kernels(hidden, keras.initializers.RandomNormal(stddev=LINEAR_STDDEV))


@keras.saving.register_keras_serializable(package="keras_fourier")
class RandomMixing(_TwoMatrixMixing):
    """The paper's "Random" mixing: fixed random (L, L) sequence and (D, D) hidden matrices.

    ``y = S[:L, :L] x H`` as :class:`LinearMixing`, with S and H fixed:
    LeCun-normal matrices drawn with NumPy from `seed` (hidden matrix) and
    `seed` + 1 (sequence matrix), the same on every backend
    (:func:`lecun_normal_matrix`), as the official ``RandomTransform``.
    They are non-trainable weights: saved and loaded with the model, never
    updated, and not counted among the learned parameters (the paper's
    Random-Base has FNet's 83M).

    Args:
        max_sequence_length: rows and columns of the sequence matrix, the
            longest input the layer takes.
        seed: the NumPy seed of the matrices. Default 0.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, L, D) tensor, L <= max_sequence_length, D static.

    Returns:
        Tensor (B, L, D).

    Example:
        >>> layer = RandomMixing(max_sequence_length=16, seed=3)
        >>> layer(keras.ops.ones((2, 8, 4))).shape, layer.trainable_weights
        (TensorShape([2, 8, 4]), [])

    Reference:
        Lee-Thorp et al., "FNet: Mixing Tokens with Fourier Transforms",
        NAACL 2022, Section 4.1.
    """

    _trainable_kernels = False

    def __init__(self, max_sequence_length: int, seed: int = 0, **kwargs):
        super().__init__(max_sequence_length, **kwargs)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"`seed` must be a non-negative int. Received: seed={seed!r}")
        self.seed = int(seed)

    def build(self, input_shape):
        hidden = self._check_shape(input_shape)
        self._add_kernels(hidden, "zeros")
        self.hidden_kernel.assign(lecun_normal_matrix(hidden, self.seed))
        self.sequence_kernel.assign(lecun_normal_matrix(self.max_sequence_length, self.seed + 1))

    def get_config(self):
        return {**super().get_config(), "seed": self.seed}
