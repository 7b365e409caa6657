"""Residual-branch helpers: LayerScale and stochastic depth (DropPath)."""

from __future__ import annotations

import keras

from keras_fourier.validation import check_rate


@keras.saving.register_keras_serializable(package="keras_fourier")
class LayerScale(keras.layers.Layer):
    """Per-channel learnable scaling of a residual branch, ``gamma * x``.

    ``gamma`` has shape (C,) and starts at ``init_value`` (small, e.g. 1e-6),
    so deep residual stacks start close to identity.

    Args:
        init_value: initial value of every entry of ``gamma``.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (..., C) tensor.

    Returns:
        Tensor of the input's shape.

    Example:
        >>> LayerScale(1e-5)(keras.ops.ones((2, 7, 7, 16))).shape
        TensorShape([2, 7, 7, 16])

    Reference:
        Touvron et al., "Going deeper with Image Transformers", ICCV 2021.
    """

    def __init__(self, init_value: float, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(init_value, (int, float)) or isinstance(init_value, bool):
            raise TypeError(f"`init_value` must be a number. Received: init_value={init_value!r}")
        self.init_value = init_value

    def build(self, input_shape):
        self.gamma = self.add_weight(
            name="gamma",
            shape=(input_shape[-1],),
            initializer=keras.initializers.Constant(self.init_value),
        )

    def call(self, inputs):
        return inputs * self.gamma

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "init_value": self.init_value}


@keras.saving.register_keras_serializable(package="keras_fourier")
class DropPath(keras.layers.Layer):
    """Stochastic depth: drops a whole residual branch per sample while training.

    In training each sample's branch is zeroed with probability ``rate`` and
    kept ones are scaled by 1 / (1 - rate), so the expectation is unchanged;
    at inference it is the identity.

    Args:
        rate: drop probability in [0, 1).
        seed: optional int seed of the layer's random generator. Default None.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, ...) tensor, a residual branch.
        training: whether to drop.

    Returns:
        Tensor of the input's shape.

    Example:
        >>> DropPath(0.1)(keras.ops.ones((4, 7, 7, 16)), training=False).shape
        TensorShape([4, 7, 7, 16])

    Reference:
        Huang et al., "Deep Networks with Stochastic Depth", ECCV 2016.
    """

    def __init__(self, rate: float, seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        check_rate("rate", rate)
        self.rate = rate
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, inputs, training=None):
        if not training or self.rate == 0:
            return inputs
        keep = 1.0 - self.rate
        shape = (keras.ops.shape(inputs)[0],) + (1,) * (len(inputs.shape) - 1)
        noise = keras.random.uniform(shape, dtype=inputs.dtype, seed=self.seed_generator)
        mask = keras.ops.floor(keep + noise)
        return inputs * mask / keep

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}
