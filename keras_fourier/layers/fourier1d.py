"""Fourier token mixers for sequences (B, L, C): the 1D global filter and AFNO1D.

The sequence counterparts of :class:`~keras_fourier.layers.fourier.GlobalFilter`
and :class:`~keras_fourier.layers.fourier.AFNO2D`, with the same weight
layouts and conventions: orthonormal real FFT over the sequence axis through
:mod:`keras_fourier.layers.spectral` (``"fft"``: any L, known or not when
tracing; ``"matmul"``: products with DFT tables, which a builtin-only TFLite
converter accepts), float32 transforms and Fourier weights whatever the
dtype policy, `keras.ops` only.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_fourier.layers import spectral
from keras_fourier.layers.fourier import AFNOBase, SpectralFilterBase
from keras_fourier.layers.interpolation import resize_axis_tensor
from keras_fourier.validation import check_optional_size, is_static_size


def _sequence_channels(layer: str, input_shape) -> int:
    """C of a (B, L, C) input shape; C must be static."""
    if len(input_shape) != 3 or input_shape[-1] is None:
        raise ValueError(
            f"{layer} expects sequences (B, L, C) with a static C; "
            f"received input_shape={tuple(input_shape)}."
        )
    return int(input_shape[-1])


def check_sequence_channels(layer: str, channels: int, inputs) -> None:
    """Raises ValueError unless `inputs` are (B, L, C) with the built C."""
    if len(inputs.shape) != 3 or inputs.shape[-1] != channels:
        raise ValueError(
            f"{layer} was built for inputs (B, L, C) with C = {channels}; received inputs "
            f"of shape {tuple(inputs.shape)}."
        )


@keras.saving.register_keras_serializable(package="keras_fourier")
class GlobalFilter1D(SpectralFilterBase):
    """The global filter on sequences: rfft, element-wise learnable complex filter, irfft.

    ``y = irfft(rfft(x, ortho) * K, ortho)`` along the sequence axis, one
    complex filter value per (frequency, channel): a depthwise circular
    convolution with a kernel as long as the sequence, in O(L log L). The
    1D form of GFNet's filter (Rao et al. Eq. (4)-(5) with one spatial
    axis).

    The weight ``complex_weight`` is (n, C, 2), real and imaginary parts
    last as in GFNet's checkpoints, initialised N(0, 0.02), where n is the
    half-spectrum size L // 2 + 1 of the inputs it is made for (the static
    input length at build time) or ``length``. On inputs of another length
    the filter is resized to their half spectrum in the graph, bicubic with
    ``align_corners=True``, as GFNet resizes its 2D filter; at its built
    size it is used as it is.

    Args:
        length: n, the filter's bins in the half spectrum, or None (default)
            for L // 2 + 1 of the input length at build time. Set it to build
            the layer for inputs of unknown length.
        fft_impl: "auto" (default), "fft" or "matmul"; see
            :mod:`keras_fourier.layers.spectral`.
        **kwargs: base `keras.layers.Layer` arguments (name, dtype, ...).

    Call arguments:
        inputs: (B, L, C) tensor with the C the layer was built for and any L.

    Returns:
        Tensor of the same shape and the layer's compute dtype.

    Example:
        >>> layer = GlobalFilter1D()
        >>> layer(keras.ops.ones((2, 16, 8))).shape
        TensorShape([2, 16, 8])

    Reference:
        Rao et al., "Global Filter Networks for Image Classification",
        NeurIPS 2021.
    """

    def __init__(self, length: int | None = None, fft_impl: str = "auto", **kwargs):
        super().__init__(fft_impl=fft_impl, **kwargs)
        self.length = check_optional_size("length", length)

    def build(self, input_shape):
        channels = _sequence_channels("GlobalFilter1D", input_shape)
        bins = self.length
        if bins is None and input_shape[1] is not None:
            bins = int(input_shape[1]) // 2 + 1
        if bins is None:
            raise ValueError(
                "GlobalFilter1D takes its filter size from the input when `length` is None, "
                f"so L must then be static; received input_shape={tuple(input_shape)}."
            )
        self._channels = channels
        self._add_filter((bins, channels, 2))

    def call(self, inputs):
        check_sequence_channels("GlobalFilter1D", self._channels, inputs)
        (length,) = spectral.spatial_dims(inputs, (1,))
        weight = ops.cast(self.complex_weight, "float32")
        weight = resize_axis_tensor(weight, length // 2 + 1, 0, "bicubic", align_corners=True)
        out = spectral.global_filter_1d(inputs, weight, self.fft_impl)
        return ops.cast(out, self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        del config["height"], config["width"]
        return {**config, "length": self.length}


def afno1d_mode_mask(length, fraction: float):
    """(L // 2 + 1,) float32 mask of the modes AFNO1D keeps: the lowest int(fraction * count).

    The rule of NVlabs/AFNO-transformer's AFNO1D (``[:kept_modes]`` with
    ``kept_modes = int((L // 2 + 1) * fraction)``). Static lengths give a
    NumPy array, run-time ones a tensor.
    """
    bins = length // 2 + 1
    if is_static_size(length):
        return (np.arange(bins) < int(bins * fraction)).astype("float32")
    kept = ops.cast(ops.floor(ops.cast(bins, "float64") * fraction), "int32")
    return ops.cast(ops.less(ops.arange(bins), kept), "float32")


@keras.saving.register_keras_serializable(package="keras_fourier")
class AFNO1D(AFNOBase):
    """Adaptive Fourier Neural Operator token mixer for sequences (B, L, C).

    NVlabs/AFNO-transformer's ``afno/afno1d.py``: rfft (ortho) along the
    sequence; per frequency, a two-layer complex MLP with a block-diagonal
    weight (``num_blocks`` blocks) and complex ReLU; soft thresholding
    (``sparsity_threshold``) on the real and imaginary parts; irfft; plus
    the input. Below ``hard_thresholding_fraction`` 1 only the lowest
    ``int((L // 2 + 1) * fraction)`` frequencies are kept, the rest zeroed,
    as the official layer does.

    Weights as :class:`~keras_fourier.layers.fourier.AFNO2D` (the official
    layout, real and imaginary parts first, N(0, 0.02)): ``w1`` (2,
    num_blocks, block_size, block_size * hidden_size_factor), ``b1``, ``w2``,
    ``b2``. No weight depends on L.

    Args:
        num_blocks: number of diagonal blocks, must divide C. Default 8.
        sparsity_threshold: soft-shrink lambda. Default 0.01.
        hard_thresholding_fraction: fraction of the frequencies kept, in
            (0, 1]. Default 1.0.
        hidden_size_factor: width multiplier of the MLP's hidden layer.
            Default 1.
        fft_impl: "auto" (default), "fft" or "matmul".
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, L, C) tensor with the C the layer was built for and any L.

    Returns:
        Tensor of the same shape and the layer's compute dtype.

    Example:
        >>> layer = AFNO1D(num_blocks=4)
        >>> layer(keras.ops.ones((2, 16, 32))).shape
        TensorShape([2, 16, 32])

    Reference:
        Guibas et al., "Adaptive Fourier Neural Operators: Efficient Token
        Mixers for Transformers", ICLR 2022, Eq. (6)-(7).
    """

    def build(self, input_shape):
        self._build_weights(_sequence_channels("AFNO1D", input_shape))

    def call(self, inputs):
        check_sequence_channels("AFNO1D", self._channels, inputs)
        (length,) = spectral.spatial_dims(inputs, (1,))
        real, imag = spectral.rfft(inputs, self.fft_impl)
        mask = None
        if self.hard_thresholding_fraction < 1:
            mask = afno1d_mode_mask(length, self.hard_thresholding_fraction)
        real, imag = self._spectral_mlp(real, imag, (-1, length // 2 + 1, self._channels), mask)
        out = spectral.irfft(real, imag, length, self.fft_impl)
        return ops.cast(out, self.compute_dtype) + ops.cast(inputs, self.compute_dtype)
