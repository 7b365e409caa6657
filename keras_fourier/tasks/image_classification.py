"""Image classification: "digits", "tfds:<name>" and "dir:<path>" sources.

The task owns the image-only settings of a run (image size, augmentation,
splits, corrupt files), the input size of a saved model it starts from
(`saved_input_size`), and the image side of `keras-fourier predict`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf

from keras_fourier.data.images import (
    count_examples,
    get_class_names,
    get_num_classes,
    is_image_source,
    load_image_dataset,
    training_splits,
)
from keras_fourier.imagenet import NUM_CLASSES
from keras_fourier.imagenet.predict import predict as predict_images
from keras_fourier.model_record import CLASS_NAMES_KEY, CROP_PCT_KEY
from keras_fourier.models.catalog import default_image_size, vision_stride
from keras_fourier.run_folder import resolve_model_file
from keras_fourier.tasks.base import EvaluationRequest, PredictRequest, TaskData, run_splits
from keras_fourier.tasks.classification import Classification
from keras_fourier.weights.saved import load_keras_file

if TYPE_CHECKING:
    from keras_fourier.training.config import TrainConfig

# The centre crop of every evaluation pipeline of a run (load_image_dataset's default).
EVAL_CROP_PCT = 0.875


@functools.lru_cache(maxsize=8)
def _input_size(model_file: str, modified: int) -> int:
    del modified  # part of the cache key: a rewritten file is read again
    shape = load_keras_file(model_file, compile=False).input_shape
    if not isinstance(shape, tuple) or len(shape) != 4 or shape[1] is None:
        raise ValueError(
            f"The saved model {model_file!r} does not take images of a fixed size. "
            f"Received: input_shape={shape}"
        )
    return shape[1]


def saved_input_size(model: str) -> int:
    """The input height of a saved image model (a `.keras` file or run folder).

    Raises:
        ValueError: not an image model of a fixed size, or a file that does not load.
    """
    model_file = resolve_model_file(model)
    return _input_size(model_file, os.stat(model_file).st_mtime_ns)


def _size(count: int | None, unit: str) -> str:
    return f"{count:,} {unit}" if count is not None else f"? {unit}"


class ImageClassification(Classification):
    """Classification of images of "digits", "tfds:<name>" and "dir:<path>" sources."""

    name = "image_classification"
    modality = "image"
    default = True
    sources = "'digits', 'tfds:<name>' or 'dir:<path>'"
    fields = (
        "image_size",
        "augment",
        "eval_split",
        "validation_split",
        "deterministic",
        "on_bad_image",
    )

    def accepts(self, data: str) -> bool:
        return is_image_source(data)

    def image_size(self, config: TrainConfig) -> int:
        """The run's image size: `image_size`, else a saved model's input size, else the default.

        The default is `keras_fourier.models.catalog.default_image_size` of
        the model and data.

        Example:
            >>> from keras_fourier.training import TrainConfig
            >>> TASK.image_size(TrainConfig(model="gfnet_h_ti"))
            32
        """
        if config.image_size is not None:
            return config.image_size
        if config.saved_model:
            return saved_input_size(config.model)
        return default_image_size(config.model, data=config.data, **config.architecture)

    def check(self, config: TrainConfig, name: Callable[[str], str]) -> None:
        weights = config.weights
        if weights is not None and weights != "imagenet" and not os.path.isfile(weights):
            raise ValueError(
                f"`{name('weights')}` of an image model must be 'imagenet' or the path of a "
                "weights file (.weights.h5, .keras, official .pth). Received: "
                f"{name('weights')}={weights!r}"
            )
        if config.saved_model:
            size = self.image_size(config)
            if config.image_size not in (None, size):
                raise ValueError(
                    f"`{name('image_size')}` must be the input size of the saved model "
                    f"{config.model!r}, {size}. Received: {name('image_size')}={config.image_size}"
                )
        elif config.image_size is not None:
            stride = vision_stride(config.model, **config.architecture)
            if config.image_size % stride:
                raise ValueError(
                    f"`{name('image_size')}` must be a multiple of {stride}, the stride of model "
                    f"{config.model!r}. Received: {name('image_size')}={config.image_size}"
                )

    def identity(self, config: TrainConfig, values: dict[str, Any]) -> dict[str, Any]:
        values["image_size"] = self.image_size(config)
        if config.augment is not None:
            values["augment"] = dataclasses.asdict(config.augment)
        return values

    def num_classes(self, data: str, data_dir: str | None = None) -> int:
        return get_num_classes(data, data_dir=data_dir)

    def split_size(self, data: str, split: str, data_dir: str | None = None) -> int | None:
        return count_examples(data, split, data_dir=data_dir)

    def labels(self, config: TrainConfig) -> dict[str, Any]:
        """The data's class names ("0"-"9", folder names, TFDS label names) and eval crop."""
        return {
            CLASS_NAMES_KEY: get_class_names(config.data, data_dir=config.data_dir),
            CROP_PCT_KEY: EVAL_CROP_PCT,
        }

    def model_options(self, config: TrainConfig) -> dict[str, Any]:
        return {"image_size": self.image_size(config)}

    def describe_input(self, config: TrainConfig, model: keras.Model) -> str:
        return "x".join(str(size) for size in model.input_shape[1:])

    def datasets(self, config: TrainConfig, names: Mapping[str, str] | None = None) -> TaskData:
        train_split, validation_split = run_splits(
            config,
            *training_splits(config.data, config.eval_split, data_dir=config.data_dir),
            names,
        )
        options = {
            "image_size": self.image_size(config),
            "batch_size": config.batch_size,
            "one_hot": True,
            "on_bad_image": config.on_bad_image,
        }
        train_data = load_image_dataset(
            config.data,
            train_split,
            training=True,
            augment=config.augment,
            data_dir=config.data_dir,
            deterministic=config.deterministic,
            seed=config.seed,
            **options,
        )
        validation_data = load_image_dataset(
            config.data, validation_split, training=False, data_dir=config.data_dir, **options
        )
        splits = {
            role: f"{split!r}, "
            + _size(count_examples(config.data, split, data_dir=config.data_dir), "images")
            for role, split in (
                ("train", train_split),
                ("validation", validation_split),
                ("test", config.eval_split),
            )
        }
        return TaskData(
            train_data,
            validation_data,
            self.num_classes(config.data, config.data_dir),
            splits,
        )

    def evaluation_data(self, model: keras.Model, request: EvaluationRequest) -> tf.data.Dataset:
        shape = model.input_shape
        if not isinstance(shape, tuple) or len(shape) != 4:
            raise ValueError(
                f"Model {model.name!r} does not take images but data {request.data!r} is an image "
                f"source of {self.name}."
            )
        return load_image_dataset(
            request.data,
            request.split,
            image_size=shape[1],
            batch_size=request.batch_size,
            training=False,
            one_hot=True,
            data_dir=request.data_dir,
            on_bad_image=request.on_bad_image,
        )

    def predict(self, model: keras.Model, request: PredictRequest) -> list[str]:
        """The top classes of each image, with probabilities (and WordNet ids for ImageNet)."""
        class_names = request.record.get(CLASS_NAMES_KEY)
        crop_pct = request.crop_pct
        if crop_pct is None:
            crop_pct = request.record.get(CROP_PCT_KEY)
        paths = list(request.inputs)
        results = predict_images(model, paths, request.top, crop_pct, class_names)
        imagenet = class_names is None and model.output_shape[-1] == NUM_CLASSES
        lines = []
        for path, classes in zip(paths, results, strict=True):
            lines.append(path)
            for rank, (identifier, name, probability) in enumerate(classes, start=1):
                suffix = f" ({identifier})" if imagenet else ""
                lines.append(f"  {rank}. {probability:7.2%}  {name}{suffix}")
        return lines


TASK = ImageClassification()
