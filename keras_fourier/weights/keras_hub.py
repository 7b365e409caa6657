"""Reading and writing keras-hub preset folders with h5py, without keras-hub.

A preset folder (what keras-hub's ``save_to_preset`` writes) holds
``config.json`` (``{"class_name", "config", ...}``: the backbone's class and
constructor arguments) and the weights file it names (``model.weights.h5`` by
default); a task preset adds ``task.json`` and ``task.weights.h5`` (the
task's head). :func:`read_keras_hub_config` reads the first,
:func:`read_keras_hub_preset` both, :func:`read_keras_hub_task` the task's
files; a family maps the tensors onto its model with its own key map
(``fnet_weights.keras_hub_key_map``), and :func:`write_keras_hub_preset`
writes a preset folder whole.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any

import h5py
import numpy as np

from keras_fourier.limits import MAX_JSON_BYTES, loads_json, read_file_bounded
from keras_fourier.weights.hdf5 import check_headers, dataset_headers, read_datasets

PRESET_CONFIG = "config.json"
PRESET_WEIGHTS = "model.weights.h5"
TASK_CONFIG = "task.json"
TASK_WEIGHTS = "task.weights.h5"


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
    return description["config"], _h5_tensors(weights_path, expected)


def _h5_tensors(
    weights_path: str, expected: Mapping[str, tuple[int, ...]] | None = None
) -> dict[str, np.ndarray]:
    """{HDF5 dataset path: array} of a preset's weights file, its headers checked first."""
    try:
        headers = dataset_headers(weights_path, skip=())
        check_headers(headers, weights_path, expected)
        tensors = read_datasets(weights_path, headers)
    except OSError as error:
        raise ValueError(f"Cannot read the preset's weights {weights_path!r}: {error}") from error
    return tensors


def read_keras_hub_task(
    folder: str | os.PathLike,
) -> tuple[dict[str, Any] | None, dict[str, np.ndarray]]:
    """A task preset's ``task.json`` and ``task.weights.h5`` (its head), if the folder has them.

    ``save_to_preset`` of a keras-hub task (``FNetTextClassifier``,
    ``FNetMaskedLM``, ...) writes the backbone's files and these two: the
    task's description (``{"class_name", "config"}``) and the weights of the
    layers the task adds to the backbone.

    Args:
        folder: the preset folder.

    Returns:
        (the task description, or None for a backbone preset; {HDF5 dataset
        path: array}, empty without a task).

    Raises:
        ValueError: a ``task.json`` that is not a keras-hub description, or
            an unreadable ``task.weights.h5``.

    Example:
        >>> task, tensors = read_keras_hub_task("f_net_sst2")  # doctest: +SKIP
        >>> task["class_name"], tensors["layers/dense/vars/0"].shape  # doctest: +SKIP
        ('FNetTextClassifier', (768, 2))
    """
    folder = os.fspath(folder)
    task_path = os.path.join(folder, TASK_CONFIG)
    if not os.path.exists(task_path):
        return None, {}
    try:
        task = loads_json(read_file_bounded(task_path, MAX_JSON_BYTES, "The task"), task_path)
    except (OSError, ValueError) as error:
        raise ValueError(f"Cannot read the keras-hub task {task_path!r}: {error}") from error
    if not isinstance(task, dict) or not isinstance(task.get("config"), dict):
        raise ValueError(f"{task_path!r} is not a keras-hub task description (no 'config').")
    weights_path = os.path.join(folder, TASK_WEIGHTS)
    return task, _h5_tensors(weights_path) if os.path.exists(weights_path) else {}


def write_keras_hub_preset(
    folder: str | os.PathLike,
    json_files: Mapping[str, Any],
    weight_files: Mapping[str, Mapping[str, np.ndarray]],
    other_files: Mapping[str, bytes] | None = None,
) -> None:
    """Writes a preset folder whole or not at all: into a temporary folder, then renamed.

    Args:
        folder: the preset folder to create; it must not exist or be empty.
        json_files: file name -> JSON value (``config.json``, ``metadata.json``, ...).
        weight_files: file name -> {HDF5 dataset path: array}
            (``model.weights.h5``, ...), the paths as Keras's
            ``.weights.h5`` stores a model's variables.
        other_files: relative path -> content, e.g.
            ``{"assets/tokenizer/vocabulary.spm": ...}``. Default None.

    Raises:
        ValueError: `folder` is a file or a folder with files in it; nothing
            is written.

    Example:
        >>> write_keras_hub_preset("out", {"config.json": {}}, {})  # doctest: +SKIP
    """
    folder = os.path.abspath(os.fspath(folder))
    if os.path.lexists(folder) and (not os.path.isdir(folder) or os.listdir(folder)):
        raise ValueError(
            "`folder` must be a new or empty folder (a preset is written whole). "
            f"Received: folder={folder!r}"
        )
    parent = os.path.dirname(folder)
    os.makedirs(parent, exist_ok=True)
    temporary = tempfile.mkdtemp(prefix=f".{os.path.basename(folder)}.tmp-", dir=parent)
    try:
        for name, value in json_files.items():
            with open(os.path.join(temporary, name), "w", encoding="utf-8") as file:
                json.dump(value, file, indent=4)
                file.flush()
                os.fsync(file.fileno())
        for name, tensors in weight_files.items():
            with h5py.File(os.path.join(temporary, name), "w") as handle:
                for path, array in tensors.items():
                    handle.create_dataset(path, data=array)
        for name, content in (other_files or {}).items():
            path = os.path.join(temporary, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as file:
                file.write(content)
                file.flush()
                os.fsync(file.fileno())
        os.chmod(temporary, 0o777 & ~_umask())
        os.replace(temporary, folder)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask
