"""Loading weights into keras_fourier models, all-or-nothing.

`weights` is a `.weights.h5` or `.keras` file saved by keras_fourier. A file
that does not match the architecture raises ValueError and leaves the model's
weights exactly as they were.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import keras
import numpy as np


def assign_atomically(model: keras.Model, load: Callable[[], None], source: str) -> None:
    """Runs `load()`; if it fails, restores every weight of `model` and raises ValueError."""
    snapshot = [variable.numpy() for variable in model.weights]
    try:
        load()
    except Exception as error:
        for variable, value in zip(model.weights, snapshot, strict=True):
            variable.assign(value)
        raise ValueError(
            f"The weights in {source!r} do not match the architecture of model "
            f"{model.name!r}; the model was left unchanged. Cause: {error}"
        ) from error


def _copy_from_keras_file(model: keras.Model, path: str) -> None:
    source = keras.saving.load_model(path, compile=False)
    theirs = {variable.path: variable for variable in source.weights}
    ours = {variable.path: variable for variable in model.weights}
    if theirs.keys() != ours.keys():
        missing = sorted(ours.keys() - theirs.keys())[:5]
        extra = sorted(theirs.keys() - ours.keys())[:5]
        raise ValueError(f"variables differ (missing {missing}, unexpected {extra})")
    for key, variable in ours.items():
        value = np.asarray(theirs[key].numpy())
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(f"{key} has shape {value.shape}, expected {tuple(variable.shape)}")
    for key, variable in ours.items():
        variable.assign(theirs[key].numpy())


def load_variant_weights(variant: str, model: keras.Model, weights: str) -> None:
    """Loads `weights` into `model` (built from `variant`), all or nothing.

    Args:
        variant: the variant-table key the model was built from.
        model: the freshly built model.
        weights: path to a `.weights.h5` or `.keras` file saved by keras_fourier.

    Raises:
        ValueError: unsupported file, or a file that does not match the model
            (the model is then unchanged).
    """
    path = os.fspath(weights)
    if path.endswith(".weights.h5"):
        assign_atomically(model, lambda: model.load_weights(path), path)
    elif path.endswith(".keras"):
        assign_atomically(model, lambda: _copy_from_keras_file(model, path), path)
    else:
        raise ValueError(
            f"Cannot load weights for {variant!r}: expected a '.weights.h5' or '.keras' file. "
            f"Received: weights={weights!r}"
        )
