"""Training tasks: what differs between image and text classification, in one object each.

The trainer (:mod:`keras_fourier.training.trainer`) never asks whether a
model reads images or text; it asks the run's :class:`Task`:

* which settings apply (`fields`) and how they enter the run's identity;
* the checks of those settings (`check`);
* the training and validation pipelines and a header line per split
  (`datasets`), the class count of a data source (`num_classes`);
* the model's input options (`model_options`) and its header description
  (`describe_input`);
* the evaluation pipeline of a trained model (`evaluation_data`);
* what `keras-fourier predict` needs to label the model's outputs, stored
  in ``model.keras`` (`labels`).

:class:`ImageClassification` serves image sources ("digits", "tfds:<name>",
"dir:<path>"), :class:`TextClassification` the text source "listops". A new
task (segmentation, say) is a new subclass and a row of :data:`TASKS`.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf

from keras_fourier.data import (
    LISTOPS_NUM_CLASSES,
    LISTOPS_VOCABULARY,
    WordTokenizer,
    count_examples,
    get_class_names,
    get_num_classes,
    listops_eval_dataset,
    listops_train_dataset,
    load_image_dataset,
    training_splits,
)
from keras_fourier.data.listops import LISTOPS_EVAL_SEED, LISTOPS_VALIDATION_SEED
from keras_fourier.models.catalog import modality, vision_stride

if TYPE_CHECKING:
    from keras_fourier.training.config import TrainConfig

# Keys of the record inside model.keras (`save_model`) that label its outputs for `predict`.
CLASS_NAMES_KEY = "class_names"
CROP_PCT_KEY = "eval_crop_pct"
# The centre crop of every evaluation pipeline of a run (load_image_dataset's default).
EVAL_CROP_PCT = 0.875


@dataclasses.dataclass
class TaskData:
    """The train and validation pipelines of a run, and a line per split for the header.

    Attributes:
        train: batches of (inputs, one-hot labels) to fit on.
        validation: batches evaluated after every epoch.
        num_classes: classes of the data.
        splits: {"train"|"validation"|"test": description} for the header.
    """

    train: tf.data.Dataset
    validation: tf.data.Dataset
    num_classes: int
    splits: dict[str, str]


class Task(abc.ABC):
    """What a kind of model trains on and is evaluated with.

    Attributes:
        name: the task's name, e.g. "image_classification".
        modality: what its models take, "image" or "text".
        sources: a description of the data sources it takes, for messages.
        fields: the `TrainConfig` fields that apply to this task only.
    """

    name: str
    modality: str
    sources: str
    fields: tuple[str, ...]

    @abc.abstractmethod
    def accepts(self, data: str) -> bool:
        """Whether `data` names a source of this task."""

    def check(self, config: TrainConfig, name: Callable[[str], str]) -> None:  # noqa: B027
        """Raises ValueError for settings of `config` that do not suit this task.

        Args:
            config: the run's settings.
            name: field -> its name in messages (e.g. the command-line flag).
        """

    def identity(self, config: TrainConfig, values: dict[str, Any]) -> dict[str, Any]:
        """The run identity `values` with this task's fields resolved (e.g. defaults)."""
        return values

    @abc.abstractmethod
    def num_classes(self, data: str, data_dir: str | None = None) -> int:
        """The class count of data source `data`."""

    def labels(self, config: TrainConfig) -> dict[str, Any]:
        """What `keras-fourier predict` needs to label the run's inputs, stored in model.keras.

        Default: nothing.
        """
        del config
        return {}

    @abc.abstractmethod
    def model_options(self, config: TrainConfig) -> dict[str, Any]:
        """The input options of `create_model` for the run's model."""

    @abc.abstractmethod
    def describe_input(self, config: TrainConfig, model: keras.Model) -> str:
        """The model's input, for the run's header."""

    @abc.abstractmethod
    def datasets(self, config: TrainConfig) -> TaskData:
        """The training and validation pipelines of the run (checked before anything is written)."""

    @abc.abstractmethod
    def evaluation_data(
        self,
        model: keras.Model,
        data: str,
        split: str,
        *,
        batch_size: int,
        data_dir: str | None,
        eval_examples: int,
        on_bad_image: str,
    ) -> tf.data.Dataset:
        """The held-out batches on which `model` is scored (one-hot labels)."""


def _size(count: int | None, unit: str) -> str:
    return f"{count:,} {unit}" if count is not None else f"? {unit}"


class ImageClassification(Task):
    """Classification of images of "digits", "tfds:<name>" and "dir:<path>" sources."""

    name = "image_classification"
    modality = "image"
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
        return not TextClassification().accepts(data)

    def check(self, config: TrainConfig, name: Callable[[str], str]) -> None:
        if config.saved_model:
            size = config.resolved_image_size()
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
        values["image_size"] = config.resolved_image_size()
        if config.augment is not None:
            values["augment"] = dataclasses.asdict(config.augment)
        return values

    def num_classes(self, data: str, data_dir: str | None = None) -> int:
        return get_num_classes(data, data_dir=data_dir)

    def labels(self, config: TrainConfig) -> dict[str, Any]:
        """The data's class names ("0"-"9", folder names, TFDS label names) and eval crop."""
        return {
            CLASS_NAMES_KEY: get_class_names(config.data, data_dir=config.data_dir),
            CROP_PCT_KEY: EVAL_CROP_PCT,
        }

    def model_options(self, config: TrainConfig) -> dict[str, Any]:
        return {"image_size": config.resolved_image_size()}

    def describe_input(self, config: TrainConfig, model: keras.Model) -> str:
        return "x".join(str(size) for size in model.input_shape[1:])

    def datasets(self, config: TrainConfig) -> TaskData:
        train_split, validation_split = training_splits(
            config.data, config.eval_split, data_dir=config.data_dir
        )
        if config.validation_split is not None:
            validation_split = config.validation_split
        if config.eval_split in (validation_split, train_split) or validation_split == train_split:
            raise ValueError(
                f"The train ({train_split!r}), validation ({validation_split!r}) and test "
                f"({config.eval_split!r}) splits of data {config.data!r} must differ."
            )
        options = {
            "image_size": config.resolved_image_size(),
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

    def evaluation_data(
        self,
        model: keras.Model,
        data: str,
        split: str,
        *,
        batch_size: int,
        data_dir: str | None,
        eval_examples: int,
        on_bad_image: str,
    ) -> tf.data.Dataset:
        del eval_examples  # the split holds its own images
        shape = model.input_shape
        if not isinstance(shape, tuple) or len(shape) != 4:
            raise ValueError(
                f"Model {model.name!r} does not take images but data {data!r} is an image "
                f"source; text models take {TextClassification.sources}."
            )
        return load_image_dataset(
            data,
            split,
            image_size=model.input_shape[1],
            batch_size=batch_size,
            training=False,
            one_hot=True,
            data_dir=data_dir,
            on_bad_image=on_bad_image,
        )


class TextClassification(Task):
    """Classification of token sequences: ListOps, generated with fixed seeds, for FNet."""

    name = "text_classification"
    modality = "text"
    sources = "'listops'"
    fields = ("sequence_length", "train_examples", "eval_examples")
    SOURCES = ("listops",)

    def accepts(self, data: str) -> bool:
        return data in self.SOURCES

    def num_classes(self, data: str, data_dir: str | None = None) -> int:
        del data, data_dir
        return LISTOPS_NUM_CLASSES

    def model_options(self, config: TrainConfig) -> dict[str, Any]:
        return {
            "sequence_length": config.sequence_length,
            "vocabulary_size": WordTokenizer(LISTOPS_VOCABULARY).vocabulary_size,
        }

    def describe_input(self, config: TrainConfig, model: keras.Model) -> str:
        return f"sequences of {config.sequence_length} tokens"

    def datasets(self, config: TrainConfig) -> TaskData:
        train_data = listops_train_dataset(
            config.sequence_length,
            config.train_examples,
            eval_examples=config.eval_examples,
            batch_size=config.batch_size,
            seed=config.seed,
        )
        validation_data = listops_eval_dataset(
            config.sequence_length, config.eval_examples, config.batch_size, "validation"
        )
        generated = f"{config.eval_examples:,} expressions generated with seed"
        return TaskData(
            train_data,
            validation_data,
            LISTOPS_NUM_CLASSES,
            {
                "train": f"{config.train_examples:,} expressions generated with seed "
                f"{config.seed}, less any also held out",
                "validation": f"{generated} {LISTOPS_VALIDATION_SEED}, less any also in test",
                "test": f"{generated} {LISTOPS_EVAL_SEED}",
            },
        )

    def evaluation_data(
        self,
        model: keras.Model,
        data: str,
        split: str,
        *,
        batch_size: int,
        data_dir: str | None,
        eval_examples: int,
        on_bad_image: str,
    ) -> tf.data.Dataset:
        del data, data_dir, on_bad_image
        inputs = model.input if isinstance(model.input, dict) else {}
        if "token_ids" not in inputs:
            raise ValueError(
                f"Data source {self.sources} is text: model {model.name!r} does not take "
                "token ids (an image model?)."
            )
        sequence_length = inputs["token_ids"].shape[1]
        return listops_eval_dataset(sequence_length, eval_examples, batch_size, split)


TASKS: tuple[Task, ...] = (ImageClassification(), TextClassification())


def task_for_data(data: str) -> Task:
    """The task whose sources include `data`.

    Example:
        >>> task_for_data("listops").name, task_for_data("digits").name
        ('text_classification', 'image_classification')
    """
    return next(task for task in TASKS if task.accepts(data))


def task_for_model(model: str) -> Task:
    """The task of a model name (either spelling): text classification for FNet, else images.

    Example:
        >>> task_for_model("fnet_tiny").name
        'text_classification'
    """
    return next(task for task in TASKS if task.modality == modality(model))
