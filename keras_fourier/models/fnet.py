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

import hashlib
import inspect
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import keras

from keras_fourier.fileio import atomic_save
from keras_fourier.layers import spectral
from keras_fourier.layers.fnet import (
    FNetEmbeddings,
    FNetEncoderBlock,
    FNetMaskedLMHead,
    initializer,
)
from keras_fourier.models import download, flax_weights
from keras_fourier.models.flax_msgpack import FlaxCheckpointError
from keras_fourier.models.fnet_family import FNET_VARIANTS, OFFICIAL_TABLES, RELEASES
from keras_fourier.models.weights import _tensor_shapes, copy_weights_except, load_weights_file
from keras_fourier.validation import check_positive_int, check_rate

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


_TABLE_KEYS = tuple(OFFICIAL_TABLES)


def _check_weights(weights: Any) -> None:
    if weights is None or weights in RELEASES:
        return
    if isinstance(weights, (str, os.PathLike)) and os.path.exists(weights):
        return
    raise ValueError(
        f"`weights` must be None, a release name {sorted(RELEASES)}, or the path of an "
        "existing file or folder: a `.weights.h5` saved by keras_fourier, an official FNet "
        "checkpoint (Flax msgpack) or a keras-hub FNet preset folder. "
        f"Received: weights={weights!r}"
    )


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


def _encoder_of(model: keras.Model) -> keras.Model:
    return model.encoder if isinstance(model, FNetPretraining) else model


def _num_layers(encoder: keras.Model) -> int:
    return sum(layer.name.startswith("encoder_layer_") for layer in encoder.layers)


def official_key_map(
    model: keras.Model, checkpoint_keys: Iterable[str] = ()
) -> tuple[dict[str, tuple[Any, str]], set[str]]:
    """The official Flax parameter keys of an FNet model built here.

    The tree of the official ``PreTrainingModel`` / ``SequenceClassificationModel``
    (google-research ``f_net/models.py``, ``layers.py``): ``encoder/embedder/
    {word,type,position}/embedding`` (position (1, L, E)),
    ``encoder/embedder/{layer_norm,hidden_mapping_in}``,
    ``encoder/encoder_{i}/{mixing,output}_layer_norm``,
    ``encoder/feed_forward_{i}/{intermediate,output}``, ``encoder/pooler``,
    the masked-LM head ``predictions_dense``, ``predictions_layer_norm``,
    ``predictions_output/output_bias``, and ``classification/{output_kernel
    (n, D), output_bias}`` (the NSP head of a pretraining checkpoint, the
    classifier of a fine-tuned one).

    Args:
        model: built by :func:`FNet` (any head) or an :class:`FNetPretraining`.
        checkpoint_keys: the checkpoint's keys; they tell a pretraining
            checkpoint (with ``predictions_*``) from a fine-tuned one.

    Returns:
        (key -> (variable, transform), keys of the checkpoint the model
        leaves unused). A classifier loading a pretraining checkpoint keeps
        its fresh head, as the official fine-tuning code does; an encoder
        ignores the heads.

    Example:
        >>> keys, _ = official_key_map(FNetBase())
        >>> keys["encoder/pooler/kernel"][0].path
        'pooler/kernel'
    """
    encoder = _encoder_of(model)
    embeddings = encoder.get_layer("embeddings")
    keys: dict[str, tuple[Any, str]] = {}

    def dense(prefix: str, layer) -> None:
        keys[f"{prefix}/kernel"] = (layer.kernel, "copy")
        keys[f"{prefix}/bias"] = (layer.bias, "copy")

    def norm(prefix: str, layer) -> None:
        keys[f"{prefix}/scale"] = (layer.gamma, "copy")
        keys[f"{prefix}/bias"] = (layer.beta, "copy")

    embedder = "encoder/embedder"
    keys[f"{embedder}/word/embedding"] = (embeddings.word.embeddings, "copy")
    keys[f"{embedder}/type/embedding"] = (embeddings.segment.embeddings, "copy")
    keys[f"{embedder}/position/embedding"] = (embeddings.position.embeddings, "squeeze_leading")
    norm(f"{embedder}/layer_norm", embeddings.norm)
    dense(f"{embedder}/hidden_mapping_in", embeddings.projection)
    for index in range(_num_layers(encoder)):
        block = encoder.get_layer(f"encoder_layer_{index}")
        norm(f"encoder/encoder_{index}/mixing_layer_norm", block.mixing_norm)
        norm(f"encoder/encoder_{index}/output_layer_norm", block.output_norm)
        dense(f"encoder/feed_forward_{index}/intermediate", block.intermediate)
        dense(f"encoder/feed_forward_{index}/output", block.output_dense)
    dense("encoder/pooler", encoder.get_layer("pooler"))

    checkpoint_keys = set(checkpoint_keys)
    mlm = {
        "predictions_dense/kernel",
        "predictions_dense/bias",
        "predictions_layer_norm/scale",
        "predictions_layer_norm/bias",
        "predictions_output/output_bias",
    }
    classification = {"classification/output_kernel", "classification/output_bias"}
    pretraining_checkpoint = bool(mlm & checkpoint_keys)
    ignored: set[str] = set()
    head = None
    if isinstance(model, FNetPretraining):
        lm = model.masked_lm_head
        dense("predictions_dense", lm.dense)
        norm("predictions_layer_norm", lm.norm)
        keys["predictions_output/output_bias"] = (lm.output_bias, "copy")
        head = model.next_sentence_head
    elif "classifier" in {layer.name for layer in encoder.layers}:
        ignored |= mlm
        if pretraining_checkpoint:
            # The NSP head is no classifier: the classifier starts fresh (official fine-tuning).
            ignored |= classification
        else:
            head = encoder.get_layer("classifier")
    else:
        ignored |= mlm | classification
    if head is not None:
        keys["classification/output_kernel"] = (head.kernel, "transpose")
        keys["classification/output_bias"] = (head.bias, "copy")
    return keys, ignored


def load_official_checkpoint(model: keras.Model, path: str | os.PathLike) -> None:
    """Loads an official FNet Flax checkpoint into `model`, all or nothing.

    Reads its parameters (``target``) without its optimizer moments and
    without JAX or Flax (:func:`keras_fourier.models.flax_weights.read_flax_params`).

    Args:
        model: built by :func:`FNet` with the checkpoint's sizes.
        path: the checkpoint file.

    Raises:
        ValueError: the file is not a Flax checkpoint of arrays, or does not
            match the model (missing, unexpected, wrong-shape keys listed);
            the model is unchanged.

    Example:
        >>> load_official_checkpoint(FNetBase(), "f_net_checkpoint")  # doctest: +SKIP
    """
    path = os.fspath(path)

    def load():
        params = flax_weights.read_flax_params(path)
        keys, ignored = official_key_map(model, params)
        return flax_weights.convert(
            keys, params, ignored=ignored, description=f"model {model.name!r}"
        )

    flax_weights.assign_all(model, load, path)


def keras_hub_key_map(model: keras.Model) -> dict[str, tuple[Any, str]]:
    """keras-hub ``FNetBackbone`` weight paths (in its preset's ``model.weights.h5``) -> variables.

    Keras stores a functional model's layers under their class names in
    snake case, numbered in layer order: ``reversible_embedding`` (word),
    ``position_embedding``, ``embedding`` (segment), ``layer_normalization``
    and ``dense`` (the embedding projection), ``f_net_encoder``,
    ``f_net_encoder_1``, ... (``_mixing_layer_norm``, ``_intermediate_dense``,
    ``_output_dense``, ``_output_layer_norm``), and ``dense_1`` (the pooler);
    ``vars/0`` is a kernel, embedding table or LayerNorm scale, ``vars/1``
    a bias or LayerNorm offset.

    Args:
        model: an FNet encoder built by :func:`FNet` (a classifier's head and
            pretraining heads are not in keras-hub's backbone preset).

    Returns:
        HDF5 dataset path -> (variable, transform).

    Example:
        >>> keys = keras_hub_key_map(FNetBase())
        >>> keys["layers/dense_1/vars/0"][0].path
        'pooler/kernel'
    """
    encoder = _encoder_of(model)
    embeddings = encoder.get_layer("embeddings")
    keys: dict[str, tuple[Any, str]] = {}

    def pair(prefix: str, first, second) -> None:
        keys[f"{prefix}/vars/0"] = (first, "copy")
        keys[f"{prefix}/vars/1"] = (second, "copy")

    keys["layers/reversible_embedding/vars/0"] = (embeddings.word.embeddings, "copy")
    keys["layers/position_embedding/vars/0"] = (embeddings.position.embeddings, "copy")
    keys["layers/embedding/vars/0"] = (embeddings.segment.embeddings, "copy")
    pair("layers/layer_normalization", embeddings.norm.gamma, embeddings.norm.beta)
    pair("layers/dense", embeddings.projection.kernel, embeddings.projection.bias)
    for index in range(_num_layers(encoder)):
        block = encoder.get_layer(f"encoder_layer_{index}")
        prefix = "layers/f_net_encoder" + (f"_{index}" if index else "")
        pair(f"{prefix}/_mixing_layer_norm", block.mixing_norm.gamma, block.mixing_norm.beta)
        pair(f"{prefix}/_intermediate_dense", block.intermediate.kernel, block.intermediate.bias)
        pair(f"{prefix}/_output_dense", block.output_dense.kernel, block.output_dense.bias)
        pair(f"{prefix}/_output_layer_norm", block.output_norm.gamma, block.output_norm.beta)
    pooler = encoder.get_layer("pooler")
    pair("layers/dense_1", pooler.kernel, pooler.bias)
    return keys


def load_keras_hub_preset(model: keras.Model, folder: str | os.PathLike) -> None:
    """Loads a keras-hub FNet preset folder (``f_net_base_en``, ...) into `model`, all or nothing.

    The folder's ``config.json`` must describe an ``FNetBackbone`` whose
    sizes match the model; its weights file is read with h5py (keras-hub is
    not needed). The backbone has no classifier or pretraining heads: those
    of `model` keep their initialisation.

    Args:
        model: built by :func:`FNet` with the preset's sizes.
        folder: the preset folder.

    Raises:
        ValueError: not an FNet preset, other sizes (listed), or weights
            that do not match; the model is unchanged.

    Example:
        >>> load_keras_hub_preset(FNetBase(), "f_net_base_en")  # doctest: +SKIP
    """
    folder = os.fspath(folder)

    def load():
        config, tensors = flax_weights.read_keras_hub_preset(folder)
        encoder = _encoder_of(model)
        embeddings = encoder.get_layer("embeddings")
        block = encoder.get_layer("encoder_layer_0")
        ours = {
            "vocabulary_size": embeddings.vocabulary_size,
            "hidden_dim": embeddings.hidden_size,
            "num_layers": _num_layers(encoder),
            "intermediate_dim": block.intermediate_size,
            "max_sequence_length": embeddings.max_sequence_length,
            "num_segments": embeddings.num_segments,
        }
        differing = [
            f"{key}: preset {config.get(key)!r}, model {value!r}"
            for key, value in ours.items()
            if config.get(key) != value
        ]
        if differing:
            raise ValueError(
                f"the preset is not an FNet backbone of the model's sizes ({'; '.join(differing)})"
            )
        return flax_weights.convert(
            keras_hub_key_map(model), tensors, description=f"model {model.name!r}"
        )

    flax_weights.assign_all(model, load, folder)


def _cache_path(checkpoint_path: str, model: keras.Model) -> str:
    """`.weights.h5` next to the downloaded checkpoint, keyed by the model's variables."""
    layout = "\n".join(f"{v.path} {tuple(v.shape)}" for v in model.weights)
    digest = hashlib.sha256(layout.encode()).hexdigest()[:12]
    stem = os.path.basename(checkpoint_path)
    return os.path.join(os.path.dirname(checkpoint_path), f"{stem}_{digest}.weights.h5")


def load_release(model: keras.Model, name: str) -> None:
    """Loads the official release `name` into `model`: downloaded once, converted once.

    The first call downloads the checkpoint into the Keras cache
    (:func:`keras_fourier.models.download.download`: whole and checked, or
    nothing), converts it and saves the model's weights as a
    ``.weights.h5`` beside it; later calls read that file, offline.

    Args:
        model: built by :func:`FNet` with the release's sizes.
        name: a key of :data:`RELEASES`.

    Raises:
        ValueError: the download failed (the message says how to work
            offline), the file is not a Flax checkpoint, or it does not
            match the model; the model is unchanged.

    Example:
        >>> load_release(FNetBase(sequence_length=128), "f_net_base")  # doctest: +SKIP
    """
    release = RELEASES[name]
    try:
        path = download.download(release.url, release.file_name, release.sha256)
    except ValueError as error:
        raise ValueError(
            f"weights={name!r} needs network access the first time. {error}"
        ) from error
    cache = _cache_path(path, model)
    if os.path.exists(cache):
        load_weights_file(model, cache)
        return
    try:
        load_official_checkpoint(model, path)
    except FlaxCheckpointError as error:
        raise ValueError(
            f"The cached official checkpoint {path!r} cannot be read ({error}); delete it to "
            "download it again."
        ) from error
    atomic_save(cache, lambda temporary: model.save_weights(temporary, overwrite=True))


def load_fnet_weights(model: keras.Model, weights: str | os.PathLike) -> None:
    """Loads any weights `FNet(weights=...)` accepts into `model`, all or nothing.

    Args:
        model: built by :func:`FNet`.
        weights: a release name (:data:`RELEASES`), a ``.weights.h5`` saved
            by keras_fourier, a keras-hub FNet preset folder (its
            ``config.json`` and weights), or an official Flax checkpoint file.

    Raises:
        ValueError: the weights do not match the model (listed); the model
            is unchanged.
    """
    if isinstance(weights, str) and weights in RELEASES:
        load_release(model, weights)
        return
    path = os.fspath(weights)
    if os.path.isdir(path):
        load_keras_hub_preset(model, path)
    elif path.endswith(".weights.h5"):
        load_weights_file(model, path)
    else:
        try:
            load_official_checkpoint(model, path)
        except FlaxCheckpointError as error:
            raise ValueError(
                f"Cannot load weights={path!r}: not a `.weights.h5` file, a keras-hub preset "
                f"folder or an official FNet Flax checkpoint ({error})."
            ) from error


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
    heads: str | None = None,
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
        weights: None (default, random initialisation), a release name
            ("f_net_base", "f_net_large": the official C4-pretrained
            checkpoint, downloaded once into the Keras cache and converted
            once, offline afterwards), or a path: a ``.weights.h5`` saved by
            this package, an official FNet Flax checkpoint file (read without
            JAX or Flax, its optimizer moments skipped), or a keras-hub FNet
            preset folder (``config.json`` + weights). Loading is all or
            nothing: weights that do not match raise ValueError listing the
            missing, unexpected and wrong-shape tensors, and the model is
            unchanged. A classifier loading a pretraining checkpoint keeps a
            fresh classifier, as the official fine-tuning does.
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
    _check_heads(heads, num_classes)
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
    if heads == "pretraining":
        model = FNetPretraining(model, name=name)
    if weights is not None:
        load_fnet_weights(model, weights)
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
        heads: None (default) or "pretraining" (masked-LM and NSP heads).
        fft_impl: "auto" (default), "fft" or "matmul".
        weights: None (default), "f_net_{variant}" (the official release), or
            a path (``.weights.h5``, official Flax checkpoint, keras-hub preset).
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


def _variant_builder(variant: str, public: str) -> Callable[..., keras.Model]:
    """The public constructor `public` of one entry of :data:`FNET_VARIANTS`.

    Its signature is :func:`FNet`'s without `variant`, the default name
    "fnet_<variant>".
    """

    def builder(**kwargs) -> keras.Model:
        bound = builder.__signature__.bind(**kwargs)
        bound.apply_defaults()
        return FNet(variant, **bound.arguments)

    parameters = [
        parameter.replace(default=f"fnet_{variant}") if parameter.name == "name" else parameter
        for parameter in inspect.signature(FNet).parameters.values()
        if parameter.name != "variant"
    ]
    builder.__signature__ = inspect.Signature(parameters, return_annotation=keras.Model)
    builder.__name__ = builder.__qualname__ = public
    builder.__doc__ = _VARIANT_DOCSTRING.format(
        title=variant.capitalize(),
        variant=variant,
        **FNET_VARIANTS[variant],
    )
    return builder


def is_official_weights(weights: str | os.PathLike) -> bool:
    """Whether FNet `weights` are official: a release, a Flax checkpoint or a keras-hub preset.

    Those were pretrained with the official 32,000-piece SentencePiece
    vocabulary; a ``.weights.h5`` saved by this package may hold anything.

    Example:
        >>> is_official_weights("f_net_base"), is_official_weights("mine.weights.h5")
        (True, False)
    """
    if isinstance(weights, str) and weights in RELEASES:
        return True
    return not os.fspath(weights).endswith(".weights.h5")


def _h5_sizes(path: str) -> tuple[dict[str, int], str, int | None]:
    """Sizes of the FNet in a `.weights.h5`, its kind ("encoder", "pretraining",
    "classifier") and a classifier's class count."""
    shapes = _tensor_shapes(path)

    def find(pattern: str) -> dict[str, tuple[int, ...]]:
        return {name: shape for name, shape in shapes.items() if re.search(pattern, name)}

    tables = {
        key: find(rf"(?:^|/)f_net_embeddings/{table}/vars/0$")
        for key, table in (
            ("vocabulary_size", "word"),
            ("max_sequence_length", "position"),
            ("num_segments", "segment"),
        )
    }
    blocks = find(r"(?:^|/)f_net_encoder_block(?:_\d+)?/intermediate/vars/0$")
    if not blocks or any(len(found) != 1 for found in tables.values()):
        raise ValueError(
            f"{path!r} holds no FNet weights saved by keras_fourier (no f_net_embeddings and "
            "f_net_encoder_block tensors)."
        )
    word = next(iter(tables["vocabulary_size"].values()))
    intermediate = next(iter(blocks.values()))
    sizes = {
        "hidden_size": word[1],
        "num_layers": len(blocks),
        "intermediate_size": intermediate[1],
        **{key: next(iter(found.values()))[0] for key, found in tables.items()},
    }
    if any(name.startswith("encoder/") for name in shapes):
        return sizes, "pretraining", None
    classifier = shapes.get("layers/dense_1/vars/1")
    if classifier is not None:
        return sizes, "classifier", classifier[0]
    return sizes, "encoder", None


def _flax_sizes(path: str) -> dict[str, int]:
    shapes = flax_weights.read_flax_shapes(path)
    embedder = "encoder/embedder"
    needed = {
        "word": f"{embedder}/word/embedding",
        "position": f"{embedder}/position/embedding",
        "type": f"{embedder}/type/embedding",
        "intermediate": "encoder/feed_forward_0/intermediate/kernel",
    }
    missing = [key for key in needed.values() if key not in shapes]
    if missing:
        raise ValueError(f"{path!r} is a Flax checkpoint but not of an FNet (no {missing[0]}).")
    layers = {int(m[1]) for key in shapes if (m := re.match(r"encoder/encoder_(\d+)/", key))}
    return {
        "hidden_size": shapes[needed["word"]][-1],
        "num_layers": len(layers),
        "intermediate_size": shapes[needed["intermediate"]][-1],
        "vocabulary_size": shapes[needed["word"]][0],
        "max_sequence_length": shapes[needed["position"]][-2],
        "num_segments": shapes[needed["type"]][0],
    }


def _preset_sizes(folder: str) -> dict[str, int]:
    config_path = os.path.join(folder, flax_weights.PRESET_CONFIG)
    try:
        with open(config_path, encoding="utf-8") as file:
            config = json.load(file).get("config", {})
    except (OSError, ValueError, AttributeError) as error:
        raise ValueError(f"{folder!r} is not a keras-hub preset folder: {error}") from error
    keys = {
        "hidden_size": "hidden_dim",
        "num_layers": "num_layers",
        "intermediate_size": "intermediate_dim",
        "vocabulary_size": "vocabulary_size",
        "max_sequence_length": "max_sequence_length",
        "num_segments": "num_segments",
    }
    sizes = {ours: config.get(theirs) for ours, theirs in keys.items()}
    absent = [keys[key] for key, value in sizes.items() if not isinstance(value, int)]
    if absent:
        raise ValueError(
            f"{config_path!r} does not describe an FNet backbone (no {', '.join(absent)})."
        )
    return sizes


def fnet_weights_sizes(weights: str | os.PathLike) -> dict[str, int]:
    """The sizes of the FNet that `weights` hold, read without loading the weights.

    Args:
        weights: anything :func:`FNet` takes as `weights`: a release name,
            a ``.weights.h5`` saved by keras_fourier (an encoder, an
            :class:`FNetPretraining` or a classifier), a keras-hub FNet preset
            folder (its ``config.json``) or an official Flax checkpoint (its
            array headers; the data is skipped).

    Returns:
        {"hidden_size", "num_layers", "intermediate_size", "vocabulary_size",
        "max_sequence_length", "num_segments"}.

    Raises:
        ValueError: not FNet weights, or a file that cannot be read, naming it.

    Example:
        >>> fnet_weights_sizes("f_net_base")["vocabulary_size"]
        32000
    """
    if isinstance(weights, str) and weights in RELEASES:
        return {**FNET_VARIANTS[RELEASES[weights].variant], **OFFICIAL_TABLES}
    _check_weights(weights)
    path = os.fspath(weights)
    if os.path.isdir(path):
        return _preset_sizes(path)
    if path.endswith(".weights.h5"):
        return _h5_sizes(path)[0]
    try:
        return _flax_sizes(path)
    except FlaxCheckpointError as error:
        raise ValueError(
            f"Cannot read weights={path!r}: not a `.weights.h5` file, a keras-hub preset "
            f"folder or an official FNet Flax checkpoint ({error})."
        ) from error


def _pretrained_encoder(weights: str | os.PathLike, sizes: Mapping[str, int]) -> keras.Model:
    """An FNet encoder of `sizes` holding the encoder weights of `weights`."""
    variant = {key: sizes[key] for key in _SIZE_KEYS}
    tables = {key: sizes[key] for key in _TABLE_KEYS}
    kind, classes = "encoder", None
    if os.fspath(weights).endswith(".weights.h5"):
        _, kind, classes = _h5_sizes(os.fspath(weights))
    if kind == "pretraining":
        return FNet(variant, **tables, heads="pretraining", weights=weights).encoder
    return FNet(variant, **tables, num_classes=classes, weights=weights)


def load_pretrained_encoder(model: keras.Model, weights: str | os.PathLike) -> None:
    """Loads the encoder of FNet `weights` into `model`; its classifier keeps its own weights.

    What fine-tuning starts from, as the official fine-tuning code does
    (``run_classifier.py`` restores the pretrained model "with fresh output
    layer"): every encoder variable (embeddings, blocks, pooler) comes from
    `weights`, whatever heads they were saved with (pretraining heads, another
    classifier, none); the ``classifier`` is left as it was built.

    Args:
        model: an FNet classifier (or encoder) whose encoder has the sizes of
            `weights` (:func:`fnet_weights_sizes`), any static sequence
            length.
        weights: see :func:`fnet_weights_sizes`.

    Raises:
        ValueError: the weights do not fit the model, listing the variables;
            the model is then unchanged.

    Example:
        >>> model = FNet("base", sequence_length=128, num_classes=2)
        >>> load_pretrained_encoder(model, "f_net_base")  # doctest: +SKIP
    """
    encoder = _pretrained_encoder(weights, fnet_weights_sizes(weights))
    copy_weights_except(model, encoder, "classifier", os.fspath(weights))


FNetBase = _variant_builder("base", "FNetBase")
FNetLarge = _variant_builder("large", "FNetLarge")
