"""Deployment exports: TF Serving SavedModels, builtin TFLite, ONNX and keras-hub presets.

* :func:`export` writes several of them in one journaled call, all or
  nothing, each checked against Keras (one row per format in `FORMATS`).

* :func:`saved_model` writes ``<export_dir>/<version>/`` with a
  ``serving_default`` signature (images in 0-255, or FNet's token ids,
  segment ids and mask) and, for vision models, ``serving_bytes`` (encoded
  JPEG/PNG/GIF/BMP/WebP up to `MAX_IMAGE_PIXELS`, decoded, resized and centre-cropped in
  the graph), then reloads it and checks both against Keras. Segmentation
  models return per-pixel ``logits`` and, from ``serving_bytes``, an int32
  ``class_map`` at the model's input size (see
  :mod:`keras_fourier.export.signatures`). One-stage detectors
  (:func:`keras_fourier.detection.RetinaNet`) return detections decoded in the
  graph (``boxes``, ``scores``, ``classes``, ``num_detections``), in every
  format, with builtin NMS; their parity check matches detections (see
  :mod:`keras_fourier.export.detections`). Two-stage detectors
  (:func:`keras_fourier.detection.MaskRCNN`,
  :func:`~keras_fourier.detection.CascadeMaskRCNN`) return their own
  detections with their masks pasted at the image's size (uint8) and in
  their boxes' frames.
* :func:`keras_hub_preset` writes an FNet as a keras-hub preset folder
  (``keras_hub.models.FNetBackbone.from_preset`` loads it).
* :func:`onnx` converts with the matmul DFT and standard ONNX ops only,
  runs the file in onnxruntime and reports its error against Keras.
* :func:`tflite` converts with the matmul DFT and TFLite builtin ops only
  (float32, float16, dynamic-range or full-integer int8), runs the file in
  LiteRT (the ``export`` extra: ``pip install "keras-fourier[export]"``) and
  reports its error against Keras.

Each checks every argument before writing anything and leaves nothing behind
when it fails. :func:`recover` finishes or undoes exports killed in a folder
(see :mod:`keras_fourier.export.journal`).

The top-level ``export/`` folder of the repository holds the TF Serving
config, REST and gRPC clients, and the commands to serve the SavedModels.
"""

from keras_fourier.data.checks import header_image_size
from keras_fourier.export.formats import DEFAULT_FORMATS, FORMATS, ExportResult, export
from keras_fourier.export.journal import recover
from keras_fourier.export.keras_hub_preset import KerasHubPresetReport, keras_hub_preset
from keras_fourier.export.litert import QUANTIZATIONS, TFLiteReport, tflite
from keras_fourier.export.onnx_export import ONNXReport, onnx
from keras_fourier.export.parity import ParityError
from keras_fourier.export.savedmodel import SavedModelReport, describe_saved_model, saved_model
from keras_fourier.export.signatures import (
    BYTES_INPUT,
    BYTES_SIGNATURE,
    DEFAULT_SIGNATURE,
    MAX_IMAGE_PIXELS,
)

__all__ = [
    "BYTES_INPUT",
    "BYTES_SIGNATURE",
    "DEFAULT_FORMATS",
    "DEFAULT_SIGNATURE",
    "FORMATS",
    "MAX_IMAGE_PIXELS",
    "QUANTIZATIONS",
    "ExportResult",
    "KerasHubPresetReport",
    "ONNXReport",
    "ParityError",
    "SavedModelReport",
    "TFLiteReport",
    "describe_saved_model",
    "export",
    "header_image_size",
    "keras_hub_preset",
    "onnx",
    "recover",
    "saved_model",
    "tflite",
]
