"""Semantic segmentation models of keras_fourier: UPerNet, Semantic FPN and SegFormer heads.

``keras_fourier.segmentation.UPerNet(backbone="hornet_t_gf", weights="ade20k")``
builds the official HorNet UPerNet ADE20K model; any vision backbone of the
package works (pyramids directly, isotropic ones through a multi-scale
neck). See :mod:`keras_fourier.segmentation.models` for the layers and the
training outputs (``auxiliary=True``), :mod:`~keras_fourier.segmentation.ade20k`
for the class names, normalisation and releases.
"""

from keras_fourier.segmentation.ade20k import RELEASES, class_names
from keras_fourier.segmentation.models import (
    AUXILIARY_WEIGHT,
    HEADS,
    SegFormer,
    SemanticFPN,
    UPerNet,
    build_segmenter,
    without_auxiliary,
)

__all__ = [
    "AUXILIARY_WEIGHT",
    "HEADS",
    "RELEASES",
    "SegFormer",
    "SemanticFPN",
    "UPerNet",
    "build_segmenter",
    "class_names",
    "without_auxiliary",
]
