"""Reading keras-hub preset folders with h5py, without keras-hub.

A preset folder (what keras-hub's ``save_to_preset`` writes) holds
``config.json`` (``{"class_name", "config", ...}``: the backbone's class and
constructor arguments) and the weights file it names (``model.weights.h5`` by
default). :func:`read_keras_hub_config` reads the first,
:func:`read_keras_hub_preset` both; a family maps the tensors onto its
model with its own key map (``fnet_weights.keras_hub_key_map``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from keras_fourier.limits import MAX_JSON_BYTES, loads_json, read_file_bounded
from keras_fourier.weights.hdf5 import check_headers, dataset_headers, read_datasets

PRESET_CONFIG = "config.json"
PRESET_WEIGHTS = "model.weights.h5"


def read_keras_hub_config(folder: str | os.PathLike) -> dict[str, Any]:
    """A keras-hub preset folder's ``config.json``: ``{"class_name", "config", ...}``.

    Args:
        folder: the preset folder.

    Returns:
        The description, whose ``"config"`` is the backbone's constructor
        arguments (a dict).

    Raises:
        ValueError: no ``config.json``, not valid JSON, or no ``config`` object.

    Example:
        >>> read_keras_hub_config("f_net_base_en")["config"]["hidden_dim"]  # doctest: +SKIP
        768
    """
    config_path = os.path.join(os.fspath(folder), PRESET_CONFIG)
    try:
        data = read_file_bounded(config_path, MAX_JSON_BYTES, "The preset's config")
        description = loads_json(data, repr(config_path))
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{os.fspath(folder)!r} is not a keras-hub preset folder: {error}"
        ) from error
    if not isinstance(description, dict) or not isinstance(description.get("config"), dict):
        raise ValueError(f"{config_path!r} is not a keras-hub config (no 'config' object).")
    return description


def read_keras_hub_preset(
    folder: str | os.PathLike, expected: Mapping[str, tuple[int, ...]] | None = None
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A keras-hub preset folder's backbone config and weight tensors.

    Args:
        folder: a folder with keras-hub's ``config.json`` (``{"class_name",
            "config", ...}``) and the weights file it names (``"weights"``,
            default ``model.weights.h5``).
        expected: {dataset path: shape} the model needs. Default None. The
            datasets' shapes and storage are read from the HDF5 headers and
            checked (:func:`~keras_fourier.weights.hdf5.check_headers`: the
            parameter ceiling, data declared but not stored, shapes other
            than `expected`) before any data is read.

    Returns:
        (the backbone's ``config`` dict, {HDF5 dataset path: array}) with
        paths as Keras's ``.weights.h5`` stores them, e.g.
        ``layers/token_embedding/vars/0``.

    Raises:
        ValueError: no ``config.json``, not valid JSON (or too large or
            deep), no readable weights file, or headers refused.

    Example:
        >>> config, tensors = read_keras_hub_preset("f_net_base_en")  # doctest: +SKIP
        >>> config["hidden_dim"]  # doctest: +SKIP
        768
    """
    folder = os.fspath(folder)
    description = read_keras_hub_config(folder)
    weights_name = description.get("weights", PRESET_WEIGHTS)
    weights_path = os.path.join(folder, os.path.basename(str(weights_name)))
    try:
        headers = dataset_headers(weights_path, skip=())
        check_headers(headers, weights_path, expected)
        tensors = read_datasets(weights_path, headers)
    except OSError as error:
        raise ValueError(f"Cannot read the preset's weights {weights_path!r}: {error}") from error
    return description["config"], tensors
