"""COCO as the official HorNet Cascade Mask R-CNN models see it: classes, normalisation, releases.

* :func:`class_names`: the 80 COCO class names, from the text file shipped
  with the package (``coco_classes.txt``; its header says where the list
  comes from and under which licence: the COCO annotations' CC BY 4.0);
* :data:`MEAN` / :data:`STD`: the normalisation of the official configs
  (``img_norm_cfg``, RGB, 0-255 pixels), which the detectors apply themselves
  in their ``preprocessing`` layer;
* :data:`RELEASES`: the Cascade Mask R-CNN 3x checkpoints fine-tuned on COCO
  that raoyongming/HorNet publishes (``object_detection/README.md``), one row
  per backbone variant, with the published box and mask AP, parameters and
  FLOPs.
"""

from __future__ import annotations

import dataclasses
import functools

from keras_fourier.fileio import read_class_names
from keras_fourier.weights.releases import TRAINING_CHECKPOINT, TSINGHUA_CLOUD, Release

# img_norm_cfg of the official COCO configs (mmdetection's), RGB order, 0-255 pixels.
MEAN = (123.675, 116.28, 103.53)
STD = (58.395, 57.12, 57.375)
NUM_CLASSES = 80
# The image size whose stride-16 and stride-32 maps the global filters of the official
# detection configs are sized for (h=14, w=8 and h=7, w=4: the classification filters); the
# HorNet-L GF config keeps its ImageNet-22k 384-pixel filters (h=24, w=13 and h=12, w=7).
FILTER_SIZE = 224
LARGE_FILTER_SIZE = 384


@functools.cache
def class_names() -> tuple[str, ...]:
    """The 80 COCO class names, class i of the models first.

    Returns:
        A tuple of 80 strings ("person", "bicycle", "car", ...).

    Example:
        >>> class_names()[:3]
        ('person', 'bicycle', 'car')
    """
    return read_class_names(__package__, "coco_classes.txt", NUM_CLASSES)


@dataclasses.dataclass(frozen=True)
class DetectionRelease(Release):
    """An official Cascade Mask R-CNN COCO checkpoint of raoyongming/HorNet (mmdetection `.pth`).

    Attributes:
        box_ap: published box AP (%) on COCO val2017.
        mask_ap: published mask AP (%).
        parameters: published parameter count (millions, as the README rounds it).
        gflops: published FLOPs (G; the official ``get_flops.py`` counts them with
            mmcv at a 1280 x 800 input by default).
        drop_path_rate: the backbone's stochastic depth in its config.
        filter_size: the image size whose maps its global filters were
            sized for (:data:`FILTER_SIZE`, or :data:`LARGE_FILTER_SIZE` for
            HorNet-L GF); a model built for it keeps the checkpoint's filters
            unresized.
    """

    box_ap: float | None = None
    mask_ap: float | None = None
    parameters: int | None = None
    gflops: int | None = None
    drop_path_rate: float = 0.0
    filter_size: int = FILTER_SIZE


def _release(
    variant: str,
    code: str,
    box_ap: float,
    mask_ap: float,
    parameters: int,
    gflops: int,
    rate: float,
    sha256: str | None = None,
    size_bytes: int | None = None,
) -> DetectionRelease:
    """The release row of `variant`; `sha256` and `size_bytes` once the file has been read."""
    size, kind = variant.split("_")[1:]
    name = {"t": "tiny", "s": "small", "b": "base", "l": "large"}[size]
    data = "in22k" if size == "l" else "in1k"
    return DetectionRelease(
        f"cascade_mask_rcnn_hornet_{name}_{kind}_3x_coco_{data}.pth",
        TSINGHUA_CLOUD.format(code),
        source="https://github.com/raoyongming/HorNet",
        license="MIT",
        box_ap=box_ap,
        mask_ap=mask_ap,
        parameters=parameters,
        gflops=gflops,
        drop_path_rate=rate,
        filter_size=LARGE_FILTER_SIZE if variant == "hornet_l_gf" else FILTER_SIZE,
        sha256=sha256,
        size=size_bytes,
        values_per_parameter=TRAINING_CHECKPOINT,  # mmdetection keeps the optimizer's state
    )


# Links, box and mask AP, parameters and FLOPs from object_detection/README.md (raoyongming/
# HorNet @ ac9e210); drop-path rates from configs/hornet/cascade_mask_rcnn_hornet_*_3x_coco_*.py.
# The parameter counts agree with mmdetection 2.28.2's CascadeRCNN built from those configs
# (79.9, 80.5, 106.9, 107.7, 144.5, 145.6, 251.5, 258.8 million). No sha256 or size yet: the
# Tsinghua Cloud host does not resolve from the machine that wrote these rows (2026-11-28), so
# no file was read; a row gains them as `_release(..., sha256=..., size_bytes=...)`.
RELEASES: dict[str, DetectionRelease] = {
    "hornet_t_7x7": _release("hornet_t_7x7", "19daa3854a6b4c75bf23", 51.7, 44.8, 80, 730, 0.4),
    "hornet_t_gf": _release("hornet_t_gf", "1ca353fb6ac44b54a2d8", 52.4, 45.6, 80, 728, 0.4),
    "hornet_s_7x7": _release("hornet_s_7x7", "6af0439735dc473f8646", 52.7, 45.6, 107, 830, 0.6),
    "hornet_s_gf": _release("hornet_s_gf", "fd9a3127b18f404d8e95", 53.3, 46.3, 108, 827, 0.6),
    "hornet_b_7x7": _release("hornet_b_7x7", "324de62466a848129e19", 53.3, 46.1, 144, 969, 0.7),
    "hornet_b_gf": _release("hornet_b_gf", "97d8587c8a0248fcac19", 54.0, 46.9, 146, 965, 0.7),
    "hornet_l_7x7": _release("hornet_l_7x7", "975af666e64840588e3e", 55.4, 48.0, 251, 1363, 0.7),
    "hornet_l_gf": _release("hornet_l_gf", "597f655fe9b84d50bffb", 56.0, 48.6, 259, 1358, 0.7),
}
