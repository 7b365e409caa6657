"""Object detection with keras_fourier backbones: RetinaNet, Mask R-CNN and Cascade Mask R-CNN.

``keras_fourier.detection.RetinaNet(backbone="hornet_t_gf", num_classes=80,
neck="horfpn_gf")`` builds the detector (raw per-anchor output), trained with
:class:`RetinaNetLoss`; :func:`detector` adds the per-class NMS decoder;
:func:`image_encoder` gives a backbone's pyramid as keras-hub's detectors take
it. Boxes are "xyxy" pixels of the model's input (see
:mod:`keras_fourier.layers.detection`). :func:`coco_evaluate` scores a split's
detections with pycocotools' COCOeval (COCO mAP, mAP50, mAP75, per-size and
per-class AP), also as the Keras metric :class:`COCOMeanAP`; :func:`coco_results`
writes detections as COCO results entries. :func:`MaskRCNN` and
:func:`CascadeMaskRCNN` build the two-stage detectors (:class:`TwoStageDetector`,
detections and masks; :func:`paste_masks` pastes masks into the image);
:func:`coco_evaluate_instances` and the metric :class:`COCOInstanceAP` score their boxes and
masks (COCOeval "bbox" and "segm"). The data side is :mod:`keras_fourier.data.detection`
and :mod:`keras_fourier.data.instances`.
"""

from keras_fourier.detection.evaluation import (
    COCO_STATS,
    coco_evaluate,
    coco_evaluate_instances,
    coco_results,
)
from keras_fourier.detection.losses import RetinaNetLoss
from keras_fourier.detection.metrics import COCOInstanceAP, COCOMeanAP
from keras_fourier.detection.models import NECKS, RetinaNet, detector
from keras_fourier.detection.two_stage import (
    TWO_STAGE_ARCHS,
    CascadeMaskRCNN,
    MaskRCNN,
    TwoStageDetector,
    paste_masks,
)
from keras_fourier.models.pyramid import PyramidEncoder, image_encoder

__all__ = [
    "COCO_STATS",
    "NECKS",
    "TWO_STAGE_ARCHS",
    "COCOInstanceAP",
    "COCOMeanAP",
    "CascadeMaskRCNN",
    "MaskRCNN",
    "PyramidEncoder",
    "RetinaNet",
    "RetinaNetLoss",
    "TwoStageDetector",
    "coco_evaluate",
    "coco_evaluate_instances",
    "coco_results",
    "detector",
    "image_encoder",
    "paste_masks",
]
