"""HorNet's recursive gated convolution (gnConv) and its global-local filter.

Both take channels-last image tokens (B, H, W, C) and return the same shape.
Sublayer names and weight layouts follow the official PyTorch code, so its
checkpoints map onto these layers one tensor at a time.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_fourier.layers import spectral
from keras_fourier.layers.fourier import SpectralFilterBase, check_channels, filter_grid
from keras_fourier.layers.interpolation import resize_axis_tensor
from keras_fourier.layers.layout import split_channels
from keras_fourier.validation import check_choice, check_optional_size

SPATIAL_MIXINGS = ("dwconv", "global_local")


def _channels_last_shape(layer: str, input_shape) -> tuple:
    if len(input_shape) != 4 or input_shape[-1] is None:
        raise ValueError(
            f"{layer} expects channels-last inputs (B, H, W, C) with a static C; "
            f"received input_shape={tuple(input_shape)}."
        )
    return tuple(input_shape)


@keras.saving.register_keras_serializable(package="keras_fourier")
class GlobalLocalFilter(SpectralFilterBase):
    """HorNet's GF layer: half the channels by a 3x3 depthwise conv, half by a global filter.

    ``pre_norm`` (LayerNorm over channels, eps 1e-6), then the first C/2
    channels go through ``dw``, a 3x3 depthwise conv without bias, and the
    last C/2 through a GFNet global filter: rfft2 (ortho), element-wise
    product with the learnable complex filter, irfft2 (ortho). The two halves
    are interleaved, output channel 2i from the depthwise half and 2i+1 from
    the filter half, as the official code's stack-and-reshape does, and
    ``post_norm`` (LayerNorm, eps 1e-6) follows.

    The filter ``complex_weight`` has the official layout (C/2, h, w, 2),
    real and imaginary parts last, where (h, w) is the rfft2 size
    (H, W // 2 + 1) of the inputs it was made for. When the inputs' rfft2
    size differs, the filter is resized over (h, w) bilinearly with
    ``align_corners=True``, as the official code's ``F.interpolate`` does
    (see :mod:`keras_fourier.layers.interpolation`), so one layer runs at any
    resolution, non-square included, and at its built size gives exactly the
    unresized outputs. H and W may be unknown until run time (any-size
    models): the resize matrices are then built in the graph from the
    run-time size. The transforms run in float32 and the
    filter is never autocast.

    Initialisation: ``complex_weight`` is drawn from N(0, 0.02^2). The
    official code calls timm's ``trunc_normal_(std=0.02)``, whose cut-off is
    the absolute interval [-2, 2], i.e. 100 standard deviations, so its draws
    are this normal distribution. ``dw`` and the norms keep the Keras
    defaults (Glorot-uniform kernel, unit scale, zero offset).

    Args:
        height: h, the filter's first spatial size, or None (default) for
            the input height at build time. Set it, with ``width``, to hold a
            checkpoint's filter (14 for HorNet's 224-pixel stage 3) or to
            build the layer for inputs of unknown size.
        width: w, the filter's second size in the half spectrum, or None
            (default) for W // 2 + 1 of the input width at build time (8 for
            HorNet's 224-pixel stage 3).
        fft_impl: "auto" (default), "fft" or "matmul"; see
            :mod:`keras_fourier.layers.spectral`.
        **kwargs: base `keras.layers.Layer` arguments (name, dtype, ...).

    Call arguments:
        inputs: (B, H, W, C) tensor with the even C the layer was built for.

    Returns:
        Tensor of the same shape and the layer's compute dtype.

    Example:
        >>> layer = GlobalLocalFilter(height=14, width=8)
        >>> layer(keras.ops.ones((2, 24, 20, 32))).shape
        TensorShape([2, 24, 20, 32])

    Reference:
        Rao et al., "HorNet: Efficient High-Order Spatial Interactions with
        Recursive Gated Convolutions", NeurIPS 2022, Section 3.1 (Global
        Filter); Rao et al., "Global Filter Networks for Image
        Classification", NeurIPS 2021, Eq. (4)-(5).
    """

    def build(self, input_shape):
        batch, height, width, channels = _channels_last_shape("GlobalLocalFilter", input_shape)
        if channels % 2:
            raise ValueError(
                "GlobalLocalFilter splits the channels into two halves, so C must be even; "
                f"received input_shape={tuple(input_shape)}."
            )
        filter_height, filter_width = filter_grid(self, input_shape)
        half = channels // 2
        self._channels = channels
        self.pre_norm = keras.layers.LayerNormalization(
            epsilon=1e-6, dtype=self.dtype_policy, name="pre_norm"
        )
        self.pre_norm.build(input_shape)
        self.dw = keras.layers.DepthwiseConv2D(
            3, padding="same", use_bias=False, dtype=self.dtype_policy, name="dw"
        )
        self.dw.build((batch, height, width, half))
        self._add_filter((half, filter_height, filter_width, 2))
        self.post_norm = keras.layers.LayerNormalization(
            epsilon=1e-6, dtype=self.dtype_policy, name="post_norm"
        )
        self.post_norm.build(input_shape)

    def _filter(self, spectrum_size: tuple):
        """The complex filter as (h, w, C/2, 2) float32, resized to `spectrum_size`."""
        weight = ops.transpose(ops.cast(self.complex_weight, "float32"), [1, 2, 0, 3])
        for axis, size in enumerate(spectrum_size):
            weight = resize_axis_tensor(weight, size, axis, "bilinear", align_corners=True)
        return weight

    def call(self, inputs):
        check_channels("GlobalLocalFilter", self._channels, inputs)
        height, width = spectral.spatial_dims(inputs, (1, 2))
        x = self.pre_norm(inputs)
        # ops.split rather than slices: the gradient of a split is one concat, while
        # each slice's gradient pads a full-size zero tensor (StridedSliceGrad).
        local_half, global_half = ops.split(x, 2, axis=-1)
        local = self.dw(local_half)
        weight = self._filter((height, width // 2 + 1))
        glob = spectral.global_filter(global_half, weight, self.fft_impl)
        glob = ops.cast(glob, self.compute_dtype)
        # The halves reshaped to (..., C/2, 1) and concatenated rather than stacked: the same
        # interleaving, with ops LiteRT's XNNPACK runs (it takes neither PACK nor EXPAND_DIMS).
        half = (-1, height, width, self._channels // 2, 1)
        pairs = ops.concatenate([ops.reshape(local, half), ops.reshape(glob, half)], axis=-1)
        x = ops.reshape(pairs, (-1, height, width, self._channels))
        return self.post_norm(x)


@keras.saving.register_keras_serializable(package="keras_fourier")
class GnConv(keras.layers.Layer):
    """HorNet's recursive gated convolution g^n Conv.

    With width C (``filters``, by default the input's channels) and
    ``order`` n, the per-order widths are ``dims = [C // 2**(n-1), ..., C //
    2, C]`` (C_k = C / 2^(n-k-1)). ``proj_in`` (1x1 conv, input channels ->
    2C, bias) gives p_0 (dims[0] channels) and q (sum(dims) channels);
    ``dwconv`` mixes q spatially, its output is multiplied by ``scale`` and
    split into q_0 .. q_{n-1} of widths dims; then ``p_1 = p_0 * q_0`` and
    ``p_{k+1} = pws_{k-1}(p_k) * q_k``, where ``pws_i`` is a 1x1 conv
    dims[i] -> dims[i+1] with bias; ``proj_out`` (1x1 conv, C -> C, bias)
    maps p_n to the output. A ``filters`` other than the input's channels is
    the ``GNConvModule`` of HorFPN (UPerNet's fused 4C-channel map to C). Multiplying the single
    depthwise output by ``scale`` applies the paper's 1/alpha at every
    recursion step, as the official code does.

    ``dwconv`` is a ``kernel_size`` x ``kernel_size`` depthwise conv with
    bias and zero "same" padding (``spatial_mixing="dwconv"``, HorNet_7x7),
    or a :class:`GlobalLocalFilter` over the sum(dims) channels
    (``spatial_mixing="global_local"``, HorNet_GF) whose filter takes the
    input's spatial size at build time, or ``filter_size``. Conv weights keep the Keras defaults
    (Glorot-uniform, zero bias), which equal the official
    ``uniform_init=True`` option; the official default draws them from
    N(0, 0.02^2) at the model level.

    Args:
        order: interaction order n >= 1; C must be divisible by 2**(n-1).
            Default 3.
        spatial_mixing: "dwconv" (default) or "global_local".
        kernel_size: odd size of the depthwise kernel. Default 7. Unused by
            "global_local", whose local half is a fixed 3x3 conv.
        scale: factor on the spatial mixing output, 1/alpha in the paper.
            Default 1/3, the value of every official HorNet model.
        fft_impl: "auto" (default), "fft" or "matmul"; used by
            "global_local".
        filter_size: (h, w) of the global-local filter (its ``height`` and
            ``width``), or None (default) for the rfft2 size of the input at
            build time. Set it to build a "global_local" layer for inputs of
            unknown size. Unused by "dwconv".
        **kwargs: base `keras.layers.Layer` arguments (name, dtype, ...).

    Call arguments:
        inputs: (B, H, W, C) tensor; with "global_local", H and W must be
            static at build time unless ``filter_size`` is set, and C must
            be divisible by 2**n so that the filter's sum(dims) channels
            split in halves (C is ``filters`` when set).

    Returns:
        Tensor of the inputs' shape (``filters`` channels when set) and the
        layer's compute dtype.

    Example:
        >>> layer = GnConv(order=3)
        >>> layer(keras.ops.ones((2, 14, 14, 64))).shape
        TensorShape([2, 14, 14, 64])

    Reference:
        Rao et al., "HorNet: Efficient High-Order Spatial Interactions with
        Recursive Gated Convolutions", NeurIPS 2022, Eq. (3.2)-(3.5).
    """

    def __init__(
        self,
        order: int = 3,
        spatial_mixing: str = "dwconv",
        kernel_size: int = 7,
        scale: float = 1 / 3,
        fft_impl: str = "auto",
        filter_size: tuple[int, int] | None = None,
        filters: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.filters = check_optional_size("filters", filters)
        if filter_size is not None:
            if not isinstance(filter_size, (tuple, list)) or len(filter_size) != 2:
                raise ValueError(
                    f"`filter_size` must be None or (height, width). Received: {filter_size=}"
                )
            filter_size = tuple(
                check_optional_size(f"filter_size[{i}]", v) for i, v in enumerate(filter_size)
            )
            if None in filter_size:
                raise ValueError(
                    f"`filter_size` must be two positive ints. Received: {filter_size=}"
                )
        if isinstance(order, bool) or not isinstance(order, int) or order < 1:
            raise ValueError(f"`order` must be an int >= 1. Received: {order=}")
        check_choice("spatial_mixing", spatial_mixing, SPATIAL_MIXINGS)
        if (
            isinstance(kernel_size, bool)
            or not isinstance(kernel_size, int)
            or kernel_size < 1
            or kernel_size % 2 == 0
        ):
            raise ValueError(f"`kernel_size` must be a positive odd int. Received: {kernel_size=}")
        if (
            isinstance(scale, bool)
            or not isinstance(scale, (int, float))
            or not math.isfinite(scale)
        ):
            raise ValueError(f"`scale` must be a finite number. Received: {scale=}")
        self.order = order
        self.spatial_mixing = spatial_mixing
        self.kernel_size = kernel_size
        self.scale = scale
        self.fft_impl = spectral.validate_fft_impl(fft_impl)
        self.filter_size = filter_size

    def build(self, input_shape):
        batch, height, width, channels = _channels_last_shape("GnConv", input_shape)
        channels = self.filters or channels
        if channels % 2 ** (self.order - 1):
            raise ValueError(
                f"GnConv needs C divisible by 2**(order - 1) = {2 ** (self.order - 1)}; "
                f"received C={channels} with order={self.order}."
            )
        if self.spatial_mixing == "global_local" and channels % 2**self.order:
            raise ValueError(
                "GnConv(spatial_mixing='global_local') needs C divisible by 2**order = "
                f"{2**self.order} so that the global-local filter's channels split in halves; "
                f"received C={channels} with order={self.order}."
            )
        self._dims = [channels // 2**i for i in range(self.order)][::-1]
        mixed = sum(self._dims)

        def conv1x1(filters: int, name: str) -> keras.layers.Conv2D:
            return keras.layers.Conv2D(filters, 1, dtype=self.dtype_policy, name=name)

        self.proj_in = conv1x1(2 * channels, "proj_in")
        self.proj_in.build(input_shape)
        if self.spatial_mixing == "dwconv":
            self.dwconv = keras.layers.DepthwiseConv2D(
                self.kernel_size, padding="same", dtype=self.dtype_policy, name="dwconv"
            )
        else:
            filter_height, filter_width = self.filter_size or (None, None)
            self.dwconv = GlobalLocalFilter(
                height=filter_height,
                width=filter_width,
                fft_impl=self.fft_impl,
                dtype=self.dtype_policy,
                name="dwconv",
            )
        self.dwconv.build((batch, height, width, mixed))
        self.pws = []
        for i in range(self.order - 1):
            layer = conv1x1(self._dims[i + 1], f"pws_{i}")
            layer.build((batch, height, width, self._dims[i]))
            self.pws.append(layer)
        self.proj_out = conv1x1(channels, "proj_out")
        self.proj_out.build((batch, height, width, channels))

    def call(self, inputs):
        # Splits for training (one concat as gradient), slices for TFLite (see layout).
        p, q_in = split_channels(self.proj_in(inputs), [self._dims[0], sum(self._dims)])
        mixed = self.dwconv(q_in) * self.scale
        q = split_channels(mixed, self._dims)
        x = p * q[0]
        for pw, q_k in zip(self.pws, q[1:], strict=True):
            x = pw(x) * q_k
        return self.proj_out(x)

    def compute_output_shape(self, input_shape):
        return (*tuple(input_shape)[:-1], self.filters or input_shape[-1])

    def get_config(self):
        return {
            **super().get_config(),
            "filters": self.filters,
            "order": self.order,
            "spatial_mixing": self.spatial_mixing,
            "kernel_size": self.kernel_size,
            "scale": self.scale,
            "fft_impl": self.fft_impl,
            "filter_size": self.filter_size,
        }
