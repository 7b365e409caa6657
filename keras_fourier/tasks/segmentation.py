"""Semantic segmentation: per-pixel classes of "digits", "segdir:" and masked TFDS data.

The task builds its model itself (:meth:`Segmentation.build_model`): a
UPerNet (:func:`keras_fourier.segmentation.UPerNet`) on the run's model as
backbone, trained with its auxiliary FCN head. The training model outputs
the main logits then the auxiliary logits along the last axis, so that it
has one output and the loss is CE(logits) + 0.4 CE(auxiliary), both with
ignore index 255 (:class:`keras_fourier.metrics.SegmentationCrossEntropy`);
:meth:`Segmentation.inference_model` gives the logits-only model that
evaluation, prediction and export use. Metrics: mIoU (selects
``best.keras``) and pixel accuracy over the whole split; ``train`` prints
``test_miou=<value>`` last. `predict` writes, per image, the label map
(``<stem>_labels.png``, one class index per pixel) and a coloured overlay
(``<stem>_overlay.png``), atomically.

A run may start from another run's backbone (``weights=<run folder or
.keras>``, e.g. an inpainting run, as AFNO's few-shot segmentation starts
from its inpainting pretraining): every layer of the backbone is copied by
name, all or nothing.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import keras
import numpy as np
import tensorflow as tf

from keras_fourier.data.checks import read_image_file
from keras_fourier.data.segmentation import (
    DIGIT_CANVAS,
    IGNORE_INDEX,
    count_segmentation_examples,
    default_augment,
    fit_image,
    is_segmentation_source,
    load_segmentation_dataset,
    segmentation_class_names,
    segmentation_num_classes,
    segmentation_splits,
)
from keras_fourier.fileio import atomic_write_bytes
from keras_fourier.limits import check_memory
from keras_fourier.metrics import MeanIoU, PixelAccuracy, SegmentationCrossEntropy
from keras_fourier.model_record import CLASS_NAMES_KEY
from keras_fourier.models.builder import build_model
from keras_fourier.models.names import VISION_PRESETS, canonical_name
from keras_fourier.run_folder import resolve_model_file
from keras_fourier.segmentation import UPerNet
from keras_fourier.tasks.base import (
    EvaluationRequest,
    PredictRequest,
    Task,
    TaskData,
    image_input_size,
    run_splits,
    split_lines,
)
from keras_fourier.weights.saved import load_keras_file

if TYPE_CHECKING:
    from keras_fourier.training.config import TrainConfig

DEFAULT_IMAGE_SIZE = 64
# The head width of runs (UPerNet's 512 is for ADE20K-size models).
HEAD_CHANNELS = 64
AUXILIARY_WEIGHT = 0.4
# What the default job on the digit canvases changes of the "deit" recipe (a few minutes on
# two CPU cores).
DIGITS_RECIPE = {"epochs": 10, "batch_size": 32}
# The per-class IoU table: names cut to this width, lines of about this many characters.
DETAILS_NAME_WIDTH = 20
DETAILS_LINE_WIDTH = 96
# Bytes per pixel of predicting an image (see `prediction_bytes`), and of one band of rows of
# its resized logits (`resized_labels`, the overlay).
PREDICTION_BYTES_PER_PIXEL = 16
BAND_BYTES = 8 * 2**20
# Layers of a segmenter that are not its backbone's (not copied by `transfer_backbone`).
HEAD_LAYERS = ("decode_head", "auxiliary", "logits", "resize", "neck", "pyramid_neck", "restore")


def palette(num_classes: int) -> np.ndarray:
    """A fixed colour per class (uint8 (num_classes, 3)); class 0 is black.

    Example:
        >>> palette(3)[0].tolist()
        [0, 0, 0]
    """
    rng = np.random.default_rng(0)
    colours = rng.integers(64, 256, size=(num_classes, 3)).astype(np.uint8)
    colours[0] = 0
    return colours


def _flat_layers(model: keras.Model) -> list[keras.layers.Layer]:
    """The layers of `model`, those of nested models in their place."""
    layers = []
    for layer in model.layers:
        layers.extend(_flat_layers(layer) if isinstance(layer, keras.Model) else [layer])
    return layers


def transfer_backbone(model: keras.Model, source: keras.Model) -> int:
    """Copies every backbone layer of `source` into the same-named layer of `model`.

    Args:
        model: the segmenter to start.
        source: a model of the same backbone (e.g. an inpainting run's).

    Returns:
        The number of layers copied.

    Raises:
        ValueError: no backbone layer in common, or one whose weight shapes
            differ (nothing is copied then).
    """
    targets = {layer.name: layer for layer in _flat_layers(model)}
    pairs = []
    for layer in _flat_layers(source):
        if not layer.weights or layer.name.startswith(HEAD_LAYERS):
            continue
        target = targets.get(layer.name)
        if target is None:
            continue
        shapes = [tuple(weight.shape) for weight in layer.weights]
        if shapes != [tuple(weight.shape) for weight in target.weights]:
            raise ValueError(
                f"Layer {layer.name!r} of the starting model has weights of shapes {shapes}, "
                f"the run's model {[tuple(weight.shape) for weight in target.weights]}: the "
                f"backbones differ. Received: weights={source.name!r}"
            )
        pairs.append((target, layer))
    if not pairs:
        raise ValueError(
            f"The starting model {source.name!r} shares no backbone layer with the run's model. "
            f"Received: weights={source.name!r}"
        )
    for target, layer in pairs:
        target.set_weights(layer.get_weights())
    return len(pairs)


def backbone(config: TrainConfig, size: int) -> str | keras.Model:
    """The backbone of a dense run: its model name, or the preset built with its architecture.

    The architecture settings (``--dims``, ``--depths``, ...) change a
    `build_model` preset (e.g. "afno_tiny"); it is built here without its
    head and preprocessing (the segmenter normalises).

    Raises:
        ValueError: architecture settings for a model that is no preset.
    """
    if not config.architecture:
        return config.model
    key = canonical_name(config.model)
    if key not in VISION_PRESETS:
        raise ValueError(
            f"Architecture settings change the presets {sorted(VISION_PRESETS)}, not model "
            f"{config.model!r}. Received: architecture={config.architecture!r}"
        )
    return build_model(
        **{**VISION_PRESETS[key], **config.architecture},
        include_top=False,
        include_preprocessing=False,
        input_shape=(size, size, 3),
        name=key,
    )


def dense_network(
    config: TrainConfig, size: int, num_classes: int, *, auxiliary: bool = False
) -> keras.Model:
    """The UPerNet of a dense run (segmentation, inpainting) on its backbone (:func:`backbone`).

    Args:
        config: the run's settings (its model, architecture and drop path rate).
        size: the input height and width.
        num_classes: the output channels per pixel.
        auxiliary: whether it also returns the auxiliary FCN head's logits,
            as {"logits", "auxiliary"}. Default False.

    Returns:
        The UPerNet, with the runs' head width :data:`HEAD_CHANNELS`.
    """
    return UPerNet(
        backbone=backbone(config, size),
        num_classes=num_classes,
        input_shape=(size, size, 3),
        auxiliary=auxiliary,
        channels=HEAD_CHANNELS,
        drop_path_rate=config.drop_path_rate,
    )


class Segmentation(Task):
    """Semantic segmentation with a UPerNet head on the run's backbone."""

    name = "segmentation"
    modality = "image"
    sources = "'digits', 'segdir:<path>', 'tfds:oxford_iiit_pet' or 'tfds:scene_parse150'"
    # "deterministic" stays a field so that run folders that recorded it resume; segmentation
    # augmentation is seeded per example, reproducible either way.
    fields = ("image_size", "eval_split", "validation_split", "deterministic")
    selection_metric = "miou"
    selection_mode = "max"

    def accepts(self, data: str) -> bool:
        return is_segmentation_source(data)

    def image_size(self, config: TrainConfig) -> int:
        """The run's crop size: `image_size`, else 64."""
        return config.image_size or DEFAULT_IMAGE_SIZE

    def check(self, config: TrainConfig, name: Callable[[str], str]) -> None:
        size = self.image_size(config)
        if size % 32:
            raise ValueError(
                f"`{name('image_size')}` of a segmentation run must be a multiple of 32 (the "
                f"decode heads' coarsest stride). Received: {name('image_size')}={size}"
            )
        if config.weights is not None:
            resolve_model_file(config.weights)  # a run folder or .keras file, else an error

    def identity(self, config: TrainConfig, values: dict[str, Any]) -> dict[str, Any]:
        values["image_size"] = self.image_size(config)
        return values

    def default_recipe(self, config: TrainConfig) -> str:
        del config
        return "deit"

    def recipe_defaults(self, config: TrainConfig) -> dict[str, Any]:
        """The default job on "digits" trains in a few minutes: `DIGITS_RECIPE`; others: none."""
        return dict(DIGITS_RECIPE) if config.data == DIGIT_CANVAS else {}

    def num_classes(self, data: str, data_dir: str | None = None) -> int:
        return segmentation_num_classes(data, data_dir)

    def split_size(self, data: str, split: str, data_dir: str | None = None) -> int | None:
        return count_segmentation_examples(data, split, data_dir)

    def labels(self, config: TrainConfig) -> dict[str, Any]:
        return {CLASS_NAMES_KEY: segmentation_class_names(config.data, config.data_dir)}

    def model_options(self, config: TrainConfig) -> dict[str, Any]:
        return {"image_size": self.image_size(config)}

    def build_model(self, config: TrainConfig, num_classes: int) -> keras.Model:
        """The training model: UPerNet on `config.model`, logits and auxiliary logits concatenated.

        With `config.weights` (a run folder or `.keras` file), its backbone
        starts the run (:func:`transfer_backbone`).
        """
        size = self.image_size(config)
        segmenter = dense_network(config, size, num_classes, auxiliary=True)
        outputs = keras.layers.Concatenate(name="logits_and_auxiliary")(
            [segmenter.output["logits"], segmenter.output["auxiliary"]]
        )
        model = keras.Model(segmenter.inputs, outputs, name=f"{segmenter.name}_training")
        if config.weights is not None:
            transfer_backbone(model, load_keras_file(resolve_model_file(config.weights)))
        return model

    def inference_model(self, model: keras.Model) -> keras.Model:
        """The logits-only model of a training model (the same weights); others as they are."""
        try:
            logits = model.get_layer("logits").output
        except ValueError:
            return model
        if logits is model.output:
            return model
        return keras.Model(model.inputs, logits, name=model.name.removesuffix("_training"))

    def describe_input(self, config: TrainConfig, model: keras.Model) -> str:
        return "x".join(str(size) for size in model.input_shape[1:])

    def datasets(self, config: TrainConfig, names: Mapping[str, str] | None = None) -> TaskData:
        train_split, validation_split = run_splits(
            config,
            *segmentation_splits(config.data, config.eval_split, data_dir=config.data_dir),
            names,
        )
        options = {
            "image_size": self.image_size(config),
            "batch_size": config.batch_size,
            "data_dir": config.data_dir,
        }
        train = load_segmentation_dataset(
            config.data,
            train_split,
            training=True,
            augment=default_augment(config.data),
            seed=config.seed,
            **options,
        )
        validation = load_segmentation_dataset(
            config.data, validation_split, training=False, **options
        )
        splits = split_lines(config, train_split, validation_split, count_segmentation_examples)
        return TaskData(train, validation, self.num_classes(config.data, config.data_dir), splits)

    def evaluation_data(self, model: keras.Model, request: EvaluationRequest) -> tf.data.Dataset:
        size = image_input_size(model, request.data, "segmentation", DEFAULT_IMAGE_SIZE)
        return load_segmentation_dataset(
            request.data,
            request.split,
            image_size=size,
            batch_size=request.batch_size,
            training=False,
            data_dir=request.data_dir,
        )

    def check_outputs(self, model: keras.Model, num_classes: int | None, what: str) -> None:
        """Refuses a model without (B, H, W, C) logits, or whose C is not the data's classes."""
        shape = model.output_shape
        if not isinstance(shape, tuple) or len(shape) != 4:
            raise ValueError(
                f"Model {model.name!r} does not output per-pixel logits (B, H, W, classes), "
                f"as {self.name} needs. Received: output_shape={shape}"
            )
        classes = shape[-1]
        if num_classes is not None and classes not in (num_classes, 2 * num_classes):
            raise ValueError(
                f"Model {model.name!r} outputs {classes} classes but {what} has {num_classes}: "
                f"use a model of its classes. Received: output_shape={shape}"
            )

    def loss(self, config: TrainConfig | None = None) -> keras.losses.Loss:
        """CE with ignore index 255, plus 0.4 x the auxiliary CE in training."""
        return SegmentationCrossEntropy(auxiliary_weight=AUXILIARY_WEIGHT if config else 0.0)

    def metrics(self, num_classes: int, *, training: bool = False) -> list[keras.metrics.Metric]:
        """mIoU and pixel accuracy, each over the whole split."""
        del training
        return [MeanIoU(num_classes), PixelAccuracy(num_classes)]

    def summary(self, metrics: dict[str, float]) -> list[str]:
        """``test_pixel_accuracy=...`` then ``test_miou=...`` (last), 4 decimals.

        Example:
            >>> TASK.summary({"miou": 0.5, "pixel_accuracy": 0.75, "loss": 1.0})
            ['test_pixel_accuracy=0.7500', 'test_miou=0.5000']
        """
        return [
            f"test_pixel_accuracy={metrics['pixel_accuracy']:.4f}",
            f"test_miou={metrics['miou']:.4f}",
        ]

    def check_scored(self, metrics: Mapping[str, float], what: str) -> None:
        """Refuses a split without a labelled pixel (its mIoU is NaN): it scores nothing.

        Example:
            >>> TASK.check_scored({"miou": float("nan")}, "split 'test' of data 'd'")
            Traceback (most recent call last):
            ValueError: Split 'test' of data 'd' has no labelled pixel ...
        """
        value = metrics.get(self.selection_metric)
        if value is not None and math.isnan(value):
            raise ValueError(
                f"{what[:1].upper()}{what[1:]} has no labelled pixel: every mask pixel is "
                f"{IGNORE_INDEX} (ignored), so it scores nothing; label its masks or use "
                "another split."
            )

    def breakdown(
        self, metrics: Sequence[keras.metrics.Metric], labels: Mapping[str, Any]
    ) -> dict[str, float]:
        """Each class's IoU over the split, ``iou/<class name>``, in label order.

        Classes absent from both the labels and the predictions (no IoU) are
        left out. Names come from `labels` (the run's class names), else the
        class indices.
        """
        (meter,) = (metric for metric in metrics if isinstance(metric, MeanIoU))
        values = meter.per_class_iou()
        names = list(labels.get(CLASS_NAMES_KEY) or [])
        if len(names) != len(values):
            names = [str(index) for index in range(len(values))]
        return {
            f"iou/{name}": float(value)
            for name, value in zip(names, values, strict=True)
            if np.isfinite(value)
        }

    def details(self, metrics: dict[str, float]) -> list[str]:
        """The per-class IoU of `breakdown` as a compact table, several classes a line.

        Example:
            >>> TASK.details({"miou": 0.5, "iou/background": 0.9, "iou/cat": 0.1})
            ['per-class IoU:', '  background 0.9000   cat        0.1000']
        """
        values = {key[4:]: value for key, value in metrics.items() if key.startswith("iou/")}
        if not values:
            return []
        width = min(max(len(name) for name in values), DETAILS_NAME_WIDTH)
        cells = [f"{name[:width]:<{width}} {value:.4f}" for name, value in values.items()]
        per_line = max(1, DETAILS_LINE_WIDTH // (width + 10))
        return ["per-class IoU:"] + [
            "  " + "   ".join(cells[start : start + per_line])
            for start in range(0, len(cells), per_line)
        ]

    def predict(self, model: keras.Model, request: PredictRequest) -> list[str]:
        """Writes ``<stem>_labels.png`` and ``<stem>_overlay.png`` per image into `request.out`.

        Each image is predicted at the model's input size (fitted and
        padded, as evaluated); the logits are resized to the image's own size
        and reduced to labels one band of rows at a time
        (:func:`resized_labels`), so memory grows with the pixels, not with
        pixels x classes: :func:`prediction_bytes`, checked against
        ``KERAS_FOURIER_MAX_MEMORY`` from the image's header, before decoding.
        """
        if request.out is None:
            raise ValueError(
                "Segmentation writes label maps and overlays: pass an output folder. "
                "Received: out=None"
            )
        model = self.inference_model(model)
        size = model.input_shape[1] or DEFAULT_IMAGE_SIZE
        num_classes = model.output_shape[-1]
        names = request.record.get(CLASS_NAMES_KEY) or [str(index) for index in range(num_classes)]
        colours = palette(num_classes)
        lines = []
        for path in request.inputs:

            def check(height: int, width: int, path: str = path) -> None:
                check_memory(
                    f"Predicting {path!r} ({height}x{width} pixels, {num_classes} classes)",
                    prediction_bytes(height, width),
                    f"IMAGE={path!r}",
                )

            image = read_image_file(path, before_decoding=check)
            height, width = int(image.shape[0]), int(image.shape[1])
            logits = model.predict(fit_image(image, size)[None], verbose=0)[0]
            scale = min(size / height, size / width)
            inside = logits[: max(1, round(height * scale)), : max(1, round(width * scale))]
            classes = resized_labels(inside, height, width)
            image = image.numpy()
            overlay = np.empty_like(image)
            for start in range(0, height, _band_rows(width, 3)):
                band = slice(start, start + _band_rows(width, 3))
                mixed = image[band].astype(np.uint16) + colours[classes[band]]
                overlay[band] = mixed // 2  # (image + colour) / 2, rounded down
            del image
            stem = request.stem(path)
            os.makedirs(request.out, exist_ok=True)
            atomic_write_bytes(stem + "_labels.png", tf.io.encode_png(classes[..., None]).numpy())
            atomic_write_bytes(stem + "_overlay.png", tf.io.encode_png(overlay).numpy())
            counts = np.bincount(classes.ravel(), minlength=num_classes)
            present = [names[index] for index in np.flatnonzero(counts)]
            lines.append(f"{path}: {stem}_labels.png, {stem}_overlay.png ({', '.join(present)})")
        return lines


def prediction_bytes(height: int, width: int) -> int:
    """Estimated bytes of predicting one image of height x width pixels (beyond the model).

    Per pixel: the decoded image (3 bytes), the label map (1), the overlay
    (3), the copies given to the PNG encoder (4) and the encoded PNGs (up
    to 4), rounded up to 16; plus the arrays of a band of
    :func:`resized_labels` (about 16 of at most :data:`BAND_BYTES`).

    Example:
        >>> prediction_bytes(1200, 1600) // 2**20
        157
    """
    return PREDICTION_BYTES_PER_PIXEL * height * width + 16 * BAND_BYTES


def _band_rows(width: int, channels: int) -> int:
    """Rows of a band of `width` x `channels` float32 values within :data:`BAND_BYTES`."""
    return max(1, BAND_BYTES // (4 * width * channels))


def _bilinear_weights(in_size: int, out_size: int, start: int, stop: int):
    """tf.image.resize's bilinear (half-pixel centres) sources and weights of outputs start:stop."""
    position = (np.arange(start, stop) + 0.5) * (in_size / out_size) - 0.5
    floor = np.floor(position)
    lower = np.maximum(floor, 0).astype(np.int64)
    upper = np.minimum(np.ceil(position), in_size - 1).astype(np.int64)
    return lower, upper, (position - floor).astype(np.float32)


def resized_labels(logits: np.ndarray, height: int, width: int) -> np.ndarray:
    """The argmax of `logits` resized (bilinear) to height x width, one band of rows at a time.

    The same labels as ``argmax(tf.image.resize(logits, (height, width)))``
    (the same interpolation, in float32), without the (height, width,
    classes) float array: each band holds at most :data:`BAND_BYTES`.

    Args:
        logits: float (h, w, classes), at most 256 classes.
        height: output height.
        width: output width.

    Returns:
        uint8 (height, width): the class of each pixel.

    Example:
        >>> resized_labels(np.eye(2, dtype="float32")[[[0, 1]]], 2, 4).tolist()
        [[0, 0, 1, 1], [0, 0, 1, 1]]
    """
    logits = np.asarray(logits, np.float32)
    in_height, in_width, classes = logits.shape
    left, right, column_lerp = _bilinear_weights(in_width, width, 0, width)
    column_lerp = column_lerp[:, None]
    labels = np.empty((height, width), np.uint8)
    rows = _band_rows(width, classes)
    for start in range(0, height, rows):
        stop = min(height, start + rows)
        top, bottom, row_lerp = _bilinear_weights(in_height, height, start, stop)
        sources, inverse = np.unique(np.concatenate([top, bottom]), return_inverse=True)
        # Along the width first (as TensorFlow), for the few source rows of the band.
        near = logits[sources][:, left]
        across = near + (logits[sources][:, right] - near) * column_lerp
        upper, lower = across[inverse[: stop - start]], across[inverse[stop - start :]]
        band = upper + (lower - upper) * row_lerp[:, None, None]
        labels[start:stop] = np.argmax(band, axis=-1)
    return labels


TASK = Segmentation()
