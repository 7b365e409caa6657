"""Output helpers of image-restoration heads."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_fourier")
class MaskComposite(keras.layers.Layer):
    """Visible pixels from the masked image, masked ones from the prediction.

    The output layer of the inpainting task (AFNO's pretraining): the loss
    then sees only the pixels the model had to restore.

    Args:
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: [masked image (B, H, W, C) in 0-255, mask (B, H, W, 1), 1 where
            a pixel is hidden, prediction (B, H, W, C) in [-1, 1] units].

    Returns:
        (B, H, W, C): ``masked_image * (1 - mask) + 127.5 * (1 + prediction) * mask``.

    Example:
        >>> masked, mask = np.full((1, 2, 2, 3), 10.0), np.eye(2)[None, ..., None]
        >>> out = MaskComposite()([masked, mask, np.zeros((1, 2, 2, 3))])
        >>> keras.ops.convert_to_numpy(out)[0, :, :, 0].tolist()
        [[127.5, 10.0], [10.0, 127.5]]

    Reference:
        Guibas et al., "Adaptive Fourier Neural Operators", ICLR 2022 (the
        inpainting experiment).
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def call(self, inputs):
        masked_image, mask, prediction = inputs
        mask = ops.cast(mask, prediction.dtype)
        pixels = 127.5 * (1.0 + prediction)
        return ops.cast(masked_image, prediction.dtype) * (1.0 - mask) + pixels * mask

    def compute_output_shape(self, input_shapes):
        return input_shapes[2]
