"""Learned absolute position embedding for channels-last token maps, and the any-size check."""

from __future__ import annotations

import keras
from keras import ops

from keras_fourier.layers import spectral
from keras_fourier.layers.fourier import check_channels
from keras_fourier.layers.interpolation import resize_axis_tensor
from keras_fourier.validation import check_optional_size, check_positive_int


@keras.saving.register_keras_serializable(package="keras_fourier")
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned position embedding of shape (1, h, w, C) to a token map.

    The ViT/GFNet ``pos_embed`` (1, N, C) with N = h * w tokens in row-major
    order, kept as a map so it reshapes to and from the official layout with
    a plain reshape and resizes like an image. Initialised truncated normal
    with std 0.02, as the official code.

    Any input size: on a token map whose (H, W) differs from (h, w), the
    embedding is resized to (H, W) in the graph, bicubic with
    ``align_corners=False``, as the official GFNet and AFNO fine-tuning code
    resizes a checkpoint's embedding (and as
    :func:`keras_fourier.weights.resize.resize_pos_embed` does when
    converting weights); at (h, w) it is added unchanged. H and W may be
    unknown until run time.

    Args:
        height: h, the embedding's rows, or None (default) for the input
            height at build time. Set it, with ``width``, to build the layer
            for inputs of unknown size (any-size models).
        width: w, the embedding's columns, or None (default) for the input
            width at build time.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, H, W, C) tensor with the C the layer was built for.

    Returns:
        ``inputs + pos_embed`` (resized to (H, W) where needed), same shape.

    Example:
        >>> PositionEmbedding()(keras.ops.zeros((2, 14, 14, 8))).shape
        TensorShape([2, 14, 14, 8])
        >>> PositionEmbedding(height=14, width=14)(keras.ops.zeros((2, 9, 20, 8))).shape
        TensorShape([2, 9, 20, 8])

    Reference:
        Dosovitskiy et al., "An Image is Worth 16x16 Words", ICLR 2021.
    """

    def __init__(self, height: int | None = None, width: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.height = check_optional_size("height", height)
        self.width = check_optional_size("width", width)

    def build(self, input_shape):
        if len(input_shape) != 4 or input_shape[-1] is None:
            raise ValueError(
                "PositionEmbedding needs (B, H, W, C) inputs with a static C; "
                f"received input_shape={tuple(input_shape)}."
            )
        height = input_shape[1] if self.height is None else self.height
        width = input_shape[2] if self.width is None else self.width
        if height is None or width is None:
            raise ValueError(
                "PositionEmbedding takes its grid from the input when `height` or `width` is "
                f"None, so H and W must then be static; received input_shape="
                f"{tuple(input_shape)} with height={self.height}, width={self.width}."
            )
        self.pos_embed = self.add_weight(
            name="pos_embed",
            shape=(1, int(height), int(width), input_shape[-1]),
            initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        )

    def call(self, inputs):
        check_channels("PositionEmbedding", self.pos_embed.shape[-1], inputs)
        pos_embed = ops.convert_to_tensor(self.pos_embed)
        for axis, size in zip((1, 2), spectral.spatial_dims(inputs, (1, 2)), strict=True):
            pos_embed = resize_axis_tensor(pos_embed, size, axis, "bicubic", align_corners=False)
        return inputs + ops.cast(pos_embed, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "height": self.height, "width": self.width}


@keras.saving.register_keras_serializable(package="keras_fourier")
class StrideCheck(keras.layers.Layer):
    """Passes images through unchanged, checking that `stride` divides their height and width.

    The first layer of an any-size vision model: its strided stem and
    downsampling convolutions would otherwise drop the edge pixels of an
    image whose size the stride does not divide. A height or width known
    when the layer is called (eager calls, JAX, PyTorch, traced shapes) is
    checked with a ValueError; one known only at run time (a TensorFlow
    graph traced with unknown sizes) by a reshape to the largest multiples
    of the stride, which the backend refuses (InvalidArgumentError) unless
    they are the size itself.

    Args:
        stride: the model's total stride, a positive int.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, H, W, C) images.

    Returns:
        `inputs`, unchanged.

    Raises:
        ValueError: H or W is known and not a multiple of `stride`.

    Example:
        >>> StrideCheck(16)(keras.ops.zeros((1, 64, 96, 3))).shape
        TensorShape([1, 64, 96, 3])
    """

    def __init__(self, stride: int, **kwargs):
        super().__init__(**kwargs)
        self.stride = check_positive_int("stride", stride)

    def call(self, inputs):
        height, width = inputs.shape[1:3]
        if any(d is not None and d % self.stride for d in (height, width)):
            raise ValueError(
                f"The input height and width must be multiples of the model's stride "
                f"{self.stride}. Received: images of shape {tuple(inputs.shape)}"
            )
        if height is not None and width is not None:
            return inputs
        # A reshape to the largest multiples of the stride: the identity where the stride
        # divides both sizes, refused by the backend for a mismatched element count otherwise.
        batch, height, width, channels = ops.shape(inputs)
        stride = self.stride
        multiples = (batch, height // stride * stride, width // stride * stride, channels)
        return ops.reshape(inputs, multiples)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "stride": self.stride}
