"""Channel-mixing feed-forward networks: the transformer MLP and gated linear units."""

from __future__ import annotations

import keras

from keras_fourier.layers.layout import on_flat_tokens
from keras_fourier.validation import check_rate


def _check_ratio(hidden_ratio: float) -> None:
    if not hidden_ratio > 0:
        raise ValueError(f"`hidden_ratio` must be > 0. Received: hidden_ratio={hidden_ratio!r}")


def get_activation(activation: str):
    """keras.activations.get with an error that names the `activation` argument."""
    try:
        return keras.activations.get(activation)
    except ValueError as error:
        raise ValueError(
            f"`activation` must name a Keras activation. Received: activation={activation!r}"
        ) from error


class _FeedForward(keras.layers.Layer):
    """Shared arguments, sublayers and config of `Mlp` and `GLU`.

    ``fc1`` maps C to ``fc1_factor * int(C * hidden_ratio)`` units and
    ``fc2`` maps the hidden units back to C; subclasses define `_mix` on
    (tokens, C) matrices.
    """

    fc1_factor = 1

    def __init__(self, hidden_ratio: float, activation: str, dropout: float, **kwargs):
        super().__init__(**kwargs)
        _check_ratio(hidden_ratio)
        check_rate("dropout", dropout)
        self.hidden_ratio = hidden_ratio
        self.activation = activation
        self.dropout = dropout
        self._activation = get_activation(activation)
        self.drop = keras.layers.Dropout(dropout, dtype=self.dtype_policy, name="drop")

    def build(self, input_shape):
        channels = input_shape[-1]
        hidden = int(channels * self.hidden_ratio)
        self.fc1 = keras.layers.Dense(self.fc1_factor * hidden, dtype=self.dtype_policy, name="fc1")
        self.fc2 = keras.layers.Dense(channels, dtype=self.dtype_policy, name="fc2")
        self.fc1.build(input_shape)
        self.fc2.build((*input_shape[:-1], hidden))

    def call(self, inputs, training=None):
        return on_flat_tokens(lambda rows: self._mix(rows, training), inputs)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_ratio": self.hidden_ratio,
            "activation": self.activation,
            "dropout": self.dropout,
        }


@keras.saving.register_keras_serializable(package="keras_fourier")
class Mlp(_FeedForward):
    """Transformer MLP: Dense(C * hidden_ratio) -> activation -> Dense(C).

    The feed-forward sublayer of ViT/DeiT/GFNet: ``fc2(drop(act(fc1(x))))``
    followed by dropout, over the last axis, so it takes (B, H, W, C) image
    tokens as well as (B, L, C) sequences. The hidden width is
    ``int(C * hidden_ratio)`` as in the official code.

    Args:
        hidden_ratio: hidden width over input width. Default 4.
        activation: any Keras activation. Default "gelu", the exact (erf)
            GELU of the official PyTorch code.
        dropout: dropout rate after the activation and after fc2. Default 0.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (..., C) tensor.
        training: whether dropout is active.

    Returns:
        Tensor of the input's shape.

    Example:
        >>> Mlp(hidden_ratio=2)(keras.ops.ones((2, 7, 7, 16))).shape
        TensorShape([2, 7, 7, 16])

    Reference:
        Dosovitskiy et al., "An Image is Worth 16x16 Words", ICLR 2021.
    """

    def __init__(
        self,
        hidden_ratio: float = 4,
        activation: str = "gelu",
        dropout: float = 0.0,
        **kwargs,
    ):
        super().__init__(hidden_ratio, activation, dropout, **kwargs)

    def _mix(self, inputs, training):
        x = self.drop(self._activation(self.fc1(inputs)), training=training)
        return self.drop(self.fc2(x), training=training)


@keras.saving.register_keras_serializable(package="keras_fourier")
class GLU(_FeedForward):
    """Gated linear unit FFN: ``fc2(act(gate(x)) * value(x))``.

    SwiGLU with the default SiLU activation, GEGLU with "gelu", ReGLU with
    "relu". ``gate`` and ``value`` are computed by one fused Dense ``fc1`` of
    width 2 * hidden (gate first, value second). The default hidden ratio 8/3
    keeps the parameter count of a ratio-4 MLP.

    Args:
        hidden_ratio: hidden width over input width. Default 8/3.
        activation: gate activation. Default "silu".
        dropout: dropout rate after the gating and after fc2. Default 0.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (..., C) tensor.
        training: whether dropout is active.

    Returns:
        Tensor of the input's shape.

    Example:
        >>> GLU()(keras.ops.ones((2, 7, 7, 12))).shape
        TensorShape([2, 7, 7, 12])

    Reference:
        Shazeer, "GLU Variants Improve Transformer", arXiv:2002.05202, 2020.
    """

    fc1_factor = 2

    def __init__(
        self,
        hidden_ratio: float = 8 / 3,
        activation: str = "silu",
        dropout: float = 0.0,
        **kwargs,
    ):
        super().__init__(hidden_ratio, activation, dropout, **kwargs)

    def _mix(self, inputs, training):
        gate, value = keras.ops.split(self.fc1(inputs), 2, axis=-1)
        x = self.drop(self._activation(gate) * value, training=training)
        return self.drop(self.fc2(x), training=training)
