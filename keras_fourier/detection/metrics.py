"""COCO box AP over a whole split, as Keras metrics, scored by the reference COCO evaluation.

:class:`COCOMeanAP` stores every scored image's decoded detections and
ground truth in fixed buffers (metric variables, so ``update_state`` runs
in the graph on every backend) and, when the split ends, hands them to
pycocotools' ``COCOeval`` (:func:`keras_fourier.detection.evaluation.coco_evaluate`).
Keras reads each metric's result eagerly once a split is done (the value
of `Model.evaluate`, of the epoch's logs, and what selects ``best.keras``);
inside a traced step it reads NaN. Metrics of different values of one split
(mAP, mAP50, mAP75: `key`) hold the same state, and share one COCOeval run:
an evaluation is cached by a digest of the state it scored.

Only evaluation batches are scored: their targets carry each image's
letterbox scale (column ``scale`` > 0), training batches' are 0 (their
augmented boxes are not the data's), so the metric compiled for training
stays empty during the training steps of `fit` and scores its validation.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence

import keras
import numpy as np
from keras import ops

from keras_fourier.detection.evaluation import coco_evaluate, coco_evaluate_instances
from keras_fourier.layers.detection import RAW_BOX_COLUMNS, DetectionDecoder

# Images a metric stores by default: COCO's val2017 split.
DEFAULT_CAPACITY = 5000
TARGET_WIDTH = 8
SCALE_COLUMN = 7
# The values of COCOeval's summary a metric may report (keys of coco_evaluate).
KEYS = ("map", "map50", "map75", "map_small", "map_medium", "map_large", "ar100")
# ... and of an instance segmenter's: the boxes', then the masks' (coco_evaluate_instances).
INSTANCE_KEYS = KEYS + tuple(f"mask_{key}" for key in KEYS)
# The side of the masks an instance metric stores per box (uint8, in the box's frame).
STORED_MASK_SIZE = 28
# Evaluations kept for metrics of the same state (digest -> values).
_CACHE: dict[str, dict[str, float]] = {}
_CACHE_SIZE = 4


def _concrete(value) -> np.ndarray | None:
    """`value` as NumPy when it has one (eager), None inside a traced graph or a JAX trace."""
    try:
        return ops.convert_to_numpy(value)
    except (NotImplementedError, TypeError, ValueError, AttributeError):
        return None


@keras.saving.register_keras_serializable(package="keras_fourier")
class COCOMeanAP(keras.metrics.Metric):
    """A COCO box AP value (mAP@[.5:.95], mAP50, ...) of a one-stage detector over a whole split.

    Args:
        num_classes: the detector's classes. Default None: read from the
            first batch's predictions.
        class_names: their names, for the per-class AP of :meth:`evaluation`.
            Default None: "0", "1", ...
        capacity: the most images one split may hold. Default 5000.
        max_boxes: ground-truth rows per image of the targets. Default 100.
        max_detections: detections kept per image (COCO's 100). Default 100.
        key: the value reported, a key of COCOeval's summary (:data:`KEYS`):
            "map" (default, AP@[.5:.95]), "map50", "map75", "map_small",
            "map_medium", "map_large" or "ar100".
        name: the metric's name. Default `key`.
        dtype: the metric's dtype. Default None.

    Call arguments (``update_state``):
        y_true: (B, max_boxes, 8) ground-truth rows (see
            :data:`keras_fourier.detection.targets.TARGET_COLUMNS`).
        y_pred: the detector's raw (B, A, 8 + C) output.

    Returns:
        ``result()``: the split's `key` value; :meth:`evaluation` gives
        every value of the summary and the per-class AP.

    Example:
        >>> metric = COCOMeanAP()
    """

    keys = KEYS

    def __init__(
        self,
        num_classes: int | None = None,
        class_names: Sequence[str] | None = None,
        capacity: int = DEFAULT_CAPACITY,
        max_boxes: int = 100,
        max_detections: int = 100,
        key: str = "map",
        name: str | None = None,
        dtype=None,
    ):
        if key not in self.keys:
            raise ValueError(f"`key` must be one of {self.keys}. Received: key={key!r}")
        super().__init__(name=name or key, dtype=dtype)
        self.key = key
        self.num_classes = None if num_classes is None else int(num_classes)
        self.class_names = None if class_names is None else list(class_names)
        self.capacity = int(capacity)
        self.max_boxes = int(max_boxes)
        self.max_detections = int(max_detections)
        self.decoder = DetectionDecoder(max_detections=self.max_detections)
        self.detections = self.add_variable(
            (self.capacity, self.max_detections, 6), "zeros", "float32", name="detections"
        )
        self.ground_truth = self.add_variable(
            (self.capacity, self.max_boxes, TARGET_WIDTH), "zeros", "float32", name="ground_truth"
        )
        self.count = self.add_variable((), "zeros", "int32", name="count")
        self.dropped = self.add_variable((), "zeros", "int32", name="dropped")
        self._evaluation: dict[str, float] | None = None

    def _decoded(self, raw) -> object:
        out = self.decoder(raw)
        return ops.concatenate(
            [
                out["boxes"],
                out["scores"][..., None],
                ops.cast(out["classes"], "float32")[..., None],
            ],
            axis=-1,
        )

    def update_state(self, y_true, y_pred, sample_weight=None):
        del sample_weight
        targets = ops.cast(y_true, "float32")
        raw = ops.cast(y_pred, "float32")
        if self.num_classes is None:
            self.num_classes = int(raw.shape[-1]) - RAW_BOX_COLUMNS
        if raw.shape[-1] != RAW_BOX_COLUMNS + self.num_classes:
            raise ValueError(
                f"COCOMeanAP for {self.num_classes} classes takes a raw (B, A, "
                f"{RAW_BOX_COLUMNS + self.num_classes}) detector output. Received: "
                f"y_pred.shape={tuple(raw.shape)}"
            )
        batch = ops.shape(targets)[0]
        scored = ops.sum(ops.cast(targets[:, 0, SCALE_COLUMN] > 0, "int32"))
        # Training batches (scale 0) skip the decoder; their rows are written past the
        # stored images and overwritten, as the count does not advance.
        detections = ops.cond(
            scored > 0,
            lambda: self._decoded(raw),
            lambda: ops.zeros((batch, self.max_detections, 6), "float32"),
        )
        start = ops.maximum(ops.minimum(self.count, self.capacity - batch), 0)
        self.detections.assign(ops.slice_update(self.detections, (start, 0, 0), detections))
        self.ground_truth.assign(ops.slice_update(self.ground_truth, (start, 0, 0), targets))
        kept = ops.minimum(scored, ops.maximum(self.capacity - self.count, 0))
        self.dropped.assign(self.dropped + scored - kept)
        self.count.assign(self.count + kept)

    def evaluation(self) -> dict[str, float]:
        """Every COCO value of the split scored so far (eager), computed once per split.

        Returns:
            {"map", "map50", "map75", "map_small", "map_medium", "map_large",
            "ap/<class name>", ...}: NaN where COCO has no value (no box of
            that size or class).

        Raises:
            ValueError: the split holds more images than `capacity`, or no
                image was scored.
        """
        if self._evaluation is not None:
            return self._evaluation
        count = int(ops.convert_to_numpy(self.count))
        dropped = int(ops.convert_to_numpy(self.dropped))
        if dropped:
            raise ValueError(
                f"The split has {count + dropped} images, more than the {self.capacity} the "
                f"{self.name!r} metric holds: build it with a larger `capacity`. Received: "
                f"capacity={self.capacity}"
            )
        if not count:
            raise ValueError(f"The {self.name!r} metric scored no image: the split is empty.")
        stored = self._stored(count)
        names = self.class_names or [str(index) for index in range(self.num_classes or 0)]
        digest = hashlib.sha256(
            b"".join(array.tobytes() for array in stored)
            + json.dumps([names, self._truth_source()]).encode()
        ).hexdigest()
        if digest not in _CACHE:
            while len(_CACHE) >= _CACHE_SIZE:
                del _CACHE[next(iter(_CACHE))]
            _CACHE[digest] = self._score(stored, names)
        self._evaluation = _CACHE[digest]
        return self._evaluation

    def _truth_source(self) -> str | None:
        """Where the ground truth comes from besides the stored state (part of the cache key)."""
        return None

    def _stored(self, count: int) -> list[np.ndarray]:
        """The state of the `count` scored images, as NumPy arrays (what `_score` reads)."""
        return [
            ops.convert_to_numpy(self.detections)[:count],
            ops.convert_to_numpy(self.ground_truth)[:count],
        ]

    def _score(self, stored: list[np.ndarray], names: list[str]) -> dict[str, float]:
        """The COCO values of the stored state."""
        detections, ground_truth = stored
        return coco_evaluate(list(ground_truth), [d[d[:, 5] >= 0] for d in detections], names)

    def result(self):
        count = _concrete(self.count)
        if count is None or int(count) == 0:
            return ops.convert_to_tensor(math.nan, "float32")
        return ops.convert_to_tensor(self.evaluation()[self.key], "float32")

    def reset_state(self):
        for variable in self.variables:
            variable.assign(ops.zeros(variable.shape, variable.dtype))
        self._evaluation = None

    def get_config(self) -> dict:
        return {
            "num_classes": self.num_classes,
            "class_names": self.class_names,
            "capacity": self.capacity,
            "max_boxes": self.max_boxes,
            "max_detections": self.max_detections,
            "key": self.key,
            "name": self.name,
            "dtype": self.dtype,
        }


# Readers of a source's own ground truth, by source kind: (source, the targets' "image"
# values, the TFDS data directory) -> per image {"height", "width", "rows", "segmentations"}
# (keras_fourier.data.instances.coco_truth and tfds_truth, which the instance segmentation
# task registers: the data side stays out of this module).
GroundTruthReader = Callable[[str, np.ndarray, str | None], list[dict]]
GROUND_TRUTH_READERS: dict[str, GroundTruthReader] = {}


def register_ground_truth(kind: str, reader: GroundTruthReader) -> None:
    """Registers `reader` as the ground truth of :class:`COCOInstanceAP` on `kind` sources.

    Example:
        >>> register_ground_truth("coco", coco_truth)  # doctest: +SKIP
    """
    GROUND_TRUTH_READERS[kind] = reader


@keras.saving.register_keras_serializable(package="keras_fourier")
class COCOInstanceAP(COCOMeanAP):
    """A COCO box or mask AP of an instance segmenter (a two-stage detector) over a whole split.

    Stores each scored image's detections (boxes, scores, classes) and their
    masks, and the ground truth's rows and masks, as :class:`COCOMeanAP`
    does; the masks as uint8 (M x M, M = `STORED_MASK_SIZE`, 28) in their
    boxes' frames: ``capacity * (max_detections + max_boxes) * 784`` bytes.
    The split is scored by pycocotools' COCOeval, "bbox" and "segm"
    (:func:`~keras_fourier.detection.evaluation.coco_evaluate_instances`):
    with `annotations` (the ``coco:`` source the targets came from) against
    that source's own annotations at the original resolution, found again
    by each image's targets ``"image"`` (COCO's protocol; a TFDS panoptic
    source's segments likewise); else against the targets' box-local masks.

    Args:
        num_classes: the detector's classes. Default None: `class_names`'s count.
        class_names: their names, for the per-class AP. Default None: "0", "1", ...
        capacity: the most images one split may hold (build it with the
            split's size). Default 5000.
        max_boxes: ground-truth rows per image of the targets. Default 100.
        max_detections: detections kept per image (COCO's 100); a model's
            fewer are padded, its more cut (they come best first). Default 100.
        key: the value reported: a box value of :data:`KEYS` or the same of
            the masks, "mask_map" (default), "mask_map50", ...
        name: the metric's name. Default `key`.
        dtype: the metric's dtype. Default None.
        annotations: the source of the scored targets whose annotations
            are the ground truth, read by the reader registered for its kind
            (`register_ground_truth`): ``"coco:<path>"``,
            ``"tfds:coco/2017_panoptic"``; None (default): the targets' rows
            and masks.
        data_dir: the TFDS data directory of a ``tfds:`` `annotations`.
            Default None.

    Call arguments (``update_state``):
        y_true: {"boxes": (B, max_boxes, 8) rows (see
            :data:`keras_fourier.detection.targets.TARGET_COLUMNS`), "masks":
            (B, max_boxes, M', M') box-local masks, M' a multiple of 28,
            "image": (B,) int the images' split codes and positions, needed
            with `annotations`
            (:func:`keras_fourier.data.instances.load_instance_dataset`)}.
        y_pred: a :class:`~keras_fourier.detection.TwoStageDetector`'s
            detections: {"boxes", "scores", "classes", "masks", ...}.

    Returns:
        ``result()``: the split's `key` value.

    Example:
        >>> metric = COCOInstanceAP(num_classes=10, capacity=200)
    """

    keys = INSTANCE_KEYS

    def __init__(
        self,
        num_classes: int | None = None,
        class_names: Sequence[str] | None = None,
        capacity: int = DEFAULT_CAPACITY,
        max_boxes: int = 100,
        max_detections: int = 100,
        key: str = "mask_map",
        name: str | None = None,
        dtype=None,
        annotations: str | None = None,
        data_dir: str | None = None,
    ):
        if num_classes is None and class_names is not None:
            num_classes = len(class_names)
        super().__init__(
            num_classes, class_names, capacity, max_boxes, max_detections, key, name, dtype
        )
        if annotations is not None and not (
            isinstance(annotations, str) and annotations.startswith(("coco:", "tfds:"))
        ):
            raise ValueError(
                "`annotations` must be None or a 'coco:<path>' or 'tfds:<name>' source. "
                f"Received: annotations={annotations!r}"
            )
        if data_dir is not None and not isinstance(data_dir, str):
            raise TypeError(f"`data_dir` must be None or a str. Received: data_dir={data_dir!r}")
        self.annotations = annotations
        self.data_dir = data_dir
        self.images = self.add_variable((self.capacity,), "zeros", "int32", name="images")
        size = STORED_MASK_SIZE
        self.detection_masks = self.add_variable(
            (self.capacity, self.max_detections, size, size), "zeros", "uint8", name="det_masks"
        )
        self.truth_masks = self.add_variable(
            (self.capacity, self.max_boxes, size, size), "zeros", "uint8", name="truth_masks"
        )

    def update_state(self, y_true, y_pred, sample_weight=None):
        del sample_weight
        targets = ops.cast(y_true["boxes"], "float32")
        truth = ops.cast(y_true["masks"], "float32")
        size = STORED_MASK_SIZE
        found = int(y_pred["boxes"].shape[1])
        shapes = {
            "y_true['boxes']": (tuple(targets.shape[1:]), (self.max_boxes, TARGET_WIDTH)),
            "y_pred['boxes']": (tuple(y_pred["boxes"].shape[1:]), (found, 4)),
            "y_pred['masks']": (tuple(y_pred["masks"].shape[1:]), (found, size, size)),
        }
        for what, (shape, expected) in shapes.items():
            if shape != expected:
                raise ValueError(
                    f"{self.name!r} takes {what} of shape (B, {', '.join(map(str, expected))}). "
                    f"Received: {what}.shape={shape}"
                )
        factor = int(truth.shape[-1]) // size
        if truth.shape[-1] != factor * size or truth.shape[-2] != truth.shape[-1]:
            raise ValueError(
                f"{self.name!r} takes y_true['masks'] of (B, {self.max_boxes}, M, M), M a "
                f"multiple of {size}. Received: y_true['masks'].shape={tuple(truth.shape)}"
            )
        batch = ops.shape(targets)[0]
        truth = ops.mean(
            ops.reshape(truth, (batch, self.max_boxes, size, factor, size, factor)), axis=(3, 5)
        )
        detections = ops.concatenate(
            [
                ops.cast(y_pred["boxes"], "float32"),
                ops.cast(y_pred["scores"], "float32")[..., None],
                ops.cast(y_pred["classes"], "float32")[..., None],
            ],
            axis=-1,
        )[:, : self.max_detections]
        masks = y_pred["masks"][:, : self.max_detections]
        if found < self.max_detections:  # rows of class -1: no detection
            pad = self.max_detections - found
            detections = ops.pad(detections, ((0, 0), (0, pad), (0, 0)), constant_values=-1.0)
            masks = ops.pad(masks, ((0, 0), (0, pad), (0, 0), (0, 0)))
        if "image" in y_true:
            images = ops.cast(y_true["image"], "int32")
        elif self.annotations is not None:
            raise ValueError(
                f"{self.name!r} scores against {self.annotations!r}: y_true needs the images' "
                f"'image' values. Received: y_true keys {sorted(y_true)}"
            )
        else:
            images = ops.zeros((batch,), "int32")
        scored = ops.sum(ops.cast(targets[:, 0, SCALE_COLUMN] > 0, "int32"))
        start = ops.maximum(ops.minimum(self.count, self.capacity - batch), 0)
        for variable, value in (
            (self.detections, detections),
            (self.ground_truth, targets),
            (self.detection_masks, _as_bytes(masks)),
            (self.truth_masks, _as_bytes(truth)),
            (self.images, images),
        ):
            corner = (start,) + (0,) * (len(variable.shape) - 1)
            variable.assign(ops.slice_update(variable, corner, value))
        kept = ops.minimum(scored, ops.maximum(self.capacity - self.count, 0))
        self.dropped.assign(self.dropped + scored - kept)
        self.count.assign(self.count + kept)

    def _truth_source(self) -> str | None:
        if self.annotations is None:
            return None
        return f"{self.annotations} (data_dir={self.data_dir})"

    def _stored(self, count: int) -> list[np.ndarray]:
        return [
            *super()._stored(count),
            ops.convert_to_numpy(self.detection_masks)[:count],
            ops.convert_to_numpy(self.truth_masks)[:count],
            ops.convert_to_numpy(self.images)[:count],
        ]

    def _score(self, stored: list[np.ndarray], names: list[str]) -> dict[str, float]:
        detections, ground_truth, detection_masks, truth_masks, images = stored
        found = [rows[:, 5] >= 0 for rows in detections]
        originals = None
        if self.annotations is not None:
            kind = self.annotations.split(":", 1)[0]
            if kind not in GROUND_TRUTH_READERS:
                raise ValueError(
                    f"No reader of {kind!r} ground truth is registered (the instance "
                    "segmentation task registers COCO's: import keras_fourier.tasks). Received: "
                    f"annotations={self.annotations!r}"
                )
            originals = GROUND_TRUTH_READERS[kind](self.annotations, images, self.data_dir)
        return coco_evaluate_instances(
            list(ground_truth),
            list(truth_masks / 255.0),
            [rows[kept] for rows, kept in zip(detections, found, strict=True)],
            [masks[kept] / 255.0 for masks, kept in zip(detection_masks, found, strict=True)],
            names,
            originals,
        )

    def get_config(self) -> dict:
        return {**super().get_config(), "annotations": self.annotations, "data_dir": self.data_dir}


def _as_bytes(masks) -> object:
    """Probabilities in [0, 1] as uint8 0-255."""
    return ops.cast(ops.round(ops.clip(ops.cast(masks, "float32"), 0.0, 1.0) * 255.0), "uint8")
