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
  the DFT still has length L (the static sequence length) and zero rows
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

import os
from collections.abc import Callable, Mapping
from typing import Any

import keras

from keras_fourier.layers import spectral
from keras_fourier.layers.fnet import FNetEmbeddings, FNetEncoderBlock, initializer
from keras_fourier.models.weights import load_weights_file
from keras_fourier.validation import check_positive_int, check_rate

# With vocabulary_size=32000 and the other defaults, "base" has 82,861,056
# parameters and "large" 236,945,408 (no classifier head).
FNET_VARIANTS: dict[str, dict[str, int]] = {
    "base": {"hidden_size": 768, "num_layers": 12, "intermediate_size": 3072},
    "large": {"hidden_size": 1024, "num_layers": 24, "intermediate_size": 4096},
}
_SIZE_KEYS = ("hidden_size", "num_layers", "intermediate_size")


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
    use_padding_mask: bool = False,
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
            that keeps padded positions out of every Fourier mixing (see the
            module docstring for the trade-off). Default False: every
            position is mixed, as in the paper and the official code.
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
        kernel_initializer=initializer(),
        name="pooler",
    )(x[:, 0])

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
        use_padding_mask: whether to take a ``padding_mask`` input (not the
            paper's function; see the module docstring). Default False.
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
        use_padding_mask: bool = False,
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
