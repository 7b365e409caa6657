"""`resolve_model`: the one way from what a user names to a model, for every command.

`train`, `evaluate`, `export`, `predict`, `bench` and `flops` all take a
model reference through :func:`resolve_model`, so they accept the same
references and load them the same way:

* a model name in either spelling: ``GFNetTi`` or ``gfnet_ti``, the small
  presets such as ``gfnet_tiny``, FNet's ``fnet_base``/``FNetBase``
  (see :func:`keras_fourier.models.catalog.model_names`), built with the
  given weights, input size and classes;
* a ``.keras`` file, loaded (without its optimizer);
* a run folder of `keras-fourier train`, its ``model.keras``;
* a weights file (``.weights.h5``, an official ``.pth``) with `family`, the
  name of the model it holds the weights of.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import keras

from keras_fourier.models.catalog import (
    ARCHITECTURE_OPTIONS,
    PUBLIC_NAMES,
    check_request,
    create_model,
    is_model_name,
    model_names,
)
from keras_fourier.models.names import modality
from keras_fourier.run_folder import resolve_model_file
from keras_fourier.weights.saved import load_keras_file

WEIGHTS_SUFFIXES = (".weights.h5", ".pth", ".pt")


def resolve_model(
    reference: str | os.PathLike | keras.Model,
    *,
    family: str | None = None,
    weights: str | None = None,
    image_size: int | tuple[int, int] | None = None,
    classes: int | None = None,
    sequence_length: int | None = None,
    names: Mapping[str, str] | None = None,
    **build_options: Any,
) -> keras.Model:
    """The model a reference names: built by name, loaded from a file or a run folder.

    Args:
        reference: a model name in either spelling ("GFNetTi", "gfnet_ti",
            "gfnet_tiny", "fnet_base", ...), a `.keras` file, a run folder of
            `train` (its ``model.keras``), a weights file (`.weights.h5`,
            `.pth`/`.pt`) with `family`, or a `keras.Model` (returned as is).
        family: with a weights file: the model name it holds the weights
            of. Default None.
        weights: weights of a named model: None (random init), "imagenet",
            or a file (as the builder's `weights`). Default None.
        image_size: input size of a named vision model, an int or (height,
            width). Default None: 224.
        classes: classes of a named model's head. Default None: 1000.
        sequence_length: input length of a named text model. Default None: 512.
        names: {argument: name} used in messages instead of the argument
            names, e.g. the command-line flags. Default None.
        **build_options: more arguments of
            :func:`~keras_fourier.models.catalog.create_model` for names
            (e.g. `drop_path_rate`, architecture overrides of a preset).

    Returns:
        The `keras.Model` (files and run folders are loaded without their
        optimizer).

    Raises:
        FileNotFoundError: a path that does not exist, or a run folder whose
            run has not finished.
        ValueError: an unknown name (listing the names), build options given
            with a file or run folder (which fix their own), a weights file
            without `family`, a folder that is not a run folder, or a file
            that does not load.

    Example:
        >>> resolve_model("GFNetTi", image_size=64, classes=10).name
        'gfnet_ti'
        >>> resolve_model("runs/default").name  # doctest: +SKIP
        'gfnet_tiny'
    """
    names = dict(names or {})
    options = {
        "weights": weights,
        "image_size": image_size,
        "classes": classes,
        "sequence_length": sequence_length,
        **build_options,
    }
    given = [names.get(key, key) for key, value in options.items() if value is not None]
    if isinstance(reference, keras.Model):
        if given:
            raise ValueError(f"{', '.join(given)} only apply to model names, not to a model.")
        return reference
    reference = os.fspath(reference)
    if is_model_name(reference) and not os.path.exists(reference):
        if modality(reference) == "field":  # the grid and channels default to the row's
            return create_model(
                reference,
                num_classes=classes,
                image_size=image_size,
                weights=weights,
                **build_options,
            )
        check_request(
            reference,
            image_size=224 if image_size is None else image_size,
            sequence_length=512 if sequence_length is None else sequence_length,
            names=names,
            **{key: build_options[key] for key in ARCHITECTURE_OPTIONS if key in build_options},
        )
        return create_model(
            reference,
            num_classes=1000 if classes is None else classes,
            image_size=224 if image_size is None else image_size,
            sequence_length=512 if sequence_length is None else sequence_length,
            weights=weights,
            **build_options,
        )
    if reference.endswith(WEIGHTS_SUFFIXES) and os.path.isfile(reference):
        if family is None:
            raise ValueError(
                f"The weights file {reference!r} needs {names.get('family', 'family')}, the "
                f"name of the model it holds the weights of (one of {model_names()})."
            )
        if weights is not None:
            raise ValueError(
                f"Give either a weights file or {names.get('weights', 'weights')}, not both."
            )
        return resolve_model(
            family,
            weights=reference,
            image_size=image_size,
            classes=classes,
            sequence_length=sequence_length,
            names=names,
            **build_options,
        )
    if not os.path.exists(reference) and not (
        os.sep in reference or reference.endswith((".keras", *WEIGHTS_SUFFIXES))
    ):
        raise ValueError(
            f"Unknown model {reference!r}: expected a model name, one of {model_names()} or "
            f"{sorted(PUBLIC_NAMES)}, a .keras file, a run folder, or a weights file with "
            f"{names.get('family', 'family')}. Received: model={reference!r}"
        )
    model_file = resolve_model_file(reference)
    if given:
        raise ValueError(
            f"{', '.join(given)} only apply to builder names, not .keras files or run folders."
        )
    if not model_file.endswith(".keras"):
        raise ValueError(
            f"Cannot load a model from {reference!r}: expected a .keras file, a run folder, "
            "or a weights file with its model name."
        )
    return load_keras_file(model_file, compile=False)
