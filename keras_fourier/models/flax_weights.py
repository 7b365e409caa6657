"""Loading checkpoints through a key map: official Flax files and keras-hub preset folders.

A family that publishes Flax checkpoints (FNet) gives, for a built model, a
key map: checkpoint key -> (Keras variable, transform), plus the keys the
model may leave unused (heads it does not have). :func:`convert` checks a
whole checkpoint against it, listing every missing key, unexpected key and
wrong shape at once, and converts the tensors; :func:`assign_all` assigns
them all or none (:func:`keras_fourier.models.weights.assign_atomically`).
The readers: :func:`read_flax_params` (the ``target`` of a Flax optimizer
checkpoint, read by :mod:`keras_fourier.models.flax_msgpack` without its
optimizer moments) and :func:`read_keras_hub_preset` (a preset folder's
``config.json`` and its ``.weights.h5``, read with h5py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import h5py
import keras
import numpy as np

from keras_fourier.models import flax_msgpack
from keras_fourier.models.weights import assign_atomically

# A tensor's layout change from the checkpoint to the Keras variable.
TRANSFORMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "copy": lambda value: value,
    "transpose": lambda value: value.T,
    "squeeze_leading": lambda value: value.reshape(value.shape[1:]) if value.ndim > 1 else value,
}
INVERSE_TRANSFORMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "copy": lambda value: value,
    "transpose": lambda value: value.T,
    "squeeze_leading": lambda value: value[None],
}
KeyMap = Mapping[str, tuple[Any, str]]
_MAX_LISTED = 10


def _listing(items: list[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    return shown + (f", ... ({len(items) - _MAX_LISTED} more)" if len(items) > _MAX_LISTED else "")


def convert(
    keys: KeyMap,
    tensors: Mapping[str, Any],
    *,
    ignored: Iterable[str] = (),
    description: str = "the model",
) -> list[tuple[Any, np.ndarray]]:
    """Checks a whole checkpoint against a key map and converts its tensors.

    Args:
        keys: checkpoint key -> (Keras variable, a key of :data:`TRANSFORMS`).
        tensors: checkpoint key -> array.
        ignored: checkpoint keys the model has no place for and leaves unused
            (heads it was built without).
        description: names the model in the message.

    Returns:
        (variable, float32 value of the variable's shape) pairs.

    Raises:
        ValueError: listing the missing keys, the unexpected keys and the
            tensors of the wrong shape (all of them in one message).

    Example:
        >>> dense = keras.layers.Dense(2)
        >>> dense.build((None, 3))
        >>> pairs = convert({"k": (dense.kernel, "transpose"), "b": (dense.bias, "copy")},
        ...                 {"k": np.ones((2, 3)), "b": np.zeros(2)})
        >>> [value.shape for _, value in pairs]
        [(3, 2), (2,)]
    """
    ignored = set(ignored)
    missing = sorted(key for key in keys if key not in tensors)
    unexpected = sorted(key for key in tensors if key not in keys and key not in ignored)
    wrong, pairs = [], []
    for key, (variable, transform) in keys.items():
        if key not in tensors:
            continue
        value = tensors[key]
        if not isinstance(value, np.ndarray) or not np.issubdtype(value.dtype, np.number):
            wrong.append(f"{key}: not a numeric array ({type(value).__name__})")
            continue
        converted = TRANSFORMS[transform](value)
        if tuple(converted.shape) != tuple(variable.shape):
            wrong.append(
                f"{key}: checkpoint {tuple(value.shape)}, model {variable.path} "
                f"{tuple(variable.shape)}"
            )
            continue
        pairs.append((variable, converted.astype(np.float32, copy=False)))
    problems = [
        f"{label} ({len(items)}): {_listing(items)}"
        for label, items in (
            ("missing keys", missing),
            ("unexpected keys", unexpected),
            ("wrong shapes", wrong),
        )
        if items
    ]
    if problems:
        raise ValueError(f"The checkpoint does not match {description}; " + "; ".join(problems))
    return pairs


def assign_all(model: keras.Model, load: Callable[[], list[tuple[Any, np.ndarray]]], source: str):
    """Assigns the pairs `load()` returns, all or none; a failure leaves `model` unchanged.

    Args:
        model: the model whose variables are assigned.
        load: reads and converts the checkpoint (e.g. with :func:`convert`).
        source: the file or folder, named in the error.

    Raises:
        ValueError: `load` failed or an assignment failed; nothing changed.
    """

    def run() -> None:
        for variable, value in load():
            variable.assign(value)

    assign_atomically(model, run, source)


def read_flax_params(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The parameters of a Flax msgpack checkpoint, flattened to slash-joined keys.

    An optimizer checkpoint (``{"target": params, "state": moments}``, what
    Flax's ``save_checkpoint`` wrote for ``flax.optim`` optimizers) gives its
    ``target``, its ``state`` skipped unread; a bare parameter tree (or
    ``{"params": ...}``) is read whole.

    Args:
        path: the checkpoint file.

    Returns:
        ``"encoder/pooler/kernel"`` -> array, for every array of the parameters.

    Raises:
        FlaxCheckpointError: not a Flax msgpack checkpoint of arrays
            (:mod:`keras_fourier.models.flax_msgpack`).

    Example:
        >>> read_flax_params("f_net_checkpoint")["encoder/pooler/kernel"].shape  # doctest: +SKIP
        (768, 768)
    """
    tree = flax_msgpack.read_flax_checkpoint(path, skip=("state",))
    for key in ("target", "params"):
        if isinstance(tree.get(key), Mapping):
            tree = tree[key]
            break
    return flax_msgpack.flatten(tree)


def read_flax_shapes(path: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """The shapes of a Flax msgpack checkpoint's parameters, without reading their data.

    The parameters of :func:`read_flax_params` (the ``target`` of an
    optimizer checkpoint), each array's header checked and its data skipped.

    Args:
        path: the checkpoint file.

    Returns:
        ``"encoder/pooler/kernel"`` -> shape, for every array of the parameters.

    Raises:
        FlaxCheckpointError: not a Flax msgpack checkpoint of arrays.

    Example:
        >>> read_flax_shapes("f_net_checkpoint")["encoder/pooler/kernel"]  # doctest: +SKIP
        (768, 768)
    """
    tree = flax_msgpack.read_flax_checkpoint(path, skip=("state",), shapes_only=True)
    for key in ("target", "params"):
        if isinstance(tree.get(key), Mapping):
            tree = tree[key]
            break
    return {
        key: value.shape if isinstance(value, flax_msgpack.ArrayShape) else np.shape(value)
        for key, value in flax_msgpack.flatten(tree).items()
    }


PRESET_CONFIG = "config.json"


def read_keras_hub_preset(
    folder: str | os.PathLike,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A keras-hub preset folder's backbone config and weight tensors.

    Args:
        folder: a folder with keras-hub's ``config.json`` (``{"class_name",
            "config", ...}``) and the weights file it names (``"weights"``,
            default ``model.weights.h5``).

    Returns:
        (the backbone's ``config`` dict, {HDF5 dataset path: array}) with
        paths as Keras's ``.weights.h5`` stores them, e.g.
        ``layers/token_embedding/vars/0``.

    Raises:
        ValueError: no ``config.json``, not valid JSON, or no readable
            weights file.

    Example:
        >>> config, tensors = read_keras_hub_preset("f_net_base_en")  # doctest: +SKIP
        >>> config["hidden_dim"]  # doctest: +SKIP
        768
    """
    folder = os.fspath(folder)
    config_path = os.path.join(folder, PRESET_CONFIG)
    try:
        with open(config_path, encoding="utf-8") as file:
            description = json.load(file)
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{folder!r} is not a keras-hub preset folder: {error}") from error
    if not isinstance(description, dict) or not isinstance(description.get("config"), dict):
        raise ValueError(f"{config_path!r} is not a keras-hub config (no 'config' object).")
    weights_name = description.get("weights", "model.weights.h5")
    weights_path = os.path.join(folder, os.path.basename(str(weights_name)))
    tensors: dict[str, np.ndarray] = {}
    try:
        with h5py.File(weights_path, "r") as handle:
            handle.visititems(
                lambda name, item: (
                    tensors.__setitem__(name, np.asarray(item))
                    if isinstance(item, h5py.Dataset)
                    else None
                )
            )
    except OSError as error:
        raise ValueError(f"Cannot read the preset's weights {weights_path!r}: {error}") from error
    return description["config"], tensors
