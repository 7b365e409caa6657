"""Fourier-domain token mixers: GFNet's global filter, AFNO and FNet mixing.

All take channels-last image tokens (B, H, W, C) and return the same shape;
`FourierMixing` also takes text tokens (B, L, D). Transforms run in float32
through :mod:`keras_fourier.layers.spectral` whatever the dtype policy, and
Fourier parameters are never autocast, so mixed precision keeps full-precision
filters. `FourierMixing` keeps its output in float32 under ``mixed_float16``:
the unnormalised DFT outgrows float16's range on FNet-Base-sized inputs.
Every layer runs on every Keras backend (`keras.ops` only).
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from keras_fourier.layers import spectral
from keras_fourier.layers.contraction import contract_axis
from keras_fourier.layers.interpolation import resize_axis_tensor
from keras_fourier.layers.layout import keep_float
from keras_fourier.validation import (
    check_choice,
    check_optional_size,
    check_positive_int,
    is_static_size,
)


def _image_shape(layer: str, input_shape) -> tuple[int | None, int | None, int]:
    """(H, W, C) of a channels-last input shape; H and W may be None, C must be static."""
    if len(input_shape) != 4 or input_shape[-1] is None:
        raise ValueError(
            f"{layer} expects channels-last inputs (B, H, W, C) with a static C; "
            f"received input_shape={tuple(input_shape)}."
        )
    _, height, width, channels = input_shape
    return height, width, int(channels)


def check_channels(layer: str, channels: int, inputs) -> None:
    """Raises ValueError unless `inputs` are (B, H, W, C) with the built C."""
    if len(inputs.shape) != 4 or inputs.shape[-1] != channels:
        raise ValueError(
            f"{layer} was built for inputs (B, H, W, C) with C = {channels}; received inputs "
            f"of shape {tuple(inputs.shape)}."
        )


def filter_grid(layer, input_shape) -> tuple[int, int]:
    """(h, w) of a filter over the rfft2 grid: `layer.height`/`width`, else the input's."""
    _, height, width, _ = input_shape
    grid_height = height if layer.height is None else layer.height
    grid_width = layer.width
    if grid_width is None and width is not None:
        grid_width = width // 2 + 1
    if grid_height is None or grid_width is None:
        raise ValueError(
            f"{type(layer).__name__} takes its filter size from the input when `height` or "
            "`width` is None, so H and W must then be static; received "
            f"input_shape={tuple(input_shape)} with height={layer.height}, width={layer.width}."
        )
    return int(grid_height), int(grid_width)


class SpectralFilterBase(keras.layers.Layer):
    """Arguments, filter weight and config shared by GlobalFilter and GlobalLocalFilter.

    Subclasses build ``complex_weight`` with :meth:`_add_filter` in their
    official checkpoint's layout and resize it to the input's spectrum in
    `call`; ``height``/``width`` fix the filter's token grid (None: the
    built input's).
    """

    def __init__(
        self,
        height: int | None = None,
        width: int | None = None,
        fft_impl: str = "auto",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.height = check_optional_size("height", height)
        self.width = check_optional_size("width", width)
        self.fft_impl = spectral.validate_fft_impl(fft_impl)

    def _add_filter(self, shape: tuple[int, ...]) -> None:
        """Creates ``complex_weight`` of `shape` (real and imaginary parts last), N(0, 0.02)."""
        self.complex_weight = self.add_weight(
            name="complex_weight",
            shape=shape,
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            autocast=False,
        )

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "height": self.height,
            "width": self.width,
            "fft_impl": self.fft_impl,
        }


@keras.saving.register_keras_serializable(package="keras_fourier")
class GlobalFilter(SpectralFilterBase):
    """GFNet's global filter: rfft2, element-wise learnable complex filter, irfft2.

    ``y = irfft2(rfft2(x, ortho) * K, ortho)`` over the spatial axes, one
    complex filter value per (frequency, channel). This is a depthwise
    circular convolution with a full-size kernel, computed in O(HW log HW).

    The weight ``complex_weight`` has the layout of the official checkpoints,
    (h, w, C, 2) with real and imaginary parts last, initialised N(0, 0.02),
    where (h, w) is the rfft2 size (H, W // 2 + 1) of the inputs it is made
    for: the static input shape at build time, or ``height`` and ``width``.

    Any input size: when the inputs' rfft2 size (H, W // 2 + 1) differs from
    (h, w), the filter is resized to it in the graph, bicubic with
    ``align_corners=True`` over (h, w), as the official GFNet fine-tuning
    code resizes a checkpoint's filter for a new resolution (and as
    :func:`keras_fourier.weights.resize.resize_global_filter` does when
    converting weights). So a layer built for 14 x 14 tokens gives, on
    24 x 20 tokens, the outputs of a layer built for 24 x 20 holding the
    resized filter (to float32 rounding), and at its built size exactly the
    unresized outputs. H and W may be unknown until run time (then the
    resize matrices are built in the graph from the run-time size, see
    :func:`keras_fourier.layers.interpolation.resize_axis_tensor`).

    Args:
        height: h, the filter's rows, or None (default) for the input
            height at build time. Set it, with ``width``, to build the layer
            for inputs of unknown size (any-size models).
        width: w, the filter's columns in the half spectrum, or None
            (default) for W // 2 + 1 of the input width at build time.
        fft_impl: "auto" (default), "fft" or "matmul"; see
            :mod:`keras_fourier.layers.spectral`.
        **kwargs: base `keras.layers.Layer` arguments (name, dtype, ...).

    Call arguments:
        inputs: (B, H, W, C) tensor with the C the layer was built for and
            any H and W.

    Returns:
        Tensor of the same shape and the layer's compute dtype.

    Example:
        >>> layer = GlobalFilter(height=14, width=8)
        >>> layer(keras.ops.ones((2, 14, 14, 32))).shape
        TensorShape([2, 14, 14, 32])
        >>> layer(keras.ops.ones((2, 24, 20, 32))).shape
        TensorShape([2, 24, 20, 32])

    Reference:
        Rao et al., "Global Filter Networks for Image Classification",
        NeurIPS 2021, Eq. (4)-(5).
    """

    def build(self, input_shape):
        _, _, channels = _image_shape("GlobalFilter", input_shape)
        grid_height, grid_width = filter_grid(self, input_shape)
        self._channels = channels
        self._add_filter((grid_height, grid_width, channels, 2))

    def call(self, inputs):
        check_channels("GlobalFilter", self._channels, inputs)
        height, width = spectral.spatial_dims(inputs, (1, 2))
        weight = ops.cast(self.complex_weight, "float32")
        weight = resize_axis_tensor(weight, height, 0, "bicubic", align_corners=True)
        weight = resize_axis_tensor(weight, width // 2 + 1, 1, "bicubic", align_corners=True)
        out = spectral.global_filter(inputs, weight, self.fft_impl)
        return ops.cast(out, self.compute_dtype)


def _block_matmul(x, weight):
    """(..., nb, i) x (nb, i, o) -> (..., nb, o): one matmul per diagonal block."""
    return contract_axis(x, weight, axis=-1, group_axis=-2)


def _soft_shrink(x, threshold: float):
    return ops.relu(x - threshold) - ops.relu(-x - threshold)


def low_frequency_mask(height: int, width: int, fraction: float) -> np.ndarray:
    """(H, W // 2 + 1) mask keeping the lowest `fraction` of modes on both axes.

    Along H (a full FFT axis) a bin's frequency is min(k, H - k); along W
    (the half spectrum) it is k. Of the H // 2 + 1 (resp. W // 2 + 1)
    distinct frequencies, the lowest int(fraction * count) are kept.
    """
    if not is_static_size(height, width):
        return _low_frequency_mask_tensor(height, width, fraction)
    kept_h = int((height // 2 + 1) * fraction)
    kept_w = int((width // 2 + 1) * fraction)
    rows = np.arange(height)
    freq_h = np.minimum(rows, height - rows)
    freq_w = np.arange(width // 2 + 1)
    return ((freq_h[:, None] < kept_h) & (freq_w[None, :] < kept_w)).astype("float32")


def _low_frequency_mask_tensor(height, width, fraction: float):
    """:func:`low_frequency_mask` from sizes known only at run time, as a float32 tensor."""

    def kept(count):
        return ops.cast(ops.floor(ops.cast(count, "float64") * fraction), "int32")

    rows = ops.arange(height)
    freq_h = ops.minimum(rows, height - rows)
    freq_w = ops.arange(width // 2 + 1)
    keep_h = ops.less(freq_h, kept(height // 2 + 1))[:, None]
    keep_w = ops.less(freq_w, kept(width // 2 + 1))[None, :]
    return ops.cast(ops.logical_and(keep_h, keep_w), "float32")


# The rules that pick the modes AFNO2D keeps below hard_thresholding_fraction 1 (see AFNO2D).
MODE_SLICINGS = ("low_frequency", "fourcastnet")


def fourcastnet_mode_mask(height: int, width: int, fraction: float) -> np.ndarray:
    """(H, W // 2 + 1) mask of the modes NVlabs/FourCastNet's AFNO2D keeps.

    With ``T = H // 2 + 1`` and ``K = int(T * fraction)``, FourCastNet
    processes the half spectrum's rows ``T - K`` to ``T + K - 1`` (clipped
    to H) and its columns below K, and zeroes the rest. Both bounds come
    from the height: at fraction 1 every row is kept, but on a grid wider
    than tall only the columns below H // 2 + 1 (on 90 x 180 tokens, 46 of
    the 91); below 1 the row window is centred on the Nyquist row, so it
    keeps the highest row frequencies and drops the lowest.
    """
    if not is_static_size(height, width):
        return _fourcastnet_mode_mask_tensor(height, width, fraction)
    total = height // 2 + 1
    kept = int(total * fraction)
    rows = np.arange(height)
    keep_rows = (rows >= total - kept) & (rows < total + kept)
    keep_cols = np.arange(width // 2 + 1) < kept
    return (keep_rows[:, None] & keep_cols[None, :]).astype("float32")


def _fourcastnet_mode_mask_tensor(height, width, fraction: float):
    """:func:`fourcastnet_mode_mask` from sizes known only at run time, as a float32 tensor."""
    total = height // 2 + 1
    kept = ops.cast(ops.floor(ops.cast(total, "float64") * fraction), "int32")
    rows = ops.arange(height)
    keep_rows = ops.logical_and(
        ops.greater_equal(rows, total - kept), ops.less(rows, total + kept)
    )[:, None]
    keep_cols = ops.less(ops.arange(width // 2 + 1), kept)[None, :]
    return ops.cast(ops.logical_and(keep_rows, keep_cols), "float32")


class AFNOBase(keras.layers.Layer):
    """Arguments, weights and the spectral MLP shared by AFNO2D and AFNO1D.

    Subclasses transform their inputs, call :meth:`_spectral_mlp` on the
    half spectrum (channels last) with their mode mask, transform back and
    add the input.
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
        if (
            isinstance(sparsity_threshold, bool)
            or not isinstance(sparsity_threshold, (int, float))
            or not math.isfinite(sparsity_threshold)
            or sparsity_threshold < 0
        ):
            raise ValueError(
                "`sparsity_threshold` must be a finite number >= 0. "
                f"Received: sparsity_threshold={sparsity_threshold!r}"
            )
        if (
            isinstance(hard_thresholding_fraction, bool)
            or not isinstance(hard_thresholding_fraction, (int, float))
            or not 0 < hard_thresholding_fraction <= 1
        ):
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

    def _build_weights(self, channels: int) -> None:
        """``w1``, ``b1``, ``w2``, ``b2`` in the official layout, N(0, 0.02)."""
        layer = type(self).__name__
        if channels % self.num_blocks:
            raise ValueError(
                f"{layer} needs channels divisible by `num_blocks`; received {channels} "
                f"channels with num_blocks={self.num_blocks}."
            )
        self._channels = channels
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

    def _complex_block_linear(self, real, imag, weight, bias):
        weight = ops.cast(weight, "float32")
        bias = ops.cast(bias, "float32")
        out_real = _block_matmul(real, weight[0]) - _block_matmul(imag, weight[1]) + bias[0]
        out_imag = _block_matmul(imag, weight[0]) + _block_matmul(real, weight[1]) + bias[1]
        return out_real, out_imag

    def _spectral_mlp(self, real, imag, spectrum_shape, mask):
        """Block MLP, mode mask and soft shrink of a (..., C) half spectrum.

        Args:
            real, imag: float32 half spectrum, channels last.
            spectrum_shape: its shape, -1 for the batch.
            mask: None or a float32 mask broadcastable to the spectrum
                without its channel axis (the modes kept), as a NumPy array
                or tensor.
        """
        channels = self._channels
        block_shape = (*spectrum_shape[:-1], self.num_blocks, channels // self.num_blocks)
        # In int8 TFLite files float32: sums of complex products (see layers.layout), and
        # block-diagonal products, which XNNPACK runs in float32 but not in int8.
        with keep_float():
            real = ops.reshape(real, block_shape)
            imag = ops.reshape(imag, block_shape)
            real, imag = self._complex_block_linear(real, imag, self.w1, self.b1)
            real, imag = ops.relu(real), ops.relu(imag)
            real, imag = self._complex_block_linear(real, imag, self.w2, self.b2)
            if mask is not None:
                mask = ops.convert_to_tensor(mask)[..., None, None]
                real, imag = real * mask, imag * mask
            real = ops.reshape(_soft_shrink(real, self.sparsity_threshold), spectrum_shape)
            imag = ops.reshape(_soft_shrink(imag, self.sparsity_threshold), spectrum_shape)
        return real, imag

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
class AFNO2D(AFNOBase):
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
    The MLP runs on every mode; the modes not kept are zeroed after it
    (which gives the numbers of official code that computes the kept modes
    only).

    Which modes are kept (``mode_slicing``):

    * ``"low_frequency"`` (default): the lowest ``hard_thresholding_fraction``
      of the modes along both H and W, the rest zeroed (see
      :func:`low_frequency_mask`): the paper's "truncating" of high
      frequencies in both directions. At 1.0 every mode is kept, which is
      exactly NVlabs/AFNO-transformer's AFNO2D at 1.0 (the value its
      training scripts use) on any grid. Below 1.0 that code slices the W
      axis only, and counts its modes from the number of tokens N // 2 + 1
      rather than W // 2 + 1, so it keeps far more modes than intended; this
      rule does not reproduce it there.
    * ``"fourcastnet"``: NVlabs/FourCastNet's AFNO2D exactly, at every
      fraction and grid (see :func:`fourcastnet_mode_mask`): rows
      ``[T - K : T + K]`` and columns ``[:K]`` of the half spectrum, with
      ``T = H // 2 + 1`` and ``K = int(T * hard_thresholding_fraction)``.
      At 1.0 this keeps every mode only when W // 2 <= H // 2: on
      FourCastNet's 90 x 180 token grid it keeps the columns 0-45 of 0-90,
      so the default rule and FourCastNet agree at 1.0 on square grids (and
      grids taller than wide) only.

    No weight depends on the input size, so one layer runs at any H and W
    (known or not when tracing); the mask follows the inputs' size.

    Args:
        num_blocks: number of diagonal blocks, must divide C. Default 8.
        sparsity_threshold: soft-shrink lambda. Default 0.01.
        hard_thresholding_fraction: fraction of modes kept, in (0, 1].
            Default 1.0.
        hidden_size_factor: width multiplier of the MLP's hidden layer.
            Default 1.
        fft_impl: "auto" (default), "fft" or "matmul".
        mode_slicing: "low_frequency" (default) or "fourcastnet", the rule
            that picks the kept modes (above).
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, H, W, C) tensor with the C the layer was built for and
            any H and W.

    Returns:
        Tensor of the same shape and the layer's compute dtype.

    Example:
        >>> layer = AFNO2D(num_blocks=4)
        >>> layer(keras.ops.ones((2, 8, 8, 32))).shape
        TensorShape([2, 8, 8, 32])
        >>> AFNO2D(num_blocks=4, mode_slicing="fourcastnet")(keras.ops.ones((1, 4, 8, 8))).shape
        TensorShape([1, 4, 8, 8])

    Reference:
        Guibas et al., "Adaptive Fourier Neural Operators: Efficient Token
        Mixers for Transformers", ICLR 2022, Eq. (6)-(7); Pathak et al.,
        "FourCastNet: A Global Data-driven High-resolution Weather Model
        using Adaptive Fourier Neural Operators", arXiv:2202.11214.
    """

    def __init__(
        self,
        num_blocks: int = 8,
        sparsity_threshold: float = 0.01,
        hard_thresholding_fraction: float = 1.0,
        hidden_size_factor: int = 1,
        fft_impl: str = "auto",
        mode_slicing: str = "low_frequency",
        **kwargs,
    ):
        super().__init__(
            num_blocks=num_blocks,
            sparsity_threshold=sparsity_threshold,
            hard_thresholding_fraction=hard_thresholding_fraction,
            hidden_size_factor=hidden_size_factor,
            fft_impl=fft_impl,
            **kwargs,
        )
        self.mode_slicing = check_choice("mode_slicing", mode_slicing, MODE_SLICINGS)

    def build(self, input_shape):
        _, _, channels = _image_shape("AFNO2D", input_shape)
        self._build_weights(channels)

    def _mode_mask(self, height, width):
        if self.mode_slicing == "fourcastnet":
            return fourcastnet_mode_mask(height, width, self.hard_thresholding_fraction)
        if self.hard_thresholding_fraction < 1:
            return low_frequency_mask(height, width, self.hard_thresholding_fraction)
        return None

    def call(self, inputs):
        check_channels("AFNO2D", self._channels, inputs)
        height, width = spectral.spatial_dims(inputs, (1, 2))
        real, imag = spectral.rfft2(inputs, self.fft_impl)
        spectrum_shape = (-1, height, width // 2 + 1, self._channels)
        real, imag = self._spectral_mlp(real, imag, spectrum_shape, self._mode_mask(height, width))
        out = spectral.irfft2(real, imag, width, self.fft_impl)
        return ops.cast(out, self.compute_dtype) + ops.cast(inputs, self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), "mode_slicing": self.mode_slicing}


@keras.saving.register_keras_serializable(package="keras_fourier")
class FourierMixing(keras.layers.Layer):
    """FNet's parameter-free token mixing: the real part of a multi-axis DFT.

    For text tokens (B, L, D): ``Re(F_seq(F_hidden(x)))``, the unnormalised
    2D DFT over (sequence, hidden). For image tokens (B, H, W, D): the 2D
    spatial DFT plus the hidden-dimension DFT, ``Re(F_H F_W F_D x)``, as the
    FNet baseline of GFNet's Table 6.

    The DFT is unnormalised, so its output grows with the number of mixed
    elements: (1, 512, 768) inputs of mean 0.2 give values near 78,600,
    beyond float16's 65,504. The transform runs in float32, and under a
    float16 compute dtype (``mixed_float16``) the output stays float32; the
    residual add and LayerNorm that follow in FNet then run in float32 too.
    Other policies get their compute dtype (bfloat16 has float32's range).

    Args:
        fft_impl: "auto" (default), "fft" or "matmul".
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, L, D) or (B, H, W, D) tensor with a static D; L (or H,
            W) may be unknown until run time.

    Returns:
        Tensor of the same shape and the layer's compute dtype, or float32
        when the compute dtype is float16.

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
        if len(input_shape) not in (3, 4) or input_shape[-1] is None:
            raise ValueError(
                "FourierMixing expects (B, L, D) or (B, H, W, D) inputs with a static D; "
                f"received input_shape={tuple(input_shape)}."
            )

    def call(self, inputs):
        out = spectral.fourier_mix_real(inputs, self.fft_impl)
        return ops.cast(out, self._output_dtype())

    def _output_dtype(self) -> str:
        return "float32" if self.compute_dtype == "float16" else self.compute_dtype

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(inputs.shape, dtype=self._output_dtype())

    def get_config(self):
        return {**super().get_config(), "fft_impl": self.fft_impl}
