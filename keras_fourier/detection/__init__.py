"""Object detection with keras_fourier backbones: RetinaNet with an FPN or HorFPN neck.

``keras_fourier.detection.RetinaNet(backbone="hornet_t_gf", num_classes=80,
neck="horfpn_gf")`` builds the detector (raw per-anchor output), trained with
:class:`RetinaNetLoss`; :func:`detector` adds the per-class NMS decoder;
:func:`image_encoder` gives a backbone's pyramid as keras-hub's detectors take
it. Boxes are "xyxy" pixels of the model's input (see
:mod:`keras_fourier.layers.detection`).
"""

from keras_fourier.detection.losses import RetinaNetLoss
from keras_fourier.detection.models import NECKS, RetinaNet, detector
from keras_fourier.models.pyramid import PyramidEncoder, image_encoder

__all__ = [
    "NECKS",
    "PyramidEncoder",
    "RetinaNet",
    "RetinaNetLoss",
    "detector",
    "image_encoder",
]
