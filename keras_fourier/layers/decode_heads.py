"""Decode heads of semantic segmentation: UPerNet, its auxiliary FCN head, Semantic FPN, SegFormer.

Channels-last Keras twins of mmsegmentation's ``UPerHead``, ``FCNHead``,
``FPN`` neck with ``FPNHead`` (Semantic FPN) and ``SegformerHead``, written
from their published definitions with `keras.ops` only, so they run on every
Keras backend. Every head takes a list of feature maps ``[(B, H_i, W_i,
C_i), ...]`` (strides 4, 8, 16, 32 for the four-stage heads) and returns
class logits at the resolution of the first map; the model resizes them to
the input.

Conventions that make an mmsegmentation ``state_dict`` map onto these layers
by a key map and transposes (see ``keras_fourier.segmentation.checkpoints``):

* a :class:`ConvModule` is mmcv's ``ConvModule``: ``conv`` (no bias when
  followed by a norm) then ``bn`` (BatchNorm, eps 1e-5, PyTorch momentum 0.1)
  then ReLU; its variables are ``conv/kernel``, ``bn/gamma`` ... exactly as
  mmcv's ``conv.weight``, ``bn.weight`` ...;
* the i-th module of an mmsegmentation ``ModuleList`` called ``lateral_convs``
  is the sublayer ``lateral_convs_{i}``;
* every classifier is ``conv_seg`` (1x1 conv with bias) after ``dropout``
  (channel dropout, PyTorch's ``Dropout2d``).

Every resize is bilinear with ``align_corners=False`` (PyTorch's
half-pixel centres) but the FPN neck's top-down path, which is nearest, as
mmsegmentation's defaults; pyramid pooling averages over PyTorch's
adaptive-average-pool bins (bin i of n over a length L covers
``[floor(i L / n), ceil((i + 1) L / n))``, so 6 bins on a length of 4
overlap). Sizes may be known only at run time (any-size models).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_fourier.layers.contraction import contract_axis
from keras_fourier.layers.hornet import GnConv
from keras_fourier.layers.interpolation import resize_axis_tensor
from keras_fourier.validation import (
    check_bool,
    check_choice,
    check_positive_int,
    check_rate,
    is_static_size,
)

# PyTorch BatchNorm2d's defaults (mmcv's BN and SyncBN): eps 1e-5, running-stat momentum 0.1.
BN_EPSILON = 1e-5
BN_MOMENTUM = 0.9


def resize_bilinear(x, size):
    """Resizes (B, H, W, C) to (B, h, w, C) like ``F.interpolate(bilinear, align_corners=False)``.

    Args:
        x: channels-last tensor.
        size: (h, w), ints or int scalar tensors (run-time sizes).

    Returns:
        The resized tensor, in the dtype of `x`; axes whose size is unchanged
        are returned as they are.

    Example:
        >>> resize_bilinear(keras.ops.ones((1, 4, 4, 2)), (8, 8)).shape
        (1, 8, 8, 2)
    """
    for axis, out_size in zip((1, 2), size, strict=True):
        x = resize_axis_tensor(x, out_size, axis, mode="bilinear", align_corners=False)
    return x


def resize_nearest(x, size):
    """Resizes (B, H, W, C) to (B, h, w, C) like ``F.interpolate(mode="nearest")``.

    Output index j reads input ``floor(j * H / h)``, in integers.

    Args:
        x: channels-last tensor.
        size: (h, w), ints or int scalar tensors.

    Returns:
        The resized tensor.
    """
    for axis, out_size in zip((1, 2), size, strict=True):
        in_size = x.shape[axis]
        if is_static_size(in_size) and is_static_size(out_size) and in_size == out_size:
            continue
        if in_size is None:
            in_size = ops.shape(x)[axis]
        index = ops.floor_divide(
            ops.arange(out_size, dtype="int32") * ops.cast(in_size, "int32"),
            ops.cast(out_size, "int32"),
        )
        x = ops.take(x, index, axis=axis)
    return x


def adaptive_pool_matrix(in_size: int, bins: int) -> np.ndarray:
    """(in_size, bins) float64 averaging matrix of PyTorch's ``AdaptiveAvgPool`` over one axis.

    Args:
        in_size: the axis length.
        bins: the output length.

    Returns:
        Column i averages ``[floor(i L / n), ceil((i + 1) L / n))``.

    Example:
        >>> adaptive_pool_matrix(3, 2)
        array([[1. , 0. ],
               [0.5, 0.5],
               [0. , 1. ]])
    """
    matrix = np.zeros((in_size, bins))
    for i in range(bins):
        start = (i * in_size) // bins
        end = -((-(i + 1) * in_size) // bins)
        matrix[start:end, i] = 1.0 / (end - start)
    return matrix


def _adaptive_pool_matrix_tensor(in_size, bins: int):
    """:func:`adaptive_pool_matrix` built in the graph from a run-time length."""
    length = ops.cast(in_size, "int32")
    positions = ops.arange(in_size, dtype="int32")
    columns = []
    for i in range(bins):
        start = ops.floor_divide(i * length, bins)
        end = -ops.floor_divide(-(i + 1) * length, bins)
        inside = ops.cast(
            ops.logical_and(ops.greater_equal(positions, start), ops.less(positions, end)),
            "float32",
        )
        columns.append(inside / ops.cast(end - start, "float32"))
    return ops.stack(columns, axis=1)


def adaptive_avg_pool(x, bins: int):
    """PyTorch's ``AdaptiveAvgPool2d(bins)`` on a channels-last tensor.

    Args:
        x: (B, H, W, C) tensor; H and W may be run-time sizes.
        bins: output height and width.

    Returns:
        (B, bins, bins, C) tensor.

    Example:
        >>> adaptive_avg_pool(keras.ops.ones((1, 4, 4, 2)), 6).shape
        (1, 6, 6, 2)
    """
    for axis in (1, 2):
        in_size = x.shape[axis]
        if is_static_size(in_size):
            matrix = adaptive_pool_matrix(int(in_size), bins)
        else:
            matrix = ops.cast(_adaptive_pool_matrix_tensor(ops.shape(x)[axis], bins), x.dtype)
        x = contract_axis(x, matrix, axis)
    return x


def _check_feature_list(layer: str, input_shape, count: int | None) -> list[tuple]:
    shapes = [tuple(shape) for shape in input_shape]
    if (
        (count is not None and len(shapes) != count)
        or not shapes
        or any(len(shape) != 4 or shape[-1] is None for shape in shapes)
    ):
        expected = f"{count} " if count is not None else ""
        raise ValueError(
            f"{layer} takes a list of {expected}channels-last feature maps (B, H, W, C) with "
            f"static C. Received: input_shape={shapes}"
        )
    return shapes


@keras.saving.register_keras_serializable(package="keras_fourier")
class ConvModule(keras.layers.Layer):
    """mmcv's ``ConvModule``: a convolution, then BatchNorm and ReLU.

    With ``norm=True`` (default) the convolution has no bias, as mmcv's
    ``bias="auto"``, and BatchNorm uses PyTorch's eps 1e-5 and momentum 0.1
    (Keras momentum 0.9). With ``norm=False`` the convolution has a bias.
    At stride 1 padding keeps the size ("same"); at a larger stride it is
    PyTorch's ``kernel_size // 2`` on every side (a 3x3 stride-2 conv gives
    ``ceil(H / 2)`` rows and reads input rows ``2 i - 1 .. 2 i + 1``, where
    Keras "same" would read ``2 i .. 2 i + 2`` on even sizes).

    Args:
        filters: output channels.
        kernel_size: square kernel size. Default 1.
        norm: whether BatchNorm follows the convolution. Default True.
        activation: "relu" (default) or None.
        strides: the convolution's stride. Default 1.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, H, W, C) tensor.
        training: whether BatchNorm uses batch statistics.

    Returns:
        (B, H', W', filters) tensor: H' = H at stride 1, else
        ``(H + 2 (kernel_size // 2) - kernel_size) // strides + 1``.

    Example:
        >>> ConvModule(8, 3)(keras.ops.ones((2, 5, 5, 4))).shape
        TensorShape([2, 5, 5, 8])

    Reference:
        MMCV contributors, ``mmcv.cnn.ConvModule`` (OpenMMLab, Apache-2.0).
    """

    def __init__(
        self,
        filters: int,
        kernel_size: int = 1,
        norm: bool = True,
        activation: str | None = "relu",
        strides: int = 1,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.filters = check_positive_int("filters", filters)
        self.kernel_size = check_positive_int("kernel_size", kernel_size)
        self.strides = check_positive_int("strides", strides)
        if not isinstance(norm, bool):
            raise TypeError(f"`norm` must be a bool. Received: norm={norm!r}")
        if activation not in ("relu", None):
            raise ValueError(
                f"`activation` must be 'relu' or None. Received: activation={activation!r}"
            )
        self.norm = norm
        self.activation = activation

    def build(self, input_shape):
        self.conv = keras.layers.Conv2D(
            self.filters,
            self.kernel_size,
            strides=self.strides,
            padding="same" if self.strides == 1 else "valid",
            use_bias=not self.norm,
            dtype=self.dtype_policy,
            name="conv",
        )
        self.conv.build(input_shape)
        if self.norm:
            self.bn = keras.layers.BatchNormalization(
                epsilon=BN_EPSILON, momentum=BN_MOMENTUM, dtype=self.dtype_policy, name="bn"
            )
            self.bn.build(self.compute_output_shape(input_shape))

    def call(self, inputs, training=None):
        if self.strides > 1:
            pad = self.kernel_size // 2
            inputs = ops.pad(inputs, [[0, 0], [pad, pad], [pad, pad], [0, 0]])
        x = self.conv(inputs)
        if self.norm:
            x = self.bn(x, training=training)
        if self.activation == "relu":
            x = ops.relu(x)
        return x

    def compute_output_shape(self, input_shape):
        batch, height, width, _ = tuple(input_shape)
        pad = self.kernel_size // 2

        def size(length):
            if length is None or self.strides == 1:
                return length
            return (length + 2 * pad - self.kernel_size) // self.strides + 1

        return (batch, size(height), size(width), self.filters)

    def get_config(self):
        return {
            **super().get_config(),
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "norm": self.norm,
            "activation": self.activation,
            "strides": self.strides,
        }


# HorFPN's gnConv fusion blocks (HorNet section 3.2), the official ``gn_conv_cfg`` / ``conv_cfg``
# of configs/horfpn: order 2, no 1/alpha scale, proj_out; "gnconv_gf" keeps GNConvModule's
# default filter of h=32, w=17 (resized to each input's rfft2 size).
GNCONV_BLOCKS = {
    "gnconv_7x7": {"spatial_mixing": "dwconv", "kernel_size": 7},
    "gnconv_gf": {"spatial_mixing": "global_local", "filter_size": (32, 17)},
}


@keras.saving.register_keras_serializable(package="keras_fourier")
class GnConvModule(GnConv):
    """HorFPN's ``GNConvModule``: a :class:`GnConv` of width `filters`, then BatchNorm and ReLU.

    The official ``mmcv_custom/gn_module.py`` module of HorNet's HorFPN and
    HorNet-UPerNet heads: ``proj_in`` (input channels -> 2 filters), the
    spatial mixing (``dwconv``) without the 1/alpha scale, the recursive
    gating, ``proj_out`` (filters -> filters), then, as mmcv's
    ``ConvModule``, ``bn`` (BatchNorm, PyTorch eps 1e-5 and momentum 0.1)
    and ReLU when asked. The variables are the official keys:
    ``proj_in/kernel`` is ``proj_in.weight``, ``bn/gamma`` is ``bn.weight``.

    Args:
        filters: the width and output channels (the official
            ``out_channels``, with ``dim_ratio`` 1).
        block: a row of ``GNCONV_BLOCKS``: "gnconv_7x7" (default, a 7x7
            depthwise conv) or "gnconv_gf" (HorNet's global-local filter
            with an h=32, w=17 filter).
        order: the interaction order. Default 2, as every HorFPN config.
        norm: whether BatchNorm follows. Default True.
        activation: "relu" (default) or None.
        fft_impl: "auto" (default), "fft" or "matmul" for "gnconv_gf".
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, H, W, C) tensor; "gnconv_gf" needs `filters` divisible
            by 4.
        training: whether BatchNorm uses batch statistics.

    Returns:
        (B, H, W, filters) tensor.

    Example:
        >>> GnConvModule(8)(keras.ops.ones((2, 6, 6, 32))).shape
        TensorShape([2, 6, 6, 8])

    Reference:
        Rao et al., "HorNet: Efficient High-Order Spatial Interactions with
        Recursive Gated Convolutions", NeurIPS 2022, Section 3.2 (HorFPN).
    """

    def __init__(
        self,
        filters: int,
        block: str = "gnconv_7x7",
        order: int = 2,
        norm: bool = True,
        activation: str | None = "relu",
        fft_impl: str = "auto",
        **kwargs,
    ):
        super().__init__(
            order=order,
            scale=1.0,
            fft_impl=fft_impl,
            filters=check_positive_int("filters", filters),
            **GNCONV_BLOCKS[check_choice("block", block, tuple(GNCONV_BLOCKS))],
            **kwargs,
        )
        self.block = block
        self.norm = check_bool("norm", norm)
        self.activation = check_choice("activation", activation, ("relu", None))

    def build(self, input_shape):
        super().build(input_shape)
        if self.norm:
            self.bn = keras.layers.BatchNormalization(
                epsilon=BN_EPSILON, momentum=BN_MOMENTUM, dtype=self.dtype_policy, name="bn"
            )
            self.bn.build(self.compute_output_shape(input_shape))

    def call(self, inputs, training=None):
        x = super().call(inputs)
        if self.norm:
            x = self.bn(x, training=training)
        if self.activation == "relu":
            x = ops.relu(x)
        return x

    def get_config(self):
        config = super().get_config()
        for key in ("spatial_mixing", "kernel_size", "filter_size", "scale"):
            del config[key]  # fixed by `block`
        return {
            **config,
            "block": self.block,
            "norm": self.norm,
            "activation": self.activation,
        }


class _DecodeHead(keras.layers.Layer):
    """mmsegmentation's ``BaseDecodeHead``: the arguments and the ``cls_seg`` classifier."""

    def __init__(self, num_classes: int, channels: int, dropout: float = 0.1, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = check_positive_int("num_classes", num_classes)
        self.channels = check_positive_int("channels", channels)
        check_rate("dropout", dropout)
        self.dropout = dropout

    def _conv_module(self, name: str, kernel_size: int, input_shape, filters: int | None = None):
        layer = ConvModule(
            self.channels if filters is None else filters,
            kernel_size,
            dtype=self.dtype_policy,
            name=name,
        )
        layer.build(input_shape)
        return layer

    def _build_classifier(self, input_shape) -> None:
        self.drop = keras.layers.SpatialDropout2D(self.dropout, dtype=self.dtype_policy)
        self.conv_seg = keras.layers.Conv2D(
            self.num_classes, 1, dtype=self.dtype_policy, name="conv_seg"
        )
        self.conv_seg.build((*input_shape[:-1], self.channels))

    def _classify(self, x, training):
        if self.dropout > 0:
            x = self.drop(x, training=training)
        return self.conv_seg(x)

    def compute_output_shape(self, input_shape):
        first = next(iter(input_shape))
        return (*tuple(first)[:-1], self.num_classes)

    def get_config(self):
        return {
            **super().get_config(),
            "num_classes": self.num_classes,
            "channels": self.channels,
            "dropout": self.dropout,
        }


def _spatial(x) -> tuple:
    """(H, W) of a channels-last tensor: static ints where known, else run-time scalars."""
    shape = ops.shape(x)
    return tuple(x.shape[axis] if x.shape[axis] is not None else shape[axis] for axis in (1, 2))


def top_down(laterals: list, resize) -> list:
    """The FPN top-down path: each level, resized to the one below by `resize`, added to it.

    Args:
        laterals: maps finest first, all of the same channels.
        resize: ``resize(x, size)``, e.g. :func:`resize_nearest` (detection
            and Semantic FPN) or :func:`resize_bilinear` (UPerNet).

    Returns:
        A new list: the coarsest map as it is, every other one plus the
        resized sum above it, computed from the top down.
    """
    laterals = list(laterals)
    for i in range(len(laterals) - 1, 0, -1):
        laterals[i - 1] = laterals[i - 1] + resize(laterals[i], _spatial(laterals[i - 1]))
    return laterals


@keras.saving.register_keras_serializable(package="keras_fourier")
class UPerHead(_DecodeHead):
    """UPerNet's decode head: pyramid pooling on the last map, an FPN over all maps.

    As mmsegmentation's ``UPerHead`` (the head of the official HorNet, Swin
    and ConvNeXt ADE20K models): the last map goes through the pyramid
    pooling module (for each scale s of `pool_scales`: adaptive average pool
    to s x s, ``psp_modules_{i}`` 1x1 ConvModule, bilinear resize back),
    concatenated with itself and fused by ``bottleneck`` (3x3); the other maps
    through ``lateral_convs_{i}`` (1x1); a top-down path adds each level,
    resized, to the one below; ``fpn_convs_{i}`` (3x3) smooth all but the
    top; all levels resized to the first and concatenated, fused by
    ``fpn_bottleneck`` (3x3), then dropout and ``conv_seg``. With `block`,
    ``fpn_bottleneck`` is HorNet's gnConv instead (HorFPN for segmentation,
    the official ``GNUPerHead``): a :class:`GnConvModule` from the
    concatenated ``4 channels`` to `channels`, with BatchNorm and ReLU.

    Args:
        num_classes: output classes.
        channels: width of every inner ConvModule. Default 512.
        pool_scales: the pyramid pooling bins. Default (1, 2, 3, 6).
        dropout: channel dropout before ``conv_seg``. Default 0.1.
        block: None (default, the 3x3 ConvModule), "gnconv_7x7" or
            "gnconv_gf" (HorFPN_7x7 / HorFPN_GF; a row of ``GNCONV_BLOCKS``).
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: list of feature maps, finest first, (B, H_i, W_i, C_i).
        training: whether dropout and BatchNorm are in training mode.

    Returns:
        (B, H_0, W_0, num_classes) logits.

    Example:
        >>> head = UPerHead(5, channels=16)
        >>> maps = [keras.ops.ones((1, 16 // 2**i, 16 // 2**i, 8 * 2**i)) for i in range(4)]
        >>> head(maps).shape
        TensorShape([1, 16, 16, 5])

    Reference:
        Xiao et al., "Unified Perceptual Parsing for Scene Understanding",
        ECCV 2018; mmsegmentation ``UPerHead`` (OpenMMLab, Apache-2.0).
    """

    def __init__(
        self,
        num_classes: int,
        channels: int = 512,
        pool_scales: tuple[int, ...] = (1, 2, 3, 6),
        dropout: float = 0.1,
        block: str | None = None,
        **kwargs,
    ):
        super().__init__(num_classes, channels, dropout, **kwargs)
        if not isinstance(pool_scales, (tuple, list)) or not pool_scales:
            raise ValueError(
                f"`pool_scales` must be a non-empty tuple of ints. Received: {pool_scales=}"
            )
        self.pool_scales = tuple(check_positive_int("pool_scales", s) for s in pool_scales)
        self.block = check_choice("block", block, (None, *GNCONV_BLOCKS))

    def build(self, input_shape):
        shapes = _check_feature_list("UPerHead", input_shape, None)
        last = shapes[-1]
        self.psp_modules = [
            self._conv_module(f"psp_modules_{i}", 1, (last[0], scale, scale, last[-1]))
            for i, scale in enumerate(self.pool_scales)
        ]
        fused = last[-1] + len(self.pool_scales) * self.channels
        self.bottleneck = self._conv_module("bottleneck", 3, (*last[:-1], fused))
        self.lateral_convs = [
            self._conv_module(f"lateral_convs_{i}", 1, shape) for i, shape in enumerate(shapes[:-1])
        ]
        self.fpn_convs = [
            self._conv_module(f"fpn_convs_{i}", 3, (*shape[:-1], self.channels))
            for i, shape in enumerate(shapes[:-1])
        ]
        fused = (*shapes[0][:-1], len(shapes) * self.channels)
        if self.block is None:
            self.fpn_bottleneck = self._conv_module("fpn_bottleneck", 3, fused)
        else:
            self.fpn_bottleneck = GnConvModule(
                self.channels, self.block, dtype=self.dtype_policy, name="fpn_bottleneck"
            )
            self.fpn_bottleneck.build(fused)
        self._build_classifier(shapes[0])

    def call(self, inputs, training=None):
        inputs = list(inputs)
        last = inputs[-1]
        size = _spatial(last)
        pooled = [
            resize_bilinear(module(adaptive_avg_pool(last, scale), training=training), size)
            for module, scale in zip(self.psp_modules, self.pool_scales, strict=True)
        ]
        top = self.bottleneck(ops.concatenate([last, *pooled], axis=-1), training=training)
        laterals = [
            conv(x, training=training) for conv, x in zip(self.lateral_convs, inputs, strict=False)
        ]
        laterals = top_down([*laterals, top], resize_bilinear)
        outs = [
            conv(x, training=training) for conv, x in zip(self.fpn_convs, laterals, strict=False)
        ]
        outs.append(laterals[-1])
        size = _spatial(outs[0])
        outs = [outs[0], *(resize_bilinear(x, size) for x in outs[1:])]
        fused = self.fpn_bottleneck(ops.concatenate(outs, axis=-1), training=training)
        return self._classify(fused, training)

    def get_config(self):
        return {**super().get_config(), "pool_scales": self.pool_scales, "block": self.block}


@keras.saving.register_keras_serializable(package="keras_fourier")
class FCNHead(_DecodeHead):
    """The fully convolutional head, UPerNet's auxiliary head on the third stage.

    As mmsegmentation's ``FCNHead`` (dilation 1): ``convs_0`` ...
    ``convs_{n-1}`` ConvModules of `kernel_size`, optionally ``conv_cat``
    over the input concatenated with their output, then dropout and
    ``conv_seg``. With ``num_convs=0`` the input goes to the classifier as is
    (its channels must equal `channels`).

    Args:
        num_classes: output classes.
        channels: width of the ConvModules. Default 256.
        num_convs: how many ConvModules. Default 1.
        kernel_size: their kernel size. Default 3.
        concat_input: whether ``conv_cat`` fuses input and output. Default False.
        dropout: channel dropout before ``conv_seg``. Default 0.1.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, H, W, C) feature map.
        training: whether dropout and BatchNorm are in training mode.

    Returns:
        (B, H, W, num_classes) logits.

    Example:
        >>> FCNHead(5, channels=16)(keras.ops.ones((1, 8, 8, 32))).shape
        TensorShape([1, 8, 8, 5])

    Reference:
        Long et al., "Fully Convolutional Networks for Semantic
        Segmentation", CVPR 2015; mmsegmentation ``FCNHead``.
    """

    def __init__(
        self,
        num_classes: int,
        channels: int = 256,
        num_convs: int = 1,
        kernel_size: int = 3,
        concat_input: bool = False,
        dropout: float = 0.1,
        **kwargs,
    ):
        super().__init__(num_classes, channels, dropout, **kwargs)
        if isinstance(num_convs, bool) or not isinstance(num_convs, int) or num_convs < 0:
            raise ValueError(f"`num_convs` must be an int >= 0. Received: num_convs={num_convs!r}")
        self.num_convs = num_convs
        self.kernel_size = check_positive_int("kernel_size", kernel_size)
        if num_convs == 0 and concat_input:
            raise ValueError("`concat_input` needs num_convs >= 1. Received: concat_input=True")
        self.concat_input = bool(concat_input)

    def build(self, input_shape):
        (shape,) = _check_feature_list("FCNHead", [input_shape], 1)
        if self.num_convs == 0 and shape[-1] != self.channels:
            raise ValueError(
                f"FCNHead with num_convs=0 needs inputs of `channels`={self.channels} channels. "
                f"Received: input_shape={shape}"
            )
        self.convs = [
            self._conv_module(
                f"convs_{i}", self.kernel_size, shape if i == 0 else (*shape[:-1], self.channels)
            )
            for i in range(self.num_convs)
        ]
        if self.concat_input:
            self.conv_cat = self._conv_module(
                "conv_cat", self.kernel_size, (*shape[:-1], shape[-1] + self.channels)
            )
        self._build_classifier(shape)

    def call(self, inputs, training=None):
        x = inputs
        for conv in self.convs:
            x = conv(x, training=training)
        if self.concat_input:
            x = self.conv_cat(ops.concatenate([inputs, x], axis=-1), training=training)
        return self._classify(x, training)

    def compute_output_shape(self, input_shape):
        return (*tuple(input_shape)[:-1], self.num_classes)

    def get_config(self):
        return {
            **super().get_config(),
            "num_convs": self.num_convs,
            "kernel_size": self.kernel_size,
            "concat_input": self.concat_input,
        }


@keras.saving.register_keras_serializable(package="keras_fourier")
class FPNNeck(keras.layers.Layer):
    """The FPN neck of Semantic FPN: every map to `channels`, top-down sums, 3x3 smoothing.

    As mmsegmentation's ``FPN`` neck with its defaults (no norm, no
    activation, nearest top-down upsampling, ``num_outs`` = number of
    inputs): ``lateral_convs_{i}`` (1x1 conv with bias) on every map, each
    level added, nearest-resized, to the one below, then ``fpn_convs_{i}``
    (3x3 conv with bias) on every level.

    Args:
        channels: output channels of every level. Default 256.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: list of feature maps, finest first.

    Returns:
        List of maps of the inputs' sizes with `channels` channels.

    Example:
        >>> neck = FPNNeck(8)
        >>> maps = [keras.ops.ones((1, 8 // 2**i, 8 // 2**i, 4 * 2**i)) for i in range(3)]
        >>> [tuple(m.shape) for m in neck(maps)]
        [(1, 8, 8, 8), (1, 4, 4, 8), (1, 2, 2, 8)]

    Reference:
        Lin et al., "Feature Pyramid Networks for Object Detection", CVPR
        2017; mmsegmentation ``FPN``.
    """

    def __init__(self, channels: int = 256, **kwargs):
        super().__init__(**kwargs)
        self.channels = check_positive_int("channels", channels)

    def _module(self, name: str, kernel_size: int, input_shape, strides: int = 1) -> ConvModule:
        return self._plain(ConvModule, name, input_shape, kernel_size, strides=strides)

    def _plain(self, cls: type, name: str, input_shape, *args, **kwargs) -> keras.layers.Layer:
        """``cls(channels, *args)`` without norm and activation, built for `input_shape`."""
        layer = cls(
            self.channels,
            *args,
            norm=False,
            activation=None,
            dtype=self.dtype_policy,
            name=name,
            **kwargs,
        )
        layer.build(input_shape)
        return layer

    def build(self, input_shape):
        shapes = _check_feature_list("FPNNeck", input_shape, None)
        self.lateral_convs = [
            self._module(f"lateral_convs_{i}", 1, shape) for i, shape in enumerate(shapes)
        ]
        self.fpn_convs = [
            self._module(f"fpn_convs_{i}", 3, (*shape[:-1], self.channels))
            for i, shape in enumerate(shapes)
        ]

    def call(self, inputs):
        laterals = [conv(x) for conv, x in zip(self.lateral_convs, inputs, strict=True)]
        laterals = top_down(laterals, resize_nearest)
        return [conv(x) for conv, x in zip(self.fpn_convs, laterals, strict=True)]

    def compute_output_shape(self, input_shape):
        return [(*tuple(shape)[:-1], self.channels) for shape in input_shape]

    def get_config(self):
        return {**super().get_config(), "channels": self.channels}


@keras.saving.register_keras_serializable(package="keras_fourier")
class FPNHead(_DecodeHead):
    """Semantic FPN's head: each level convolved and upsampled to stride 4, summed, classified.

    As mmsegmentation's ``FPNHead``: level i (stride ``4 * 2**i``) goes
    through ``max(1, i)`` 3x3 ConvModules, each followed (for i > 0) by a 2x
    bilinear upsampling (align_corners False); the sublayer of the k-th
    ConvModule is ``scale_heads_{i}_{j}`` with j its index in the official
    ``Sequential`` (0 for level 0, ``2 k`` above). The levels are summed
    (each resized to the first's size) then dropout and ``conv_seg``.

    Args:
        num_classes: output classes.
        channels: width of the scale heads. Default 128.
        dropout: channel dropout before ``conv_seg``. Default 0.1.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: list of maps at strides 4, 8, 16, ... (each half the previous).
        training: whether dropout and BatchNorm are in training mode.

    Returns:
        (B, H_0, W_0, num_classes) logits.

    Example:
        >>> maps = [keras.ops.ones((1, 8 // 2**i, 8 // 2**i, 8)) for i in range(4)]
        >>> FPNHead(3, channels=8)(maps).shape
        TensorShape([1, 8, 8, 3])

    Reference:
        Kirillov et al., "Panoptic Feature Pyramid Networks", CVPR 2019;
        mmsegmentation ``FPNHead``.
    """

    def __init__(self, num_classes: int, channels: int = 128, dropout: float = 0.1, **kwargs):
        super().__init__(num_classes, channels, dropout, **kwargs)

    def build(self, input_shape):
        shapes = _check_feature_list("FPNHead", input_shape, None)
        self.scale_heads = []
        for level, shape in enumerate(shapes):
            modules = []
            for k in range(max(1, level)):
                source = shape if k == 0 else (*shape[:-1], self.channels)
                index = 2 * k if level > 0 else 0
                modules.append(self._conv_module(f"scale_heads_{level}_{index}", 3, source))
            self.scale_heads.append(modules)
        self._build_classifier(shapes[0])

    def call(self, inputs, training=None):
        output = None
        for level, (modules, x) in enumerate(zip(self.scale_heads, inputs, strict=True)):
            for module in modules:
                x = module(x, training=training)
                if level > 0:
                    height, width = _spatial(x)
                    x = resize_bilinear(x, (2 * height, 2 * width))
            output = x if output is None else output + resize_bilinear(x, _spatial(output))
        return self._classify(output, training)


@keras.saving.register_keras_serializable(package="keras_fourier")
class SegFormerHead(_DecodeHead):
    """SegFormer's all-MLP head: each map to `channels`, resized to the first, fused, classified.

    As mmsegmentation's ``SegformerHead``: ``convs_{i}`` (1x1 ConvModule,
    the per-level "MLP") on every map, each bilinearly resized to the first
    map's size, concatenated in level order, ``fusion_conv`` (1x1
    ConvModule), dropout and ``conv_seg``.

    Args:
        num_classes: output classes.
        channels: the embedding width. Default 256.
        dropout: channel dropout before ``conv_seg``. Default 0.1.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: list of feature maps, finest first.
        training: whether dropout and BatchNorm are in training mode.

    Returns:
        (B, H_0, W_0, num_classes) logits.

    Example:
        >>> maps = [keras.ops.ones((1, 8 // 2**i, 8 // 2**i, 8)) for i in range(4)]
        >>> SegFormerHead(3, channels=8)(maps).shape
        TensorShape([1, 8, 8, 3])

    Reference:
        Xie et al., "SegFormer: Simple and Efficient Design for Semantic
        Segmentation with Transformers", NeurIPS 2021; mmsegmentation
        ``SegformerHead``.
    """

    def __init__(self, num_classes: int, channels: int = 256, dropout: float = 0.1, **kwargs):
        super().__init__(num_classes, channels, dropout, **kwargs)

    def build(self, input_shape):
        shapes = _check_feature_list("SegFormerHead", input_shape, None)
        self.convs = [self._conv_module(f"convs_{i}", 1, shape) for i, shape in enumerate(shapes)]
        self.fusion_conv = self._conv_module(
            "fusion_conv", 1, (*shapes[0][:-1], len(shapes) * self.channels)
        )
        self._build_classifier(shapes[0])

    def call(self, inputs, training=None):
        inputs = list(inputs)
        size = _spatial(inputs[0])
        outs = [
            resize_bilinear(conv(x, training=training), size)
            for conv, x in zip(self.convs, inputs, strict=True)
        ]
        fused = self.fusion_conv(ops.concatenate(outs, axis=-1), training=training)
        return self._classify(fused, training)


@keras.saving.register_keras_serializable(package="keras_fourier")
class MultiScaleNeck(keras.layers.Layer):
    """A feature pyramid from one map: transposed convs up, max-pooling down (ViT-style).

    For isotropic backbones (GFNet, AFNONet: one token map at stride
    `input_stride`), the simple pyramid of BEiT and ViTDet: for each output
    stride s of `strides`, a map at s from the single input. Finer strides
    go through ``log2(input_stride / s)`` 2x2 stride-2 transposed
    convolutions (``up{i}_{k}``, with BatchNorm and GELU between two of
    them), the same stride is the input itself, coarser strides a 2x2
    max-pooling per halving.

    Args:
        input_stride: the stride of the input map, a power of two. Default 16.
        strides: the output strides, powers of two. Default (4, 8, 16, 32).
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, H, W, C) tensor.
        training: whether BatchNorm uses batch statistics.

    Returns:
        List of (B, H * input_stride / s, W * input_stride / s, C) maps, one
        per stride s.

    Example:
        >>> maps = MultiScaleNeck()(keras.ops.ones((1, 4, 4, 8)))
        >>> [tuple(m.shape) for m in maps]
        [(1, 16, 16, 8), (1, 8, 8, 8), (1, 4, 4, 8), (1, 2, 2, 8)]

    Reference:
        Bao et al., "BEiT: BERT Pre-Training of Image Transformers", ICLR
        2022 (its segmentation FPN); Li et al., "Exploring Plain Vision
        Transformer Backbones for Object Detection", ECCV 2022.
    """

    def __init__(self, input_stride: int = 16, strides: tuple[int, ...] = (4, 8, 16, 32), **kwargs):
        super().__init__(**kwargs)
        for name, value in [("input_stride", input_stride), *(("strides", s) for s in strides)]:
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or value < 1
                or value & (value - 1)
            ):
                raise ValueError(f"`{name}` must hold powers of two. Received: {name}={value!r}")
        self.input_stride = input_stride
        self.strides = tuple(strides)

    def build(self, input_shape):
        (shape,) = _check_feature_list("MultiScaleNeck", [input_shape], 1)
        channels = shape[-1]
        self.branches = []
        for index, stride in enumerate(self.strides):
            steps = []
            ups = self.input_stride.bit_length() - stride.bit_length()
            for k in range(ups):
                if k > 0:
                    norm = keras.layers.BatchNormalization(
                        epsilon=BN_EPSILON, dtype=self.dtype_policy, name=f"up{index}_norm{k}"
                    )
                    norm.build((*shape[:-1], channels))
                    steps.append(norm)
                    steps.append(keras.layers.Activation("gelu", dtype=self.dtype_policy))
                deconv = keras.layers.Conv2DTranspose(
                    channels, 2, strides=2, dtype=self.dtype_policy, name=f"up{index}_{k}"
                )
                deconv.build((*shape[:-1], channels))
                steps.append(deconv)
            for _ in range(-ups):
                steps.append(keras.layers.MaxPooling2D(2, dtype=self.dtype_policy))
            self.branches.append(steps)

    def call(self, inputs, training=None):
        outputs = []
        for steps in self.branches:
            x = inputs
            for step in steps:
                x = (
                    step(x, training=training)
                    if isinstance(step, keras.layers.BatchNormalization)
                    else step(x)
                )
            outputs.append(x)
        return outputs

    def compute_output_shape(self, input_shape):
        batch, height, width, channels = tuple(input_shape)

        def scaled(size, stride):
            if size is None:
                return None
            return size * self.input_stride // stride

        return [
            (batch, scaled(height, stride), scaled(width, stride), channels)
            for stride in self.strides
        ]

    def get_config(self):
        return {
            **super().get_config(),
            "input_stride": self.input_stride,
            "strides": self.strides,
        }


@keras.saving.register_keras_serializable(package="keras_fourier")
class ResizeToMatch(keras.layers.Layer):
    """Bilinear resize (align_corners False) of a map to the height and width of another.

    The last step of a segmentation model: the head's stride-4 logits to the
    input's resolution, as mmsegmentation's ``EncoderDecoder`` does, at any
    run-time size.

    Args:
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: ``[x, reference]``: (B, h, w, C) and (B, H, W, ...) tensors.

    Returns:
        (B, H, W, C) tensor.

    Example:
        >>> ResizeToMatch()([keras.ops.ones((1, 4, 4, 3)), keras.ops.ones((1, 16, 16, 3))]).shape
        (1, 16, 16, 3)
    """

    def call(self, inputs):
        x, reference = inputs
        return resize_bilinear(x, _spatial(reference))

    def compute_output_shape(self, input_shape):
        x, reference = (tuple(shape) for shape in input_shape)
        return (x[0], reference[1], reference[2], x[-1])
