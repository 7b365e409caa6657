"""What kind of model a Keras model is, read from its inputs, outputs and last layer.

Keras alone (no TensorFlow): the benchmarks, which run on JAX and PyTorch
machines too, and the exports (:mod:`keras_fourier.export.signatures`) ask
these questions.
"""

from __future__ import annotations

import keras

# The input name of a field model (a forecaster): (B, H, W, C) states.
FIELDS_INPUT = "fields"


def classifier_head(model: keras.Model) -> keras.layers.Dense | None:
    """The Dense layer producing the model's single output, if there is one.

    The classification head of the vision models (``head``) and of FNet
    with `num_classes` (``classifier``): exports and benchmarks switch its
    activation to linear to give logits, and keep it in float32 under a
    mixed precision.

    Args:
        model: a Keras model.

    Returns:
        The Dense layer, or None (several or dict outputs, or a last layer
        that is not a Dense layer producing the output).

    Example:
        >>> classifier_head(keras_fourier.GFNetTi()).name
        'head'
    """
    if isinstance(model.output, dict) or len(model.outputs) != 1:
        return None
    last = model.layers[-1]
    if isinstance(last, keras.layers.Dense) and last.output is model.outputs[0]:
        return last
    return None


def is_field_model(model: keras.Model) -> bool:
    """Whether `model` is a field model: one ``fields`` input (B, H, W, C), an output of its shape.

    Example:
        >>> is_field_model(keras_fourier.models.fourcastnet.field_model(
        ...     "fourcastnet_tiny", image_size=16, channels=2))
        True
    """
    if isinstance(model.output, dict) or len(model.outputs) != 1 or len(model.inputs) != 1:
        return False
    fields, output = model.inputs[0], model.outputs[0]
    shape = tuple(fields.shape)
    return (
        fields.name == FIELDS_INPUT
        and len(shape) == 4
        and None not in shape[1:]
        and shape[1:] == tuple(output.shape)[1:]
    )
