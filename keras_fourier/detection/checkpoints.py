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
"""

from __future__ import annotations

import functools
import re

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
from keras_fourier.weights.convert import KeyMapFunction
from keras_fourier.weights.pipeline import load_release_or_file

_BN_PARAMETERS = {**PARAMETERS, "moving_mean": "running_mean", "moving_variance": "running_var"}
_STAGE_HEAD = re.compile(r"(bbox_head|mask_head)_(\d+)")
# Box-head shared convs (conv + bn) and fcs, mask-head convs: Keras "shared_convs_2_bn" is
# mmdetection's "shared_convs.2.bn"; a mask conv "convs_1" is the ConvModule "convs.1.conv".
_HEAD_PART = re.compile(r"(shared_convs|shared_fcs|convs)_(\d+)(?:_(conv|bn))?")
_LINEAR = frozenset({"shared_fcs", "fc_cls", "fc_reg"})


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


def mmdet_key_map(backbone: str, cascade: bool = True) -> KeyMapFunction:
    """The key map of mmdetection checkpoints of two-stage detectors on `backbone`.

    :func:`~keras_fourier.segmentation.checkpoints.openmmlab_key_map` with
    :func:`mmdet_key` (`cascade`: stage-indexed heads, default True; False
    for Mask R-CNN) and the RoI heads' layout changes.

    Example:
        >>> keys, _ = mmdet_key_map("hornet_t_gf")(detection.CascadeMaskRCNN(), ())
        >>> keys["roi_head.bbox_head.0.shared_fcs.0.weight"][1]
        'roi_linear'
    """
    key_of = functools.partial(mmdet_key, cascade=cascade)
    return openmmlab_key_map(backbone, key_of, _transform, "mmdetection")


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


def check_weights_argument(weights, architecture: str, backbone, num_classes: int, neck) -> None:
    """Refuses, before building, `weights` that cannot fit the detector (one-line ValueError).

    Args:
        weights: the builder's `weights`: None, "coco" or a path.
        architecture: the architecture row ("cascade_mask_rcnn" or "mask_rcnn").
        backbone: the builder's `backbone`.
        num_classes: the builder's `num_classes`.
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
        if num_classes != coco.NUM_CLASSES:
            raise ValueError(
                f"weights='coco' need num_classes={coco.NUM_CLASSES}. "
                f"Received: num_classes={num_classes}"
            )
        if neck != "fpn":
            raise ValueError(f"weights='coco' need neck='fpn'. Received: neck={neck!r}")
    check_weights_path(weights, "coco")


def load_detection_weights(model: keras.Model, weights, backbone) -> None:
    """Loads "coco" (the release of `backbone`), an mmdetection `.pth` or a saved file, wholly.

    The release is downloaded once (Keras cache, ``$KERAS_FOURIER_MIRROR``)
    and converted once; the package's own `.weights.h5` and `.keras` files
    load as saved.

    Args:
        model: the freshly built detector.
        weights: "coco" or a path.
        backbone: the backbone's name, whose key map reads ``backbone.*``.

    Raises:
        ValueError: weights that do not fit; `model` is left unchanged.
    """
    key = variant_key(backbone) or str(backbone)
    load_release_or_file(
        model,
        weights,
        mmdet_key_map(key, cascade=model.get_layer("roi_head").num_stages > 1),
        release_name="coco",
        release=lambda: coco.RELEASES[key],
        label=f"weights='coco' for {key!r}",
        description=f"model {model.name!r} (backbone {key!r})",
        refusal="`weights` must be 'coco', a '.weights.h5' or '.keras' file, or an "
        "mmdetection '.pth' checkpoint.",
    )
