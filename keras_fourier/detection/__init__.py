"""Object detection of keras_fourier: COCO box evaluation with the reference tool.

:func:`coco_evaluate` scores a split's detections with pycocotools' COCOeval
(COCO mAP, mAP50, mAP75, per-size and per-class AP); :func:`coco_results`
writes detections as COCO results entries. The data side is
:mod:`keras_fourier.data.detection`.
"""

from keras_fourier.detection.evaluation import COCO_STATS, coco_evaluate, coco_results

__all__ = ["COCO_STATS", "coco_evaluate", "coco_results"]
