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
  through :func:`keras_hub_key_map`;
* a ``.weights.h5`` saved by keras_fourier (:mod:`keras_fourier.weights.saved`).

:func:`fnet_weights_sizes` reads the sizes of any of them without loading the
weights, and :func:`load_pretrained_encoder` starts fine-tuning from them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from typing import Any

import keras

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
)
from keras_fourier.weights.pipeline import load_checkpoint, load_release
from keras_fourier.weights.saved import load_weights_file, tensor_shapes

_TABLE_KEYS = tuple(OFFICIAL_TABLES)


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
    model: keras.Model, checkpoint_keys: Collection[str] = ()
) -> tuple[KeyMap, set[str]]:
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
        model: built by :func:`FNet` (a classifier's head and pretraining
            heads are not in keras-hub's backbone preset: they keep their
            initialisation).
        checkpoint_keys: unused (a backbone preset has one layout).

    Returns:
        (HDF5 dataset path -> (variable, transform), no ignored keys).

    Example:
        >>> keys, _ = keras_hub_key_map(FNet("base"))
        >>> keys["layers/dense_1/vars/0"][0].path
        'pooler/kernel'
    """
    encoder = encoder_of(model)
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
    for index in range(num_layers(encoder)):
        block = encoder.get_layer(f"encoder_layer_{index}")
        prefix = "layers/f_net_encoder" + (f"_{index}" if index else "")
        pair(f"{prefix}/_mixing_layer_norm", block.mixing_norm.gamma, block.mixing_norm.beta)
        pair(f"{prefix}/_intermediate_dense", block.intermediate.kernel, block.intermediate.bias)
        pair(f"{prefix}/_output_dense", block.output_dense.kernel, block.output_dense.bias)
        pair(f"{prefix}/_output_layer_norm", block.output_norm.gamma, block.output_norm.beta)
    pooler = encoder.get_layer("pooler")
    pair("layers/dense_1", pooler.kernel, pooler.bias)
    return keys, set()


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
        >>> load_keras_hub_preset(FNet("base"), "f_net_base_en")  # doctest: +SKIP
    """
    folder = os.fspath(folder)
    config = read_keras_hub_config(folder)["config"]
    encoder = encoder_of(model)
    embeddings = encoder.get_layer("embeddings")
    ours = {
        "vocabulary_size": embeddings.vocabulary_size,
        "hidden_dim": embeddings.hidden_size,
        "num_layers": num_layers(encoder),
        "intermediate_dim": encoder.get_layer("encoder_layer_0").intermediate_size,
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
            f"The keras-hub preset {folder!r} is not an FNet backbone of the sizes of model "
            f"{model.name!r} ({'; '.join(differing)}); the model was left unchanged."
        )
    keys, _ = keras_hub_key_map(model)
    expected = {key: tuple(variable.shape) for key, (variable, _) in keys.items()}
    _, tensors = read_keras_hub_preset(folder, expected)
    load_tensors(model, tensors, keras_hub_key_map, source=folder)


def load_fnet_weights(model: keras.Model, weights: str | os.PathLike) -> None:
    """Loads any weights `FNet(weights=...)` accepts into `model`, all or nothing.

    Args:
        model: built by :func:`FNet`.
        weights: a release name (:data:`RELEASES`: downloaded once into the
            Keras cache, converted once, offline afterwards), a
            ``.weights.h5`` saved by keras_fourier, a keras-hub FNet preset
            folder (its ``config.json`` and weights), or an official Flax
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
        load_keras_hub_preset(model, path)
    elif path.endswith(".weights.h5"):
        load_weights_file(model, path)
    else:
        try:
            load_checkpoint(model, path, "flax", flax_key_map)
        except FlaxCheckpointError as error:
            raise ValueError(
                f"Cannot load weights={path!r}: not a `.weights.h5` file, a keras-hub preset "
                f"folder or an official FNet Flax checkpoint ({error})."
            ) from error


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
    keys = {
        "hidden_size": "hidden_dim",
        "num_layers": "num_layers",
        "intermediate_size": "intermediate_dim",
        "vocabulary_size": "vocabulary_size",
        "max_sequence_length": "max_sequence_length",
        "num_segments": "num_segments",
    }
    sizes = {ours: config.get(theirs) for ours, theirs in keys.items()}
    weights = os.path.join(
        folder, os.path.basename(str(description.get("weights", PRESET_WEIGHTS)))
    )
    try:  # the weights' headers, checked before anything is built from the sizes
        check_headers(dataset_headers(weights, skip=()), weights)
    except OSError as error:
        raise ValueError(f"Cannot read the preset's weights {weights!r}: {error}") from error
    absent = [keys[key] for key, value in sizes.items() if value is None]
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
    check_fnet_weights(weights)
    path = os.fspath(weights)
    if os.path.isdir(path):
        return check_fnet_sizes(_preset_sizes(path), path)
    if path.endswith(".weights.h5"):
        return check_fnet_sizes(_h5_sizes(path)[0], path)
    try:
        return check_fnet_sizes(_flax_sizes(path), path)
    except FlaxCheckpointError as error:
        raise ValueError(
            f"Cannot read weights={path!r}: not a `.weights.h5` file, a keras-hub preset "
            f"folder or an official FNet Flax checkpoint ({error})."
        ) from error


def _pretrained_encoder(weights: str | os.PathLike, sizes: Mapping[str, int]) -> keras.Model:
    """An FNet encoder of `sizes` holding the encoder weights of `weights`."""
    variant = {key: sizes[key] for key in SIZE_KEYS}
    tables = {key: sizes[key] for key in _TABLE_KEYS}
    kind, classes = "encoder", None
    if os.fspath(weights).endswith(".weights.h5"):
        _, kind, classes = _h5_sizes(os.fspath(weights))
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
