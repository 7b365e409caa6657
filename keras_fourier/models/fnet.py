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
number of layers and intermediate size, and :func:`build_fnet` builds any of
them (or a custom size). The public ``FNet``, ``FNetBase`` and ``FNetLarge``
(:mod:`keras_fourier.models.catalog`) are :func:`build_fnet` with the weight
loader of :mod:`keras_fourier.models.fnet_weights` bound
(:func:`public_builder`), the latter two with the variant fixed. This module
holds the architecture only; it reads no file.

The paper's other models are the same builder with another token mixing
(``mixing``: "attention" for BERT, "linear", "random", "identity" for FF-only;
``attention_layers=2`` for FNet-Hybrid), rows of
:data:`keras_fourier.models.fnet_family.PAPER_MODELS`. With
``sequence_length=None`` (the default) a model takes batches of any length up
to ``max_sequence_length``.

Padding mask
------------
The official FNet code does not mask: every position, padding included,
enters the DFT of every layer (its ``FourierTransform`` drops the mask), so
the ids at padded positions change the outputs at real positions. That is
the default here (``use_padding_mask=False``): the model computes the
paper's function, the one the official checkpoints were trained for, and
takes no mask input (a ``padding_mask`` entry in the input dict, as the
package's text pipelines produce, is not an input of the model; select the
model's inputs, see :func:`keras_fourier.data.text.select_model_inputs`).

With ``use_padding_mask=True`` the model takes a third input,
``padding_mask`` (B, L), 1 for real tokens and 0 for padding, and each
encoder block multiplies its input by the mask before the Fourier mixing
only. Precisely, block ``i`` computes::

    mixed = Re(DFT2(x * mask[..., None]))        # padded rows are zero here
    x = LayerNorm(x + mixed)                     # residual uses the unmasked x
    x = LayerNorm(x + FFN(x))

Every other operation acts on each position separately, so the outputs at
real positions do not depend on the token or segment ids at padded
positions. The trade-off: masking makes a prediction independent of what
fills the padding (useful when padding is not always the pad id, or for
bucketed batching), but it is *another function* than the one pretrained
weights learned (the official models saw ``[PAD]`` embeddings in every
mixing), so it shifts a pretrained model's outputs and needs fine-tuning to
recover; with the default the padding's contribution is the learned one
and is the same for every batch padded with the pad id. What the mask does
*not* do:

* it does not make a padded sequence equivalent to the shorter unpadded one:
  the DFT still has length L (the padded length of the batch) and zero rows
  still take part in it, as in zero-padded signal processing;
* it does not clean the padded positions themselves: their rows of
  ``sequence_output`` are computed (from their own embeddings and the mixed
  real tokens) and are meaningless; ignore them downstream;
* the pooled output reads position 0, which must be a real token (the
  first token, e.g. ``[CLS]``).

Layer names are stable, so importing a checkpoint is a key map:
``embeddings/{word,position,segment,norm,projection}``,
``encoder_layer_{i}/{mixing_norm,intermediate,output,output_norm}``,
``pooler`` and, with a head, ``classifier``.

Reference:
    Lee-Thorp, Ainslie, Eckstein, Ontanon, "FNet: Mixing Tokens with Fourier
    Transforms", NAACL 2022.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any

import keras

from keras_fourier.layers import spectral
from keras_fourier.layers.fnet import (
    GELU_TANH,
    MIXINGS,
    FNetEmbeddings,
    FNetEncoderBlock,
    FNetMaskedLMHead,
    feed_forward_activation,
    initializer,
)
from keras_fourier.models.fnet_family import FNET_VARIANTS, SIZE_KEYS, check_fnet_weights
from keras_fourier.validation import check_choice, check_positive_int, check_rate


def _resolve_variant(variant: str | Mapping[str, int]) -> dict[str, int]:
    if isinstance(variant, str):
        if variant not in FNET_VARIANTS:
            raise ValueError(
                f"`variant` must be one of {sorted(FNET_VARIANTS)} or a mapping with keys "
                f"{SIZE_KEYS}. Received: variant={variant!r}"
            )
        return dict(FNET_VARIANTS[variant])
    if not isinstance(variant, Mapping) or set(variant) != set(SIZE_KEYS):
        raise ValueError(
            f"`variant` must be one of {sorted(FNET_VARIANTS)} or a mapping with exactly the "
            f"keys {SIZE_KEYS}. Received: variant={variant!r}"
        )
    sizes = dict(variant)
    for key in SIZE_KEYS:
        check_positive_int(key, sizes[key])
    return sizes


def _check_heads(heads: Any, num_classes: int | None) -> None:
    if heads not in (None, "pretraining"):
        raise ValueError(f'`heads` must be None or "pretraining". Received: heads={heads!r}')
    if heads is not None and num_classes is not None:
        raise ValueError(
            '`heads="pretraining"` and `num_classes` exclude each other (the pretraining '
            f"model has its own heads). Received: heads={heads!r}, num_classes={num_classes!r}"
        )


@keras.saving.register_keras_serializable(package="keras_fourier")
class FNetPretraining(keras.Model):
    """An FNet encoder with the official pretraining heads: masked LM (tied) and next sentence.

    The heads of the official ``PreTrainingModel``: the masked-LM head
    (:class:`~keras_fourier.layers.FNetMaskedLMHead`, its decoder tied to the
    encoder's word embeddings) on the sequence output at
    ``masked_positions``, and a Dense(2) next-sentence head on the pooled
    output. With them the whole official checkpoint loads and pretraining
    can continue. Build it with ``FNet(..., heads="pretraining")``.

    Args:
        encoder: an FNet encoder built by :func:`FNet` without ``num_classes``.
        **kwargs: base `keras.Model` arguments (``name``).

    Call arguments:
        inputs: the encoder's inputs plus ``"masked_positions"``, int (B, P).
        training: whether dropout is active.

    Returns:
        ``{"masked_lm_logits": (B, P, vocabulary_size),
        "next_sentence_logits": (B, 2)}``.

    Example:
        >>> model = FNet({"hidden_size": 16, "num_layers": 1, "intermediate_size": 32},
        ...              vocabulary_size=100, max_sequence_length=8, heads="pretraining")
        >>> ids = keras.ops.zeros((2, 8), "int32")
        >>> out = model({"token_ids": ids, "segment_ids": ids,
        ...              "masked_positions": keras.ops.zeros((2, 3), "int32")})
        >>> out["masked_lm_logits"].shape
        TensorShape([2, 3, 100])

    Reference:
        Lee-Thorp et al., "FNet: Mixing Tokens with Fourier Transforms",
        NAACL 2022, Section 4.1.
    """

    def __init__(self, encoder: keras.Model, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(encoder, keras.Model) or "pooled_output" not in (encoder.output or {}):
            raise ValueError(
                "`encoder` must be an FNet encoder built by FNet() without num_classes. "
                f"Received: encoder={encoder!r}"
            )
        self.encoder = encoder
        embeddings = encoder.get_layer("embeddings")
        self.masked_lm_head = FNetMaskedLMHead(
            embeddings.vocabulary_size,
            embeddings.hidden_size,
            activation=encoder.get_layer("encoder_layer_0").activation,
            dtype=encoder.dtype_policy,
            name="masked_lm_head",
        )
        self.next_sentence_head = keras.layers.Dense(
            2,
            kernel_initializer=initializer(),
            bias_initializer=initializer(),
            dtype=encoder.dtype_policy,
            name="next_sentence_head",
        )
        hidden = encoder.output["pooled_output"].shape[-1]
        self.masked_lm_head.build((None, None, hidden), (None, None))
        self.next_sentence_head.build((None, hidden))
        self.built = True

    def call(self, inputs, training=None):
        features = {name: inputs[name] for name in self.encoder.input}
        outputs = self.encoder(features, training=training)
        word = self.encoder.get_layer("embeddings").word.embeddings
        return {
            "masked_lm_logits": self.masked_lm_head(
                outputs["sequence_output"], inputs["masked_positions"], word
            ),
            "next_sentence_logits": self.next_sentence_head(outputs["pooled_output"]),
        }

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "encoder": keras.saving.serialize_keras_object(self.encoder),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        encoder = keras.saving.deserialize_keras_object(config.pop("encoder"))
        return cls(encoder, **config)


def encoder_of(model: keras.Model) -> keras.Model:
    """The FNet encoder of `model`: itself, or the encoder of an :class:`FNetPretraining`."""
    return model.encoder if isinstance(model, FNetPretraining) else model


def num_layers(encoder: keras.Model) -> int:
    """The number of encoder blocks (``encoder_layer_{i}``) of an FNet encoder."""
    return sum(layer.name.startswith("encoder_layer_") for layer in encoder.layers)


def _check_classifier_activation(classifier_activation: Any) -> None:
    try:
        keras.activations.get(classifier_activation)
    except ValueError as error:
        raise ValueError(
            "`classifier_activation` must be None or a Keras activation. "
            f"Received: classifier_activation={classifier_activation!r}"
        ) from error


def build_fnet(
    variant: str | Mapping[str, int] = "base",
    *,
    vocabulary_size: int = 32000,
    max_sequence_length: int = 512,
    sequence_length: int | None = None,
    num_segments: int = 4,
    dropout: float = 0.1,
    use_padding_mask: bool = False,
    num_classes: int | None = None,
    classifier_activation: str | Callable | None = None,
    heads: str | None = None,
    fft_impl: str = "auto",
    mixing: str = "fourier",
    attention_layers: int = 0,
    num_heads: int | None = None,
    activation: str = GELU_TANH,
    weights: str | os.PathLike | None = None,
    name: str = "fnet",
    load_weights: Callable[[keras.Model, Any], None] | None = None,
) -> keras.Model:
    """Builds an FNet text encoder of any size as a functional `keras.Model`.

    The one builder behind the public ``FNet``, ``FNetBase`` and
    ``FNetLarge`` (made by :func:`public_builder` with the package's weight
    loader); see the module docstring for the wiring, the layer names and
    what the padding mask does.

    Args:
        variant: a key of :data:`FNET_VARIANTS` ("base" or "large"), or a
            mapping with exactly the keys ``hidden_size``, ``num_layers`` and
            ``intermediate_size`` (positive ints). Default "base".
        vocabulary_size: rows of the word embedding table. Default 32000,
            the paper's SentencePiece vocabulary.
        max_sequence_length: rows of the position embedding table (and
            the size of the sequence matrices of the "linear" and "random"
            mixings): the longest input. Default 512.
        sequence_length: static length L of the inputs, at most
            ``max_sequence_length``. Default None: any length up to
            ``max_sequence_length``, chosen per batch (the FFT needs no
            static length, the matmul DFT builds its tables from the
            batch's length); export such a model at a fixed length
            (``sequence_length=`` of the exports).
        num_segments: rows of the segment (type) embedding table. Default 4.
        dropout: dropout rate after the embeddings, after each feed-forward
            sublayer and before the classifier. Default 0.1.
        use_padding_mask: whether the model takes a ``padding_mask`` input
            that keeps padded positions out of every Fourier mixing (see the
            module docstring for the trade-off). Default False: every
            position is mixed, as in the paper and the official code.
        num_classes: if set, a classifier head on the pooled output replaces
            the dict output: Dense(num_classes) on the pooled output, as the
            official ``SequenceClassificationModel`` (its
            ``classification`` projection); the package adds dropout
            (``dropout``) between the pooled output and that Dense layer,
            which the official model does not have (set ``dropout=0`` for
            the official function in training; inference is the same).
            Default None.
        classifier_activation: activation of the classifier head, e.g.
            "softmax". Default None: logits. Ignored without ``num_classes``.
        heads: None (default) or "pretraining": an :class:`FNetPretraining`
            with the official masked-LM (tied to the word embeddings) and
            next-sentence heads, which takes ``masked_positions`` too.
        fft_impl: "auto" (default), "fft" or "matmul"; see
            :mod:`keras_fourier.layers.spectral`.
        mixing: the token mixing of every encoder block, the paper's
            models (Section 4.1, Table 2): "fourier" (default, FNet),
            "attention" (BERT: multi-head self-attention with BERT's
            parameters), "linear" (Linear: learned sequence and hidden
            matrices), "random" (Random: fixed random ones) or "identity"
            (FF-only: no token mixing). See
            :data:`keras_fourier.layers.fnet.MIXINGS`.
        attention_layers: how many of the last blocks mix with
            self-attention instead of `mixing`: 2 with "fourier" is the
            paper's FNet-Hybrid. Default 0.
        num_heads: attention heads of the self-attention blocks. Default
            None: hidden_size // 64 (at least 1), as BERT and the paper.
        activation: the feed-forward (and masked-LM head) activation:
            "gelu_tanh" (default, the tanh-approximate GELU of the official
            code and of transformers' ``hidden_act="gelu_new"``) or a Keras
            activation name, e.g. "gelu" (exact, transformers' "gelu").
        weights: None (default, random initialisation), a release name
            ("f_net_base", "f_net_large": the official C4-pretrained
            checkpoint, downloaded once into the Keras cache and converted
            once, offline afterwards), or a path: a ``.weights.h5`` saved by
            this package, an official FNet Flax checkpoint file (read without
            JAX or Flax, its optimizer moments skipped), a Hugging Face
            transformers FNet folder (``config.json`` + ``model.safetensors``
            or ``pytorch_model.bin``; its ``hidden_act`` must be this
            model's `activation`), or a keras-hub FNet preset folder
            (``config.json`` + weights, a task preset's classifier
            included). Loading is all or nothing: weights that do not match
            raise ValueError listing the missing, unexpected and wrong-shape
            tensors, and the model is unchanged. A classifier loading a
            pretraining checkpoint keeps a fresh classifier, as the official
            fine-tuning does; a transformers or keras-hub head that does not
            fit starts fresh with one ``FreshHeadWarning``.
        name: model name. Default "fnet".
        load_weights: ``load_weights(model, weights)`` loads non-None
            `weights`; the public builders pass
            :func:`keras_fourier.models.fnet_weights.load_fnet_weights` and
            do not take this argument. Default None: no loader.

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
        >>> out = model({"token_ids": ids, "segment_ids": ids})
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
    if sequence_length is not None:
        check_positive_int("sequence_length", sequence_length)
    if sequence_length is not None and sequence_length > max_sequence_length:
        raise ValueError(
            f"`sequence_length` must be <= max_sequence_length={max_sequence_length}. "
            f"Received: sequence_length={sequence_length!r}"
        )
    check_rate("dropout", dropout)
    if num_classes is not None:
        check_positive_int("num_classes", num_classes)
        _check_classifier_activation(classifier_activation)
    _check_heads(heads, num_classes)
    spectral.validate_fft_impl(fft_impl)
    check_choice("mixing", mixing, tuple(MIXINGS))
    if (
        isinstance(attention_layers, bool)
        or not isinstance(attention_layers, int)
        or not 0 <= attention_layers <= sizes["num_layers"]
    ):
        raise ValueError(
            f"`attention_layers` must be an int from 0 to num_layers={sizes['num_layers']}. "
            f"Received: attention_layers={attention_layers!r}"
        )
    if num_heads is not None:
        check_positive_int("num_heads", num_heads)
    feed_forward_activation(activation)
    check_fnet_weights(weights)
    if weights is not None and load_weights is None:
        raise ValueError(f"This model has no weight loader. Received: weights={weights!r}")

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
    first_attention = sizes["num_layers"] - attention_layers
    for index in range(sizes["num_layers"]):
        x = FNetEncoderBlock(
            intermediate_size=sizes["intermediate_size"],
            dropout=dropout,
            fft_impl=fft_impl,
            mixing="attention" if index >= first_attention else mixing,
            max_sequence_length=max_sequence_length,
            num_heads=num_heads,
            seed=index,
            activation=activation,
            name=f"encoder_layer_{index}",
        )(x, padding_mask=padding_mask)
    # x[:, 0] as a slice that keeps its axis, which XNNPACK runs, and a reshape.
    first_token = keras.ops.reshape(x[:, :1], (-1, sizes["hidden_size"]))
    pooled = keras.layers.Dense(
        sizes["hidden_size"],
        activation="tanh",
        kernel_initializer=initializer(),
        name="pooler",
    )(first_token)

    if num_classes is None:
        outputs = {"sequence_output": x, "pooled_output": pooled}
    else:
        head = keras.layers.Dropout(dropout, name="classifier_dropout")(pooled)
        outputs = keras.layers.Dense(
            num_classes,
            activation=classifier_activation,
            kernel_initializer=initializer(),
            name="classifier",
        )(head)
    model = keras.Model(inputs, outputs, name=name)
    if heads == "pretraining":
        model = FNetPretraining(model, name=name)
    if weights is not None:
        load_weights(model, weights)
    return model


_VARIANT_DOCSTRING = """FNet-{title} text encoder, ``FNet("{variant}", ...)``.

    Hidden size {hidden_size}, {num_layers} layers, intermediate size
    {intermediate_size}. See :func:`FNet` for the arguments, the inputs and
    outputs, and the module docstring for the padding mask.

    Args:
        vocabulary_size: word table rows. Default 32000.
        max_sequence_length: position table rows. Default 512.
        sequence_length: static input length. Default None: any length up
            to max_sequence_length.
        num_segments: segment table rows. Default 4.
        dropout: dropout rate. Default 0.1.
        use_padding_mask: whether to take a ``padding_mask`` input (not the
            paper's function; see the module docstring). Default False.
        num_classes: classifier head size. Default None: no head.
        classifier_activation: head activation. Default None: logits.
        heads: None (default) or "pretraining" (masked-LM and NSP heads).
        fft_impl: "auto" (default), "fft" or "matmul".
        mixing: "fourier" (default, FNet), "attention" (BERT), "linear",
            "random" or "identity" (FF-only); the paper's models.
        attention_layers: last blocks with self-attention (2: FNet-Hybrid).
            Default 0.
        num_heads: attention heads. Default None: hidden_size // 64.
        activation: feed-forward activation, "gelu_tanh" (default) or a
            Keras activation name such as "gelu".
        weights: None (default), "f_net_{variant}" (the official release), or
            a path (``.weights.h5``, official Flax checkpoint, transformers or
            keras-hub folder).
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


def public_builder(
    public: str, load_weights: Callable[[keras.Model, Any], None], variant: str | None = None
) -> Callable[..., keras.Model]:
    """A public FNet constructor: :func:`build_fnet` with its weight loader bound.

    Args:
        public: its name, "FNet", "FNetBase" or "FNetLarge".
        load_weights: the loader it passes to :func:`build_fnet`.
        variant: None (default) for the generic ``FNet``, whose signature is
            :func:`build_fnet`'s without `load_weights`; or a key of
            :data:`FNET_VARIANTS`, fixed, without the `variant` argument and
            with the default name "fnet_<variant>".

    Returns:
        The constructor.

    Example:
        >>> FNetBase = public_builder("FNetBase", load_fnet_weights, "base")
        >>> FNetBase(sequence_length=128).name  # doctest: +SKIP
        'fnet_base'
    """
    fixed = {} if variant is None else {"variant": variant}

    def builder(*args, **kwargs) -> keras.Model:
        bound = builder.__signature__.bind(*args, **kwargs)
        bound.apply_defaults()
        return build_fnet(**fixed, **bound.arguments, load_weights=load_weights)

    parameters = [
        parameter.replace(default=f"fnet_{variant}")
        if parameter.name == "name" and variant is not None
        else parameter
        for parameter in inspect.signature(build_fnet).parameters.values()
        if parameter.name != "load_weights" and parameter.name not in fixed
    ]
    builder.__signature__ = inspect.Signature(parameters, return_annotation=keras.Model)
    builder.__name__ = builder.__qualname__ = public
    builder.__module__ = "keras_fourier"
    builder.__doc__ = (
        build_fnet.__doc__
        if variant is None
        else _VARIANT_DOCSTRING.format(
            title=variant.capitalize(), variant=variant, **FNET_VARIANTS[variant]
        )
    )
    return builder
