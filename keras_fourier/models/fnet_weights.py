"""FNet's weights: the key maps of its Flax checkpoints and keras-hub presets, and its loader.

:func:`load_fnet_weights` is the ``load_weights`` the public ``FNet``,
``FNetBase`` and ``FNetLarge`` are given
(:mod:`keras_fourier.models.catalog`); the architecture
(:mod:`keras_fourier.models.fnet`) knows nothing of files. It loads:

* a release name (``fnet_family.RELEASES``: "f_net_base", "f_net_large")
  through the one release pipeline
  (:func:`keras_fourier.weights.pipeline.load_release`: downloaded once,
  converted once, then offline);
* an official Flax checkpoint (read by
  :mod:`keras_fourier.weights.flax_msgpack` without JAX or Flax) through
  :func:`flax_key_map`;
* a keras-hub FNet preset folder (:mod:`keras_fourier.weights.keras_hub`)
  through :func:`keras_hub_key_map`, a task preset's classifier head
  included when it fits;
* a Hugging Face transformers FNet folder (``config.json`` and
  ``model.safetensors`` or ``pytorch_model.bin``, read by
  :mod:`keras_fourier.weights.transformers_folder` without transformers or
  PyTorch) through :func:`transformers_key_map`;
* a ``.weights.h5`` saved by keras_fourier (:mod:`keras_fourier.weights.saved`),
  which records the weights only: the feed-forward `activation` is the
  model's own (the tanh GELU unless built with another).

Fine-tuning (:func:`load_pretrained_encoder`, ``keras-fourier train
--weights``) also starts from a ``.keras`` file of an FNet (a text run's
``model.keras``), whose config records its sizes and activation.

:func:`fnet_weights_sizes` reads the sizes of any of them without loading the
weights, and :func:`load_pretrained_encoder` starts fine-tuning from them.
:func:`save_keras_hub_preset` writes an FNet as a keras-hub preset folder
(:func:`check_keras_hub_model` refuses a model keras-hub's FNet cannot express).

A head the weights do not fill (another class count, a head the checkpoint
lacks) starts fresh and a head of the checkpoint that the model has no place
for is left out, each time with one :class:`FreshHeadWarning`.
"""

from __future__ import annotations

import datetime
import functools
import os
import re
import warnings
from collections.abc import Callable, Collection, Mapping
from typing import Any

import keras
import numpy as np

from keras_fourier.layers.fnet import (
    GELU_TANH,
    LAYER_NORM_EPSILON,
    FNetEmbeddings,
    FNetEncoderBlock,
)
from keras_fourier.limits import check_parameters
from keras_fourier.models.fnet import FNetPretraining, build_fnet, encoder_of, num_layers
from keras_fourier.models.fnet_family import (
    FNET_VARIANTS,
    OFFICIAL_TABLES,
    RELEASES,
    SIZE_KEYS,
    check_fnet_weights,
)
from keras_fourier.weights.convert import KeyMap, copy_weights_except, load_tensors
from keras_fourier.weights.flax_msgpack import FlaxCheckpointError, read_flax_shapes
from keras_fourier.weights.hdf5 import check_headers, dataset_headers
from keras_fourier.weights.keras_hub import (
    PRESET_WEIGHTS,
    read_keras_hub_config,
    read_keras_hub_preset,
    read_keras_hub_task,
    write_keras_hub_preset,
)
from keras_fourier.weights.pipeline import load_checkpoint, load_release
from keras_fourier.weights.saved import (
    load_keras_file,
    load_weights_file,
    read_keras_config,
    tensor_shapes,
)
from keras_fourier.weights.transformers_folder import (
    CONFIG,
    is_transformers_config,
    read_json_object,
    read_transformers_weights,
)

_TABLE_KEYS = tuple(OFFICIAL_TABLES)
_TASK = "task"  # the prefix of a keras-hub task preset's head tensors
_HEAD_NAMES = {"classifier": "classifier", "mlm": "masked-LM head", "nsp": "next-sentence head"}


class FreshHeadWarning(UserWarning):
    """Loaded weights leave a head of the model fresh, or a head of the checkpoint unused."""


def _model_sizes(model: keras.Model) -> dict[str, int]:
    """The sizes of an FNet model, as :func:`fnet_weights_sizes` names them."""
    encoder = encoder_of(model)
    embeddings = encoder.get_layer("embeddings")
    return {
        "hidden_size": embeddings.hidden_size,
        "num_layers": num_layers(encoder),
        "intermediate_size": encoder.get_layer("encoder_layer_0").intermediate_size,
        "vocabulary_size": embeddings.vocabulary_size,
        "max_sequence_length": embeddings.max_sequence_length,
        "num_segments": embeddings.num_segments,
    }


def _model_activation(model: keras.Model) -> str:
    return encoder_of(model).get_layer("encoder_layer_0").activation


def _classifier(model: keras.Model):
    """The classifier Dense layer of an FNet classifier, or None."""
    if isinstance(model, FNetPretraining):
        return None
    names = {layer.name for layer in model.layers}
    return model.get_layer("classifier") if "classifier" in names else None


def _head_plan(
    model: keras.Model,
    classes: int | None,
    mlm: bool,
    nsp: bool,
    source: str,
    note: str | None = None,
):
    """Which heads of a checkpoint load into `model`, and the warning for the rest (or None).

    Args:
        model: the model to load.
        classes: the class count of the checkpoint's classifier, or None.
        mlm: whether the checkpoint has a masked-LM head that fits `model`'s.
        nsp: whether the checkpoint has a next-sentence head.
        source: the checkpoint, for the warning.
        note: what the warning says first, e.g. why a head of the checkpoint
            cannot load. Default None.

    Returns:
        (the loadable heads, a subset of {"classifier", "mlm", "nsp"}; the
        warning or None).
    """
    present = {"classifier": classes is not None, "mlm": mlm, "nsp": nsp}
    classifier = _classifier(model)
    if isinstance(model, FNetPretraining):
        places = {"mlm", "nsp"}
    elif classifier is not None:
        places = {"classifier"}
    else:
        places = set()
    heads = {head for head in places if present[head]}
    parts = [note] if note else []
    if classifier is not None and classes is not None and classes != classifier.units:
        heads.discard("classifier")
        parts.append(
            f"the classifier of model {model.name!r} starts fresh ({classifier.units} classes, "
            f"the checkpoint's classifier {classes})"
        )
    fresh = [_HEAD_NAMES[head] for head in sorted(places) if not present[head]]
    if fresh:
        parts.append(
            f"the {' and '.join(fresh)} of model {model.name!r} "
            f"{'starts' if len(fresh) == 1 else 'start'} fresh"
        )
    unused = [_HEAD_NAMES[head] for head in sorted(present) if present[head] and head not in places]
    if unused:
        parts.append(
            f"the checkpoint's {' and '.join(unused)} "
            f"{'is' if len(unused) == 1 else 'are'} not loaded (model {model.name!r} has no "
            f"place for {'it' if len(unused) == 1 else 'them'})"
        )
    return heads, (f"{source}: " + "; ".join(parts) + "." if parts else None)


def _layer_writers(
    keys: dict[str, tuple[Any, str]],
    separator: str,
    kernel: str,
    scale: str,
    bias: str = "bias",
    kernel_transform: str = "copy",
) -> tuple[Callable[[str, Any], None], Callable[[str, Any], None]]:
    """The `dense(prefix, layer)` and `norm(prefix, layer)` that put one layer's weights in `keys`.

    A checkpoint format names a Dense layer's weights ``{prefix}{separator}{kernel}``
    and ``...{bias}``, a LayerNorm's ``...{scale}`` and ``...{bias}``.
    """

    def dense(prefix: str, layer) -> None:
        keys[f"{prefix}{separator}{kernel}"] = (layer.kernel, kernel_transform)
        keys[f"{prefix}{separator}{bias}"] = (layer.bias, "copy")

    def norm(prefix: str, layer) -> None:
        keys[f"{prefix}{separator}{scale}"] = (layer.gamma, "copy")
        keys[f"{prefix}{separator}{bias}"] = (layer.beta, "copy")

    return dense, norm


def flax_key_map(
    model: keras.Model, checkpoint_keys: Collection[str] = ()
) -> tuple[KeyMap, set[str]]:
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
        >>> keys, _ = flax_key_map(FNet("base"))
        >>> keys["encoder/pooler/kernel"][0].path
        'pooler/kernel'
    """
    encoder = encoder_of(model)
    embeddings = encoder.get_layer("embeddings")
    keys: dict[str, tuple[Any, str]] = {}
    dense, norm = _layer_writers(keys, "/", kernel="kernel", scale="scale")

    embedder = "encoder/embedder"
    keys[f"{embedder}/word/embedding"] = (embeddings.word.embeddings, "copy")
    keys[f"{embedder}/type/embedding"] = (embeddings.segment.embeddings, "copy")
    keys[f"{embedder}/position/embedding"] = (embeddings.position.embeddings, "squeeze_leading")
    norm(f"{embedder}/layer_norm", embeddings.norm)
    dense(f"{embedder}/hidden_mapping_in", embeddings.projection)
    for index in range(num_layers(encoder)):
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
        keys["classification/output_kernel"] = (head.kernel, "linear")
        keys["classification/output_bias"] = (head.bias, "copy")
    return keys, ignored


def keras_hub_key_map(
    model: keras.Model, checkpoint_keys: Collection[str] = (), heads: Collection[str] = ()
) -> tuple[KeyMap, set[str]]:
    """keras-hub ``FNetBackbone`` weight paths (in its preset's ``model.weights.h5``) -> variables.

    Keras stores a functional model's layers under their class names in
    snake case, numbered in layer order: ``reversible_embedding`` (word),
    ``position_embedding``, ``embedding`` (segment), ``layer_normalization``
    and ``dense`` (the embedding projection), ``f_net_encoder``,
    ``f_net_encoder_1``, ... (``_mixing_layer_norm``, ``_intermediate_dense``,
    ``_output_dense``, ``_output_layer_norm``), and ``dense_1`` (the pooler);
    ``vars/0`` is a kernel, embedding table or LayerNorm scale, ``vars/1``
    a bias or LayerNorm offset. A task preset's head (``task.weights.h5``)
    is read under ``task/``: an ``FNetTextClassifier``'s Dense layer is
    ``task/layers/dense``.

    Args:
        model: built by :func:`FNet`.
        checkpoint_keys: the preset's keys; those under ``task/`` that are
            not mapped are ignored.
        heads: {"classifier"} to map a task preset's classifier onto the
            model's. Default (): the backbone only.

    Returns:
        (HDF5 dataset path -> (variable, transform), the ignored task keys).

    Example:
        >>> keys, _ = keras_hub_key_map(FNet("base"))
        >>> keys["layers/dense_1/vars/0"][0].path
        'pooler/kernel'
    """
    encoder = encoder_of(model)
    embeddings = encoder.get_layer("embeddings")
    keys: dict[str, tuple[Any, str]] = {}
    dense, norm = _layer_writers(keys, "/", kernel="vars/0", scale="vars/0", bias="vars/1")
    keys["layers/reversible_embedding/vars/0"] = (embeddings.word.embeddings, "copy")
    keys["layers/position_embedding/vars/0"] = (embeddings.position.embeddings, "copy")
    keys["layers/embedding/vars/0"] = (embeddings.segment.embeddings, "copy")
    norm("layers/layer_normalization", embeddings.norm)
    dense("layers/dense", embeddings.projection)
    for index in range(num_layers(encoder)):
        block = encoder.get_layer(f"encoder_layer_{index}")
        prefix = "layers/f_net_encoder" + (f"_{index}" if index else "")
        norm(f"{prefix}/_mixing_layer_norm", block.mixing_norm)
        dense(f"{prefix}/_intermediate_dense", block.intermediate)
        dense(f"{prefix}/_output_dense", block.output_dense)
        norm(f"{prefix}/_output_layer_norm", block.output_norm)
    dense("layers/dense_1", encoder.get_layer("pooler"))
    if "classifier" in heads:
        dense(f"{_TASK}/layers/dense", _classifier(model))
    return keys, {key for key in checkpoint_keys if key.startswith(f"{_TASK}/") and key not in keys}


def load_keras_hub_preset(model: keras.Model, folder: str | os.PathLike) -> None:
    """Loads a keras-hub FNet preset folder (``f_net_base_en``, ...) into `model`, all or nothing.

    The folder's ``config.json`` must describe an ``FNetBackbone`` whose
    sizes match the model; its weights file is read with h5py (keras-hub is
    not needed). A task preset's head (``task.json``, ``task.weights.h5``)
    loads too when it fits: an ``FNetTextClassifier``'s into a classifier
    built with its ``num_classes``. Otherwise one :class:`FreshHeadWarning`
    says which head starts fresh or is left out (a keras-hub
    ``FNetMaskedLM`` head is never loaded: it computes with the exact GELU
    and LayerNorm epsilon 1e-5, the official head with the tanh GELU and
    1e-12).

    Args:
        model: built by :func:`FNet` with the preset's sizes.
        folder: the preset folder.

    Raises:
        ValueError: not an FNet preset, other sizes (listed), or weights
            that do not match; the model is unchanged.

    Example:
        >>> load_keras_hub_preset(FNet("base"), "f_net_base_en")  # doctest: +SKIP
    """
    folder = os.fspath(folder)
    description = read_keras_hub_config(folder)
    if description.get("class_name") != "FNetBackbone":
        raise ValueError(
            f"The keras-hub preset {folder!r} is of a {description.get('class_name')!r}, not of "
            "an FNetBackbone."
        )
    config = description["config"]
    ours = {theirs: _model_sizes(model)[key] for key, theirs in _KERAS_HUB_SIZES.items()}
    differing = [
        f"{key}: preset {config.get(key)!r}, model {value!r}"
        for key, value in ours.items()
        if config.get(key) != value
    ]
    if _model_activation(model) != GELU_TANH:
        differing.append(
            f"activation: preset {GELU_TANH!r} (keras-hub's FNet), model "
            f"{_model_activation(model)!r}"
        )
    if differing:
        raise ValueError(
            f"The keras-hub preset {folder!r} is not an FNet backbone of the sizes of model "
            f"{model.name!r} ({'; '.join(differing)}); the model was left unchanged."
        )
    keys, _ = keras_hub_key_map(model)
    expected = {key: tuple(variable.shape) for key, (variable, _) in keys.items()}
    _, tensors = read_keras_hub_preset(folder, expected)
    task, task_tensors = read_keras_hub_task(folder)
    task_class = (task or {}).get("class_name")
    tensors.update({f"{_TASK}/{key}": value for key, value in task_tensors.items()})
    kernel = task_tensors.get("layers/dense/vars/0")
    classes = (
        int(kernel.shape[-1])
        if task_class == "FNetTextClassifier" and kernel is not None and kernel.ndim == 2
        else None
    )
    note = None
    if task_class == "FNetMaskedLM":
        note = (
            "the keras-hub FNetMaskedLM head is not loaded (it computes with the exact GELU and "
            "LayerNorm epsilon 1e-5, FNet's official head with the tanh GELU and 1e-12)"
        )
    elif task is not None and classes is None:
        note = f"the head of its keras-hub task {task_class!r} is not loaded"
    heads, warning = _head_plan(model, classes, mlm=False, nsp=False, source=folder, note=note)
    load_tensors(
        model,
        tensors,
        functools.partial(keras_hub_key_map, heads=heads),
        source=folder,
        description=f"model {model.name!r} (as a keras-hub FNet preset)",
    )
    if warning:
        warnings.warn(warning, FreshHeadWarning, stacklevel=3)


# transformers' hidden_act -> FNet's activation (transformers' ACT2FN: "gelu" is the exact
# GELU, "gelu_new" and "gelu_pytorch_tanh" the tanh approximation of the official code).
HIDDEN_ACTIVATIONS = {
    "gelu_new": GELU_TANH,
    "gelu_pytorch_tanh": GELU_TANH,
    "gelu": "gelu",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
# FNet's sizes -> their names in a transformers FNetConfig and a keras-hub FNetBackbone config.
_TRANSFORMERS_SIZES = {
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "intermediate_size": "intermediate_size",
    "vocabulary_size": "vocab_size",
    "max_sequence_length": "max_position_embeddings",
    "num_segments": "type_vocab_size",
}
_KERAS_HUB_SIZES = {
    "vocabulary_size": "vocabulary_size",
    "hidden_size": "hidden_dim",
    "num_layers": "num_layers",
    "intermediate_size": "intermediate_dim",
    "max_sequence_length": "max_sequence_length",
    "num_segments": "num_segments",
}
# Buffers and tied copies a transformers FNet state dict may hold besides its parameters.
_TRANSFORMERS_EXTRA = (
    "fnet.embeddings.position_ids",
    "fnet.embeddings.token_type_ids",
    "cls.predictions.decoder.weight",  # the word table (tied)
    "cls.predictions.decoder.bias",  # cls.predictions.bias (tied)
)
# The DFT matrices transformers keeps as buffers with use_tpu_fourier_optimizations: not weights.
_DFT_BUFFER = re.compile(r"fnet\.encoder\.layer\.\d+\.fourier\.self\.dft_mat_(hidden|seq)$")
_TRANSFORMERS_HEADS = {
    "classifier": "classifier.",
    "mlm": "cls.predictions.",
    "nsp": "cls.seq_relationship.",
}


def _transformers_config(folder: str) -> dict[str, Any]:
    """A transformers FNet folder's ``config.json``, checked to be an FNet's and complete."""
    config = read_json_object(os.path.join(folder, CONFIG))
    if config.get("model_type") != "fnet":
        raise ValueError(
            f"{folder!r} is a transformers folder of a {config.get('model_type')!r} model, "
            "not of an FNet (model_type 'fnet')."
        )
    absent = [
        theirs
        for theirs in _TRANSFORMERS_SIZES.values()
        if not isinstance(config.get(theirs), int) or isinstance(config.get(theirs), bool)
    ]
    if absent:
        raise ValueError(
            f"The transformers FNet config {os.path.join(folder, CONFIG)!r} has no "
            f"{', '.join(absent)}."
        )
    return config


def transformers_activation(config: Mapping[str, Any]) -> str:
    """FNet's `activation` for a transformers FNet config's ``hidden_act`` (default "gelu_new").

    Raises:
        ValueError: a ``hidden_act`` FNet does not compute.

    Example:
        >>> transformers_activation({"hidden_act": "gelu"}), transformers_activation({})
        ('gelu', 'gelu_tanh')
    """
    hidden_act = config.get("hidden_act", "gelu_new")
    if hidden_act not in HIDDEN_ACTIVATIONS:
        raise ValueError(
            f"The transformers FNet config has hidden_act={hidden_act!r}; FNet computes "
            f"{sorted(HIDDEN_ACTIVATIONS)}."
        )
    return HIDDEN_ACTIVATIONS[hidden_act]


def transformers_key_map(
    model: keras.Model, checkpoint_keys: Collection[str] = (), heads: Collection[str] = ()
) -> tuple[KeyMap, set[str]]:
    """transformers FNet state-dict keys -> variables of an FNet model built here.

    The names of transformers' ``modeling_fnet.py`` (``FNetModel`` under
    ``fnet.``): ``fnet.embeddings.{word,position,token_type}_embeddings``,
    ``.LayerNorm``, ``.projection``; ``fnet.encoder.layer.{i}.``
    ``fourier.output.LayerNorm``, ``intermediate.dense``, ``output.dense``,
    ``output.LayerNorm``; ``fnet.pooler.dense``; the heads
    ``classifier`` (``FNetForSequenceClassification``),
    ``cls.predictions.{transform.dense, transform.LayerNorm, bias}``
    (``FNetForMaskedLM``, ``FNetForPreTraining``, the decoder tied to the
    word table) and ``cls.seq_relationship`` (``FNetForPreTraining``).
    ``nn.Linear`` weights (out, in) are transposed. The buffers
    (``position_ids``, the DFT matrices ``fourier.self.dft_mat_*`` of
    ``use_tpu_fourier_optimizations``) and the tied decoder are not weights.

    Args:
        model: built by :func:`FNet` (any head) or an :class:`FNetPretraining`.
        checkpoint_keys: the checkpoint's keys (with the ``fnet.`` prefix).
        heads: the heads to load, a subset of {"classifier", "mlm", "nsp"}
            the model has. Default (): the encoder only.

    Returns:
        (key -> (variable, transform), the checkpoint's keys left unused:
        buffers, tied copies and the heads not loaded).

    Example:
        >>> keys, _ = transformers_key_map(FNet("base"))
        >>> keys["fnet.pooler.dense.weight"][1]
        'linear'
    """
    encoder = encoder_of(model)
    embeddings = encoder.get_layer("embeddings")
    keys: dict[str, tuple[Any, str]] = {}
    linear, norm = _layer_writers(
        keys, ".", kernel="weight", scale="weight", kernel_transform="linear"
    )

    keys["fnet.embeddings.word_embeddings.weight"] = (embeddings.word.embeddings, "copy")
    keys["fnet.embeddings.position_embeddings.weight"] = (embeddings.position.embeddings, "copy")
    keys["fnet.embeddings.token_type_embeddings.weight"] = (embeddings.segment.embeddings, "copy")
    norm("fnet.embeddings.LayerNorm", embeddings.norm)
    linear("fnet.embeddings.projection", embeddings.projection)
    for index in range(num_layers(encoder)):
        block = encoder.get_layer(f"encoder_layer_{index}")
        prefix = f"fnet.encoder.layer.{index}"
        norm(f"{prefix}.fourier.output.LayerNorm", block.mixing_norm)
        linear(f"{prefix}.intermediate.dense", block.intermediate)
        linear(f"{prefix}.output.dense", block.output_dense)
        norm(f"{prefix}.output.LayerNorm", block.output_norm)
    linear("fnet.pooler.dense", encoder.get_layer("pooler"))
    if "classifier" in heads:
        linear("classifier", _classifier(model))
    if "mlm" in heads:
        linear("cls.predictions.transform.dense", model.masked_lm_head.dense)
        norm("cls.predictions.transform.LayerNorm", model.masked_lm_head.norm)
        keys["cls.predictions.bias"] = (model.masked_lm_head.output_bias, "copy")
    if "nsp" in heads:
        linear("cls.seq_relationship", model.next_sentence_head)
    skipped = [prefix for head, prefix in _TRANSFORMERS_HEADS.items() if head not in heads]
    ignored = {
        key
        for key in checkpoint_keys
        if key in _TRANSFORMERS_EXTRA
        or _DFT_BUFFER.match(key)
        or (key not in keys and key.startswith(tuple(skipped)))
    }
    return keys, ignored


def _transformers_tensors(folder: str) -> tuple[str, dict[str, np.ndarray]]:
    """A transformers FNet folder's weights file and tensors, every key under ``fnet.``."""
    name, tensors = read_transformers_weights(folder)
    encoder_parts = ("embeddings.", "encoder.", "pooler.")
    return name, {
        (f"fnet.{key}" if key.startswith(encoder_parts) else key): value
        for key, value in tensors.items()
    }


def load_transformers_folder(model: keras.Model, folder: str | os.PathLike) -> None:
    """Loads a Hugging Face transformers FNet folder into `model`, all or nothing.

    The folder is what ``save_pretrained`` writes and the hub holds
    (``google/fnet-base``, fine-tuned FNets): ``config.json`` and
    ``model.safetensors`` (or ``pytorch_model.bin``, read without PyTorch
    and without running any code), of an ``FNetModel``,
    ``FNetForSequenceClassification``, ``FNetForMaskedLM`` or
    ``FNetForPreTraining``. The sizes in ``config.json`` and its
    ``hidden_act`` (as the model's `activation`: "gelu" is the exact GELU,
    "gelu_new" the tanh approximation) are checked before any weight is
    read; ``use_tpu_fourier_optimizations`` (how transformers computes the
    DFT) does not concern the weights. The heads load where they fit
    (:func:`transformers_key_map`); one :class:`FreshHeadWarning` names
    those that start fresh or are left out.

    Args:
        model: built by :func:`FNet` with the folder's sizes and activation.
        folder: the transformers model folder.

    Raises:
        ValueError: not an FNet folder, other sizes or activation (listed),
            no readable weights, or weights that do not match (listed); the
            model is then unchanged.

    Example:
        >>> model = FNet("base", vocabulary_size=32000, num_classes=2)  # doctest: +SKIP
        >>> load_transformers_folder(model, "fnet-base-finetuned-sst2")  # doctest: +SKIP
    """
    folder = os.fspath(folder)
    config = _transformers_config(folder)
    architecture = (config.get("architectures") or ["FNet"])[0]
    label = f"The transformers {architecture} folder {folder!r}"
    ours = _model_sizes(model)
    differing = [
        f"{theirs}: folder {config[theirs]}, model {ours[key]}"
        for key, theirs in _TRANSFORMERS_SIZES.items()
        if config[theirs] != ours[key]
    ]
    activation = transformers_activation(config)
    if activation != _model_activation(model):
        differing.append(
            f"hidden_act: folder {config.get('hidden_act', 'gelu_new')!r} (activation="
            f"{activation!r}), model activation={_model_activation(model)!r}"
        )
    epsilon = config.get("layer_norm_eps", LAYER_NORM_EPSILON)
    if not np.isclose(epsilon, LAYER_NORM_EPSILON, rtol=1e-3, atol=0):
        differing.append(f"layer_norm_eps: folder {epsilon!r}, model {LAYER_NORM_EPSILON}")
    if differing:
        raise ValueError(
            f"{label} does not fit model {model.name!r} ({'; '.join(differing)}); the model "
            "was left unchanged."
        )
    name, tensors = _transformers_tensors(folder)
    source = os.path.join(folder, name)
    classifier = tensors.get("classifier.weight")
    decoder = tensors.get("cls.predictions.decoder.weight")
    word = tensors.get("fnet.embeddings.word_embeddings.weight")
    table = tuple(encoder_of(model).get_layer("embeddings").word.embeddings.shape)
    tied = decoder is None or (word is not None and decoder.shape == word.shape)
    if decoder is not None and tied and word.shape == table:  # another shape is refused unread
        tied = np.array_equal(decoder, word)
    if not tied:
        raise ValueError(
            f"{label}: its masked-LM decoder is not tied to the word embeddings, as FNet's is; "
            "the model was left unchanged."
        )
    heads, warning = _head_plan(
        model,
        None if classifier is None or classifier.ndim != 2 else int(classifier.shape[0]),
        mlm="cls.predictions.bias" in tensors,
        nsp="cls.seq_relationship.weight" in tensors,
        source=source,
    )
    load_tensors(
        model,
        tensors,
        functools.partial(transformers_key_map, heads=heads),
        source=source,
        description=f"model {model.name!r} (as a transformers {architecture})",
    )
    if warning:
        warnings.warn(warning, FreshHeadWarning, stacklevel=3)


def _folder_format(folder: str) -> str:
    """ "transformers" or "keras-hub": the kind of model folder `folder` is, by its config.json."""
    config_path = os.path.join(folder, CONFIG)
    if not os.path.isfile(config_path):
        raise ValueError(
            f"weights={folder!r} is a folder without config.json: FNet reads a Hugging Face "
            "transformers folder or a keras-hub preset folder."
        )
    config = read_json_object(config_path)
    if is_transformers_config(config):
        return "transformers"
    if isinstance(config.get("config"), dict) and "class_name" in config:
        return "keras-hub"
    raise ValueError(
        f"{config_path!r} is neither a transformers config (no model_type) nor a keras-hub "
        "preset config (no class_name and config)."
    )


def load_model_folder(model: keras.Model, folder: str | os.PathLike) -> None:
    """Loads a transformers or a keras-hub FNet folder, told apart by its config.json.

    Raises:
        ValueError: neither, or weights that do not fit (see
            :func:`load_transformers_folder`, :func:`load_keras_hub_preset`).
    """
    folder = os.fspath(folder)
    if _folder_format(folder) == "transformers":
        load_transformers_folder(model, folder)
    else:
        load_keras_hub_preset(model, folder)


def load_fnet_weights(model: keras.Model, weights: str | os.PathLike) -> None:
    """Loads any weights `FNet(weights=...)` accepts into `model`, all or nothing.

    Args:
        model: built by :func:`FNet`.
        weights: a release name (:data:`RELEASES`: downloaded once into the
            Keras cache, converted once, offline afterwards), a
            ``.weights.h5`` saved by keras_fourier, a Hugging Face
            transformers FNet folder (:func:`load_transformers_folder`), a
            keras-hub FNet preset folder (its ``config.json`` and weights,
            a task preset's head included: :func:`load_keras_hub_preset`),
            or an official Flax
            checkpoint file (read without JAX or Flax, its optimizer moments
            skipped). A classifier loading a pretraining checkpoint keeps a
            fresh classifier, as the official fine-tuning does.

    Raises:
        ValueError: the weights cannot be read or do not match the model
            (listed; the model is unchanged), or a release's download failed
            (the message says how to work offline).

    Example:
        >>> load_fnet_weights(FNet("base"), "f_net_base")  # doctest: +SKIP
    """
    if isinstance(weights, str) and weights in RELEASES:
        load_release(model, RELEASES[weights], flax_key_map, label=f"weights={weights!r}")
        return
    path = os.fspath(weights)
    if os.path.isdir(path):
        load_model_folder(model, path)
    elif path.endswith(".weights.h5"):
        load_weights_file(model, path)
    elif path.endswith((".safetensors", ".bin")):
        raise ValueError(
            f"weights={path!r} is a transformers weights file: pass its folder, whose "
            "config.json gives the sizes checked before loading."
        )
    else:
        try:
            load_checkpoint(model, path, "flax", flax_key_map)
        except FlaxCheckpointError as error:
            raise ValueError(
                f"Cannot load weights={path!r}: not a `.weights.h5` file, a transformers or "
                f"keras-hub folder, or an official FNet Flax checkpoint ({error})."
            ) from error


def is_official_weights(weights: str | os.PathLike) -> bool:
    """Whether FNet `weights` are official: a release, a Flax checkpoint or a keras-hub preset.

    Those were pretrained with the official 32,000-piece SentencePiece
    vocabulary; a ``.weights.h5`` or ``.keras`` file saved by this package may
    hold anything.

    Example:
        >>> is_official_weights("f_net_base"), is_official_weights("mine.weights.h5")
        (True, False)
    """
    if isinstance(weights, str) and weights in RELEASES:
        return True
    return not os.fspath(weights).endswith((".weights.h5", ".keras"))


def _keras_file_fnet(path: str) -> keras.Model:
    """The FNet of a `.keras` file (an encoder, a classifier, an `FNetPretraining` or a text
    run's model), loaded within bounds; ValueError for another model."""
    model = load_keras_file(path, compile=False)
    layers = {layer.name: layer for layer in getattr(encoder_of(model), "layers", ())}
    if not isinstance(layers.get("embeddings"), FNetEmbeddings):
        raise ValueError(f"weights={path!r} holds model {model.name!r}, not an FNet.")
    return model


def _keras_file_declared(path: str) -> tuple[dict[str, Any], Any]:
    """The sizes and activation that the config of a `.keras` file declares for its FNet,
    read without its weights: what `_keras_file_fnet` would load (an encoder, a classifier,
    an `FNetPretraining` or a text run's model); ValueError for another model."""
    config = read_keras_config(path)
    model = config if isinstance(config, dict) else {}
    settings = model.get("config") if isinstance(model.get("config"), dict) else {}
    encoder = settings
    if model.get("registered_name") == keras.saving.get_registered_name(FNetPretraining):
        inner = settings.get("encoder")
        encoder = inner.get("config") if isinstance(inner, dict) else None
    entries = encoder.get("layers") if isinstance(encoder, dict) else None
    layers = {
        entry["config"].get("name"): entry
        for entry in (entries if isinstance(entries, list) else ())
        if isinstance(entry, dict) and isinstance(entry.get("config"), dict)
    }
    embeddings = layers.get("embeddings", {})
    if embeddings.get("registered_name") != keras.saving.get_registered_name(FNetEmbeddings):
        raise ValueError(f"weights={path!r} holds model {settings.get('name')!r}, not an FNet.")
    tables = embeddings["config"]
    first = layers.get("encoder_layer_0", {}).get("config", {})
    sizes = {
        "hidden_size": tables.get("hidden_size"),
        "num_layers": sum(str(name).startswith("encoder_layer_") for name in layers),
        "intermediate_size": first.get("intermediate_size"),
        **{key: tables.get(key) for key in _TABLE_KEYS},
    }
    return sizes, first.get("activation")


def _h5_sizes(path: str) -> tuple[dict[str, int], str, int | None]:
    """Sizes of the FNet in a `.weights.h5`, its kind ("encoder", "pretraining",
    "classifier") and a classifier's class count."""
    shapes = tensor_shapes(path)

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
    shapes = read_flax_shapes(path)
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
    ranks = {"word": (2,), "position": (2, 3), "type": (2,), "intermediate": (2,)}
    for key, allowed in ranks.items():
        if len(shapes[needed[key]]) not in allowed:
            raise ValueError(
                f"{path!r} is not an FNet Flax checkpoint: {needed[key]} has shape "
                f"{shapes[needed[key]]}. Received: {needed[key]}={shapes[needed[key]]}"
            )
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
    description = read_keras_hub_config(folder)
    config = description["config"]
    sizes = {ours: config.get(theirs) for ours, theirs in _KERAS_HUB_SIZES.items()}
    weights = os.path.join(
        folder, os.path.basename(str(description.get("weights", PRESET_WEIGHTS)))
    )
    try:  # the weights' headers, checked before anything is built from the sizes
        check_headers(dataset_headers(weights, skip=()), weights)
    except OSError as error:
        raise ValueError(f"Cannot read the preset's weights {weights!r}: {error}") from error
    absent = [_KERAS_HUB_SIZES[key] for key, value in sizes.items() if value is None]
    if absent:
        raise ValueError(
            f"The keras-hub preset {folder!r} does not describe an FNet backbone (no "
            f"{', '.join(absent)})."
        )
    return sizes


def check_fnet_sizes(sizes: Mapping[str, Any], source: str) -> dict[str, int]:
    """FNet sizes read from a file, checked before anything of them is built.

    Every size must be a positive integer, and the encoder they describe
    (word, position and segment tables, blocks, pooler) within the
    parameter ceiling of :mod:`keras_fourier.limits`
    (``KERAS_FOURIER_MAX_PARAMETERS``).

    Args:
        sizes: {"hidden_size", "num_layers", "intermediate_size",
            "vocabulary_size", "max_sequence_length", "num_segments"}.
        source: the weights, for the message.

    Returns:
        `sizes`, as ints.

    Raises:
        ValueError: naming the size and its value.

    Example:
        >>> sizes = {**FNET_VARIANTS["base"], **OFFICIAL_TABLES}
        >>> check_fnet_sizes(sizes, "f_net_base")["num_layers"]
        12
    """
    for key, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(
                f"The FNet weights {source!r} declare a size that is not a positive integer. "
                f"Received: {key}={value!r}"
            )
    hidden, layers = sizes["hidden_size"], sizes["num_layers"]
    tables = {key: sizes[key] * hidden for key in _TABLE_KEYS}
    blocks = layers * (2 * hidden * sizes["intermediate_size"] + 6 * hidden)
    check_parameters(
        f"The FNet weights {source!r} describe an encoder that",
        sum(tables.values()) + blocks + hidden * hidden,
        ", ".join(f"{key}={sizes[key]}" for key in (*_TABLE_KEYS, *SIZE_KEYS)),
    )
    return dict(sizes)


def _folder_sizes(folder: str) -> dict[str, int]:
    if _folder_format(folder) == "keras-hub":
        return _preset_sizes(folder)
    config = _transformers_config(folder)
    return {ours: config[theirs] for ours, theirs in _TRANSFORMERS_SIZES.items()}


def fnet_weights_activation(weights: str | os.PathLike) -> str:
    """The feed-forward `activation` an FNet needs for `weights`.

    A transformers folder's ``hidden_act`` (:func:`transformers_activation`),
    or a ``.keras`` file's (its config records it); every other kind of FNet
    weights was trained with the official tanh-approximate GELU
    ("gelu_tanh"). A ``.weights.h5`` records no activation: "gelu_tanh",
    the default (a model of another activation is saved as a ``.keras``
    file to keep it).

    Example:
        >>> fnet_weights_activation("f_net_base")
        'gelu_tanh'
    """
    if isinstance(weights, str) and weights in RELEASES:
        return GELU_TANH
    path = os.fspath(weights)
    if os.path.isdir(path) and _folder_format(path) == "transformers":
        return transformers_activation(_transformers_config(path))
    if path.endswith(".keras"):
        return _keras_file_declared(path)[1]
    return GELU_TANH


def fnet_weights_sizes(weights: str | os.PathLike) -> dict[str, int]:
    """The sizes of the FNet that `weights` hold, read without loading the weights.

    Args:
        weights: anything :func:`FNet` takes as `weights`: a release name,
            a ``.weights.h5`` saved by keras_fourier (an encoder, an
            :class:`FNetPretraining` or a classifier), a transformers or
            keras-hub FNet folder (its ``config.json``) or an official Flax
            checkpoint (its array headers; the data is skipped); or a
            ``.keras`` file of an FNet (its ``config.json``: the weights are not read).

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
    check_fnet_weights(weights)
    path = os.fspath(weights)
    if os.path.isdir(path):
        return check_fnet_sizes(_folder_sizes(path), path)
    if path.endswith(".weights.h5"):
        return check_fnet_sizes(_h5_sizes(path)[0], path)
    if path.endswith(".keras"):  # the archive's declared sizes are bounded before it is built
        return check_fnet_sizes(_keras_file_declared(path)[0], path)
    try:
        return check_fnet_sizes(_flax_sizes(path), path)
    except FlaxCheckpointError as error:
        raise ValueError(
            f"Cannot read weights={path!r}: not a `.weights.h5` file, a transformers or "
            f"keras-hub folder, or an official FNet Flax checkpoint ({error})."
        ) from error


def _pretrained_encoder(weights: str | os.PathLike, sizes: Mapping[str, int]) -> keras.Model:
    """An FNet encoder of `sizes` holding the encoder weights of `weights`.

    Its heads are discarded, so the warnings about them are not shown.
    """
    if os.fspath(weights).endswith(".keras"):
        return encoder_of(_keras_file_fnet(os.fspath(weights)))
    variant = {key: sizes[key] for key in SIZE_KEYS}
    tables = {key: sizes[key] for key in _TABLE_KEYS}
    tables["activation"] = fnet_weights_activation(weights)
    kind, classes = "encoder", None
    if os.fspath(weights).endswith(".weights.h5"):
        _, kind, classes = _h5_sizes(os.fspath(weights))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FreshHeadWarning)
        if kind == "pretraining":
            loaded = build_fnet(variant, **tables, heads="pretraining")
            load_fnet_weights(loaded, weights)
            return loaded.encoder
        loaded = build_fnet(variant, **tables, num_classes=classes)
        load_fnet_weights(loaded, weights)
    return loaded


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


_KERAS_HUB_BACKBONE = {
    "module": "keras_hub.src.models.f_net.f_net_backbone",
    "class_name": "FNetBackbone",
    "registered_name": "keras_hub>FNetBackbone",
}
_KERAS_HUB_CLASSIFIER = {
    "module": "keras_hub.src.models.f_net.f_net_text_classifier",
    "class_name": "FNetTextClassifier",
    "registered_name": "keras_hub>FNetTextClassifier",
}


_KERAS_HUB_TOKENIZER = {
    "module": "keras_hub.src.models.f_net.f_net_tokenizer",
    "class_name": "FNetTokenizer",
    "registered_name": "keras_hub>FNetTokenizer",
}
_KERAS_HUB_PREPROCESSOR = {
    "module": "keras_hub.src.models.f_net.f_net_text_classifier_preprocessor",
    "class_name": "FNetTextClassifierPreprocessor",
    "registered_name": "keras_hub>FNetTextClassifierPreprocessor",
}
_KERAS_HUB_VOCABULARY = "assets/tokenizer/vocabulary.spm"
_MAX_SENTENCEPIECE_BYTES = 64 * 2**20


def _sentencepiece_bytes(tokenizer: str | os.PathLike) -> bytes:
    path = os.fspath(tokenizer)
    if not os.path.isfile(path) or os.path.getsize(path) > _MAX_SENTENCEPIECE_BYTES:
        raise ValueError(
            "`tokenizer` must be the path of a SentencePiece .model file of at most "
            f"{_MAX_SENTENCEPIECE_BYTES:,} bytes. Received: tokenizer={tokenizer!r}"
        )
    with open(path, "rb") as file:
        return file.read()


def check_keras_hub_model(model: keras.Model) -> None:
    """Raises ValueError unless keras-hub's FNet computes what `model` computes.

    keras-hub's ``FNetBackbone`` is the paper's FNet: Fourier mixing in
    every block, the tanh GELU, every position mixed (no padding mask).
    An encoder, a classifier or an :class:`FNetPretraining` built by
    :func:`FNet` with those settings passes; any other model (not an FNet,
    another `mixing`, self-attention blocks, another `activation`, a
    ``padding_mask`` input) is refused with one line naming it.

    Args:
        model: the model to write as a keras-hub preset.

    Raises:
        ValueError: naming the model and what keras-hub cannot express.

    Example:
        >>> check_keras_hub_model(FNet("base"))
        >>> check_keras_hub_model(FNet("base", mixing="linear"))
        Traceback (most recent call last):
        ValueError: keras-hub's FNet mixes with the Fourier transform; ...
    """
    encoder = encoder_of(model)
    layers = {layer.name: layer for layer in getattr(encoder, "layers", ())}
    blocks = [layers.get(f"encoder_layer_{index}") for index in range(num_layers(encoder))]
    if (
        not isinstance(layers.get("embeddings"), FNetEmbeddings)
        or not blocks
        or not all(isinstance(block, FNetEncoderBlock) for block in blocks)
        or "pooler" not in layers
    ):
        raise ValueError(
            f"A keras-hub FNet preset is written from an FNet (keras_fourier.FNet or a text "
            f"run's model); model {model.name!r} is not one. Received: model={model.name!r}"
        )
    mixings = sorted({block.mixing_name for block in blocks} - {"fourier"})
    if mixings:
        raise ValueError(
            f"keras-hub's FNet mixes with the Fourier transform; model {model.name!r} has "
            f"{', '.join(mixings)} mixing blocks. Received: mixing={mixings[0]!r}"
        )
    if _model_activation(model) != GELU_TANH:
        raise ValueError(
            f"keras-hub's FNet computes the tanh GELU; model {model.name!r} has "
            f"activation={_model_activation(model)!r}. Received: model={model.name!r}"
        )
    if "padding_mask" in getattr(encoder, "input", {}):
        raise ValueError(
            f"keras-hub's FNet mixes every position; model {model.name!r} takes a padding "
            f"mask (built with use_padding_mask=True). Received: model={model.name!r}"
        )


def save_keras_hub_preset(
    model: keras.Model,
    folder: str | os.PathLike,
    *,
    tokenizer: str | os.PathLike | bytes | None = None,
) -> None:
    """Writes an FNet as a keras-hub preset folder, which ``keras_hub.models.FNetBackbone`` loads.

    The layout of keras-hub's ``save_to_preset``: ``config.json`` (the
    ``FNetBackbone`` and its sizes), ``metadata.json`` and
    ``model.weights.h5`` with keras-hub's variable paths
    (:func:`keras_hub_key_map`, the map the loader uses, read the other way).
    A classifier adds ``task.json`` and ``task.weights.h5``, an
    ``FNetTextClassifier`` (``keras_hub.models.FNetTextClassifier.from_preset``
    loads it with its head). With `tokenizer`, keras-hub's ``FNetTokenizer``
    files too (``tokenizer.json``, ``assets/tokenizer/vocabulary.spm``, and
    for a classifier ``preprocessor.json``, an
    ``FNetTextClassifierPreprocessor`` of the model's sequence length), so
    that ``from_preset`` builds the task with its preprocessor. The folder is
    written whole or not at all.

    Args:
        model: built by :func:`FNet` (an encoder, a classifier, or an
            :class:`FNetPretraining`, whose encoder is written), with the
            tanh-GELU activation of keras-hub's FNet.
        folder: the preset folder; it must not exist or be empty.
        tokenizer: the SentencePiece ``.model`` file (or its bytes) the
            model's text was encoded with (the official ``c4_bpe_sentencepiece.model`` for
            official weights: ``keras_fourier.data.official_sentencepiece_model()``).
            Default None: no tokenizer files.

    Raises:
        ValueError: a model keras-hub's FNet cannot express
            (:func:`check_keras_hub_model`), a `tokenizer` that is not a
            file, or a `folder` that holds files; nothing is written.

    Example:
        >>> model = FNet("base", weights="f_net_base")  # doctest: +SKIP
        >>> save_keras_hub_preset(model, "f_net_base_en")  # doctest: +SKIP
        >>> keras_hub.models.FNetBackbone.from_preset("f_net_base_en")  # doctest: +SKIP
    """
    check_keras_hub_model(model)
    vocabulary = tokenizer if isinstance(tokenizer, bytes) else None
    if tokenizer is not None and vocabulary is None:
        vocabulary = _sentencepiece_bytes(tokenizer)
    encoder = encoder_of(model)
    sizes = _model_sizes(model)
    backbone = {
        **_KERAS_HUB_BACKBONE,
        "config": {
            "name": "f_net_backbone",
            "trainable": True,
            **{theirs: sizes[ours] for ours, theirs in _KERAS_HUB_SIZES.items()},
            "dropout": encoder.get_layer("embeddings").dropout,
        },
    }
    classifier = _classifier(model)
    keys, _ = keras_hub_key_map(model, heads={"classifier"} if classifier else ())
    values = {key: np.asarray(keras.ops.convert_to_numpy(v)) for key, (v, _) in keys.items()}
    prefix = f"{_TASK}/"
    backbone_weights = {k: v for k, v in values.items() if not k.startswith(prefix)}
    json_files: dict[str, Any] = {
        "config.json": backbone,
        "metadata.json": {
            "keras_version": keras.__version__,
            "parameter_count": int(sum(np.prod(v.shape) for v in backbone_weights.values())),
            "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S"),
            "tasks": ["MaskedLM", "TextClassifier"],
        },
    }
    weight_files = {"model.weights.h5": backbone_weights}
    if classifier is not None:
        activation = keras.activations.serialize(classifier.activation)
        last = model.layers[-1]
        if activation == "linear" and isinstance(last, keras.layers.Activation):
            # A text run's classifier: logits, then a softmax layer (the model's output).
            activation = keras.activations.serialize(last.activation)
        json_files["task.json"] = {
            **_KERAS_HUB_CLASSIFIER,
            "config": {
                "backbone": backbone,
                "preprocessor": None,
                "name": "f_net_text_classifier",
                "num_classes": classifier.units,
                "dropout": encoder.get_layer("classifier_dropout").rate,
                "activation": activation if isinstance(activation, str) else "linear",
            },
        }
        weight_files["task.weights.h5"] = {
            k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)
        }
    other_files = {}
    if vocabulary is not None:
        json_files["tokenizer.json"] = {
            **_KERAS_HUB_TOKENIZER,
            "config": {
                "name": "f_net_tokenizer",
                "trainable": True,
                "config_file": "tokenizer.json",
                "proto": None,
                "sequence_length": None,
                "add_bos": False,
                "add_eos": False,
            },
        }
        other_files[_KERAS_HUB_VOCABULARY] = vocabulary
        if classifier is not None:
            length = encoder.input["token_ids"].shape[1] or sizes["max_sequence_length"]
            json_files["preprocessor.json"] = json_files["task.json"]["config"]["preprocessor"] = {
                **_KERAS_HUB_PREPROCESSOR,
                "config": {
                    "name": "f_net_text_classifier_preprocessor",
                    "trainable": True,
                    "tokenizer": json_files["tokenizer.json"],
                    "config_file": "preprocessor.json",
                    "sequence_length": length,
                    "truncate": "round_robin",
                },
            }
    write_keras_hub_preset(folder, json_files, weight_files, other_files)
