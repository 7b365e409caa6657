"""FourCastNet's official checkpoints: the key map and the loader, beside the family.

The architecture is in :mod:`keras_fourier.models.fourcastnet`; the files are
read by the package's safe reader (:func:`keras_fourier.weights.pth.read_pth`)
and converted by the one key-map application of :mod:`keras_fourier.weights.convert`.

A checkpoint holds tensors only: AFNO's ``hard_thresholding_fraction``,
``sparsity_threshold`` and mode slicing change what the model computes but no
tensor's shape, so a checkpoint trained with other values loads into a model
built with the defaults and computes something else (a model trained with
``hard_thresholding_fraction=0.5`` differs by about its own scale). Build the
model with the values it was trained with (``config/AFNO.yaml`` of the
training run; the releases use the defaults). The package's own ``.keras``
files record them, and :func:`check_saved_settings` refuses one whose values
differ from the model's.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection

import keras

from keras_fourier.layers import AFNO2D
from keras_fourier.models.fourcastnet_family import VARIANTS, checkpoint_key
from keras_fourier.validation import check_choice
from keras_fourier.weights.convert import KeyMap, load_tensors, map_variables
from keras_fourier.weights.pth import read_pth
from keras_fourier.weights.saved import layer_configs, read_keras_config

# AFNO2D's arguments that change what it computes but not its weights' shapes.
UNSHAPED_SETTINGS = ("hard_thresholding_fraction", "sparsity_threshold", "mode_slicing")


def _transform(path: str) -> str:
    """The layout change from the official tensor to the variable at `path`."""
    *owners, name = path.split("/")
    if name != "kernel":
        return "copy"  # AFNO weights, biases, LayerNorm, the position embedding (laid out)
    return "conv" if owners[0] in ("stem_conv", "precip_conv") else "linear"


def fourcastnet_key_map(
    variant: str, model: keras.Model, checkpoint_keys: Collection[str] = ()
) -> tuple[KeyMap, set[str]]:
    """The official key of every variable of `model`, with its layout change.

    The key-map function of :func:`keras_fourier.weights.convert.convert`
    (with `variant` bound): Linear and convolution weights are transposed,
    everything else copied; the keys of the final ``norm``, which the
    official forward never applies, are ignored.

    Args:
        variant: the variant the model was built from.
        model: a model built by :func:`~keras_fourier.models.fourcastnet.FourCastNet` from it.
        checkpoint_keys: unused (one layout per variant).

    Returns:
        (official key -> (variable, transform), ignored official keys).

    Raises:
        ValueError: a variable without an official counterpart (a model not
            built by :func:`~keras_fourier.models.fourcastnet.FourCastNet`).
    """
    del checkpoint_keys
    keys = map_variables(
        model,
        lambda path: checkpoint_key(variant, path),
        _transform,
        f"Model {model.name!r} has variables without a counterpart in the official "
        f"{variant!r} checkpoints; was it built by FourCastNet? Variables: ",
    )
    prefix = "backbone." if VARIANTS[variant].precip else ""
    return keys, {f"{prefix}norm.weight", f"{prefix}norm.bias"}


def load_fourcastnet_checkpoint(
    model: keras.Model, path: str | os.PathLike, variant: str = "fourcastnet"
) -> None:
    """Loads an official FourCastNet checkpoint into `model`, all or nothing.

    The file (``backbone.ckpt``, ``precip.ckpt``, or a ``.tar`` saved by
    ``train.py``: ``{"iters", "epoch", "model_state": {"module.<key>": tensor},
    "optimizer_state_dict"}``) is read without PyTorch by
    :func:`keras_fourier.weights.pth.read_pth`, which runs no code from it,
    takes ``model_state`` and strips ``module.``. The (1, h * w, E) position
    embedding is laid out row-major on the model's token grid, so the
    checkpoint must be for the model's grid (the official model runs at its
    one grid only); Linear and convolution weights are transposed.

    The checkpoint does not record AFNO's ``hard_thresholding_fraction``,
    ``sparsity_threshold`` or mode slicing (they shape no tensor): `model`
    must be built with those it was trained with, which nothing here can
    check (see the module docstring).

    Args:
        model: a model built by
            :func:`~keras_fourier.models.fourcastnet.FourCastNet` from `variant`.
        path: the checkpoint.
        variant: the variant the model was built from. Default "fourcastnet".

    Raises:
        ValueError: the file cannot be read, or does not match the model (the
            message lists every missing key, unexpected key and wrong shape);
            the model is then unchanged.
    """
    check_choice("variant", variant, tuple(VARIANTS))
    path = os.fspath(path)
    tensors = read_pth(path)
    key = f"{'backbone.' if VARIANTS[variant].precip else ''}pos_embed"
    pos_embed = tensors.get(key)
    rows, cols = model.get_layer("pos_embed").pos_embed.shape[1:3]
    if pos_embed is not None and pos_embed.ndim == 3 and pos_embed.shape[:2] == (1, rows * cols):
        tensors[key] = pos_embed.reshape(1, rows, cols, pos_embed.shape[2])
    load_tensors(
        model,
        tensors,
        functools.partial(fourcastnet_key_map, variant),
        source=path,
        description=f"FourCastNet variant {variant!r} as built (model {model.name!r})",
    )


def _afno_layers(layer: keras.Layer) -> list[AFNO2D]:
    """The AFNO2D layers of `layer`, nested models included."""
    if isinstance(layer, AFNO2D):
        return [layer]
    return [found for inner in getattr(layer, "layers", ()) for found in _afno_layers(inner)]


def check_saved_settings(model: keras.Model, path: str | os.PathLike) -> None:
    """Refuses a `.keras` file whose AFNO settings differ from `model`'s, before loading it.

    The settings of :data:`UNSHAPED_SETTINGS` are recorded in the file's
    config (each AFNO2D layer's arguments) and compared by layer name.

    Args:
        model: the model the file is to load into.
        path: a `.keras` file saved by keras_fourier (a run's ``model.keras``).

    Raises:
        ValueError: a setting differs, naming it with the file's and the
            model's values, or the file cannot be read.

    Example:
        >>> check_saved_settings(FourCastNet(...), "runs/forecast/model.keras")  # doctest: +SKIP
    """
    path = os.fspath(path)
    saved = {
        layer["config"].get("name"): layer["config"]
        for layer in layer_configs(read_keras_config(path))
        if layer.get("class_name") == "AFNO2D"
    }
    for layer in _afno_layers(model):
        config = saved.get(layer.name, {})
        for setting in UNSHAPED_SETTINGS:
            if setting in config and config[setting] != getattr(layer, setting):
                raise ValueError(
                    f"The .keras file {path!r} was saved with {setting}={config[setting]!r} in "
                    f"layer {layer.name!r}, model {model.name!r} has "
                    f"{getattr(layer, setting)!r}; its weights would compute something else. "
                    f"Build the model with the file's value. Received: {setting}="
                    f"{config[setting]!r}"
                )
