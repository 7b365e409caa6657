"""mmsegmentation checkpoints (the official HorNet UPerNet ADE20K releases) into Keras models.

A checkpoint written by mmsegmentation is ``{"meta": ..., "state_dict":
{key: tensor}}`` with keys ``backbone.*`` (the backbone as its
classification checkpoint names it, plus ``norm0``-``norm3``),
``decode_head.*`` and ``auxiliary_head.*`` (ConvModules with BatchNorm
statistics). It is read without PyTorch and without running code
(:func:`keras_fourier.models.pth.read_checkpoint`), each Keras variable's
key is derived from its path (:func:`mmseg_key`), the tensors converted
(:func:`keras_fourier.models.checkpoints.convert_tensor`: convolutions
(out, in, kh, kw) to (kh, kw, in, out), HorNet's global-local filters resized
bilinearly with align_corners True to the model's map size, as the official
layer does at run time), and assigned all or nothing: a checkpoint that does
not match lists the missing keys, the unexpected keys and the wrong shapes.
BatchNorm's ``num_batches_tracked`` counters have no Keras counterpart and
are skipped, and so are ``auxiliary_head.*`` when the model has no
auxiliary head.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import keras
import numpy as np

from keras_fourier.models import checkpoints, download, pth
from keras_fourier.models import weights as model_weights
from keras_fourier.models.keymap import PARAMETERS
from keras_fourier.models.names import VARIANTS, canonical_name, variant
from keras_fourier.segmentation import ade20k

_HEAD_LAYERS = ("decode_head", "auxiliary_head", "neck")
_LIST = re.compile(r"(psp_modules|lateral_convs|fpn_convs|convs|scale_heads)_(\d+)(?:_(\d+))?")
_BN_PARAMETERS = {**PARAMETERS, "moving_mean": "running_mean", "moving_variance": "running_var"}
_STAGE_NORM = re.compile(r"norm(\d+)")
_MAX_LISTED = 10


def mmseg_key(path: str, backbone: str) -> str | None:
    """The mmsegmentation key of the Keras variable at `path` of a segmentation model.

    Args:
        path: a variable path, e.g. ``decode_head/psp_modules_0/conv/kernel``.
        backbone: the backbone's variant key, e.g. "hornet_t_gf".

    Returns:
        The checkpoint key (``decode_head.psp_modules.0.1.conv.weight``), or
        None for a variable without one.

    Example:
        >>> mmseg_key("decode_head/lateral_convs_2/bn/moving_var", "hornet_t_gf")
        'decode_head.lateral_convs.2.bn.running_var'
    """
    layer, *inner, name = path.split("/")
    if layer in _HEAD_LAYERS:
        parts = [layer]
        for part in inner:
            match = _LIST.fullmatch(part)
            if match is None:
                parts.append(part)
                continue
            group, index, second = match.groups()
            parts += [group, index]
            if second is not None:
                parts.append(second)
            if group == "psp_modules":  # Sequential(AdaptiveAvgPool2d, ConvModule)
                parts.append("1")
        return ".".join([*parts, _BN_PARAMETERS.get(name, name)])
    if _STAGE_NORM.fullmatch(layer):
        return f"backbone.{layer}.{PARAMETERS[name]}"
    if backbone not in VARIANTS:
        return None
    try:
        key = variant(backbone).checkpoint_key(path)
    except ValueError:
        return None
    return None if key is None else f"backbone.{key}"


def _transform(path: str) -> str:
    layer = path.split("/")[0]
    if layer in _HEAD_LAYERS:
        return "conv" if path.endswith("/kernel") else "copy"
    return checkpoints.transform_for(path)


def _listing(items: list[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    more = len(items) - _MAX_LISTED
    return f"{shown}, ... and {more} more" if more > 0 else shown


def convert_mmseg_state_dict(
    state_dict: Mapping[str, np.ndarray], model: keras.Model, backbone: str
) -> dict[str, np.ndarray]:
    """The value of every variable of `model` from an mmsegmentation state dict.

    Args:
        state_dict: checkpoint key -> NumPy array.
        model: a segmentation model built by keras_fourier.
        backbone: the variant key of its backbone.

    Returns:
        ``variable.path`` -> float32 array of the variable's shape, for
        every variable.

    Raises:
        ValueError: one line listing the variables without a key, the
            missing keys, the unexpected keys and the wrong shapes.
    """
    keys, unmapped = {}, []
    for variable in model.weights:
        key = mmseg_key(variable.path, backbone)
        if key is None:
            unmapped.append(variable.path)
        else:
            keys[key] = variable
    has_auxiliary = any(layer.name == "auxiliary_head" for layer in model.layers)
    missing = sorted(key for key in keys if key not in state_dict)
    unexpected = sorted(
        key
        for key in state_dict
        if key not in keys
        and not key.endswith(".num_batches_tracked")
        and (has_auxiliary or not key.startswith("auxiliary_head."))
    )
    values, wrong = {}, []
    for key, variable in keys.items():
        if key not in state_dict:
            continue
        try:
            values[variable.path] = checkpoints.convert_tensor(
                _transform(variable.path), state_dict[key], variable.shape
            )
        except ValueError as error:
            wrong.append(f"{key}: {error}")
    problems = [
        f"{label} ({len(items)}): {_listing(items)}"
        for label, items in (
            ("variables without a checkpoint key", unmapped),
            ("missing keys", missing),
            ("unexpected keys", unexpected),
            ("wrong shapes", wrong),
        )
        if items
    ]
    if problems:
        raise ValueError(
            f"The checkpoint does not match model {model.name!r} (backbone {backbone!r}); "
            + "; ".join(problems)
        )
    return values


def read_mmseg_checkpoint(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The state dict of an mmsegmentation checkpoint, read without PyTorch or code execution.

    Args:
        path: a `.pth` file: ``{"meta", "state_dict"}`` as mmsegmentation
            saves, or a bare state dict.

    Returns:
        Key -> float32 NumPy array (integer counters included, as float32).

    Raises:
        ValueError: the file cannot be read, refers to code, or holds
            something else than tensors under ``state_dict``.
    """
    path = os.fspath(path)
    try:
        checkpoint = pth.read_checkpoint(path)
    except pth.UnsafeCheckpointError as error:
        raise pth.UnsafeCheckpointError(f"{path!r}: {error}") from error
    except (OSError, ValueError) as error:
        raise ValueError(f"Could not read {path!r} as a PyTorch checkpoint: {error}") from error
    if isinstance(checkpoint, Mapping) and isinstance(checkpoint.get("state_dict"), Mapping):
        checkpoint = checkpoint["state_dict"]
    if not isinstance(checkpoint, Mapping):
        raise ValueError(f"{path!r} holds no state dict. Received: {type(checkpoint).__name__}")
    not_tensors = sorted(str(k) for k, v in checkpoint.items() if not isinstance(v, np.ndarray))
    if not_tensors:
        raise ValueError(
            f"{path!r} is not a state dict of tensors; entries that are not tensors: "
            f"{_listing(not_tensors)}"
        )
    return {str(key): value.astype(np.float32) for key, value in checkpoint.items()}


def check_weights_argument(weights, head: str, backbone, num_classes: int) -> None:
    """Refuses, before building, `weights` that cannot fit the model (one-line ValueError).

    Args:
        weights: the builder's `weights`.
        head: the head row.
        backbone: the builder's `backbone`.
        num_classes: the builder's `num_classes`.
    """
    if weights == "ade20k":
        key = canonical_name(backbone) if isinstance(backbone, str) else None
        if head != "upernet" or key not in ade20k.RELEASES:
            raise ValueError(
                "weights='ade20k' are the official UPerNet checkpoints of HorNet: use "
                f"UPerNet with a backbone of {sorted(ade20k.RELEASES)}. Received: "
                f"head={head!r}, backbone={backbone!r}"
            )
        if num_classes != ade20k.NUM_CLASSES:
            raise ValueError(
                f"weights='ade20k' need num_classes={ade20k.NUM_CLASSES}. "
                f"Received: num_classes={num_classes}"
            )
        return
    if not isinstance(weights, (str, os.PathLike)) or not os.path.isfile(weights):
        raise ValueError(
            "`weights` must be None, 'ade20k' or the path of an existing weights file. "
            f"Received: weights={weights!r}"
        )


def ade20k_checkpoint(backbone: str) -> str:
    """The path of the official ADE20K checkpoint of `backbone`, downloaded once.

    Args:
        backbone: a HorNet variant key with a release in
            :data:`keras_fourier.segmentation.ade20k.RELEASES`.

    Returns:
        The cached file (under ``$KERAS_HOME/keras_fourier``; from
        ``$KERAS_FOURIER_MIRROR`` when set), with a progress bar.
    """
    release = ade20k.RELEASES[canonical_name(backbone)]
    try:
        return download.download(release.url, release.file_name, release.sha256)
    except ValueError as error:
        raise ValueError(
            f"weights='ade20k' for {backbone!r} needs network access the first time. {error}"
        ) from error


def load_segmentation_weights(model: keras.Model, weights, backbone: str) -> None:
    """Loads `weights` into a segmentation model, all or nothing.

    Args:
        model: the freshly built model.
        weights: "ade20k", a `.weights.h5`/`.keras` file saved by
            keras_fourier, or an mmsegmentation `.pth` checkpoint.
        backbone: the backbone's name.

    Raises:
        ValueError: the file does not fit the model (which is unchanged).
    """
    if weights == "ade20k":
        path = ade20k_checkpoint(backbone)
    else:
        path = os.fspath(weights)
        if model_weights.load_saved_weights(model, path):
            return
        if not path.endswith((".pth", ".pt")):
            raise ValueError(
                "`weights` must be 'ade20k', a '.weights.h5' or '.keras' file, or an "
                f"mmsegmentation '.pth' checkpoint. Received: weights={weights!r}"
            )
    state_dict = read_mmseg_checkpoint(path)
    key = canonical_name(backbone) if backbone in VARIANTS or _is_name(backbone) else backbone

    def load() -> None:
        values = convert_mmseg_state_dict(state_dict, model, key)
        for variable in model.weights:
            variable.assign(values[variable.path])

    model_weights.assign_atomically(model, load, path)


def _is_name(backbone: str) -> bool:
    try:
        canonical_name(backbone)
    except ValueError:
        return False
    return True
