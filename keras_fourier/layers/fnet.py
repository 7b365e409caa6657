"""FNet's layers: the embeddings and the post-LN encoder block with its token mixing.

The model builders (`FNet`, `FNetBase`, `FNetLarge`) are in
:mod:`keras_fourier.models.fnet`, which documents the wiring and the padding
mask. :data:`MIXINGS` is the one registration point of the block's token
mixings, the paper's mixers (Section 4.1): a row there gives
``FNet(mixing=...)`` and the bench.

Reference:
    Lee-Thorp, Ainslie, Eckstein, Ontanon, "FNet: Mixing Tokens with Fourier
    Transforms", NAACL 2022.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras

from keras_fourier.layers import spectral
from keras_fourier.layers.attention import SelfAttention
from keras_fourier.layers.fourier import FourierMixing
from keras_fourier.layers.layout import on_flat_tokens
from keras_fourier.layers.sequence_mixing import LinearMixing, RandomMixing
from keras_fourier.validation import check_choice, check_positive_int, check_rate

LAYER_NORM_EPSILON = 1e-12
INITIALIZER_STDDEV = 0.02
# The tanh approximation of GELU: the official Flax code's nn.gelu and the default here.
GELU_TANH = "gelu_tanh"


def feed_forward_activation(activation: str):
    """The function of an FNet `activation` name: "gelu_tanh" or a Keras activation name.

    Raises:
        ValueError: any other value.

    Example:
        >>> float(feed_forward_activation("gelu")(keras.ops.ones(())))  # exact (erf) GELU
        0.8413447...
    """
    if activation == GELU_TANH:
        return lambda x: keras.activations.gelu(x, approximate=True)
    try:
        if not isinstance(activation, str):
            raise ValueError(activation)
        return keras.activations.get(activation)
    except ValueError as error:
        raise ValueError(
            f'`activation` must be "{GELU_TANH}" (the tanh-approximate GELU of the official '
            'code) or the name of a Keras activation such as "gelu" (exact, erf). '
            f"Received: activation={activation!r}"
        ) from error


def initializer() -> keras.initializers.Initializer:
    """BERT's initializer of FNet's kernels and embeddings: N(0, 0.02^2)."""
    return keras.initializers.RandomNormal(stddev=INITIALIZER_STDDEV)


def _attention(block: FNetEncoderBlock, **kwargs: Any) -> keras.layers.Layer:
    return SelfAttention(block.num_heads, dropout=block.dropout, **kwargs)


# The token mixings of FNetEncoderBlock, by name (the paper's names in the comments):
# name -> (factory of the mixing sublayer from the block, whether it takes the padding mask).
# "fourier": FNet; "attention": BERT (multi-head self-attention, BERT's parameters);
# "linear": Linear (two learned matrices); "random": Random (two fixed random matrices);
# "identity": FF-only (no mixing: the sublayer returns its input, as the official
# IdentityTransform, so the block computes LayerNorm(x + x) before the feed-forward).
MIXINGS: dict[str, tuple[Callable[..., keras.layers.Layer], bool]] = {
    "fourier": (lambda block, **kw: FourierMixing(fft_impl=block.fft_impl, **kw), False),
    "attention": (_attention, True),
    "linear": (lambda block, **kw: LinearMixing(block.max_sequence_length, **kw), False),
    "random": (
        lambda block, **kw: RandomMixing(block.max_sequence_length, seed=block.seed, **kw),
        False,
    ),
    "identity": (lambda block, **kw: keras.layers.Identity(**kw), False),
}
# The mixings with a sequence-sized matrix: they need max_sequence_length.
SEQUENCE_SIZED_MIXINGS = ("linear", "random")


@keras.saving.register_keras_serializable(package="keras_fourier")
class FNetEmbeddings(keras.layers.Layer):
    """FNet's input embeddings: word + position + segment, LayerNorm, projection, dropout.

    ``dropout(projection(LayerNorm(word[token_ids] + position[:L] +
    segment[segment_ids])))`` with LayerNorm eps 1e-12 and a Dense(hidden)
    projection with bias (the official ``hidden_mapping_in``). Embedding
    tables and the projection kernel are initialised N(0, 0.02).

    Args:
        vocabulary_size: rows of the word table.
        hidden_size: embedding and output width.
        max_sequence_length: rows of the position table; inputs may be
            shorter.
        num_segments: rows of the segment (type) table.
        dropout: dropout rate after the projection. Default 0.1.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        token_ids: int tensor (B, L), L <= max_sequence_length (L may be
            unknown until run time).
        segment_ids: int tensor (B, L).
        training: whether dropout is active.

    Returns:
        Tensor (B, L, hidden_size).

    Example:
        >>> layer = FNetEmbeddings(100, 16, max_sequence_length=8, num_segments=2)
        >>> ids = keras.ops.zeros((2, 8), dtype="int32")
        >>> layer(ids, ids).shape
        TensorShape([2, 8, 16])

    Reference:
        Lee-Thorp et al., "FNet: Mixing Tokens with Fourier Transforms",
        NAACL 2022, Section 3.2.
    """

    def __init__(
        self,
        vocabulary_size: int,
        hidden_size: int,
        max_sequence_length: int,
        num_segments: int,
        dropout: float = 0.1,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for arg, value in (
            ("vocabulary_size", vocabulary_size),
            ("hidden_size", hidden_size),
            ("max_sequence_length", max_sequence_length),
            ("num_segments", num_segments),
        ):
            check_positive_int(arg, value)
        check_rate("dropout", dropout)
        self.vocabulary_size = vocabulary_size
        self.hidden_size = hidden_size
        self.max_sequence_length = max_sequence_length
        self.num_segments = num_segments
        self.dropout = dropout
        self.word = keras.layers.Embedding(
            vocabulary_size,
            hidden_size,
            embeddings_initializer=initializer(),
            dtype=self.dtype_policy,
            name="word",
        )
        self.position = keras.layers.Embedding(
            max_sequence_length,
            hidden_size,
            embeddings_initializer=initializer(),
            dtype=self.dtype_policy,
            name="position",
        )
        self.segment = keras.layers.Embedding(
            num_segments,
            hidden_size,
            embeddings_initializer=initializer(),
            dtype=self.dtype_policy,
            name="segment",
        )
        self.norm = keras.layers.LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, dtype=self.dtype_policy, name="norm"
        )
        self.projection = keras.layers.Dense(
            hidden_size,
            kernel_initializer=initializer(),
            dtype=self.dtype_policy,
            name="projection",
        )
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy, name="dropout")

    def build(self, token_ids_shape, segment_ids_shape=None):
        length = token_ids_shape[-1]
        if length is not None and length > self.max_sequence_length:
            raise ValueError(
                "FNetEmbeddings takes sequences of at most max_sequence_length="
                f"{self.max_sequence_length} tokens; received token_ids shape "
                f"{tuple(token_ids_shape)}."
            )
        self.word.build(token_ids_shape)
        self.position.build((self.max_sequence_length,))
        self.segment.build(token_ids_shape)
        embedded_shape = (*tuple(token_ids_shape), self.hidden_size)
        self.norm.build(embedded_shape)
        self.projection.build(embedded_shape)

    def call(self, token_ids, segment_ids, training=None):
        positions = keras.ops.arange(keras.ops.shape(token_ids)[-1], dtype="int32")
        x = self.word(token_ids) + self.position(positions)[None] + self.segment(segment_ids)
        projected = on_flat_tokens(self.projection, self.norm(x))
        return self.dropout_layer(projected, training=training)

    def compute_output_shape(self, token_ids_shape, segment_ids_shape=None):
        return (*tuple(token_ids_shape), self.hidden_size)

    def get_config(self):
        return {
            **super().get_config(),
            "vocabulary_size": self.vocabulary_size,
            "hidden_size": self.hidden_size,
            "max_sequence_length": self.max_sequence_length,
            "num_segments": self.num_segments,
            "dropout": self.dropout,
        }


@keras.saving.register_keras_serializable(package="keras_fourier")
class FNetEncoderBlock(keras.layers.Layer):
    """One post-LN FNet encoder block: token mixing then a GELU feed-forward sublayer.

    ``x = LayerNorm(x + Mixing(x * mask))`` followed by
    ``x = LayerNorm(x + Dropout(Dense(D)(gelu_tanh(Dense(intermediate_size)(x)))))``,
    LayerNorm eps 1e-12 (``activation`` replaces ``gelu_tanh``). The mixing is
    FNet's by default,
    ``Re(DFT2(x))``, the unnormalised DFT over (sequence, hidden) of
    :class:`~keras_fourier.layers.FourierMixing`; the paper's baselines
    swap it (:data:`MIXINGS`): "attention" (BERT's multi-head
    self-attention, :class:`~keras_fourier.layers.SelfAttention`, whose
    dropout is `dropout`), "linear"
    (:class:`~keras_fourier.layers.LinearMixing`), "random"
    (:class:`~keras_fourier.layers.RandomMixing`) or "identity" (FF-only).
    The padding mask, when given, zeroes the mixing's input (see the module
    docstring of :mod:`keras_fourier.models.fnet`), and self-attention also
    attends to real tokens only; without it every position is mixed, as in
    the official code. Dense kernels and the intermediate bias are
    initialised N(0, 0.02).

    Args:
        intermediate_size: width of the feed-forward hidden layer.
        dropout: dropout rate after the feed-forward output (and of the
            self-attention). Default 0.1.
        fft_impl: "auto" (default), "fft" or "matmul" (Fourier mixing).
        mixing: a name of :data:`MIXINGS`. Default "fourier".
        max_sequence_length: the longest input, the size of the sequence
            matrix of "linear" and "random" (required by those). Default
            None.
        num_heads: attention heads of "attention". Default None: one head
            per 64 hidden units (at least one), as BERT and the paper.
        seed: NumPy seed of the "random" matrices. Default 0.
        activation: the feed-forward activation, "gelu_tanh" (default, the
            official code's) or a Keras activation name, e.g. "gelu" (exact),
            as transformers' ``hidden_act`` "gelu" asks.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, L, D) tensor with a static D; L may be unknown until
            run time (at most `max_sequence_length` for "linear" and
            "random").
        padding_mask: optional (B, L) tensor, 1 for real tokens and 0 for
            padding. Default None: every position is mixed.
        training: whether dropout is active.

    Returns:
        Tensor (B, L, D).

    Example:
        >>> block = FNetEncoderBlock(intermediate_size=32)
        >>> block(keras.ops.ones((2, 8, 16))).shape
        TensorShape([2, 8, 16])

    Reference:
        Lee-Thorp et al., "FNet: Mixing Tokens with Fourier Transforms",
        NAACL 2022, Eq. (3), Section 4.1 and Appendix A.6.
    """

    def __init__(
        self,
        intermediate_size: int,
        dropout: float = 0.1,
        fft_impl: str = "auto",
        mixing: str = "fourier",
        max_sequence_length: int | None = None,
        num_heads: int | None = None,
        seed: int = 0,
        activation: str = GELU_TANH,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("intermediate_size", intermediate_size)
        check_rate("dropout", dropout)
        check_choice("mixing", mixing, tuple(MIXINGS))
        if max_sequence_length is not None or mixing in SEQUENCE_SIZED_MIXINGS:
            check_positive_int("max_sequence_length", max_sequence_length)
        if num_heads is not None:
            check_positive_int("num_heads", num_heads)
        self.intermediate_size = intermediate_size
        self.dropout = dropout
        self.fft_impl = spectral.validate_fft_impl(fft_impl)
        self.mixing_name = mixing
        self.max_sequence_length = max_sequence_length
        self.num_heads = num_heads
        self.seed = seed
        self._mixing_takes_mask = MIXINGS[mixing][1]
        self.activation = activation
        self._activation = feed_forward_activation(activation)
        self.mixing_norm = keras.layers.LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, dtype=self.dtype_policy, name="mixing_norm"
        )
        self.intermediate = keras.layers.Dense(
            intermediate_size,
            kernel_initializer=initializer(),
            bias_initializer=initializer(),
            dtype=self.dtype_policy,
            name="intermediate",
        )
        self.output_dropout = keras.layers.Dropout(
            dropout, dtype=self.dtype_policy, name="output_dropout"
        )
        self.output_norm = keras.layers.LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, dtype=self.dtype_policy, name="output_norm"
        )

    def build(self, inputs_shape, padding_mask_shape=None):
        inputs_shape = tuple(inputs_shape)
        if self.mixing_name == "attention" and self.num_heads is None:
            self.num_heads = max(1, inputs_shape[-1] // 64)
        # Made here, where the hidden size (attention's heads) is known.
        self.mixing = MIXINGS[self.mixing_name][0](self, dtype=self.dtype_policy, name="mixing")
        self.mixing.build(inputs_shape)
        self.mixing_norm.build(inputs_shape)
        self.intermediate.build(inputs_shape)
        self.output_dense = keras.layers.Dense(
            inputs_shape[-1],
            kernel_initializer=initializer(),
            dtype=self.dtype_policy,
            name="output",
        )
        self.output_dense.build((*inputs_shape[:-1], self.intermediate_size))
        self.output_norm.build(inputs_shape)

    def call(self, inputs, padding_mask=None, training=None):
        mixing_input = inputs
        if padding_mask is not None:
            mixing_input = inputs * keras.ops.cast(padding_mask, inputs.dtype)[..., None]
        if self._mixing_takes_mask:
            mixed = self.mixing(mixing_input, padding_mask=padding_mask, training=training)
        else:
            mixed = self.mixing(mixing_input)
        # float32 under mixed_float16 (see FourierMixing): the residual add and the
        # LayerNorm run in float32, and the LayerNorm casts back to the compute dtype.
        x = self.mixing_norm(keras.ops.cast(inputs, mixed.dtype) + mixed)
        feed_forward = on_flat_tokens(
            lambda rows: self.output_dense(self._activation(self.intermediate(rows))), x
        )
        feed_forward = self.output_dropout(feed_forward, training=training)
        return self.output_norm(x + feed_forward)

    def compute_output_shape(self, inputs_shape, padding_mask_shape=None):
        return tuple(inputs_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "intermediate_size": self.intermediate_size,
            "dropout": self.dropout,
            "fft_impl": self.fft_impl,
            "mixing": self.mixing_name,
            "max_sequence_length": self.max_sequence_length,
            "num_heads": self.num_heads,
            "seed": self.seed,
            "activation": self.activation,
        }


@keras.saving.register_keras_serializable(package="keras_fourier")
class FNetMaskedLMHead(keras.layers.Layer):
    """FNet's masked-LM head: gather, Dense, GELU, LayerNorm, then the tied word-embedding decoder.

    ``logits = LayerNorm(gelu_tanh(Dense(E)(x[positions]))) @ W^T + b`` with
    ``W`` the word embedding table (V, E), passed at call time so that the
    decoder is tied to the embeddings, as in the official pretraining model
    (``predictions_dense``, ``predictions_layer_norm``,
    ``predictions_output``; Flax's ``nn.gelu`` is the tanh approximation;
    ``activation`` replaces it, as transformers' ``hidden_act`` does).
    The Dense kernel and the output bias are initialised N(0, 0.02), the
    Dense bias zeros.

    Args:
        vocabulary_size: rows V of the word table (size of the output bias).
        embedding_size: width E of the word table and of the Dense layer.
        activation: "gelu_tanh" (default) or a Keras activation name, the
            encoder blocks' ``activation``.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        sequence_output: (B, L, D) encoder output.
        masked_positions: int (B, P) positions to predict.
        word_embeddings: (V, E) word embedding table.

    Returns:
        (B, P, V) logits.

    Example:
        >>> head = FNetMaskedLMHead(vocabulary_size=100, embedding_size=16)
        >>> x = keras.ops.ones((2, 8, 16))
        >>> head(x, keras.ops.zeros((2, 3), "int32"), keras.ops.ones((100, 16))).shape
        TensorShape([2, 3, 100])

    Reference:
        Lee-Thorp et al., "FNet: Mixing Tokens with Fourier Transforms",
        NAACL 2022, Section 4.1 (BERT's MLM and NSP pretraining).
    """

    def __init__(
        self, vocabulary_size: int, embedding_size: int, activation: str = GELU_TANH, **kwargs
    ):
        super().__init__(**kwargs)
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("embedding_size", embedding_size)
        self.vocabulary_size = vocabulary_size
        self.embedding_size = embedding_size
        self.activation = activation
        self._activation = feed_forward_activation(activation)
        self.dense = keras.layers.Dense(
            embedding_size,
            kernel_initializer=initializer(),
            dtype=self.dtype_policy,
            name="dense",
        )
        self.norm = keras.layers.LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, dtype=self.dtype_policy, name="norm"
        )

    def build(self, sequence_output_shape, masked_positions_shape=None, word_embeddings_shape=None):
        gathered = (None, None, sequence_output_shape[-1])
        self.dense.build(gathered)
        self.norm.build((None, None, self.embedding_size))
        self.output_bias = self.add_weight(
            shape=(self.vocabulary_size,), initializer=initializer(), name="output_bias"
        )

    def call(self, sequence_output, masked_positions, word_embeddings):
        positions = keras.ops.cast(masked_positions, "int32")[..., None]
        gathered = keras.ops.take_along_axis(sequence_output, positions, axis=1)
        hidden = self._activation(self.dense(gathered))
        hidden = self.norm(hidden)
        table = keras.ops.cast(word_embeddings, hidden.dtype)
        logits = keras.ops.matmul(hidden, keras.ops.transpose(table))
        return logits + keras.ops.cast(self.output_bias, hidden.dtype)

    def compute_output_shape(
        self, sequence_output_shape, masked_positions_shape, word_embeddings_shape=None
    ):
        return (*tuple(masked_positions_shape), self.vocabulary_size)

    def get_config(self):
        return {
            **super().get_config(),
            "vocabulary_size": self.vocabulary_size,
            "embedding_size": self.embedding_size,
            "activation": self.activation,
        }
