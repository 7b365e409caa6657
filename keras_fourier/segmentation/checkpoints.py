"""mmsegmentation checkpoints (the official HorNet UPerNet ADE20K releases) into Keras models.

A checkpoint written by mmsegmentation is ``{"meta": ..., "state_dict":
{key: tensor}}`` with keys ``backbone.*`` (the backbone as its
classification checkpoint names it, plus ``norm0``-``norm3``),
``decode_head.*`` and ``auxiliary_head.*`` (ConvModules with BatchNorm
statistics). :func:`mmseg_key_map` is its key map for the package's weights
pipeline (:mod:`keras_fourier.weights`): each Keras variable's key derived
from its path (:func:`mmseg_key`) with its layout change (convolutions
(out, in, kh, kw) to (kh, kw, in, out), depthwise ones (C, 1, kh, kw) to
(kh, kw, C, 1); HorNet's global-local filters resized bilinearly with
align_corners True to the model's map size, as the official layer does at
run time). The same map reads the official ``GNUPerHead`` (HorFPN) heads of
``UPerNet(head_block=...)``. The pipeline reads the file without
PyTorch and without running code, converts all or nothing (a checkpoint
that does not match lists the missing keys, the unexpected keys and the
wrong shapes) and, for ``weights="ade20k"``, downloads once and caches the
conversion. BatchNorm's ``num_batches_tracked`` counters have no Keras
counterpart and are skipped, and so are ``auxiliary_head.*`` when the model
has no auxiliary head.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Collection

import keras

from keras_fourier.models.keymap import PARAMETERS
from keras_fourier.models.names import VARIANTS, canonical_name, variant
from keras_fourier.models.vision_weights import transform_for
from keras_fourier.segmentation import ade20k
from keras_fourier.weights.convert import KeyMap, KeyMapFunction, map_variables
from keras_fourier.weights.pipeline import load_release_or_file

_HEAD_LAYERS = ("decode_head", "auxiliary_head", "neck")
_LIST = re.compile(r"(psp_modules|lateral_convs|fpn_convs|convs|scale_heads|pws)_(\d+)(?:_(\d+))?")
_BN_PARAMETERS = {**PARAMETERS, "moving_mean": "running_mean", "moving_variance": "running_var"}
_STAGE_NORM = re.compile(r"norm(\d+)")


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


def _key_map(
    backbone: str,
    key_of: Callable[[str, str], str | None],
    transform_of: Callable[[str], str],
    library: str,
    model: keras.Model,
    checkpoint_keys: Collection[str],
) -> tuple[KeyMap, set[str]]:
    keys = map_variables(
        model,
        lambda path: key_of(path, backbone),
        transform_of,
        f"Model {model.name!r} has variables without a counterpart in {library} "
        f"checkpoints of {backbone!r}: ",
    )
    has_auxiliary = any(layer.name == "auxiliary_head" for layer in model.layers)
    ignored = {
        key
        for key in checkpoint_keys
        if key.endswith(".num_batches_tracked")
        or (not has_auxiliary and key.startswith("auxiliary_head."))
    }
    return keys, ignored


def openmmlab_key_map(
    backbone: str,
    key_of: Callable[[str, str], str | None] = mmseg_key,
    transform_of: Callable[[str], str] = transform_for,
    library: str = "mmsegmentation",
) -> KeyMapFunction:
    """The key map of OpenMMLab checkpoints (mmsegmentation, mmdetection) of models on `backbone`.

    Args:
        backbone: the backbone's variant key, e.g. "hornet_t_gf" (its
            classification key map names the ``backbone.*`` keys).
        key_of: ``(variable path, backbone) -> checkpoint key`` or None.
            Default :func:`mmseg_key`.
        transform_of: a variable path -> its layout change. Default the
            vision models' (head convolutions "conv", the gnConv head's
            dwconv/dw "depthwise", as the backbone's).
        library: names the checkpoints in the message for unmapped
            variables. Default "mmsegmentation".

    Returns:
        ``key_map(model, checkpoint_keys) -> ({key: (variable, transform)},
        ignored keys)``, as :func:`keras_fourier.weights.convert.convert`
        takes; it raises ValueError for variables without a key. BatchNorm's
        ``num_batches_tracked`` are ignored, and ``auxiliary_head.*`` when
        the model has no auxiliary head.

    Example:
        >>> keys, _ = openmmlab_key_map("hornet_t_gf")(keras_fourier.segmentation.UPerNet(), ())
        >>> keys["decode_head.conv_seg.weight"][1]
        'conv'
    """
    return functools.partial(_key_map, backbone, key_of, transform_of, library)


def mmseg_key_map(backbone: str) -> KeyMapFunction:
    """The key map of mmsegmentation checkpoints of models on `backbone`.

    Args:
        backbone: the backbone's variant key, e.g. "hornet_t_gf".

    Returns:
        :func:`openmmlab_key_map` with :func:`mmseg_key`.
    """
    return openmmlab_key_map(backbone)


def check_weights_path(weights, release_name: str) -> None:
    """Refuses `weights` that are neither `release_name` nor an existing file (one-line ValueError).

    Args:
        weights: the builder's `weights` (not None).
        release_name: the name of the family's releases, e.g. "ade20k".
    """
    if weights == release_name:
        return
    if not isinstance(weights, (str, os.PathLike)) or not os.path.isfile(weights):
        raise ValueError(
            f"`weights` must be None, {release_name!r} or the path of an existing weights "
            f"file. Received: weights={weights!r}"
        )


def check_weights_argument(weights, head: str, backbone, num_classes: int) -> None:
    """Refuses, before building, `weights` that cannot fit the model (one-line ValueError).

    Args:
        weights: the builder's `weights`.
        head: the head row.
        backbone: the builder's `backbone`.
        num_classes: the builder's `num_classes`.
    """
    if weights == "ade20k":
        key = variant_key(backbone)
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
    check_weights_path(weights, "ade20k")


def variant_key(backbone) -> str | None:
    """The canonical variant key of a backbone name ("hornet_tiny_gf" -> "hornet_t_gf"), or None."""
    if not isinstance(backbone, str):
        return None
    try:
        return canonical_name(backbone)
    except ValueError:
        return None


def load_segmentation_weights(model: keras.Model, weights, backbone: str) -> None:
    """Loads `weights` into a segmentation model, all or nothing.

    Args:
        model: the freshly built model.
        weights: "ade20k" (downloaded once into the Keras cache, or from
            ``$KERAS_FOURIER_MIRROR``, converted once), a `.weights.h5` or
            `.keras` file saved by keras_fourier, or an mmsegmentation `.pth`.
        backbone: the backbone's name.

    Raises:
        ValueError: the file does not fit the model (which is unchanged).
    """
    key = variant_key(backbone) or backbone
    key_map = mmseg_key_map(key)
    description = f"model {model.name!r} (backbone {key!r})"
    load_release_or_file(
        model,
        weights,
        key_map,
        release_name="ade20k",
        release=lambda: ade20k.RELEASES[key],
        label=f"weights='ade20k' for {key!r}",
        description=description,
        refusal="`weights` must be 'ade20k', a '.weights.h5' or '.keras' file, or an "
        "mmsegmentation '.pth' checkpoint.",
    )
