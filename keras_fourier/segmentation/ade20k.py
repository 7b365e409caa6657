"""ADE20K as the official HorNet UPerNet models see it: class names, normalisation, releases.

* :func:`class_names`: the 150 class names, from the text file shipped with
  the package (``ade20k_classes.txt``; its header says where the list comes
  from and under which licence);
* :data:`MEAN` / :data:`STD`: the normalisation of the official configs
  (``img_norm_cfg``, RGB, 0-255 pixels), which the segmentation models apply
  themselves in their ``preprocessing`` layer;
* :data:`RELEASES`: the UPerNet checkpoints fine-tuned on ADE20K that
  raoyongming/HorNet publishes (``semantic_segmentation/README.md``), one row
  per backbone variant, with the published single- and multi-scale mIoU.
"""

from __future__ import annotations

import dataclasses
import functools

from keras_fourier.fileio import read_class_names
from keras_fourier.weights.releases import TRAINING_CHECKPOINT, TSINGHUA_CLOUD, Release

# img_norm_cfg of the official ADE20K configs (mmsegmentation's), RGB order, 0-255 pixels.
MEAN = (123.675, 116.28, 103.53)
STD = (58.395, 57.12, 57.375)
NUM_CLASSES = 150
# Labels the loss and the metrics skip: ADE20K's "other" (0) after reduce_zero_label.
IGNORE_INDEX = 255


@functools.cache
def class_names() -> tuple[str, ...]:
    """The 150 ADE20K class names, class i of the models first.

    Returns:
        A tuple of 150 strings ("wall", "building", "sky", ...).

    Example:
        >>> class_names()[:3]
        ('wall', 'building', 'sky')
    """
    return read_class_names(__package__, "ade20k_classes.txt", NUM_CLASSES)


@dataclasses.dataclass(frozen=True)
class SegmentationRelease(Release):
    """One official UPerNet ADE20K checkpoint of raoyongming/HorNet (an mmsegmentation `.pth`).

    Attributes:
        miou: published single-scale mIoU (%) on ADE20K val.
        miou_ms: published multi-scale + flip mIoU (%).
        crop_size: the training crop and sliding-window size of its config.
        drop_path_rate: the backbone's stochastic depth in its config.
    """

    miou: float | None = None
    miou_ms: float | None = None
    crop_size: int = 512
    drop_path_rate: float = 0.0


def _release(
    variant: str,
    code: str,
    miou: float,
    miou_ms: float,
    crop: int,
    rate: float,
    sha256: str | None = None,
    size_bytes: int | None = None,
):
    """The release row of `variant`; `sha256` and `size_bytes` once the file has been read."""
    size, kind = variant.split("_")[1:]
    name = {"t": "tiny", "s": "small", "b": "base", "l": "large"}[size]
    file_name = f"upernet_hornet_{name}_{kind}_{crop}_160k_ade20k.pth"
    return SegmentationRelease(
        file_name,
        TSINGHUA_CLOUD.format(code),
        source="https://github.com/raoyongming/HorNet",
        license="MIT",
        miou=miou,
        miou_ms=miou_ms,
        crop_size=crop,
        drop_path_rate=rate,
        sha256=sha256,
        size=size_bytes,
        values_per_parameter=TRAINING_CHECKPOINT,  # mmsegmentation keeps the optimizer's state
    )


# Links and mIoU from semantic_segmentation/README.md; crop sizes and drop-path rates from
# configs/hornet/upernet_hornet_*_160k_ade20k.py (the README lists HorNet-B GF at 640x640,
# its config file at 512x512: the config is what trained it). No sha256 or size yet: the
# Tsinghua Cloud host did not resolve from the machine that wrote these rows (2026-11-25), so
# no file was read; a row gains them as `_release(..., sha256=..., size_bytes=...)`.
RELEASES: dict[str, SegmentationRelease] = {
    "hornet_t_7x7": _release("hornet_t_7x7", "684334b0a7ea436b9a97", 48.1, 48.9, 512, 0.4),
    "hornet_t_gf": _release("hornet_t_gf", "34725e1401194786bb76", 49.2, 49.3, 512, 0.4),
    "hornet_s_7x7": _release("hornet_s_7x7", "0e488e21a88d414da90c", 49.2, 49.8, 512, 0.3),
    "hornet_s_gf": _release("hornet_s_gf", "d37290faa8a34bc091c3", 50.0, 50.5, 512, 0.3),
    "hornet_b_7x7": _release("hornet_b_7x7", "98288e9023c2425a880c", 50.0, 50.5, 512, 0.4),
    "hornet_b_gf": _release("hornet_b_gf", "e50ecead21e4408187b7", 50.5, 50.9, 512, 0.5),
    "hornet_l_7x7": _release("hornet_l_7x7", "d7a782e07a354f59bf62", 54.1, 54.5, 640, 0.4),
    "hornet_l_gf": _release("hornet_l_gf", "3dbb38bae1694653a666", 55.0, 55.2, 640, 0.4),
}
