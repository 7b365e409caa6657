"""A detector's exports: its detections decoded in the graph with builtin NMS, and their matching.

A one-stage detector (:func:`keras_fourier.detection.RetinaNet`, and the
``model.keras`` of a ``keras-fourier train --task detection`` run) outputs
raw rows, (B, A, 8 + C) per anchor (:data:`~keras_fourier.layers.detection.RAW_COLUMNS`).
Its exports return detections instead, the outputs of
:class:`~keras_fourier.layers.DetectionDecoder` with its defaults (sigmoid
scores, the best 1,000 (anchor, class) pairs, scores above 0.05, per-class
NMS at IoU 0.5, the best 100):

* ``boxes`` float32 (B, 100, 4): "xyxy" pixels of the input image;
* ``scores`` float32 (B, 100);
* ``classes`` int32 (B, 100): -1 past the detections;
* ``num_detections`` int32 (B,).

The decoding is written once, here, in TensorFlow ops that every export
format keeps as builtins (:func:`nms_detections`): TensorFlow's
``NonMaxSuppressionV5``, which the TFLite converter keeps as the builtin
``NON_MAX_SUPPRESSION_V5`` and tf2onnx turns into ONNX
``NonMaxSuppression``; ``TOPK_V2``, ``GATHER``, ``CUMSUM`` and element-wise
ops around it. That NMS is class-agnostic and per image; one call does the
per-class NMS of the whole batch by shifting each box by its class along x
and by its image along y (``class * (W + 1)``, ``image * (H + 1)``), so that
boxes of different classes or images never overlap (torchvision's
``batched_nms``). The shifted coordinates lose float32 precision (with 80
classes at 1333 pixels wide, x reaches 1.1e5, one unit in the last place is
0.008 px): an IoU within about 1e-3 of the threshold may be decided the
other way than by the Keras decoder, which computes it unshifted.

The parity check (:func:`keras_fourier.export.parity.compare`) therefore
compares detections, not arrays: the exported model's and the Keras
decoder's detections of each image are matched greedily by score, a match
having the same class and every box coordinate within 1e-3 of the image
size (:data:`BOX_TOLERANCE`).

A two-stage detector (:class:`keras_fourier.detection.TwoStageDetector`,
:func:`~keras_fourier.detection.MaskRCNN`,
:func:`~keras_fourier.detection.CascadeMaskRCNN`) decodes its detections
itself (its RPN proposals and RoI heads, NMS included, are in the model);
its SavedModel adds the masks pasted into the image
(:func:`with_pasted_masks`):

* ``masks`` uint8 (B, 100, H, W): 1 where the detection's mask probability,
  pasted at the image's size (:func:`keras_fourier.detection.paste_masks`),
  is at least :data:`MASK_THRESHOLD` (mmdetection's ``mask_thr_binary``);
* ``mask_probabilities`` float32 (B, 100, 28, 28): the probabilities in each
  box's frame, as the model gives them.

Matched detections must also agree on their pasted masks: the IoU of the
matched masks, their intersections over their unions summed over the
detections, is at least :data:`~keras_fourier.export.parity.MASK_IOU`.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_fourier.detection.two_stage import paste_masks
from keras_fourier.layers.detection import (
    AnchorBoxes,
    DetectionDecoder,
    decode_boxes,
    has_area,
    split_raw,
)
from keras_fourier.layers.roi_heads import CascadeRoIHead

BOXES = "boxes"
SCORES = "scores"
CLASSES = "classes"
NUM_DETECTIONS = "num_detections"
DETECTION_OUTPUTS = (BOXES, SCORES, CLASSES, NUM_DETECTIONS)
MASKS = "masks"
MASK_PROBABILITIES = "mask_probabilities"
# mmdetection's mask_thr_binary: a pasted mask holds the pixels of at least this probability.
MASK_THRESHOLD = 0.5
# The largest sent image (height * width) a two-stage detector's serving_bytes pastes masks
# into: 100 detections take about 600 bytes per pixel while pasted (2.4 GB at this size).
MASK_MAX_PIXELS = 4_000_000
# How far a matched box may be from Keras's, per coordinate, as a fraction of the image size.
BOX_TOLERANCE = 1e-3


def is_two_stage(model: keras.Model) -> bool:
    """Whether `model` is a two-stage detector: images to detections with box-frame masks.

    Args:
        model: a Keras model.

    Returns:
        True for one (B, H, W, 3) input, the outputs {"boxes", "scores",
        "classes", "num_detections", "masks"} and a
        :class:`~keras_fourier.layers.CascadeRoIHead` (the models of
        :func:`keras_fourier.detection.MaskRCNN` and
        :func:`~keras_fourier.detection.CascadeMaskRCNN`).

    Example:
        >>> is_two_stage(keras_fourier.detection.MaskRCNN(
        ...     "gfnet_tiny", num_classes=3, input_shape=(64, 64, 3)))
        True
    """
    if not isinstance(model.output, dict) or len(model.inputs) != 1:
        return False
    image = tuple(model.inputs[0].shape)
    return (
        len(image) == 4
        and image[-1] == 3
        and set(model.output) == {*DETECTION_OUTPUTS, MASKS}
        and any(isinstance(layer, CascadeRoIHead) for layer in model.layers)
    )


def roi_head(model: keras.Model) -> CascadeRoIHead:
    """A two-stage detector's RoI head, whose settings (score threshold, detections) parity reads.

    Example:
        >>> roi_head(two_stage_model).max_detections
        100
    """
    (head,) = [layer for layer in model.layers if isinstance(layer, CascadeRoIHead)]
    return head


def with_pasted_masks(
    detections: dict[str, tf.Tensor], height: int | tf.Tensor, width: int | tf.Tensor
) -> dict[str, tf.Tensor]:
    """A two-stage detector's exported outputs: its detections and their masks in the image.

    Args:
        detections: the model's outputs, "masks" (B, D, M, M) probabilities
            in each box's frame.
        height: the image's height, an int or a scalar int tensor.
        width: its width.

    Returns:
        {"boxes", "scores", "classes", "num_detections"} as the model gives
        them, "masks" uint8 (B, D, height, width) pasted
        (:func:`keras_fourier.detection.paste_masks`, threshold
        :data:`MASK_THRESHOLD`) and "mask_probabilities", the model's masks.
    """
    outputs = {name: detections[name] for name in DETECTION_OUTPUTS}
    outputs[MASK_PROBABILITIES] = detections[MASKS]
    pasted = paste_masks(detections[MASKS], detections[BOXES], height, width, MASK_THRESHOLD)
    outputs[MASKS] = tf.cast(pasted, tf.uint8)
    return outputs


def export_decoder(model: keras.Model) -> DetectionDecoder:
    """The decoder of a detector's exports: DetectionDecoder's defaults at the anchors' first level.

    Example:
        >>> export_decoder(detector_model).max_detections
        100
    """
    (anchors,) = [layer for layer in model.layers if isinstance(layer, AnchorBoxes)]
    return DetectionDecoder(min_level=anchors.min_level, name="decoder")


def _shift(values: tf.Tensor, extent: float) -> tf.Tensor:
    return tf.cast(values, tf.float32) * (extent + 1.0)


def nms_detections(
    raw: tf.Tensor, decoder: DetectionDecoder, height: int, width: int
) -> dict[str, tf.Tensor]:
    """Detections from raw rows in TensorFlow ops that TFLite and ONNX keep as builtins.

    The :class:`~keras_fourier.layers.DetectionDecoder` of `decoder`'s
    settings, with one ``NonMaxSuppressionV5`` for the per-class NMS of the
    whole batch (see the module docstring).

    Args:
        raw: float32 (B, A, 8 + C) raw rows, A and C known.
        decoder: the settings (thresholds, candidates, detections).
        height: the input images' height, which clips the boxes.
        width: their width.

    Returns:
        {"boxes", "scores", "classes", "num_detections"} as
        :class:`~keras_fourier.layers.DetectionDecoder` returns them.
    """
    raw = tf.cast(raw, tf.float32)
    anchors, deltas, logits = split_raw(raw)
    count, num_classes = int(raw.shape[1]), int(logits.shape[-1])
    batch = tf.shape(raw)[0]
    candidates = min(decoder.pre_nms, count * num_classes)
    scores, index = tf.math.top_k(tf.reshape(tf.sigmoid(logits), (batch, -1)), candidates)
    anchor_index = index // num_classes
    classes = index - anchor_index * num_classes
    boxes = decode_boxes(
        tf.gather(anchors, anchor_index, batch_dims=1),
        tf.gather(deltas, anchor_index, batch_dims=1),
    )
    boxes = tf.clip_by_value(boxes, 0.0, tf.constant([width, height, width, height], tf.float32))
    images = tf.broadcast_to(tf.range(batch)[:, None], tf.shape(classes))
    shift = tf.stack([_shift(classes, width), _shift(images, height)], axis=-1)
    flat_boxes = tf.reshape(boxes, (-1, 4))
    selected, selected_scores, valid = tf.raw_ops.NonMaxSuppressionV5(
        boxes=tf.reshape(boxes + tf.concat([shift, shift], axis=-1), (-1, 4)),
        # LiteRT's NMS stops suppressing after selecting a box of no area (LiteRT 2.x, measured):
        # such boxes, which the decoder drops, score 0 here.
        scores=tf.reshape(tf.where(has_area(boxes), scores, 0.0), (-1,)),
        max_output_size=batch * candidates,
        iou_threshold=decoder.iou_threshold,
        score_threshold=decoder.score_threshold,
        soft_nms_sigma=0.0,
        pad_to_max_output_size=True,
    )
    # The selection is sorted by score: each image keeps its first max_detections.
    mine = tf.logical_and(
        tf.equal(selected[None, :] // candidates, tf.range(batch)[:, None]),
        (tf.range(tf.shape(selected)[0]) < valid)[None, :],
    )
    rank = tf.cumsum(tf.cast(mine, tf.int32), axis=1)
    keep = tf.logical_and(mine, rank <= decoder.max_detections)
    top = min(decoder.max_detections, candidates)
    best, order = tf.math.top_k(tf.where(keep, selected_scores[None, :], -1.0), top)
    kept = best >= 0
    pick = tf.gather(selected, order)
    outputs = {
        BOXES: tf.where(kept[..., None], tf.gather(flat_boxes, pick), 0.0),
        SCORES: tf.where(kept, best, 0.0),
        CLASSES: tf.where(kept, tf.gather(tf.reshape(classes, (-1,)), pick), -1),
    }
    pad = decoder.max_detections - top
    if pad:
        outputs = {
            name: tf.pad(
                value,
                [(0, 0), (0, pad)] + [(0, 0)] * (len(value.shape) - 2),
                constant_values=-1 if name == CLASSES else 0,
            )
            for name, value in outputs.items()
        }
    outputs[NUM_DETECTIONS] = tf.reduce_sum(tf.cast(kept, tf.int32), axis=1)
    return outputs


def to_image_pixels(
    detections: dict[str, tf.Tensor], sizes: tf.Tensor, height: int, width: int
) -> dict[str, tf.Tensor]:
    """`detections` at the model's input size with their boxes scaled to each image's own size.

    A two-stage detector's masks (outputs of :func:`with_pasted_masks`) are
    pasted again, at each image's own size: (B, D, H, W) with H and W the
    largest of the batch, each image's masks in its top-left (height,
    width) corner, zero beyond.

    Args:
        detections: outputs of :func:`nms_detections` or :func:`with_pasted_masks`.
        sizes: (B, 2) (height, width) of the sent images.
        height: the model's input height.
        width: its input width.
    """
    sizes = tf.cast(sizes, tf.int32)
    extent = tf.cast(sizes, tf.float32)
    scale = tf.stack([extent[:, 1] / width, extent[:, 0] / height], axis=-1)
    outputs = {**detections, BOXES: detections[BOXES] * tf.tile(scale, (1, 2))[:, None, :]}
    if MASK_PROBABILITIES in detections:
        largest = tf.reduce_max(sizes, axis=0)
        pasted = with_pasted_masks(
            {**outputs, MASKS: detections[MASK_PROBABILITIES]}, largest[0], largest[1]
        )[MASKS]
        rows = tf.range(largest[0])[None, :, None] < sizes[:, 0, None, None]
        cols = tf.range(largest[1])[None, None, :] < sizes[:, 1, None, None]
        inside = tf.cast(tf.logical_and(rows, cols), tf.uint8)
        outputs[MASKS] = pasted * inside[:, None]
    return outputs
