"""Instance segmentation: boxes, classes and masks of digits, COCO and TFDS panoptic data.

The task builds its model itself (:meth:`InstanceSegmentation.build_model`):
a :func:`keras_fourier.detection.CascadeMaskRCNN` (`ARCH`) on the run's model
as backbone, with a narrow neck and heads (`CHANNELS`, `FC_CHANNELS`), or,
with ``weights`` ("coco" or an mmdetection `.pth`), the release's own
Cascade Mask R-CNN fine-tuned from them on the data's classes, whose
output is the detections dict {"boxes", "scores", "classes",
"num_detections", "masks"}. Targets are the box rows and box-local masks
of :func:`keras_fourier.data.instances.load_instance_dataset`; the model
computes its own training loss from them (RPN, R-CNN stages, mask BCE).
Metrics: COCO box and mask AP over the whole split from pycocotools'
COCOeval, "bbox" and "segm" (:class:`~keras_fourier.detection.COCOInstanceAP`);
mask mAP@[.5:.95] selects ``best.keras``; ``train`` prints ``test_map50=``,
``test_map=``, ``test_mask_map50=``, then ``test_mask_map=`` last. `predict`
writes, per image, its instances as COCO results JSON with RLE
``segmentation`` in the image's pixels (``<stem>_instances.json``) and the
image with its masks coloured over it, boxes and class names drawn
(``<stem>_masks.png``), atomically, once every image has been read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import keras
import numpy as np
import tensorflow as tf

from keras_fourier.data.checks import read_image_file
from keras_fourier.data.detection import count_detection_examples, letterbox_example
from keras_fourier.data.instances import (
    coco_truth,
    is_instance_source,
    load_instance_dataset,
    tfds_truth,
)
from keras_fourier.detection import COCOInstanceAP, coco
from keras_fourier.detection.evaluation import coco_results, mask_results, paste_mask
from keras_fourier.detection.metrics import register_ground_truth
from keras_fourier.detection.two_stage import TwoStageDetector, two_stage_detector
from keras_fourier.fileio import atomic_write_bytes
from keras_fourier.model_record import CLASS_NAMES_KEY
from keras_fourier.models.names import VARIANTS
from keras_fourier.segmentation.checkpoints import variant_key
from keras_fourier.tasks.base import EvaluationRequest, PredictRequest
from keras_fourier.tasks.detection import (
    CATEGORY_IDS_KEY,
    DEFAULT_IMAGE_SIZE,
    DRAW_SCORE,
    BoxTask,
    _draw,
    image_detections,
)
from keras_fourier.tasks.segmentation import backbone, palette

if TYPE_CHECKING:
    from keras_fourier.training.config import TrainConfig

# The architecture of runs (a row of keras_fourier.detection.TWO_STAGE_ARCHS): HorNet's
# Cascade Mask R-CNN; on small images (at most SMALL_IMAGE pixels, the digit canvases) Mask
# R-CNN, whose one stage trains about twice as fast (measured: 1.9 s against 3-4 s a batch of
# 16 canvases on a loaded 2-core host, with SMALL_IMAGE_SETTINGS).
ARCH = "cascade_mask_rcnn"
SMALL_IMAGE_ARCH = "mask_rcnn"
SMALL_IMAGE = 128
# Widths of runs: the neck, RPN and box-head convs; the box heads' dense layer; the mask heads.
CHANNELS = 64
FC_CHANNELS = 256
MASK_CHANNELS = 64
# Proposals and detections per image at inference on small images (the builder's
# max_proposals and max_detections, 1000 and 100 else; the digit canvases hold 1 to 3).
SMALL_IMAGE_PROPOSALS = 100
SMALL_IMAGE_DETECTIONS = 20
# The training settings that small images change of mmdetection's COCO ones, builder argument
# (a layer) -> {constructor argument: value} (kept in the layer's config, so in model.keras):
# RPN training proposals per level and kept (2000), RoIs sampled per image (512),
# RoIAlign's gathers per bin in training (64; 16 is mmcv's exact 2 x 2 grid, RoIs up to 14
# feature pixels, 56 input pixels on P2; inference is always exact) and the class-wise NMS
# candidates (1000). Measured
# on batches of 16 canvases: training 8.1 s to 1.9 s, inference 5.6 s to 1.3 s (with
# SMALL_IMAGE_DETECTIONS).
SMALL_IMAGE_SETTINGS = {
    "proposals": {"train_pre_nms": 128, "train_max_proposals": 128},
    "roi_head": {"num_samples": 32, "train_sampling_terms": 16, "pre_nms": 200},
}
# COCOInstanceAP(annotations="coco:<path>" or "tfds:coco/2017_panoptic") scores against the
# source's own annotations.
register_ground_truth("coco", coco_truth)
register_ground_truth("tfds", tfds_truth)
# What the default job on the digit canvases changes of the "deit" recipe.
DIGITS_RECIPE = {"epochs": 6, "batch_size": 16, "learning_rate": 1e-3, "warmup_epochs": 1}
# The metrics of runs (COCOInstanceAP keys; "mask_map" selects best.keras).
METRIC_KEYS = ("map", "map50", "mask_map", "mask_map50", "mask_map75")
# Images the metrics hold when the scored split's size is unknown.
DEFAULT_CAPACITY = 5000
# How much of a mask's colour covers the image in the overlay.
OVERLAY_ALPHA = 0.5


def _is_two_stage(model: keras.Model) -> bool:
    """Whether `model` outputs a two-stage detector's detections dict, with its RoI head."""
    outputs = model.output
    needed = {"boxes", "scores", "classes", "num_detections", "masks"}
    names = {layer.name for layer in model.layers}
    return isinstance(outputs, dict) and needed <= set(outputs) and "roi_head" in names


def _overlay(
    image: np.ndarray, found: np.ndarray, masks: Sequence[np.ndarray], names: Sequence[str]
) -> np.ndarray:
    """`image` with each instance's mask coloured over it, then its box and class drawn."""
    colours = palette(len(names) + 1)[1:].astype(np.float32)
    blended = image.astype(np.float32)
    for row, mask in zip(found, masks, strict=True):
        colour = colours[int(row[5])]
        blended[mask] = (1 - OVERLAY_ALPHA) * blended[mask] + OVERLAY_ALPHA * colour
    return _draw(np.round(blended).astype(np.uint8), found, names)


class InstanceSegmentation(BoxTask):
    """Instance segmentation with Cascade Mask R-CNN on the run's backbone."""

    name = "instance_segmentation"
    what = "instance segmentation"
    sources = "'digits', 'coco:<path>' (COCO polygons or RLE) or 'tfds:coco/2017_panoptic'"
    selection_metric = "mask_map"
    outputs = "classes (Cascade Mask R-CNN: boxes and 28x28 masks)"
    recipe = DIGITS_RECIPE
    is_source = staticmethod(is_instance_source)
    load = staticmethod(load_instance_dataset)
    # The size of the split a pipeline last scored (the metrics' capacity), its source when it
    # has its own annotations (the metrics' ground truth: coco: and TFDS panoptic), and the
    # TFDS data directory.
    _scored_images: int | None = None
    _scored_source: str | None = None
    _scored_data_dir: str | None = None

    def check_weights(self, config: TrainConfig, name: Callable[[str], str]) -> None:
        """Accepts "coco" (the release of a HorNet `model`) and an existing mmdetection `.pth`.

        Both start the release's Cascade Mask R-CNN on the named backbone
        (:meth:`build_model`), so the model must be a named variant with an
        official key map and no architecture settings.
        """
        flag, weights = name("weights"), config.weights
        if weights != "coco" and not str(weights).endswith((".pth", ".pt")):
            raise ValueError(
                f"{self.a_run.capitalize()} starts from random weights, from 'coco' (the official "
                f"HorNet Cascade Mask R-CNN checkpoint of `{name('model')}`) or from an "
                f"mmdetection '.pth' checkpoint in its layout; `{flag}` takes nothing else. "
                f"Received: {flag}={weights!r}"
            )
        key = variant_key(config.model)
        if config.architecture or key is None:
            raise ValueError(
                f"`{flag}` of {self.a_run} loads into a named backbone of "
                f"{sorted(VARIANTS)} without architecture settings. "
                f"Received: {name('model')}={config.model!r}"
            )
        if weights == "coco" and key not in coco.RELEASES:
            raise ValueError(
                f"`{flag} coco` loads the official Cascade Mask R-CNN checkpoint of a HorNet "
                f"backbone: use a `{name('model')}` of {sorted(coco.RELEASES)}. Received: "
                f"{name('model')}={config.model!r}"
            )
        if weights != "coco" and not os.path.isfile(weights):
            raise ValueError(f"`{flag}` names no file. Received: {flag}={weights!r}")

    def build_model(self, config: TrainConfig, num_classes: int) -> keras.Model:
        """`ARCH` on `config.model` at the run's size (`SMALL_IMAGE_ARCH` and settings on small).

        With `config.weights` ("coco" or an mmdetection `.pth`), the release's
        Cascade Mask R-CNN (its widths, not the runs' narrow heads) starts
        from them; on other classes than the checkpoint's, its class-dependent
        layers start fresh (:func:`~keras_fourier.detection.checkpoints.load_detection_weights`).
        """
        size = self.image_size(config)
        small = size <= SMALL_IMAGE
        widths = {"channels": CHANNELS, "fc_channels": FC_CHANNELS, "mask_channels": MASK_CHANNELS}
        return two_stage_detector(
            SMALL_IMAGE_ARCH if small and config.weights is None else ARCH,
            backbone(config, size),
            num_classes,
            input_shape=(size, size, 3),
            weights=config.weights,
            max_proposals=SMALL_IMAGE_PROPOSALS if small else 1000,
            max_detections=SMALL_IMAGE_DETECTIONS if small else 100,
            drop_path_rate=config.drop_path_rate,
            **(widths if config.weights is None else {}),
            **(SMALL_IMAGE_SETTINGS if small else {}),
        )

    def scorer(self, model: keras.Model) -> keras.Model:
        """A :class:`~keras_fourier.detection.TwoStageDetector` of `model`'s layers (its loss)."""
        return TwoStageDetector(model.input, model.output, name=f"{model.name}_scorer")

    def _unscored(self, targets):
        return {**targets, "boxes": super()._unscored(targets["boxes"])}

    def _pipeline(self, config: TrainConfig, split: str, training: bool) -> tf.data.Dataset:
        data = super()._pipeline(config, split, training)
        if not training:
            self._scored(config.data, split, config.data_dir)
        return data

    def evaluation_data(self, model: keras.Model, request: EvaluationRequest) -> tf.data.Dataset:
        data = super().evaluation_data(model, request)
        self._scored(request.data, request.split, request.data_dir)
        return data

    def _scored(self, data: str, split: str, data_dir: str | None) -> None:
        self._scored_images = count_detection_examples(data, split, data_dir)
        self._scored_source = data if data.startswith(("coco:", "tfds:")) else None
        self._scored_data_dir = data_dir

    def check_outputs(self, model: keras.Model, num_classes: int | None, what: str) -> None:
        """Refuses a model without a two-stage detector's detections and masks of C classes."""
        if not _is_two_stage(model):
            raise ValueError(
                f"Model {model.name!r} does not output a two-stage detector's detections and "
                f"masks ({{'boxes', 'scores', 'classes', 'num_detections', 'masks'}}), as "
                f"{self.name} needs. Received: output_shape={model.output_shape}"
            )
        classes = model.get_layer("roi_head").num_classes
        if num_classes is not None and classes != num_classes:
            raise ValueError(
                f"Model {model.name!r} detects {classes} classes but {what} has {num_classes}: "
                f"use a model of its classes. Received: num_classes={classes}"
            )

    def loss(self, config: TrainConfig | None = None) -> None:
        """None: the two-stage detector computes its loss itself (RPN, stages, masks)."""
        del config

    def metrics(self, num_classes: int, *, training: bool = False) -> list[keras.metrics.Metric]:
        """COCO box mAP and mAP50, mask mAP, mAP50 and mAP75 of the whole split (pycocotools).

        They hold as many images as the split last given by `datasets` or
        `evaluation_data` (else 5,000); on a ``coco:`` or TFDS panoptic
        source they score against its own annotations at the original
        resolution.
        """
        del training
        capacity = self._scored_images or DEFAULT_CAPACITY
        return [
            COCOInstanceAP(
                num_classes,
                capacity=capacity,
                max_boxes=100,
                key=key,
                annotations=self._scored_source,
                data_dir=self._scored_data_dir,
            )
            for key in METRIC_KEYS
        ]

    def summary(self, metrics: dict[str, float]) -> list[str]:
        """``test_map50=``, ``test_map=``, ``test_mask_map50=``, ``test_mask_map=`` (last).

        Example:
            >>> TASK.summary({"map": 0.5, "map50": 0.75, "mask_map": 0.4, "mask_map50": 0.7})[2:]
            ['test_mask_map50=0.7000', 'test_mask_map=0.4000']
        """
        return [
            f"test_{key}={metrics[key]:.4f}" for key in ("map50", "map", "mask_map50", "mask_map")
        ]

    def breakdown(
        self, metrics: Sequence[keras.metrics.Metric], labels: Mapping[str, Any]
    ) -> dict[str, float]:
        """Box and mask mAP per object size (``map/small``, ``mask_map/small``, ...) and each
        class's mask AP (``mask_ap/<class name>``); values COCO leaves undefined are left out."""
        return self.coco_breakdown(metrics, labels, ("map", "mask_map"), "mask_ap")

    def details(self, metrics: dict[str, float]) -> list[str]:
        """Box and mask mAP per object size, then each class's mask AP as a compact table.

        Example:
            >>> TASK.details({"map/small": 0.2, "mask_map/small": 0.1, "mask_ap/cat": 0.1})
            ['box mAP by size: small 0.2000, medium -, large -', \
'mask mAP by size: small 0.1000, medium -, large -', 'per-class mask AP:', '  cat 0.1000']
        """
        return [
            *self.size_lines(metrics, "map", "box mAP"),
            *self.size_lines(metrics, "mask_map", "mask mAP"),
            *self.class_lines(metrics, "mask_ap", "per-class mask AP"),
        ]

    def predict(self, model: keras.Model, request: PredictRequest) -> list[str]:
        """Writes ``<stem>_instances.json`` (COCO results, RLE) and ``<stem>_masks.png`` per image.

        Every image is decoded before anything is written: an unreadable one
        refuses the whole request, and the folder is not created. Images are
        held one at a time (decoded again for their prediction), so memory
        does not grow with the number of inputs.
        """
        if request.out is None:
            raise ValueError(
                "Instance segmentation writes instances and overlay images: pass an output "
                "folder. Received: out=None"
            )
        self.check_outputs(model, None, "the data")
        size = model.input_shape[1] or DEFAULT_IMAGE_SIZE
        num_classes = model.get_layer("roi_head").num_classes
        names = request.record.get(CLASS_NAMES_KEY) or [str(index) for index in range(num_classes)]
        category_ids = request.record.get(CATEGORY_IDS_KEY) or list(range(1, num_classes + 1))
        for path in request.inputs:
            read_image_file(path)
        os.makedirs(request.out, exist_ok=True)
        lines = []
        for image_id, path in enumerate(request.inputs):
            image = read_image_file(path)
            fitted, _, scale = letterbox_example(
                tf.cast(image, tf.float32), tf.zeros((0, 7), tf.float32), size
            )
            out = model.predict(fitted[None], verbose=0)
            found = image_detections(out, scale, image)
            height, width = int(image.shape[0]), int(image.shape[1])
            masks = out["masks"][0, : len(found)]
            results = coco_results([found], [image_id], category_ids)
            encoded = mask_results(found, masks, height, width)
            for result, (rle, area) in zip(results, encoded, strict=True):
                result.update(segmentation=rle, area=area, file_name=os.path.basename(path))
            shown = found[:, 4] > DRAW_SCORE
            pasted = [
                paste_mask(mask, row[:4], height, width)
                for row, mask in zip(found[shown], masks[shown], strict=True)
            ]
            overlay = _overlay(image.numpy(), found[shown], pasted, names)
            stem = request.stem(path)
            atomic_write_bytes(stem + "_instances.json", json.dumps(results, indent=1).encode())
            atomic_write_bytes(stem + "_masks.png", tf.io.encode_png(overlay).numpy())
            labels = [f"{names[int(cls)]} {score:.2f}" for *_, score, cls in found[shown]]
            lines.append(
                f"{path}: {stem}_instances.json, {stem}_masks.png "
                f"({', '.join(labels) if labels else 'no instance above ' + str(DRAW_SCORE)})"
            )
        return lines


TASK = InstanceSegmentation()
