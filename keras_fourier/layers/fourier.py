"""Fourier-domain token mixers: GFNet's global filter, AFNO and FNet mixing.

All take channels-last image tokens (B, H, W, C) and return the same shape;
`FourierMixing` also takes text tokens (B, L, D). Transforms run in float32
through :mod:`keras_fourier.layers.spectral` whatever the dtype policy, and
Fourier parameters are never autocast, so mixed precision keeps full-precision
filters.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from keras_fourier.layers import spectral
from keras_fourier.validation import check_positive_int


def _static_image_shape(layer: str, input_shape) -> tuple[int, int, int]:
    if len(input_shape) != 4:
        raise ValueError(
            f"{layer} expects channels-last inputs (B, H, W, C); "
            f"received input_shape={tuple(input_shape)}."
        )
    _, height, width, channels = input_shape
    if height is None or width is None or channels is None:
        raise ValueError(
            f"{layer} builds a filter for a fixed spatial size, so H, W and C must be static; "
            f"received input_shape={tuple(input_shape)}."
        )
    return int(height), int(width), int(channels)


def _check_spatial_match(layer: str, built: tuple[int, int], inputs) -> None:
    got = (inputs.shape[1], inputs.shape[2])
    if got != built:
        raise ValueError(
            f"{layer} was built for spatial size {built} and cannot run on inputs of "
            f"shape {tuple(inputs.shape)}; build a new layer (or model) for this size."
        )


@keras.saving.register_keras_serializable(package="keras_fourier")
class GlobalFilter(keras.layers.Layer):
    """GFNet's global filter: rfft2, element-wise learnable complex filter, irfft2.

    ``y = irfft2(rfft2(x, ortho) * K, ortho)`` over the spatial axes, one
    complex filter value per (frequency, channel). This is a depthwise
    circular convolution with a full-size kernel, computed in O(HW log HW).

    The weight ``complex_weight`` has the layout of the official checkpoints,
    (H, W // 2 + 1, C, 2) with real and imaginary parts last, initialised
    N(0, 0.02). H and W are taken from the static input shape at build time.

    Args:
        fft_impl: "auto" (default), "fft" or "matmul"; see
            :mod:`keras_fourier.layers.spectral`.
        **kwargs: base `keras.layers.Layer` arguments (name, dtype, ...).

    Call arguments:
        inputs: (B, H, W, C) tensor with the H and W the layer was built for.

    Returns:
        Tensor of the same shape and the layer's compute dtype.

    Example:
        >>> layer = GlobalFilter()
        >>> layer(keras.ops.ones((2, 14, 14, 32))).shape
        TensorShape([2, 14, 14, 32])

    Reference:
        Rao et al., "Global Filter Networks for Image Classification",
        NeurIPS 2021, Eq. (4)-(5).
    """

    def __init__(self, fft_impl: str = "auto", **kwargs):
        super().__init__(**kwargs)
        self.fft_impl = spectral.validate_fft_impl(fft_impl)

    def build(self, input_shape):
        height, width, channels = _static_image_shape("GlobalFilter", input_shape)
        self._spatial = (height, width)
        self.complex_weight = self.add_weight(
            name="complex_weight",
            shape=(height, width // 2 + 1, channels, 2),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            autocast=False,
        )

    def call(self, inputs):
        _check_spatial_match("GlobalFilter", self._spatial, inputs)
        out = spectral.global_filter(inputs, self.complex_weight, self.fft_impl)
        return tf.cast(out, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "fft_impl": self.fft_impl}


def _block_matmul(x, weight):
    """(..., nb, i) x (nb, i, o) -> (..., nb, o) with builtin-friendly ops."""
    num_blocks, block_in, block_out = weight.shape
    leading = tf.shape(x)[:-2]
    flat = tf.transpose(tf.reshape(x, [-1, num_blocks, block_in]), [1, 0, 2])
    out = tf.transpose(tf.matmul(flat, weight), [1, 0, 2])
    return tf.reshape(out, tf.concat([leading, [num_blocks, block_out]], axis=0))


def _soft_shrink(x, threshold: float):
    return tf.nn.relu(x - threshold) - tf.nn.relu(-x - threshold)


def low_frequency_mask(height: int, width: int, fraction: float) -> np.ndarray:
    """(H, W // 2 + 1) mask keeping the lowest `fraction` of modes on both axes.

    Along H (a full FFT axis) a bin's frequency is min(k, H - k); along W
    (the half spectrum) it is k. Of the H // 2 + 1 (resp. W // 2 + 1)
    distinct frequencies, the lowest int(fraction * count) are kept.
    """
    kept_h = int((height // 2 + 1) * fraction)
    kept_w = int((width // 2 + 1) * fraction)
    rows = np.arange(height)
    freq_h = np.minimum(rows, height - rows)
    freq_w = np.arange(width // 2 + 1)
    return ((freq_h[:, None] < kept_h) & (freq_w[None, :] < kept_w)).astype("float32")


@keras.saving.register_keras_serializable(package="keras_fourier")
class AFNO2D(keras.layers.Layer):
    """Adaptive Fourier Neural Operator token mixer.

    rfft2 (ortho) over space; per frequency, a two-layer complex MLP with a
    block-diagonal weight (``num_blocks`` blocks) and complex ReLU; soft
    thresholding (``sparsity_threshold``) for sparsity; irfft2; plus the
    input, as the official AFNO2D adds its own residual.

    Weights follow the official layout, with real and imaginary parts on the
    first axis, all initialised N(0, 0.02): ``w1`` (2, num_blocks,
    block_size, block_size * hidden_size_factor), ``b1`` (2, num_blocks,
    block_size * hidden_size_factor), ``w2`` (2, num_blocks, block_size *
    hidden_size_factor, block_size), ``b2`` (2, num_blocks, block_size).

    ``hard_thresholding_fraction`` keeps the lowest fraction of modes along
    both H and W and zeroes the rest (see :func:`low_frequency_mask`). The
    official NVlabs code slices only the W axis, and counts its modes from
    the number of tokens N // 2 + 1 rather than W // 2 + 1, so below 1.0 it
    keeps far more modes than intended; this layer implements the paper's
    intent, "truncating" high frequencies in both directions. At 1.0 (the
    default) the two agree exactly.

    Args:
        num_blocks: number of diagonal blocks, must divide C. Default 8.
        sparsity_threshold: soft-shrink lambda. Default 0.01.
        hard_thresholding_fraction: fraction of modes kept, in (0, 1].
            Default 1.0.
        hidden_size_factor: width multiplier of the MLP's hidden layer.
            Default 1.
        fft_impl: "auto" (default), "fft" or "matmul".
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, H, W, C) tensor with the H and W the layer was built for.

    Returns:
        Tensor of the same shape and the layer's compute dtype.

    Example:
        >>> layer = AFNO2D(num_blocks=4)
        >>> layer(keras.ops.ones((2, 8, 8, 32))).shape
        TensorShape([2, 8, 8, 32])

    Reference:
        Guibas et al., "Adaptive Fourier Neural Operators: Efficient Token
        Mixers for Transformers", ICLR 2022, Eq. (6)-(7).
    """

    def __init__(
        self,
        num_blocks: int = 8,
        sparsity_threshold: float = 0.01,
        hard_thresholding_fraction: float = 1.0,
        hidden_size_factor: int = 1,
        fft_impl: str = "auto",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("num_blocks", num_blocks)
        if sparsity_threshold < 0:
            raise ValueError(f"`sparsity_threshold` must be >= 0. Received: {sparsity_threshold=}")
        if not 0 < hard_thresholding_fraction <= 1:
            raise ValueError(
                "`hard_thresholding_fraction` must be in (0, 1]. "
                f"Received: {hard_thresholding_fraction=}"
            )
        check_positive_int("hidden_size_factor", hidden_size_factor)
        self.num_blocks = num_blocks
        self.sparsity_threshold = sparsity_threshold
        self.hard_thresholding_fraction = hard_thresholding_fraction
        self.hidden_size_factor = hidden_size_factor
        self.fft_impl = spectral.validate_fft_impl(fft_impl)

    def build(self, input_shape):
        height, width, channels = _static_image_shape("AFNO2D", input_shape)
        if channels % self.num_blocks:
            raise ValueError(
                f"AFNO2D needs channels divisible by `num_blocks`; received {channels} "
                f"channels with num_blocks={self.num_blocks}."
            )
        self._spatial = (height, width)
        block = channels // self.num_blocks
        hidden = block * self.hidden_size_factor
        init = keras.initializers.RandomNormal(stddev=0.02)
        shapes = {
            "w1": (2, self.num_blocks, block, hidden),
            "b1": (2, self.num_blocks, hidden),
            "w2": (2, self.num_blocks, hidden, block),
            "b2": (2, self.num_blocks, block),
        }
        for name, shape in shapes.items():
            setattr(
                self,
                name,
                self.add_weight(name=name, shape=shape, initializer=init, autocast=False),
            )
        self._mask = None
        if self.hard_thresholding_fraction < 1:
            self._mask = low_frequency_mask(height, width, self.hard_thresholding_fraction)

    def _complex_block_linear(self, real, imag, weight, bias):
        weight = tf.cast(weight, tf.float32)
        bias = tf.cast(bias, tf.float32)
        out_real = _block_matmul(real, weight[0]) - _block_matmul(imag, weight[1]) + bias[0]
        out_imag = _block_matmul(imag, weight[0]) + _block_matmul(real, weight[1]) + bias[1]
        return out_real, out_imag

    def call(self, inputs):
        _check_spatial_match("AFNO2D", self._spatial, inputs)
        channels = inputs.shape[-1]
        real, imag = spectral.rfft2(inputs, self.fft_impl)
        spectrum_shape = tf.shape(real)
        block_shape = tf.concat(
            [spectrum_shape[:-1], [self.num_blocks, channels // self.num_blocks]], axis=0
        )
        real = tf.reshape(real, block_shape)
        imag = tf.reshape(imag, block_shape)
        real, imag = self._complex_block_linear(real, imag, self.w1, self.b1)
        real, imag = tf.nn.relu(real), tf.nn.relu(imag)
        real, imag = self._complex_block_linear(real, imag, self.w2, self.b2)
        if self._mask is not None:
            mask = tf.constant(self._mask[:, :, None, None])
            real, imag = real * mask, imag * mask
        real = tf.reshape(_soft_shrink(real, self.sparsity_threshold), spectrum_shape)
        imag = tf.reshape(_soft_shrink(imag, self.sparsity_threshold), spectrum_shape)
        out = spectral.irfft2(real, imag, self._spatial[1], self.fft_impl)
        return tf.cast(out, self.compute_dtype) + tf.cast(inputs, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "num_blocks": self.num_blocks,
            "sparsity_threshold": self.sparsity_threshold,
            "hard_thresholding_fraction": self.hard_thresholding_fraction,
            "hidden_size_factor": self.hidden_size_factor,
            "fft_impl": self.fft_impl,
        }


@keras.saving.register_keras_serializable(package="keras_fourier")
class FourierMixing(keras.layers.Layer):
    """FNet's parameter-free token mixing: the real part of a multi-axis DFT.

    For text tokens (B, L, D): ``Re(F_seq(F_hidden(x)))``, the unnormalised
    2D DFT over (sequence, hidden). For image tokens (B, H, W, D): the 2D
    spatial DFT plus the hidden-dimension DFT, ``Re(F_H F_W F_D x)``, as the
    FNet baseline of GFNet's Table 6.

    Args:
        fft_impl: "auto" (default), "fft" or "matmul".
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, L, D) or (B, H, W, D) tensor with static non-batch axes.

    Returns:
        Tensor of the same shape and the layer's compute dtype.

    Example:
        >>> layer = FourierMixing()
        >>> layer(keras.ops.ones((2, 16, 8))).shape
        TensorShape([2, 16, 8])

    Reference:
        Lee-Thorp et al., "FNet: Mixing Tokens with Fourier Transforms",
        NAACL 2022, Eq. (3).
    """

    def __init__(self, fft_impl: str = "auto", **kwargs):
        super().__init__(**kwargs)
        self.fft_impl = spectral.validate_fft_impl(fft_impl)

    def build(self, input_shape):
        if len(input_shape) not in (3, 4) or any(d is None for d in input_shape[1:]):
            raise ValueError(
                "FourierMixing expects (B, L, D) or (B, H, W, D) inputs with static "
                f"non-batch dimensions; received input_shape={tuple(input_shape)}."
            )

    def call(self, inputs):
        return tf.cast(spectral.fourier_mix_real(inputs, self.fft_impl), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "fft_impl": self.fft_impl}
