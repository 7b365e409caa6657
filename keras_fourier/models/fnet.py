"""FNet text encoders: FNetBase, FNetLarge and the generic `FNet` builder.

FNet (Lee-Thorp et al., NAACL 2022) is a BERT encoder whose self-attention
sublayers are replaced by the parameter-free Fourier mixing
``Re(F_seq(F_hidden(x)))``. The wiring follows the official Flax code
(paper, Appendix A.6):

* embeddings: word + position + segment (type) embeddings -> LayerNorm
  (eps 1e-12) -> Dense(hidden) projection -> dropout;
* ``num_layers`` post-LN encoder blocks,
  ``x = LayerNorm(x + FourierMixing(x))`` then
  ``x = LayerNorm(x + Dropout(Dense(hidden)(gelu_tanh(Dense(intermediate)(x)))))``,
  both with eps 1e-12 and the tanh-approximate GELU;
* a pooler, ``tanh(Dense(hidden)(x[:, 0]))``, on the first token.

Sizes are data: :data:`FNET_VARIANTS` maps a variant name to its hidden size,
number of layers and intermediate size, and :func:`FNet` builds any of them
(or a custom size). :func:`FNetBase` and :func:`FNetLarge` are :func:`FNet`
with the variant fixed.

Padding mask
------------
The official FNet code does not mask: every position, padding included,
enters the DFT of every layer, so the contents of padding tokens change the
outputs at real positions. With ``use_padding_mask=True`` (the default) the
model takes a third input, ``padding_mask`` (B, L), 1 for real tokens and 0
for padding, and each encoder block multiplies its input by the mask before
the Fourier mixing only. Precisely, block ``i`` computes::

    mixed = Re(DFT2(x * mask[..., None]))        # padded rows are zero here
    x = LayerNorm(x + mixed)                     # residual uses the unmasked x
    x = LayerNorm(x + FFN(x))

Every other operation acts on each position separately, so the outputs at
real positions do not depend on the token or segment ids at padded
positions. What the mask does *not* do:

* it does not make a padded sequence equivalent to the shorter unpadded one:
  the DFT still has length L (the static sequence length) and zero rows
  still take part in it, as in zero-padded signal processing;
* it does not clean the padded positions themselves: their rows of
  ``sequence_output`` are computed (from their own embeddings and the mixed
  real tokens) and are meaningless; ignore them downstream;
* the pooled output reads position 0, which must be a real token (the
  first token, e.g. ``[CLS]``).

With ``use_padding_mask=False`` there is no mask input and every position
is mixed, as in the original code.

Layer names are stable, so importing a checkpoint is a key map:
``embeddings/{word,position,segment,norm,projection}``,
``encoder_layer_{i}/{mixing_norm,intermediate,output,output_norm}``,
``pooler`` and, with a head, ``classifier``.

Reference:
    Lee-Thorp, Ainslie, Eckstein, Ontanon, "FNet: Mixing Tokens with Fourier
    Transforms", NAACL 2022.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import keras

from keras_fourier.layers import spectral
from keras_fourier.layers.fourier import FourierMixing
from keras_fourier.models.weights import load_weights_file
from keras_fourier.validation import check_positive_int, check_rate

LAYER_NORM_EPSILON = 1e-12
INITIALIZER_STDDEV = 0.02

# With vocabulary_size=32000 and the other defaults, "base" has 82,861,056
# parameters and "large" 236,945,408 (no classifier head).
FNET_VARIANTS: dict[str, dict[str, int]] = {
    "base": {"hidden_size": 768, "num_layers": 12, "intermediate_size": 3072},
    "large": {"hidden_size": 1024, "num_layers": 24, "intermediate_size": 4096},
}
_SIZE_KEYS = ("hidden_size", "num_layers", "intermediate_size")


def _initializer() -> keras.initializers.Initializer:
    return keras.initializers.RandomNormal(stddev=INITIALIZER_STDDEV)


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
        token_ids: int tensor (B, L), L static and <= max_sequence_length.
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
            vocabulary_size, hidden_size, embeddings_initializer=_initializer(), name="word"
        )
        self.position = keras.layers.Embedding(
            max_sequence_length, hidden_size, embeddings_initializer=_initializer(), name="position"
        )
        self.segment = keras.layers.Embedding(
            num_segments, hidden_size, embeddings_initializer=_initializer(), name="segment"
        )
        self.norm = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name="norm")
        self.projection = keras.layers.Dense(
            hidden_size, kernel_initializer=_initializer(), name="projection"
        )
        self.dropout_layer = keras.layers.Dropout(dropout, name="dropout")

    def build(self, token_ids_shape, segment_ids_shape=None):
        length = token_ids_shape[-1]
        if length is None or length > self.max_sequence_length:
            raise ValueError(
                "FNetEmbeddings needs a static sequence length <= max_sequence_length="
                f"{self.max_sequence_length}; received token_ids shape {tuple(token_ids_shape)}."
            )
        self.word.build(token_ids_shape)
        self.position.build((length,))
        self.segment.build(token_ids_shape)
        embedded_shape = (*tuple(token_ids_shape), self.hidden_size)
        self.norm.build(embedded_shape)
        self.projection.build(embedded_shape)

    def call(self, token_ids, segment_ids, training=None):
        positions = keras.ops.arange(keras.ops.shape(token_ids)[-1], dtype="int32")
        x = self.word(token_ids) + self.position(positions)[None] + self.segment(segment_ids)
        return self.dropout_layer(self.projection(self.norm(x)), training=training)

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
    """One post-LN FNet encoder block: Fourier mixing then a GELU feed-forward sublayer.

    ``x = LayerNorm(x + Re(DFT2(x * mask)))`` followed by
    ``x = LayerNorm(x + Dropout(Dense(D)(gelu_tanh(Dense(intermediate_size)(x)))))``,
    LayerNorm eps 1e-12, where DFT2 is the unnormalised DFT over (sequence,
    hidden) of :class:`~keras_fourier.layers.FourierMixing`. The padding
    mask, when given, only zeroes the mixing's input (see the module
    docstring); without it every position is mixed, as in the official code.
    Dense kernels and the intermediate bias are initialised N(0, 0.02).

    Args:
        intermediate_size: width of the feed-forward hidden layer.
        dropout: dropout rate after the feed-forward output. Default 0.1.
        fft_impl: "auto" (default), "fft" or "matmul".
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, L, D) tensor with static L and D.
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
        NAACL 2022, Eq. (3) and Appendix A.6.
    """

    def __init__(
        self,
        intermediate_size: int,
        dropout: float = 0.1,
        fft_impl: str = "auto",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("intermediate_size", intermediate_size)
        check_rate("dropout", dropout)
        self.intermediate_size = intermediate_size
        self.dropout = dropout
        self.fft_impl = spectral.validate_fft_impl(fft_impl)
        self.mixing = FourierMixing(fft_impl=fft_impl, name="mixing")
        self.mixing_norm = keras.layers.LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, name="mixing_norm"
        )
        self.intermediate = keras.layers.Dense(
            intermediate_size,
            kernel_initializer=_initializer(),
            bias_initializer=_initializer(),
            name="intermediate",
        )
        self.output_dropout = keras.layers.Dropout(dropout, name="output_dropout")
        self.output_norm = keras.layers.LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, name="output_norm"
        )

    def build(self, inputs_shape, padding_mask_shape=None):
        inputs_shape = tuple(inputs_shape)
        self.mixing.build(inputs_shape)
        self.mixing_norm.build(inputs_shape)
        self.intermediate.build(inputs_shape)
        self.output_dense = keras.layers.Dense(
            inputs_shape[-1], kernel_initializer=_initializer(), name="output"
        )
        self.output_dense.build((*inputs_shape[:-1], self.intermediate_size))
        self.output_norm.build(inputs_shape)

    def call(self, inputs, padding_mask=None, training=None):
        mixing_input = inputs
        if padding_mask is not None:
            mixing_input = inputs * keras.ops.cast(padding_mask, inputs.dtype)[..., None]
        mixed = self.mixing(mixing_input)
        # float32 under mixed_float16 (see FourierMixing): the residual add and the
        # LayerNorm run in float32, and the LayerNorm casts back to the compute dtype.
        x = self.mixing_norm(keras.ops.cast(inputs, mixed.dtype) + mixed)
        hidden = keras.activations.gelu(self.intermediate(x), approximate=True)
        feed_forward = self.output_dropout(self.output_dense(hidden), training=training)
        return self.output_norm(x + feed_forward)

    def compute_output_shape(self, inputs_shape, padding_mask_shape=None):
        return tuple(inputs_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "intermediate_size": self.intermediate_size,
            "dropout": self.dropout,
            "fft_impl": self.fft_impl,
        }


def _resolve_variant(variant: str | Mapping[str, int]) -> dict[str, int]:
    if isinstance(variant, str):
        if variant not in FNET_VARIANTS:
            raise ValueError(
                f"`variant` must be one of {sorted(FNET_VARIANTS)} or a mapping with keys "
                f"{_SIZE_KEYS}. Received: variant={variant!r}"
            )
        return dict(FNET_VARIANTS[variant])
    if not isinstance(variant, Mapping) or set(variant) != set(_SIZE_KEYS):
        raise ValueError(
            f"`variant` must be one of {sorted(FNET_VARIANTS)} or a mapping with exactly the "
            f"keys {_SIZE_KEYS}. Received: variant={variant!r}"
        )
    sizes = dict(variant)
    for key in _SIZE_KEYS:
        check_positive_int(key, sizes[key])
    return sizes


def _check_weights(weights: Any) -> None:
    if weights is None:
        return
    if (
        not isinstance(weights, (str, os.PathLike))
        or not os.fspath(weights).endswith(".weights.h5")
        or not os.path.isfile(weights)
    ):
        raise ValueError(
            "`weights` must be None or the path of an existing `.weights.h5` file saved by "
            "keras_fourier (no pretrained FNet weights are bundled). "
            f"Received: weights={weights!r}"
        )


def _check_classifier_activation(classifier_activation: Any) -> None:
    try:
        keras.activations.get(classifier_activation)
    except ValueError as error:
        raise ValueError(
            "`classifier_activation` must be None or a Keras activation. "
            f"Received: classifier_activation={classifier_activation!r}"
        ) from error


def FNet(
    variant: str | Mapping[str, int] = "base",
    *,
    vocabulary_size: int = 32000,
    max_sequence_length: int = 512,
    sequence_length: int | None = None,
    num_segments: int = 4,
    dropout: float = 0.1,
    use_padding_mask: bool = True,
    num_classes: int | None = None,
    classifier_activation: str | Callable | None = None,
    fft_impl: str = "auto",
    weights: str | os.PathLike | None = None,
    name: str = "fnet",
) -> keras.Model:
    """Builds an FNet text encoder of any size as a functional `keras.Model`.

    The one builder behind :func:`FNetBase` and :func:`FNetLarge`; see the
    module docstring for the wiring, the layer names and what the padding
    mask does.

    Args:
        variant: a key of :data:`FNET_VARIANTS` ("base" or "large"), or a
            mapping with exactly the keys ``hidden_size``, ``num_layers`` and
            ``intermediate_size`` (positive ints). Default "base".
        vocabulary_size: rows of the word embedding table. Default 32000,
            the paper's SentencePiece vocabulary.
        max_sequence_length: rows of the position embedding table.
            Default 512.
        sequence_length: static length L of the inputs, at most
            ``max_sequence_length``. The Fourier transform needs a static
            length. Default None: ``max_sequence_length``.
        num_segments: rows of the segment (type) embedding table. Default 4.
        dropout: dropout rate after the embeddings, after each feed-forward
            sublayer and before the classifier. Default 0.1.
        use_padding_mask: whether the model takes a ``padding_mask`` input
            that keeps padded positions out of every Fourier mixing.
            Default True.
        num_classes: if set, a classifier head (dropout + Dense(num_classes))
            on the pooled output replaces the dict output. Default None.
        classifier_activation: activation of the classifier head, e.g.
            "softmax". Default None: logits. Ignored without ``num_classes``.
        fft_impl: "auto" (default), "fft" or "matmul"; see
            :mod:`keras_fourier.layers.spectral`.
        weights: None (default, random initialisation) or the path of a
            ``.weights.h5`` file saved by this package for the same
            configuration; a file that does not match raises ValueError.
        name: model name. Default "fnet".

    Returns:
        A `keras.Model` with inputs ``{"token_ids": (B, L) int32,
        "segment_ids": (B, L) int32}`` plus ``"padding_mask": (B, L) int32``
        when ``use_padding_mask``. Its output is ``{"sequence_output":
        (B, L, D), "pooled_output": (B, D)}``, or the (B, num_classes)
        classifier output when ``num_classes`` is set.

    Example:
        >>> model = FNet(
        ...     {"hidden_size": 16, "num_layers": 2, "intermediate_size": 32},
        ...     vocabulary_size=100,
        ...     max_sequence_length=8,
        ... )
        >>> ids = keras.ops.zeros((2, 8), dtype="int32")
        >>> mask = keras.ops.ones((2, 8), dtype="int32")
        >>> out = model({"token_ids": ids, "segment_ids": ids, "padding_mask": mask})
        >>> out["sequence_output"].shape, out["pooled_output"].shape
        (TensorShape([2, 8, 16]), TensorShape([2, 16]))

    Reference:
        Lee-Thorp et al., "FNet: Mixing Tokens with Fourier Transforms",
        NAACL 2022, Section 3.2 and Appendix A.1, A.6.
    """
    sizes = _resolve_variant(variant)
    for arg, value in (
        ("vocabulary_size", vocabulary_size),
        ("max_sequence_length", max_sequence_length),
        ("num_segments", num_segments),
    ):
        check_positive_int(arg, value)
    if sequence_length is None:
        sequence_length = max_sequence_length
    check_positive_int("sequence_length", sequence_length)
    if sequence_length > max_sequence_length:
        raise ValueError(
            f"`sequence_length` must be <= max_sequence_length={max_sequence_length}. "
            f"Received: sequence_length={sequence_length!r}"
        )
    check_rate("dropout", dropout)
    if num_classes is not None:
        check_positive_int("num_classes", num_classes)
        _check_classifier_activation(classifier_activation)
    spectral.validate_fft_impl(fft_impl)
    _check_weights(weights)

    inputs = {
        "token_ids": keras.Input((sequence_length,), dtype="int32", name="token_ids"),
        "segment_ids": keras.Input((sequence_length,), dtype="int32", name="segment_ids"),
    }
    padding_mask = None
    if use_padding_mask:
        padding_mask = keras.Input((sequence_length,), dtype="int32", name="padding_mask")
        inputs["padding_mask"] = padding_mask

    x = FNetEmbeddings(
        vocabulary_size=vocabulary_size,
        hidden_size=sizes["hidden_size"],
        max_sequence_length=max_sequence_length,
        num_segments=num_segments,
        dropout=dropout,
        name="embeddings",
    )(inputs["token_ids"], inputs["segment_ids"])
    for index in range(sizes["num_layers"]):
        x = FNetEncoderBlock(
            intermediate_size=sizes["intermediate_size"],
            dropout=dropout,
            fft_impl=fft_impl,
            name=f"encoder_layer_{index}",
        )(x, padding_mask=padding_mask)
    pooled = keras.layers.Dense(
        sizes["hidden_size"],
        activation="tanh",
        kernel_initializer=_initializer(),
        name="pooler",
    )(x[:, 0])

    if num_classes is None:
        outputs = {"sequence_output": x, "pooled_output": pooled}
    else:
        head = keras.layers.Dropout(dropout, name="classifier_dropout")(pooled)
        outputs = keras.layers.Dense(
            num_classes,
            activation=classifier_activation,
            kernel_initializer=_initializer(),
            name="classifier",
        )(head)
    model = keras.Model(inputs, outputs, name=name)
    if weights is not None:
        path = os.fspath(weights)
        load_weights_file(model, path)
    return model


_VARIANT_DOCSTRING = """FNet-{title} text encoder, ``FNet("{variant}", ...)``.

    Hidden size {hidden_size}, {num_layers} layers, intermediate size
    {intermediate_size}. See :func:`FNet` for the arguments, the inputs and
    outputs, and the module docstring for the padding mask.

    Args:
        vocabulary_size: word table rows. Default 32000.
        max_sequence_length: position table rows. Default 512.
        sequence_length: static input length. Default None: max_sequence_length.
        num_segments: segment table rows. Default 4.
        dropout: dropout rate. Default 0.1.
        use_padding_mask: whether to take a ``padding_mask`` input. Default True.
        num_classes: classifier head size. Default None: no head.
        classifier_activation: head activation. Default None: logits.
        fft_impl: "auto" (default), "fft" or "matmul".
        weights: None (default) or a ``.weights.h5`` path saved by this package.
        name: model name. Default "fnet_{variant}".

    Returns:
        A functional `keras.Model`, as :func:`FNet`.

    Example:
        >>> model = FNet{title}(sequence_length=128, num_classes=2)
        >>> model.output_shape
        (None, 2)

    Reference:
        Lee-Thorp et al., "FNet: Mixing Tokens with Fourier Transforms",
        NAACL 2022, Section 4.1 and Appendix A.1.
    """


def _variant_builder(variant: str) -> Callable[..., keras.Model]:
    """The public constructor of one entry of :data:`FNET_VARIANTS`."""

    def builder(
        *,
        vocabulary_size: int = 32000,
        max_sequence_length: int = 512,
        sequence_length: int | None = None,
        num_segments: int = 4,
        dropout: float = 0.1,
        use_padding_mask: bool = True,
        num_classes: int | None = None,
        classifier_activation: str | Callable | None = None,
        fft_impl: str = "auto",
        weights: str | os.PathLike | None = None,
        name: str = f"fnet_{variant}",
    ) -> keras.Model:
        return FNet(
            variant,
            vocabulary_size=vocabulary_size,
            max_sequence_length=max_sequence_length,
            sequence_length=sequence_length,
            num_segments=num_segments,
            dropout=dropout,
            use_padding_mask=use_padding_mask,
            num_classes=num_classes,
            classifier_activation=classifier_activation,
            fft_impl=fft_impl,
            weights=weights,
            name=name,
        )

    title = variant.capitalize()
    builder.__name__ = builder.__qualname__ = f"FNet{title}"
    builder.__doc__ = _VARIANT_DOCSTRING.format(
        title=title,
        variant=variant,
        **FNET_VARIANTS[variant],
    )
    return builder


FNetBase = _variant_builder("base")
FNetLarge = _variant_builder("large")
