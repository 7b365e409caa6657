"""Learned absolute position embedding for channels-last token maps."""

from __future__ import annotations

import keras


@keras.saving.register_keras_serializable(package="keras_fourier")
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned position embedding of shape (1, H, W, C) to a token map.

    The ViT/GFNet ``pos_embed`` (1, N, C) with N = H * W tokens in row-major
    order, kept as a map so it reshapes to and from the official layout with
    a plain reshape and resizes like an image. Initialised truncated normal
    with std 0.02, as the official code.

    Args:
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, H, W, C) tensor with static H, W and C.

    Returns:
        ``inputs + pos_embed``, same shape.

    Example:
        >>> PositionEmbedding()(keras.ops.zeros((2, 14, 14, 8))).shape
        TensorShape([2, 14, 14, 8])

    Reference:
        Dosovitskiy et al., "An Image is Worth 16x16 Words", ICLR 2021.
    """

    def build(self, input_shape):
        if len(input_shape) != 4 or any(d is None for d in input_shape[1:]):
            raise ValueError(
                "PositionEmbedding needs (B, H, W, C) inputs with static H, W and C; "
                f"received input_shape={tuple(input_shape)}."
            )
        self.pos_embed = self.add_weight(
            name="pos_embed",
            shape=(1, *input_shape[1:]),
            initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        )

    def call(self, inputs):
        return inputs + self.pos_embed

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)
