"""Multi-head self-attention over image tokens, the baseline token mixer."""

from __future__ import annotations

import math

import keras

from keras_fourier.layers.layout import keep_float, split_channels
from keras_fourier.validation import check_positive_int, check_rate


@keras.saving.register_keras_serializable(package="keras_fourier")
class SelfAttention(keras.layers.Layer):
    """Multi-head self-attention over the H * W tokens of a (B, H, W, C) map.

    ViT/DeiT attention with a fused ``qkv`` projection (Dense(3C), layout
    [q | k | v] each split into heads, as timm) and an output projection
    ``proj``; softmax(q k^T / sqrt(head_dim)) v. Every token attends to every
    other, so it costs O((HW)^2 C): the baseline the Fourier mixers replace.
    It also accepts (B, L, C) sequences, of any length, with an optional
    padding mask: the self-attention sublayer of BERT in the FNet paper's
    baselines (:class:`~keras_fourier.layers.FNetEncoderBlock` with
    ``mixing="attention"``), BERT's parameters with its query, key and value
    kernels side by side in ``qkv``: 4 C^2 + 4 C per layer.

    Args:
        num_heads: number of attention heads; must divide C.
        qkv_bias: whether the qkv projection has a bias. Default True.
        dropout: dropout rate on the attention weights and the output.
            Default 0.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, H, W, C) or (B, L, C) tensor.
        padding_mask: optional (B, L) tensor for (B, L, C) inputs, 1 for
            real tokens and 0 for padding: padded tokens are not attended
            to (their scores are set to -10000 before the softmax, as BERT).
            Default None: every token is attended to.
        training: whether dropout is active.

    Returns:
        Tensor of the input's shape.

    Example:
        >>> SelfAttention(num_heads=2)(keras.ops.ones((2, 4, 4, 8))).shape
        TensorShape([2, 4, 4, 8])

    Reference:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017;
        Touvron et al., "Training data-efficient image transformers", ICML 2021.
    """

    def __init__(self, num_heads: int, qkv_bias: bool = True, dropout: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("num_heads", num_heads)
        check_rate("dropout", dropout)
        self.num_heads = num_heads
        self.qkv_bias = qkv_bias
        self.dropout = dropout
        self.drop = keras.layers.Dropout(dropout, dtype=self.dtype_policy, name="drop")

    def build(self, inputs_shape, padding_mask_shape=None):
        channels = inputs_shape[-1]
        if channels % self.num_heads:
            raise ValueError(
                f"SelfAttention needs channels divisible by `num_heads`; received {channels} "
                f"channels with num_heads={self.num_heads}."
            )
        self.qkv = keras.layers.Dense(
            3 * channels, use_bias=self.qkv_bias, dtype=self.dtype_policy, name="qkv"
        )
        self.proj = keras.layers.Dense(channels, dtype=self.dtype_policy, name="proj")
        self.qkv.build((None, channels))
        self.proj.build((None, channels))

    def call(self, inputs, padding_mask=None, training=None):
        ops = keras.ops
        channels = inputs.shape[-1]
        head_dim = channels // self.num_heads
        # Static token counts make every reshape a constant shape (-1 for the batch): one 2D
        # matmul per Dense, and no shape arithmetic on the batch in exported TFLite graphs.
        if None in inputs.shape[1:]:
            shape = ops.shape(inputs)
            heads_shape = (shape[0], -1, self.num_heads, head_dim)
        else:
            shape = (-1, *inputs.shape[1:])
            heads_shape = (-1, math.prod(inputs.shape[1:-1]), self.num_heads, head_dim)
        qkv = self.qkv(ops.reshape(inputs, (-1, channels)))
        query, key, value = (
            ops.transpose(ops.reshape(part, heads_shape), (0, 2, 1, 3))
            for part in split_channels(qkv, [channels] * 3)
        )
        # int8 TFLite: products of two activations (BATCH_MATMUL) have no int8 XNNPACK kernel,
        # and no int8 scale holds both the scores and the mask's -10000.
        with keep_float():
            scores = ops.matmul(query, ops.transpose(key, (0, 1, 3, 2))) * (head_dim**-0.5)
            if padding_mask is not None:
                # The scores where `keep` is 1, -10000 where it is 0: a where() without
                # SELECT_V2, which XNNPACK does not run.
                keep = ops.cast(ops.cast(padding_mask, "bool"), scores.dtype)[:, None, None, :]
                scores = scores * keep + (keep - 1.0) * 10000.0
        weights = self.drop(ops.softmax(scores, axis=-1), training=training)
        with keep_float():
            out = ops.transpose(ops.matmul(weights, value), (0, 2, 1, 3))
        out = self.proj(ops.reshape(out, (-1, channels)))
        return self.drop(ops.reshape(out, shape), training=training)

    def compute_output_shape(self, inputs_shape, padding_mask_shape=None):
        return tuple(inputs_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "qkv_bias": self.qkv_bias,
            "dropout": self.dropout,
        }
