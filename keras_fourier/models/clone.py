"""The same model with other layer settings: another `fft_impl`, a linear head, a dtype policy."""

from __future__ import annotations

from collections.abc import Collection

import keras


def clone_with(
    model: keras.Model,
    *,
    fft_impl: str | None = None,
    linear_head: str | None = None,
    dtype_policy: str | None = None,
    keep_dtype: Collection[str] = (),
) -> keras.Model:
    """A copy of `model`, same weights, rebuilt from its layer configs with other settings.

    The one helper for "this model with another `fft_impl`" or "this model
    in mixed precision": benchmarks compare implementations and precisions
    with it, and exports switch to the matmul DFT (and drop the head's
    softmax) with it.

    Args:
        model: a functional or Sequential model.
        fft_impl: the `fft_impl` of every layer that has one ("auto", "fft"
            or "matmul"). Default None: unchanged.
        linear_head: the name of a layer whose activation becomes linear
            (the classifier head, to export logits). Default None: none.
        dtype_policy: the dtype policy ("mixed_bfloat16", "mixed_float16",
            ...) of every layer whose policy is float32, the policy the
            builders' default leaves on every layer, and the global policy
            while the layers are rebuilt (for the sublayers they make).
            Default None: unchanged.
        keep_dtype: names of layers that keep their policy under
            `dtype_policy` (the classifier head, float32 as the builders make
            it under a global mixed policy). Default: none.

    Returns:
        The new `keras.Model`, with `model`'s weights.

    Raises:
        ValueError: a model whose layers cannot be rebuilt from their configs
            (a subclassed model).

    Example:
        >>> fast = clone_with(keras_fourier.GFNetTi(), fft_impl="matmul")
        >>> bf16 = clone_with(keras_fourier.GFNetTi(), dtype_policy="mixed_bfloat16")
    """

    def clone_layer(layer: keras.layers.Layer) -> keras.layers.Layer:
        config = layer.get_config()
        if fft_impl is not None and "fft_impl" in config:
            config["fft_impl"] = fft_impl
        if layer.name == linear_head:
            config["activation"] = "linear"
        dtype = config.get("dtype")
        is_float32 = isinstance(dtype, dict) and dtype.get("config", {}).get("name") == "float32"
        if dtype_policy is not None and is_float32 and layer.name not in keep_dtype:
            config["dtype"] = dtype_policy
        return layer.__class__.from_config(config)

    previous = keras.config.dtype_policy()
    if dtype_policy is not None:
        keras.config.set_dtype_policy(dtype_policy)
    try:
        clone = keras.models.clone_model(model, clone_function=clone_layer)
    except ValueError as error:
        raise ValueError(
            "Cloning needs a functional or Sequential model whose layers can be rebuilt "
            f"from their configs. Received: model={model.name!r} ({type(model).__name__})"
        ) from error
    finally:
        keras.config.set_dtype_policy(previous)
    clone.set_weights(model.get_weights())
    return clone
