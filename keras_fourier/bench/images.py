"""The bench's image inputs from data sources: the TensorFlow side of ``--agreement --data``.

Loaded on first use (:mod:`keras_fourier.bench` resolves its names lazily), so
that the Keras bench runs on a machine without TensorFlow.
"""

from __future__ import annotations

from keras_fourier.bench.timing import at_input_size, has_free_input_size, random_inputs
from keras_fourier.data import load_image_dataset


def agreement_inputs(
    model, data: str | None, split: str, examples: int, image_size: int | None = None
):
    """Images for :func:`precision_agreement`: `examples` of `data`, or uniform 0-255 noise.

    Args:
        model: the model they are for (its input size).
        data: None (seeded uniform noise in [0, 255]) or an image source of
            :func:`keras_fourier.data.load_image_dataset` ("digits",
            "dir:PATH", "tfds:NAME"), read in evaluation mode.
        split: the split of `data`.
        examples: at most this many examples.
        image_size: the size of the images of a model of free input size.
            Default None: the model's own input size.

    Returns:
        A float32 array (examples, height, width, channels), or the model's
        random inputs for non-image models.

    Raises:
        ValueError: `data` for a model that does not take RGB images, or no
            `image_size` for a model of free input size.
    """
    import numpy as np

    if has_free_input_size(model):
        if image_size is None:
            raise ValueError(
                "agreement inputs of a model of free input size need an image size. "
                "Received: image_size=None"
            )
        model = at_input_size(model, image_size)
    shape = model.input_shape
    if data is None:
        if not (isinstance(shape, tuple) and len(shape) == 4):
            return random_inputs(model, examples)
        rng = np.random.default_rng(0)
        return (255 * rng.random((examples, *shape[1:]))).astype("float32")
    if not (isinstance(shape, tuple) and len(shape) == 4 and shape[-1] == 3):
        raise ValueError(f"--data needs a model of RGB images. Received: input_shape={shape}")
    import keras

    # The pipeline's Keras preprocessing layers follow the global policy: read in float32.
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        dataset = load_image_dataset(
            data, split, image_size=shape[1], batch_size=examples, training=False
        )
        images, _ = next(iter(dataset))
    finally:
        keras.config.set_dtype_policy(previous)
    return np.asarray(images, dtype="float32")
