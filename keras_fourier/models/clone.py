"""The same model with other layer settings: another `fft_impl`, or a linear head."""

from __future__ import annotations

import keras


def clone_with(
    model: keras.Model, *, fft_impl: str | None = None, linear_head: str | None = None
) -> keras.Model:
    """A copy of `model`, same weights, rebuilt from its layer configs with other settings.

    The one helper for "this model with another `fft_impl`": benchmarks
    compare implementations with it, and exports switch to the matmul DFT
    (and drop the head's softmax) with it.

    Args:
        model: a functional or Sequential model.
        fft_impl: the `fft_impl` of every layer that has one ("auto", "fft"
            or "matmul"). Default None: unchanged.
        linear_head: the name of a layer whose activation becomes linear
            (the classifier head, to export logits). Default None: none.

    Returns:
        The new `keras.Model`, with `model`'s weights.

    Raises:
        ValueError: a model whose layers cannot be rebuilt from their configs
            (a subclassed model).

    Example:
        >>> fast = clone_with(keras_fourier.GFNetTi(), fft_impl="matmul")
    """

    def clone_layer(layer: keras.layers.Layer) -> keras.layers.Layer:
        config = layer.get_config()
        if fft_impl is not None and "fft_impl" in config:
            config["fft_impl"] = fft_impl
        if layer.name == linear_head:
            config["activation"] = "linear"
        return layer.__class__.from_config(config)

    try:
        clone = keras.models.clone_model(model, clone_function=clone_layer)
    except ValueError as error:
        raise ValueError(
            "Cloning needs a functional or Sequential model whose layers can be rebuilt "
            f"from their configs. Received: model={model.name!r} ({type(model).__name__})"
        ) from error
    clone.set_weights(model.get_weights())
    return clone
