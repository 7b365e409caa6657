"""Periodic padding for lat-lon fields: circular in longitude, zeros in latitude."""

from __future__ import annotations

import keras
from keras import ops

from keras_fourier.validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_fourier")
class PeriodicPad2D(keras.layers.Layer):
    """Pads a (B, H, W, C) field circularly along W and with zeros along H.

    The padding of a global latitude-longitude grid, where longitude wraps
    around and latitude does not: FourCastNet's ``PeriodicPad2d``
    (``utils/img_utils.py``), before its precipitation head's 3x3
    convolution.

    Args:
        pad_width: cells added on each side of both axes, a positive int.
            Default 1.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, H, W, C) tensor with W >= `pad_width`.

    Returns:
        Tensor (B, H + 2 * pad_width, W + 2 * pad_width, C).

    Example:
        >>> PeriodicPad2D(1)(keras.ops.ones((1, 4, 8, 2))).shape
        TensorShape([1, 6, 10, 2])

    Reference:
        Pathak et al., "FourCastNet: A Global Data-driven High-resolution
        Weather Model using Adaptive Fourier Neural Operators",
        arXiv:2202.11214.
    """

    def __init__(self, pad_width: int = 1, **kwargs):
        super().__init__(**kwargs)
        self.pad_width = check_positive_int("pad_width", pad_width)

    def call(self, inputs):
        pad = self.pad_width
        wrapped = ops.concatenate([inputs[:, :, -pad:], inputs, inputs[:, :, :pad]], axis=2)
        return ops.pad(wrapped, [[0, 0], [pad, pad], [0, 0], [0, 0]])

    def compute_output_shape(self, input_shape):
        batch, height, width, channels = input_shape
        grow = 2 * self.pad_width
        return (
            batch,
            None if height is None else height + grow,
            None if width is None else width + grow,
            channels,
        )

    def get_config(self):
        return {**super().get_config(), "pad_width": self.pad_width}


@keras.saving.register_keras_serializable(package="keras_fourier")
class PadToMultiple(keras.layers.Layer):
    """Pads (B, H, W, C) images bottom and right with zeros to multiples of `multiple`.

    mmdetection's ``Pad(size_divisor=32)`` after its normalisation: the
    backbone of a two-stage detector reads an image whose height and width
    its stride divides, whatever the input's size; sizes already multiples
    pass unchanged. Works on a fixed size and on one known only at run time.

    Args:
        multiple: what the padded height and width are multiples of, a
            positive int. Default 32.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, H, W, C) tensor.

    Returns:
        Tensor (B, H', W', C): `inputs` in its top-left corner, zeros below and
        to its right; H' and W' the smallest multiples of `multiple` at or
        above H and W.

    Example:
        >>> PadToMultiple(32)(keras.ops.ones((1, 70, 100, 3))).shape
        TensorShape([1, 96, 128, 3])

    Reference:
        Chen et al., "MMDetection: Open MMLab Detection Toolbox and
        Benchmark", arXiv:1906.07155 (``mmdet/datasets/pipelines/transforms.py``,
        ``Pad``).
    """

    def __init__(self, multiple: int = 32, **kwargs):
        super().__init__(**kwargs)
        self.multiple = check_positive_int("multiple", multiple)

    def call(self, inputs):
        shape = ops.shape(inputs)
        grow = [(self.multiple - shape[axis] % self.multiple) % self.multiple for axis in (1, 2)]
        return ops.pad(inputs, [[0, 0], [0, grow[0]], [0, grow[1]], [0, 0]])

    def compute_output_shape(self, input_shape):
        batch, height, width, channels = input_shape
        padded = [
            None if d is None else -(-d // self.multiple) * self.multiple for d in (height, width)
        ]
        return (batch, *padded, channels)

    def get_config(self):
        return {**super().get_config(), "multiple": self.multiple}
