"""Inpainting (AFNO's pretraining task): restore the pixels of a random-walk mask.

Inputs are {"masked_image", "mask"} (:mod:`keras_fourier.data.inpainting`);
the model is a UPerNet on the run's backbone with 3 output channels read as
pixels (127.5 (1 + output)), composited with the visible pixels: the
output is the masked image where the mask is 0 and the prediction where it
is 1. The MSE loss on that output is therefore the MSE of the masked
pixels (as the paper's) scaled by the masked share. Metrics: PSNR (selects
``best.keras``) and SSIM; ``train`` prints ``test_psnr=<value>`` last.
`predict` writes each image masked (``<stem>_masked.png``, fixed seed) and
restored (``<stem>_restored.png``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf

from keras_fourier.data.checks import read_image_file
from keras_fourier.data.images import count_examples, is_image_source, training_splits
from keras_fourier.data.inpainting import (
    EVAL_MASK_SEED,
    MASK_KEY,
    MASKED_IMAGE_KEY,
    load_inpainting_dataset,
    mask_batch,
)
from keras_fourier.data.segmentation import (
    count_segmentation_examples,
    is_segmentation_source,
    segmentation_splits,
)
from keras_fourier.fileio import atomic_write_bytes
from keras_fourier.layers import MaskComposite
from keras_fourier.metrics import PSNR, SSIM
from keras_fourier.tasks.base import EvaluationRequest, PredictRequest, Task, TaskData, run_splits
from keras_fourier.tasks.segmentation import DEFAULT_IMAGE_SIZE, dense_network

if TYPE_CHECKING:
    from keras_fourier.training.config import TrainConfig


class Inpainting(Task):
    """Random-walk inpainting of any image or segmentation source's images."""

    name = "inpainting"
    modality = "image"
    sources = "the image sources ('digits', 'tfds:', 'dir:') and the segmentation ones"
    fields = ("image_size", "eval_split", "validation_split")
    selection_metric = "psnr"
    selection_mode = "max"

    def accepts(self, data: str) -> bool:
        return is_segmentation_source(data) or is_image_source(data)

    def image_size(self, config: TrainConfig) -> int:
        return config.image_size or DEFAULT_IMAGE_SIZE

    def check(self, config: TrainConfig, name: Callable[[str], str]) -> None:
        if self.image_size(config) % 32:
            raise ValueError(
                f"`{name('image_size')}` of an inpainting run must be a multiple of 32. "
                f"Received: {name('image_size')}={self.image_size(config)}"
            )

    def num_classes(self, data: str, data_dir: str | None = None) -> int:
        del data, data_dir
        return 3  # the output channels

    def split_size(self, data: str, split: str, data_dir: str | None = None) -> int | None:
        if is_segmentation_source(data):
            return count_segmentation_examples(data, split, data_dir)
        return count_examples(data, split, data_dir)

    def model_options(self, config: TrainConfig) -> dict[str, Any]:
        return {"image_size": self.image_size(config)}

    def build_model(self, config: TrainConfig, num_classes: int = 3) -> keras.Model:
        """UPerNet on `config.model` predicting the masked pixels, composited with the rest."""
        size = self.image_size(config)
        network = dense_network(config, size, num_classes)
        masked = keras.Input((size, size, 3), name=MASKED_IMAGE_KEY)
        mask = keras.Input((size, size, 1), name=MASK_KEY)
        restored = network(masked)
        if num_classes == 3:  # other channel counts cannot be composited with RGB images
            restored = MaskComposite(name="restore")([masked, mask, restored])
        return keras.Model(
            {MASKED_IMAGE_KEY: masked, MASK_KEY: mask}, restored, name=f"{network.name}_inpainting"
        )

    def inference_model(self, model: keras.Model) -> keras.Model:
        return model

    def describe_input(self, config: TrainConfig, model: keras.Model) -> str:
        size = self.image_size(config)
        return f"{size}x{size}x3 images with random-walk masks"

    def _splits(self, config: TrainConfig) -> tuple[str, str]:
        if is_segmentation_source(config.data):
            return segmentation_splits(config.data, config.eval_split, config.data_dir)
        return training_splits(config.data, config.eval_split, data_dir=config.data_dir)

    def datasets(self, config: TrainConfig, names: Mapping[str, str] | None = None) -> TaskData:
        train_split, validation_split = run_splits(config, *self._splits(config), names)
        options = {
            "image_size": self.image_size(config),
            "batch_size": config.batch_size,
            "data_dir": config.data_dir,
        }
        train = load_inpainting_dataset(
            config.data, train_split, training=True, seed=config.seed, **options
        )
        validation = load_inpainting_dataset(
            config.data, validation_split, training=False, **options
        )
        splits = {
            "train": repr(train_split),
            "validation": repr(validation_split),
            "test": repr(config.eval_split),
        }
        return TaskData(train, validation, 3, splits)

    def evaluation_data(self, model: keras.Model, request: EvaluationRequest) -> tf.data.Dataset:
        size = model.output_shape[1] or DEFAULT_IMAGE_SIZE
        return load_inpainting_dataset(
            request.data,
            request.split,
            image_size=size,
            batch_size=request.batch_size,
            training=False,
            data_dir=request.data_dir,
        )

    def check_outputs(self, model: keras.Model, num_classes: int | None, what: str) -> None:
        shape = model.output_shape
        if not isinstance(shape, tuple) or len(shape) != 4 or shape[-1] != 3:
            raise ValueError(
                f"Model {model.name!r} does not output RGB images (B, H, W, 3) as inpainting "
                f"of {what} needs. Received: output_shape={shape}"
            )

    def loss(self, config: TrainConfig | None = None) -> keras.losses.Loss:
        """Mean squared error of the composited output (the masked pixels' error)."""
        del config
        return keras.losses.MeanSquaredError()

    def metrics(self, num_classes: int, *, training: bool = False) -> list[keras.metrics.Metric]:
        del num_classes, training
        return [PSNR(255.0), SSIM(255.0)]

    def summary(self, metrics: dict[str, float]) -> list[str]:
        """``test_ssim=...`` then ``test_psnr=...`` (last).

        Example:
            >>> TASK.summary({"psnr": 27.06, "ssim": 0.931, "loss": 1.0})
            ['test_ssim=0.9310', 'test_psnr=27.0600']
        """
        return [f"test_ssim={metrics['ssim']:.4f}", f"test_psnr={metrics['psnr']:.4f}"]

    def predict(self, model: keras.Model, request: PredictRequest) -> list[str]:
        """Writes ``<stem>_masked.png`` and ``<stem>_restored.png`` per image into `request.out`."""
        if request.out is None:
            raise ValueError("Inpainting writes images: pass an output folder. Received: out=None")
        size = model.output_shape[1] or DEFAULT_IMAGE_SIZE
        os.makedirs(request.out, exist_ok=True)
        lines = []
        for index, path in enumerate(request.inputs):
            image = read_image_file(path)
            image = tf.image.resize(tf.cast(image, tf.float32), (size, size))[None]
            inputs, _ = mask_batch(image, tf.constant([EVAL_MASK_SEED, index], tf.int64))
            restored = model.predict(inputs, verbose=0)
            stem = request.stem(path)
            for suffix, pixels in (
                ("masked", inputs[MASKED_IMAGE_KEY][0]),
                ("restored", restored[0]),
            ):
                encoded = tf.io.encode_png(
                    tf.cast(tf.clip_by_value(tf.round(pixels), 0, 255), tf.uint8)
                )
                atomic_write_bytes(f"{stem}_{suffix}.png", encoded.numpy())
            lines.append(f"{path}: {stem}_masked.png, {stem}_restored.png")
        return lines


TASK = Inpainting()
