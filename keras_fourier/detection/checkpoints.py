"""mmdetection checkpoints (the official HorNet Cascade Mask R-CNN COCO releases) into Keras models.

A checkpoint written by mmdetection 2.x is ``{"meta": ..., "state_dict":
{key: tensor}}`` (with ``"optimizer"`` for a training checkpoint) with keys

* ``backbone.*``: the backbone as its classification checkpoint names it,
  plus ``norm0``-``norm3`` (the segmentation backbone's keys);
* ``neck.lateral_convs.{i}.conv.*``, ``neck.fpn_convs.{i}.conv.*``: the FPN;
* ``rpn_head.rpn_conv|rpn_cls|rpn_reg.*``: the RPN;
* ``roi_head.bbox_head.{s}.shared_convs.{i}.conv|bn.*`` (BatchNorm
  statistics included), ``shared_fcs.{i}.*``, ``fc_cls.*`` (background
  last), ``fc_reg.*`` (class-specific deltas): each cascade stage's box head;
* ``roi_head.mask_head.{s}.convs.{i}.conv.*``, ``upsample.*`` (a
  ConvTranspose2d), ``conv_logits.*``: each stage's mask head.

:func:`mmdet_key_map` is its key map for the package's weights pipeline
(:mod:`keras_fourier.weights`): each Keras variable's key derived from its
path (:func:`mmdet_key`, the backbone and the FPN through the
mmsegmentation map :func:`keras_fourier.segmentation.checkpoints.mmseg_key`)
with its layout change: convolutions (out, in, kh, kw) to (kh, kw, in, out),
the transposed convolution (in, out, kh, kw) to (kh, kw, out, in) (the same
permutation), Linear (out, in) to Dense (in, out), and the first fc of a box
head, which flattens a (C, 7, 7) RoI map in mmdetection and a (7, 7, C) one
here, with its rows permuted ("roi_linear"). The pipeline reads the file
without PyTorch and without running code, reads only the tensors the model
takes (an optimizer's state is never read), converts all or nothing (a
checkpoint that does not match lists the missing keys, the unexpected keys
and the wrong shapes; the model is then unchanged) and, for
``weights="coco"``, downloads once and caches the conversion. BatchNorm's
``num_batches_tracked`` counters have no Keras counterpart and are skipped.

Fine-tuning on other classes: when the checkpoint's class count (80 for
"coco"; a `.pth`'s from its first ``fc_cls``) differs from the model's, the
class-dependent tensors (:data:`CLASS_LAYERS`: each stage's ``fc_cls`` and
``fc_reg``, each mask head's ``conv_logits``) are skipped and keep their
fresh initialisation, as mmdetection's ``load_from`` leaves them; every
other tensor still loads all or nothing.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Collection

import keras

from keras_fourier.detection import coco
from keras_fourier.models.keymap import PARAMETERS
from keras_fourier.models.vision import BUILT_SIZE
from keras_fourier.models.vision_weights import transform_for
from keras_fourier.segmentation.checkpoints import (
    check_weights_path,
    mmseg_key,
    openmmlab_key_map,
    variant_key,
)
from keras_fourier.weights.convert import KeyMap, KeyMapFunction
from keras_fourier.weights.pipeline import load_release_or_file
from keras_fourier.weights.pth import read_pth

_BN_PARAMETERS = {**PARAMETERS, "moving_mean": "running_mean", "moving_variance": "running_var"}
_STAGE_HEAD = re.compile(r"(bbox_head|mask_head)_(\d+)")
# Box-head shared convs (conv + bn) and fcs, mask-head convs: Keras "shared_convs_2_bn" is
# mmdetection's "shared_convs.2.bn"; a mask conv "convs_1" is the ConvModule "convs.1.conv".
_HEAD_PART = re.compile(r"(shared_convs|shared_fcs|convs)_(\d+)(?:_(conv|bn))?")
_LINEAR = frozenset({"shared_fcs", "fc_cls", "fc_reg"})
# The RoI heads' layers whose outputs count classes: the box heads' classifier (C + 1
# logits) and class-specific deltas (4C), the mask heads' logits (C channels).
CLASS_LAYERS = ("fc_cls", "fc_reg", "conv_logits")
# The first box head's classifier bias of a cascade's and of Mask R-CNN's checkpoints.
_CLASSIFIER_BIASES = ("roi_head.bbox_head.0.fc_cls.bias", "roi_head.bbox_head.fc_cls.bias")


def mmdet_key(path: str, backbone: str, cascade: bool = True) -> str | None:
    """The mmdetection key of the Keras variable at `path` of a two-stage detector.

    Args:
        path: a variable path, e.g. ``roi_head/bbox_head_1/shared_convs_0_bn/moving_mean``.
        backbone: the backbone's variant key, e.g. "hornet_t_gf".
        cascade: whether the heads are a ``CascadeRoIHead``'s, indexed by
            stage (``bbox_head.1``); False: a ``StandardRoIHead``'s (Mask
            R-CNN: ``bbox_head``, ``mask_head``). Default True.

    Returns:
        The checkpoint key (``roi_head.bbox_head.1.shared_convs.0.bn.running_mean``),
        or None for a variable without one.

    Example:
        >>> mmdet_key("roi_head/mask_head_2/upsample/kernel", "hornet_t_gf")
        'roi_head.mask_head.2.upsample.weight'
        >>> mmdet_key("roi_head/bbox_head_0/fc_cls/bias", "hornet_t_gf", cascade=False)
        'roi_head.bbox_head.fc_cls.bias'
    """
    layer, *inner, name = path.split("/")
    if layer == "rpn_head":
        return ".".join([layer, *inner, PARAMETERS.get(name, name)])
    if layer != "roi_head":
        return mmseg_key(path, backbone)
    parts = [layer]
    for part in inner:
        stage = _STAGE_HEAD.fullmatch(part)
        listed = _HEAD_PART.fullmatch(part)
        if stage is not None:
            parts += stage.groups() if cascade else stage.groups()[:1]
        elif listed is not None:
            group, index, module = listed.groups()
            parts += [group, index]
            if module is not None:
                parts.append(module)
            elif group == "convs":
                parts.append("conv")
        else:
            parts.append(part)
    return ".".join([*parts, _BN_PARAMETERS.get(name, name)])


def _transform(path: str) -> str:
    """The layout change of the variable at `path` (see the module docstring)."""
    *owners, name = path.split("/")
    if owners[0] != "roi_head" or name != "kernel":
        return transform_for(path)
    owner = owners[-1]
    if owner == "shared_fcs_0":
        return "roi_linear"
    return "linear" if _HEAD_PART.sub(r"\1", owner) in _LINEAR else "conv"


def class_variables(model: keras.Model) -> list[keras.Variable]:
    """The variables of a two-stage detector's class-dependent layers (:data:`CLASS_LAYERS`).

    Example:
        >>> [v.path for v in class_variables(detection.MaskRCNN(num_classes=3))][:2]
        ['roi_head/bbox_head_0/fc_cls/kernel', 'roi_head/bbox_head_0/fc_cls/bias']
    """
    return [
        variable
        for variable in model.weights
        if variable.path.startswith("roi_head/") and variable.path.split("/")[-2] in CLASS_LAYERS
    ]


def _fine_tuning_key_map(
    key_map: KeyMapFunction,
    checkpoint_classes: int | None,
    model: keras.Model,
    checkpoint_keys: Collection[str],
) -> tuple[KeyMap, set[str]]:
    """`key_map` without the class-dependent keys when the class counts differ (ignored)."""
    keys, ignored = key_map(model, checkpoint_keys)
    ignored = set(ignored)
    if checkpoint_classes is None or checkpoint_classes == model.get_layer("roi_head").num_classes:
        return keys, ignored
    fresh = {id(variable) for variable in class_variables(model)}
    skipped = {key for key, (variable, _) in keys.items() if id(variable) in fresh}
    return {key: keys[key] for key in keys if key not in skipped}, ignored | skipped


def mmdet_key_map(
    backbone: str, cascade: bool = True, checkpoint_classes: int | None = None
) -> KeyMapFunction:
    """The key map of mmdetection checkpoints of two-stage detectors on `backbone`.

    :func:`~keras_fourier.segmentation.checkpoints.openmmlab_key_map` with
    :func:`mmdet_key` (`cascade`: stage-indexed heads, default True; False
    for Mask R-CNN) and the RoI heads' layout changes.

    Args:
        backbone: the backbone's variant key, e.g. "hornet_t_gf".
        cascade: whether the heads are indexed by stage. Default True.
        checkpoint_classes: the checkpoint's class count; when it differs
            from the model's, the class-dependent keys (:data:`CLASS_LAYERS`)
            are ignored and their variables keep their values. Default None:
            every key is loaded.

    Returns:
        The key map (:func:`keras_fourier.weights.convert.convert`).

    Example:
        >>> keys, _ = mmdet_key_map("hornet_t_gf")(detection.CascadeMaskRCNN(), ())
        >>> keys["roi_head.bbox_head.0.shared_fcs.0.weight"][1]
        'roi_linear'
    """
    key_of = functools.partial(mmdet_key, cascade=cascade)
    key_map = openmmlab_key_map(backbone, key_of, _transform, "mmdetection")
    return functools.partial(_fine_tuning_key_map, key_map, checkpoint_classes)


def checkpoint_classes(weights) -> int | None:
    """The class count of a detector's `weights`: 80 for "coco", a `.pth`'s from its classifier.

    Args:
        weights: "coco" or a path.

    Returns:
        The count (the first box head's ``fc_cls`` outputs less the
        background), or None for other files and a `.pth` without a box head.

    Raises:
        ValueError: a `.pth` that cannot be read.
    """
    if weights == "coco":
        return coco.NUM_CLASSES
    if not os.fspath(weights).endswith((".pth", ".pt")):
        return None
    tensors = read_pth(weights)  # the archive's index only: no storage is read here
    for key in _CLASSIFIER_BIASES:
        bias = tensors.get(key)
        if bias is not None and len(bias.shape) == 1:
            return int(bias.shape[0]) - 1
    return None


def built_size(backbone) -> int:
    """The image size a detector's named backbone builds its global filters for.

    Its COCO release's :attr:`~keras_fourier.detection.coco.DetectionRelease.filter_size`
    (the official configs' filters: 224, or 384 for HorNet-L GF), so that the
    official checkpoint's filters load unresized; else the package's
    ``BUILT_SIZE`` (224). The filters are resized to each map at run time, as
    the official layer does.

    Example:
        >>> built_size("hornet_l_gf"), built_size("hornet_t_gf"), built_size("gfnet_tiny")
        (384, 224, 224)
    """
    release = coco.RELEASES.get(variant_key(backbone))
    return BUILT_SIZE if release is None else release.filter_size


def check_weights_argument(weights, architecture: str, backbone, neck) -> None:
    """Refuses, before building, `weights` that cannot fit the detector (one-line ValueError).

    Any class count fits: the class-dependent layers of a checkpoint of
    other classes are skipped (see the module docstring).

    Args:
        weights: the builder's `weights`: None, "coco" or a path.
        architecture: the architecture row ("cascade_mask_rcnn" or "mask_rcnn").
        backbone: the builder's `backbone`.
        neck: the builder's `neck`.
    """
    if weights is None:
        return
    if weights == "coco":
        if architecture != "cascade_mask_rcnn" or variant_key(backbone) not in coco.RELEASES:
            raise ValueError(
                "weights='coco' are the official Cascade Mask R-CNN checkpoints of HorNet: use "
                f"CascadeMaskRCNN with a backbone of {sorted(coco.RELEASES)}. Received: "
                f"architecture={architecture!r}, backbone={backbone!r}"
            )
        if neck != "fpn":
            raise ValueError(f"weights='coco' need neck='fpn'. Received: neck={neck!r}")
    check_weights_path(weights, "coco")


def load_detection_weights(model: keras.Model, weights, backbone) -> None:
    """Loads "coco" (the release of `backbone`), an mmdetection `.pth` or a saved file, wholly.

    The release is downloaded once (Keras cache, ``$KERAS_FOURIER_MIRROR``)
    and converted once; the package's own `.weights.h5` and `.keras` files
    load as saved. A "coco" or `.pth` checkpoint of other classes than the
    model's loads all but the class-dependent tensors (:data:`CLASS_LAYERS`),
    which keep their fresh initialisation, also from the cached conversion.

    Args:
        model: the freshly built detector.
        weights: "coco" or a path.
        backbone: the backbone's name, whose key map reads ``backbone.*``.

    Raises:
        ValueError: weights that do not fit; `model` is left unchanged.
    """
    key = variant_key(backbone) or str(backbone)
    roi_head = model.get_layer("roi_head")
    classes = checkpoint_classes(weights)
    fine_tuning = classes is not None and classes != roi_head.num_classes
    load_release_or_file(
        model,
        weights,
        mmdet_key_map(key, cascade=roi_head.num_stages > 1, checkpoint_classes=classes),
        release_name="coco",
        release=lambda: coco.RELEASES[key],
        label=f"weights='coco' for {key!r}",
        description=f"model {model.name!r} (backbone {key!r})",
        refusal="`weights` must be 'coco', a '.weights.h5' or '.keras' file, or an "
        "mmdetection '.pth' checkpoint.",
        keep=class_variables(model) if fine_tuning else (),
    )
