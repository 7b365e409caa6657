"""Reading Hugging Face transformers model folders without transformers or PyTorch.

A folder written by ``save_pretrained`` (or downloaded from the hub) holds
``config.json`` (``{"model_type", "architectures", ...}``: the model's sizes)
and its weights, one of (in this order of preference):

* ``model.safetensors``, read by :mod:`keras_fourier.weights.safetensors_file`;
* ``model.safetensors.index.json`` and the shards its ``weight_map`` names;
* ``pytorch_model.bin`` (a ``torch.save`` zip), read by the safe unpickler of
  :mod:`keras_fourier.weights.pth`;
* ``pytorch_model.bin.index.json`` and its shards.

:func:`is_transformers_config` tells such a ``config.json`` from keras-hub's
(``{"class_name", "config"}``); a family maps the tensors onto its model with
its own key map (``fnet_weights.transformers_key_map``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from keras_fourier.limits import loads_json
from keras_fourier.weights.pth import read_pth
from keras_fourier.weights.safetensors_file import read_safetensors

CONFIG = "config.json"
MAX_JSON_BYTES = 16 * 2**20
# Weight files in the order transformers prefers them, each with its reader.
WEIGHT_FILES: tuple[tuple[str, Callable[[str], dict[str, np.ndarray]]], ...] = (
    ("model.safetensors", read_safetensors),
    ("pytorch_model.bin", read_pth),
)


def read_json_object(path: str) -> dict[str, Any]:
    """A JSON object from a file of at most 16 MiB.

    Raises:
        ValueError: missing, too large, not JSON or not an object.
    """
    try:
        if os.path.getsize(path) > MAX_JSON_BYTES:
            raise ValueError(f"{path!r} is larger than {MAX_JSON_BYTES:,} bytes.")
        with open(path, "rb") as file:
            value = loads_json(file.read(MAX_JSON_BYTES + 1), repr(path))
    except (OSError, ValueError) as error:
        raise ValueError(f"Cannot read {path!r}: {error}") from error
    if not isinstance(value, dict):
        raise ValueError(f"{path!r} does not hold a JSON object.")
    return value


def is_transformers_config(config: dict[str, Any]) -> bool:
    """Whether a parsed ``config.json`` is a transformers model config (it has ``model_type``)."""
    return isinstance(config.get("model_type"), str)


def _sharded(folder: str, index_name: str, reader) -> dict[str, np.ndarray]:
    index_path = os.path.join(folder, index_name)
    weight_map = read_json_object(index_path).get("weight_map")
    if not isinstance(weight_map, dict) or not all(
        isinstance(name, str) for name in weight_map.values()
    ):
        raise ValueError(f"{index_path!r} has no weight_map of file names.")
    tensors: dict[str, np.ndarray] = {}
    for shard in sorted(set(weight_map.values())):
        # Only files of this folder: a name with a path is reduced to its base name.
        tensors.update(reader(os.path.join(folder, os.path.basename(shard))))
    absent = sorted(key for key in weight_map if key not in tensors)
    if absent:
        raise ValueError(f"{index_path!r} names tensors its shards lack: {', '.join(absent[:5])}")
    return tensors


def read_transformers_weights(folder: str | os.PathLike) -> tuple[str, dict[str, np.ndarray]]:
    """The weight tensors of a transformers model folder, and the file they came from.

    Args:
        folder: a folder written by ``save_pretrained``.

    Returns:
        (the weights file's name, e.g. "model.safetensors", {key: array}).

    Raises:
        ValueError: no weights file of :data:`WEIGHT_FILES` (or their
            ``.index.json``), or one that cannot be read.

    Example:
        >>> name, tensors = read_transformers_weights("fnet-base")  # doctest: +SKIP
        >>> name, tensors["fnet.pooler.dense.weight"].shape  # doctest: +SKIP
        ('model.safetensors', (768, 768))
    """
    folder = os.fspath(folder)
    for name, reader in WEIGHT_FILES:
        if os.path.isfile(os.path.join(folder, name)):
            return name, reader(os.path.join(folder, name))
        if os.path.isfile(os.path.join(folder, f"{name}.index.json")):
            return f"{name}.index.json", _sharded(folder, f"{name}.index.json", reader)
    raise ValueError(
        f"The transformers folder {folder!r} has no weights: none of "
        f"{', '.join(name for name, _ in WEIGHT_FILES)} (or their .index.json)."
    )
