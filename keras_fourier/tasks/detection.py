"""Object detection: boxes and classes of "digits", "coco:" and TFDS COCO/VOC data, with RetinaNet.

The task builds its model itself (:meth:`Detection.build_model`): a
:func:`keras_fourier.detection.RetinaNet` on the run's model as backbone,
whose raw (B, A, 8 + C) output carries its anchors, box deltas and class
logits (:data:`keras_fourier.layers.detection.RAW_COLUMNS`). Targets are the
ground-truth rows themselves (:data:`keras_fourier.detection.targets.TARGET_COLUMNS`);
the loss assigns anchors in the graph (:class:`~keras_fourier.detection.RetinaNetLoss`:
focal loss and L1). Metrics: COCO mAP@[.5:.95] (selects ``best.keras``),
mAP50, mAP75 and mAP per object size, from pycocotools' COCOeval over the
whole split (:class:`~keras_fourier.detection.COCOMeanAP`), plus each
class's AP in the breakdown; ``train`` prints ``test_map50=`` then
``test_map=`` last. `predict` writes, per image, its detections as COCO
results JSON (``<stem>_detections.json``, boxes in the image's pixels) and
the image with its boxes and class names drawn (``<stem>_boxes.png``),
atomically.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import keras
import numpy as np
import tensorflow as tf

from keras_fourier.data.checks import read_image_file
from keras_fourier.data.detection import (
    DIGIT_CANVAS,
    count_detection_examples,
    default_detection_augment,
    detection_category_ids,
    detection_class_names,
    detection_num_classes,
    detection_splits,
    is_detection_source,
    letterbox_example,
    load_detection_dataset,
)
from keras_fourier.detection import COCOMeanAP, RetinaNet, RetinaNetLoss, detector
from keras_fourier.detection.evaluation import coco_results
from keras_fourier.detection.targets import MAX_BOXES
from keras_fourier.fileio import atomic_write_bytes
from keras_fourier.layers.detection import RAW_BOX_COLUMNS
from keras_fourier.model_record import CLASS_NAMES_KEY
from keras_fourier.tasks.base import (
    EvaluationRequest,
    PredictRequest,
    Task,
    TaskData,
    image_input_size,
    run_splits,
    split_lines,
)
from keras_fourier.tasks.segmentation import backbone, palette

if TYPE_CHECKING:
    from keras_fourier.training.config import TrainConfig

DEFAULT_IMAGE_SIZE = 64
# The neck and head width of runs (RetinaNet's 256 is for COCO-size models) and the head's
# convolutions per subnet (RetinaNet's 4).
HEAD_CHANNELS = 64
HEAD_CONVS = 2
# What the default job on the digit canvases changes of the "deit" recipe.
DIGITS_RECIPE = {"epochs": 12, "batch_size": 16, "learning_rate": 1e-3, "warmup_epochs": 1}
# The anchors' base size of runs on the digit canvases: their 10-32 pixel digits are smaller
# than the 32-pixel anchors of RetinaNet's COCO setting at P3.
DIGITS_ANCHOR_SCALE = 2.0
# The category ids a run stores beside its class names (COCO results JSON needs them).
CATEGORY_IDS_KEY = "category_ids"
# Detections drawn by `predict`: those above this score.
DRAW_SCORE = 0.3
# The per-class AP table: names cut to this width, lines of about this many characters.
DETAILS_NAME_WIDTH = 20
DETAILS_LINE_WIDTH = 96
# The metrics of runs (COCOMeanAP keys; "map" selects best.keras) and the breakdown's sizes.
METRIC_KEYS = ("map", "map50", "map75")
SIZES = ("small", "medium", "large")


def _classes(output_shape) -> int:
    return int(output_shape[-1]) - RAW_BOX_COLUMNS


def _draw(image: np.ndarray, detections: np.ndarray, names: Sequence[str]) -> np.ndarray:
    """`image` (uint8 (H, W, 3)) with each detection's box and "<class> <score>" drawn."""
    try:
        from PIL import Image, ImageDraw
    except ImportError as error:  # pragma: no cover - the detection extra installs Pillow
        raise ImportError(
            "Drawing detections needs Pillow: pip install 'keras-fourier[detection]'"
        ) from error
    canvas = Image.fromarray(image)
    draw = ImageDraw.Draw(canvas)
    colours = palette(len(names) + 1)[1:]
    line = max(1, round(min(image.shape[:2]) / 200))
    for x1, y1, x2, y2, score, cls in detections:
        colour = tuple(int(c) for c in colours[int(cls)])
        draw.rectangle((x1, y1, x2, y2), outline=colour, width=line)
        draw.text((x1 + 2, y1 + 1), f"{names[int(cls)]} {score:.2f}", fill=colour)
    return np.asarray(canvas)


def image_detections(outputs: Mapping[str, np.ndarray], scale: float, image: tf.Tensor):
    """The first image's detections of a detector's `outputs` as (K, 6) rows in its own pixels.

    Rows ``[x1, y1, x2, y2, score, class]``: the boxes divided by the letterbox
    `scale` and clipped to `image` (H, W, 3).
    """
    count = int(outputs["num_detections"][0])
    found = np.concatenate(
        [
            outputs["boxes"][0, :count] / float(scale),
            outputs["scores"][0, :count, None],
            outputs["classes"][0, :count, None].astype(np.float32),
        ],
        axis=1,
    )
    height, width = int(image.shape[0]), int(image.shape[1])
    found[:, [0, 2]] = np.clip(found[:, [0, 2]], 0, width)
    found[:, [1, 3]] = np.clip(found[:, [1, 3]], 0, height)
    return found


class BoxTask(Task):
    """What detection and instance segmentation share: box data, its splits, labels, input size.

    A subclass sets `what` (the task in messages), `recipe` (the default
    job's on "digits"), `is_source` and `load` (its data's test and
    pipeline, `load_detection_dataset`'s arguments), and the model, loss,
    metrics and results.
    """

    modality = "image"
    fields = ("image_size", "eval_split", "validation_split")
    selection_mode = "max"
    what: str
    recipe: Mapping[str, Any]
    is_source: Callable[[str], bool]
    load: Callable[..., tf.data.Dataset]

    def accepts(self, data: str) -> bool:
        return self.is_source(data)

    @property
    def a_run(self) -> str:
        """The task's runs in messages: "a detection run", "an instance segmentation run"."""
        return f"{'an' if self.what[0] in 'aeiou' else 'a'} {self.what} run"

    def image_size(self, config: TrainConfig) -> int:
        """The run's input size: `image_size`, else 64."""
        return config.image_size or DEFAULT_IMAGE_SIZE

    def check(self, config: TrainConfig, name: Callable[[str], str]) -> None:
        size = self.image_size(config)
        if size % 32:
            raise ValueError(
                f"`{name('image_size')}` of {self.a_run} must be a multiple of 32 (the "
                f"backbone's stride). Received: {name('image_size')}={size}"
            )
        if config.weights is not None:
            self.check_weights(config, name)

    def check_weights(self, config: TrainConfig, name: Callable[[str], str]) -> None:
        """Refuses `config.weights` that the task cannot start from: here, any (no release).

        A subclass whose models have released weights accepts those.
        """
        raise ValueError(
            f"{self.a_run.capitalize()} starts from random weights (its model has no released "
            f"checkpoint); `{name('weights')}` is not supported. "
            f"Received: {name('weights')}={config.weights!r}"
        )

    def identity(self, config: TrainConfig, values: dict[str, Any]) -> dict[str, Any]:
        values["image_size"] = self.image_size(config)
        return values

    def recipe_defaults(self, config: TrainConfig) -> dict[str, Any]:
        """The default job on "digits" trains in minutes: `recipe`; others: none."""
        return dict(self.recipe) if config.data == DIGIT_CANVAS else {}

    def num_classes(self, data: str, data_dir: str | None = None) -> int:
        return detection_num_classes(data, data_dir)

    def split_size(self, data: str, split: str, data_dir: str | None = None) -> int | None:
        return count_detection_examples(data, split, data_dir)

    def labels(self, config: TrainConfig) -> dict[str, Any]:
        return {
            CLASS_NAMES_KEY: detection_class_names(config.data, config.data_dir),
            CATEGORY_IDS_KEY: detection_category_ids(config.data, config.data_dir),
        }

    def model_options(self, config: TrainConfig) -> dict[str, Any]:
        return {"image_size": self.image_size(config)}

    def describe_input(self, config: TrainConfig, model: keras.Model) -> str:
        return "x".join(str(size) for size in model.input_shape[1:])

    def _unscored(self, targets):
        """Training targets with scale 0: their augmented boxes are not scored (COCOMeanAP)."""
        return targets * tf.constant([1.0] * 7 + [0.0])

    def _pipeline(self, config: TrainConfig, split: str, training: bool) -> tf.data.Dataset:
        data = self.load(
            config.data,
            split,
            image_size=self.image_size(config),
            batch_size=config.batch_size,
            training=training,
            augment=default_detection_augment(config.data) if training else None,
            max_boxes=MAX_BOXES,
            data_dir=config.data_dir,
            seed=config.seed,
        )
        if not training:
            return data
        return data.map(lambda images, targets: (images, self._unscored(targets)))

    def datasets(self, config: TrainConfig, names: Mapping[str, str] | None = None) -> TaskData:
        train_split, validation_split = run_splits(
            config,
            *detection_splits(config.data, config.eval_split, data_dir=config.data_dir),
            names,
        )
        train = self._pipeline(config, train_split, training=True)
        validation = self._pipeline(config, validation_split, training=False)
        splits = split_lines(config, train_split, validation_split, count_detection_examples)
        return TaskData(train, validation, self.num_classes(config.data, config.data_dir), splits)

    def evaluation_data(self, model: keras.Model, request: EvaluationRequest) -> tf.data.Dataset:
        size = image_input_size(model, request.data, self.what, DEFAULT_IMAGE_SIZE)
        return self.load(
            request.data,
            request.split,
            image_size=size,
            batch_size=request.batch_size,
            training=False,
            max_boxes=MAX_BOXES,
            data_dir=request.data_dir,
            on_bad_image=request.on_bad_image,
        )

    @staticmethod
    def coco_breakdown(
        metrics: Sequence[keras.metrics.Metric],
        labels: Mapping[str, Any],
        size_prefixes: Sequence[str],
        class_prefix: str,
    ) -> dict[str, float]:
        """Values of the split's COCO evaluation: ``<prefix>/<size>`` of each of `size_prefixes`
        and ``<class_prefix>/<class name>``, those COCO leaves undefined left out."""
        meter = next(metric for metric in metrics if isinstance(metric, COCOMeanAP))
        values = meter.evaluation()
        names = list(labels.get(CLASS_NAMES_KEY) or [])
        result = {
            f"{prefix}/{size}": float(values[f"{prefix}_{size}"])
            for prefix in size_prefixes
            for size in SIZES
            if math.isfinite(values[f"{prefix}_{size}"])
        }
        count = meter.num_classes or 0
        for index in range(count):
            value = values.get(f"{class_prefix}/{index}", math.nan)
            name = names[index] if len(names) == count else str(index)
            if math.isfinite(value):
                result[f"{class_prefix}/{name}"] = float(value)
        return result

    @staticmethod
    def size_lines(metrics: Mapping[str, float], prefix: str, title: str) -> list[str]:
        """The line of ``<prefix>/<size>`` values, when there is one: "<title> by size: ..."."""
        if not any(f"{prefix}/{size}" in metrics for size in SIZES):
            return []
        sizes = ", ".join(
            f"{size} {f'{metrics[key]:.4f}' if key in metrics else '-'}"
            for size in SIZES
            for key in [f"{prefix}/{size}"]
        )
        return [f"{title} by size: {sizes}"]

    @staticmethod
    def class_lines(metrics: Mapping[str, float], prefix: str, title: str) -> list[str]:
        """The ``<prefix>/<class>`` values as a compact table under "<title>:", when any."""
        start = len(prefix) + 1
        values = {
            key[start:]: value for key, value in metrics.items() if key[:start] == prefix + "/"
        }
        if not values:
            return []
        width = min(max(len(name) for name in values), DETAILS_NAME_WIDTH)
        cells = [f"{name[:width]:<{width}} {value:.4f}" for name, value in values.items()]
        per_line = max(1, DETAILS_LINE_WIDTH // (width + 10))
        return [f"{title}:"] + [
            "  " + "   ".join(cells[start : start + per_line])
            for start in range(0, len(cells), per_line)
        ]


class Detection(BoxTask):
    """Object detection with RetinaNet on the run's backbone."""

    name = "detection"
    what = "detection"
    sources = "'digits', 'coco:<path>', 'tfds:coco/2017' or 'tfds:voc/2007'"
    selection_metric = "map"
    outputs = "classes (RetinaNet, 9 anchors a location)"
    recipe = DIGITS_RECIPE
    is_source = staticmethod(is_detection_source)
    load = staticmethod(load_detection_dataset)

    def build_model(self, config: TrainConfig, num_classes: int) -> keras.Model:
        """RetinaNet on `config.model` at the run's size, with the runs' head width."""
        size = self.image_size(config)
        return RetinaNet(
            backbone(config, size),
            num_classes,
            input_shape=(size, size, 3),
            channels=HEAD_CHANNELS,
            stacked_convs=HEAD_CONVS,
            anchor_scale=DIGITS_ANCHOR_SCALE if config.data == DIGIT_CANVAS else 4.0,
            drop_path_rate=config.drop_path_rate,
        )

    def check_outputs(self, model: keras.Model, num_classes: int | None, what: str) -> None:
        """Refuses a model without the raw (B, A, 8 + C) output of the data's C classes."""
        shape = model.output_shape
        if not isinstance(shape, tuple) or len(shape) != 3 or shape[-1] <= RAW_BOX_COLUMNS:
            raise ValueError(
                f"Model {model.name!r} does not output a one-stage detector's raw (B, anchors, "
                f"8 + classes) predictions, as {self.name} needs. Received: output_shape={shape}"
            )
        classes = _classes(shape)
        if num_classes is not None and classes != num_classes:
            raise ValueError(
                f"Model {model.name!r} detects {classes} classes but {what} has {num_classes}: "
                f"use a model of its classes. Received: output_shape={shape}"
            )

    def loss(self, config: TrainConfig | None = None) -> keras.losses.Loss:
        """RetinaNet's focal loss and L1 box loss, over the batch's positive anchors."""
        del config
        return RetinaNetLoss()

    def metrics(self, num_classes: int, *, training: bool = False) -> list[keras.metrics.Metric]:
        """COCO mAP (over the whole split, pycocotools), then mAP50, mAP75 and mAP per size.

        The classes are read from the predictions (`num_classes` is the
        data's, or the raw output's width where `evaluate` scores a model).
        """
        del num_classes, training
        return [COCOMeanAP(max_boxes=MAX_BOXES, key=key) for key in METRIC_KEYS]

    def summary(self, metrics: dict[str, float]) -> list[str]:
        """``test_map50=...`` then ``test_map=...`` (last), 4 decimals.

        Example:
            >>> TASK.summary({"map": 0.5, "map50": 0.75, "loss": 1.0})
            ['test_map50=0.7500', 'test_map=0.5000']
        """
        return [f"test_map50={metrics['map50']:.4f}", f"test_map={metrics['map']:.4f}"]

    def breakdown(
        self, metrics: Sequence[keras.metrics.Metric], labels: Mapping[str, Any]
    ) -> dict[str, float]:
        """mAP per object size (``map/small``, ...) and each class's AP (``ap/<class name>``).

        Values COCO leaves undefined (no box of that size or class) are left out.
        """
        return self.coco_breakdown(metrics, labels, ("map",), "ap")

    def details(self, metrics: dict[str, float]) -> list[str]:
        """mAP per object size, then the per-class AP of `breakdown` as a compact table.

        Example:
            >>> TASK.details({"map/small": 0.2, "map/medium": 0.5, "ap/cat": 0.1})
            ['mAP by size: small 0.2000, medium 0.5000, large -', 'per-class AP:', '  cat 0.1000']
        """
        return [
            *self.size_lines(metrics, "map", "mAP"),
            *self.class_lines(metrics, "ap", "per-class AP"),
        ]

    def predict(self, model: keras.Model, request: PredictRequest) -> list[str]:
        """Writes ``<stem>_detections.json`` (COCO results) and ``<stem>_boxes.png`` per image."""
        if request.out is None:
            raise ValueError(
                "Detection writes detections and drawn images: pass an output folder. "
                "Received: out=None"
            )
        size = model.input_shape[1] or DEFAULT_IMAGE_SIZE
        num_classes = _classes(model.output_shape)
        names = request.record.get(CLASS_NAMES_KEY) or [str(index) for index in range(num_classes)]
        category_ids = request.record.get(CATEGORY_IDS_KEY) or list(range(1, num_classes + 1))
        decoding = detector(model)
        lines = []
        for image_id, path in enumerate(request.inputs):
            image = read_image_file(path)
            fitted, _, scale = letterbox_example(
                tf.cast(image, tf.float32), tf.zeros((0, 7), tf.float32), size
            )
            found = image_detections(decoding.predict(fitted[None], verbose=0), scale, image)
            results = coco_results([found], [image_id], category_ids)
            for result in results:
                result["file_name"] = os.path.basename(path)
            stem = request.stem(path)
            drawn = _draw(image.numpy(), found[found[:, 4] > DRAW_SCORE], names)
            os.makedirs(request.out, exist_ok=True)
            atomic_write_bytes(
                stem + "_detections.json", json.dumps(results, indent=1).encode("utf-8")
            )
            atomic_write_bytes(stem + "_boxes.png", tf.io.encode_png(drawn).numpy())
            shown = [
                f"{names[int(cls)]} {score:.2f}" for *_, score, cls in found if score > DRAW_SCORE
            ]
            lines.append(
                f"{path}: {stem}_detections.json, {stem}_boxes.png "
                f"({', '.join(shown) if shown else 'no detection above ' + str(DRAW_SCORE)})"
            )
        return lines


TASK = Detection()
