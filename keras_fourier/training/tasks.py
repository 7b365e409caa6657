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
* what `keras-fourier predict` and `evaluate` need to label the model's
  outputs and feed it, stored in ``model.keras`` (`labels`: class names,
  and a text model's tokenizer).

:class:`ImageClassification` serves image sources ("digits", "tfds:<name>",
"dir:<path>"), :class:`TextClassification` the text sources "listops" and
"csv:<path>". A new task (segmentation, say) is a new subclass and a row of
:data:`TASKS`.
"""

from __future__ import annotations

import abc
import dataclasses
import os
from collections.abc import Callable, Sequence
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
from keras_fourier.data.text import (
    BYTES_TOKENIZER,
    OFFICIAL_TOKENIZER,
    TOKENIZER_NAMES,
    load_tokenizer,
    tokenizer_from_record,
    tokenizer_record,
    tokenizer_vocabulary_size,
)
from keras_fourier.data.text_files import (
    is_text_source,
    read_text_split,
    text_class_names,
    text_label_ids,
    text_split_dataset,
    text_training_splits,
)
from keras_fourier.models.catalog import check_text_weights, modality, vision_stride
from keras_fourier.models.fnet_weights import is_official_weights

if TYPE_CHECKING:
    from keras_fourier.training.config import TrainConfig

# Keys of the record inside model.keras (`save_model`) that label its outputs for `predict`.
CLASS_NAMES_KEY = "class_names"
CROP_PCT_KEY = "eval_crop_pct"
# The record of the tokenizer of a text model (`keras_fourier.data.text.tokenizer_record`).
TOKENIZER_KEY = "tokenizer"
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
        tokenizer: Callable | None = None,
        class_names: Sequence[str] | None = None,
    ) -> tf.data.Dataset:
        """The held-out batches on which `model` is scored (one-hot labels).

        Args:
            model: the model.
            data: the data source.
            split: the split to score.
            batch_size: batch size.
            data_dir: TFDS data directory.
            eval_examples: held-out examples of generated data.
            on_bad_image: what to do with a corrupt image file.
            tokenizer: a text model's tokenizer (its run stored it); None:
                the source's own or "bytes".
            class_names: the model's classes in label order (its run stored
                them); None: the source's.
        """


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
        weights = config.weights
        if weights is not None and weights != "imagenet" and not os.path.isfile(weights):
            raise ValueError(
                f"`{name('weights')}` of an image model must be 'imagenet' or the path of a "
                "weights file (.weights.h5, .keras, official .pth). Received: "
                f"{name('weights')}={weights!r}"
            )
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
        tokenizer: Callable | None = None,
        class_names: Sequence[str] | None = None,
    ) -> tf.data.Dataset:
        del eval_examples, tokenizer, class_names  # the split holds its own images and labels
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
    """Classification of texts: "csv:<path>" files, or ListOps generated with fixed seeds.

    "csv:<path>" (:mod:`keras_fourier.data.text_files`) is tokenized with the
    run's `tokenizer` (stored in ``model.keras`` with the class names);
    "listops" with its own word vocabulary.
    """

    name = "text_classification"
    modality = "text"
    sources = "'listops' or 'csv:<path>'"
    fields = (
        "sequence_length",
        "train_examples",
        "eval_examples",
        "tokenizer",
        "eval_split",
        "validation_split",
    )
    LISTOPS = "listops"
    # The fields that apply to one source only.
    LISTOPS_FIELDS = ("train_examples", "eval_examples")
    CSV_FIELDS = ("tokenizer", "eval_split", "validation_split")

    def accepts(self, data: str) -> bool:
        return data == self.LISTOPS or is_text_source(data)

    def tokenizer_spec(self, config: TrainConfig) -> str | None:
        """The run's tokenizer: `config.tokenizer`, else "official" for official FNet weights,
        else "bytes"; None for ListOps (its own vocabulary)."""
        if config.data == self.LISTOPS:
            return None
        if config.tokenizer is not None:
            return os.fspath(config.tokenizer)
        if config.weights is not None and is_official_weights(config.weights):
            return OFFICIAL_TOKENIZER
        return BYTES_TOKENIZER

    def _vocabulary_size(self, config: TrainConfig) -> int:
        spec = self.tokenizer_spec(config)
        if spec is None:
            return WordTokenizer(LISTOPS_VOCABULARY).vocabulary_size
        try:
            return tokenizer_vocabulary_size(spec)
        except ImportError as error:  # a SentencePiece model without the [text] extra
            raise ValueError(str(error)) from error

    def check(self, config: TrainConfig, name: Callable[[str], str]) -> None:
        listops = config.data == self.LISTOPS
        if listops and config.tokenizer is not None:
            raise ValueError(
                f"`{name('tokenizer')}` applies to 'csv:' data; ListOps has its own vocabulary. "
                f"Received: {name('tokenizer')}={config.tokenizer!r}"
            )
        if config.tokenizer is not None and not (
            config.tokenizer in TOKENIZER_NAMES or os.path.isfile(os.fspath(config.tokenizer))
        ):
            raise ValueError(
                f"`{name('tokenizer')}` must be one of {TOKENIZER_NAMES} or the path of a "
                f"SentencePiece .model file. Received: {name('tokenizer')}={config.tokenizer!r}"
            )
        vocabulary_size = self._vocabulary_size(config)
        if config.weights is not None:
            check_text_weights(
                config.model,
                config.weights,
                sequence_length=config.sequence_length,
                vocabulary_size=vocabulary_size,
            )
        if not listops and config.sequence_length < 4:
            raise ValueError(
                f"`{name('sequence_length')}` must leave room for a text between [CLS] and "
                f"[SEP] tokens (at least 4). Received: "
                f"{name('sequence_length')}={config.sequence_length}"
            )

    def identity(self, config: TrainConfig, values: dict[str, Any]) -> dict[str, Any]:
        dropped = self.CSV_FIELDS if config.data == self.LISTOPS else self.LISTOPS_FIELDS
        for field in dropped:
            values.pop(field, None)
        if config.data != self.LISTOPS:
            values["tokenizer"] = self.tokenizer_spec(config)
        return values

    def num_classes(self, data: str, data_dir: str | None = None) -> int:
        del data_dir
        return LISTOPS_NUM_CLASSES if data == self.LISTOPS else len(text_class_names(data))

    def labels(self, config: TrainConfig) -> dict[str, Any]:
        """For "csv:" data, the class names and the tokenizer's record (with its model)."""
        if config.data == self.LISTOPS:
            return {}
        return {
            CLASS_NAMES_KEY: text_class_names(config.data),
            TOKENIZER_KEY: tokenizer_record(self.tokenizer_spec(config)),
        }

    def model_options(self, config: TrainConfig) -> dict[str, Any]:
        return {
            "sequence_length": config.sequence_length,
            "vocabulary_size": self._vocabulary_size(config),
        }

    def describe_input(self, config: TrainConfig, model: keras.Model) -> str:
        spec = self.tokenizer_spec(config)
        tokenizer = "" if spec is None else f", tokenizer {spec!r}"
        return f"sequences of {config.sequence_length} tokens{tokenizer}"

    def datasets(self, config: TrainConfig) -> TaskData:
        if config.data == self.LISTOPS:
            return self._listops(config)
        source = config.data
        train_split, validation_split = text_training_splits(source, config.eval_split)
        if config.validation_split is not None:
            validation_split = config.validation_split
        if len({train_split, validation_split, config.eval_split}) < 3:
            raise ValueError(
                f"The train ({train_split!r}), validation ({validation_split!r}) and test "
                f"({config.eval_split!r}) splits of data {source!r} must differ."
            )
        class_names = text_class_names(source)
        splits = {}
        for role, split in (
            ("train", train_split),
            ("validation", validation_split),
            ("test", config.eval_split),
        ):
            rows = read_text_split(source, split)
            text_label_ids(rows, class_names, source, split)  # refused now, not at the end
            splits[role] = f"{split!r}, {len(rows.labels):,} texts of {rows.file}"
        tokenizer = load_tokenizer(self.tokenizer_spec(config))
        options = {
            "tokenizer": tokenizer,
            "class_names": class_names,
            "sequence_length": config.sequence_length,
            "batch_size": config.batch_size,
        }
        train_data = text_split_dataset(
            source, train_split, training=True, seed=config.seed, **options
        )
        validation_data = text_split_dataset(source, validation_split, **options)
        return TaskData(train_data, validation_data, len(class_names), splits)

    def _listops(self, config: TrainConfig) -> TaskData:
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
        tokenizer: Callable | None = None,
        class_names: Sequence[str] | None = None,
    ) -> tf.data.Dataset:
        del data_dir, on_bad_image
        inputs = model.input if isinstance(model.input, dict) else {}
        if "token_ids" not in inputs:
            raise ValueError(
                f"Data source {data!r} is text: model {model.name!r} does not take "
                "token ids (an image model?)."
            )
        sequence_length = inputs["token_ids"].shape[1]
        if data == self.LISTOPS:
            return listops_eval_dataset(sequence_length, eval_examples, batch_size, split)
        tokenizer = load_tokenizer(BYTES_TOKENIZER) if tokenizer is None else tokenizer
        rows = model_vocabulary_size(model)
        if rows is not None and rows != tokenizer.vocabulary_size:
            raise ValueError(
                f"Model {model.name!r} has a word table of {rows} rows but the tokenizer has "
                f"{tokenizer.vocabulary_size} ids: pass the tokenizer it was trained with "
                "(a run stores it in its model.keras)."
            )
        return text_split_dataset(
            data,
            split,
            tokenizer=tokenizer,
            class_names=text_class_names(data) if class_names is None else class_names,
            sequence_length=sequence_length,
            batch_size=batch_size,
        )


def model_vocabulary_size(model: keras.Model) -> int | None:
    """The rows of an FNet model's word table, or None for another model."""
    try:
        return model.get_layer("embeddings").vocabulary_size
    except (ValueError, AttributeError):
        return None


def stored_tokenizer(record: dict[str, Any]) -> Callable | None:
    """The tokenizer a run stored in its model.keras record, or None if it stored none."""
    stored = record.get(TOKENIZER_KEY)
    return None if stored is None else tokenizer_from_record(stored)


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
