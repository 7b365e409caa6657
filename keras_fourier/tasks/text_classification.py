"""Text classification: "csv:<path>" files, or ListOps generated with fixed seeds.

The task owns the text-only settings of a run (sequence length, padding,
tokenizer, ListOps example counts), the tokenizer stored in the run's
model.keras, the official FNet fine-tuning recipe as the default of a run
with weights, and the text side of `keras-fourier predict` (``--text``).

With ``padding="batch"`` the run's model takes any length up to
`sequence_length` (``FNet(sequence_length=None)``) and every batch is padded
to its longest text (`keras_fourier.data.text_dataset`); such a model is
evaluated, and predicts, on batches padded the same way, up to the run's
`sequence_length` (stored in its model.keras), else its position table.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import keras
import numpy as np
import tensorflow as tf

from keras_fourier.data.listops import (
    LISTOPS_EVAL_SEED,
    LISTOPS_NUM_CLASSES,
    LISTOPS_VALIDATION_SEED,
    LISTOPS_VOCABULARY,
    listops_eval_dataset,
    listops_train_dataset,
)
from keras_fourier.data.text import (
    BYTES_TOKENIZER,
    OFFICIAL_TOKENIZER,
    TOKENIZER_NAMES,
    WordTokenizer,
    load_tokenizer,
    tokenize_and_pack,
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
from keras_fourier.limits import read_zip_json
from keras_fourier.model_record import CLASS_NAMES_KEY, TEXT_LENGTH_KEY, TOKENIZER_KEY
from keras_fourier.models.catalog import check_text_weights
from keras_fourier.models.fnet_weights import is_official_weights
from keras_fourier.run_folder import resolve_model_file
from keras_fourier.settings import TEXT_PADDINGS
from keras_fourier.tasks.base import EvaluationRequest, PredictRequest, TaskData, run_splits
from keras_fourier.tasks.classification import Classification
from keras_fourier.validation import check_choice

if TYPE_CHECKING:
    from keras_fourier.training.config import TrainConfig


class TextClassification(Classification):
    """Classification of texts: "csv:<path>" files, or ListOps generated with fixed seeds.

    "csv:<path>" (:mod:`keras_fourier.data.text_files`) is tokenized with the
    run's `tokenizer` (stored in ``model.keras`` with the class names);
    "listops" with its own word vocabulary.
    """

    name = "text_classification"
    modality = "text"
    default = True
    sources = "'listops' or 'csv:<path>'"
    fields = (
        "sequence_length",
        "train_examples",
        "eval_examples",
        "tokenizer",
        "eval_split",
        "validation_split",
        "padding",
        "bucket_boundaries",
    )
    LISTOPS = "listops"
    # The fields that apply to one source only.
    LISTOPS_FIELDS = ("train_examples", "eval_examples")
    CSV_FIELDS = ("tokenizer", "eval_split", "validation_split")

    def accepts(self, data: str) -> bool:
        return data == self.LISTOPS or is_text_source(data)

    def default_recipe(self, config: TrainConfig) -> str:
        """ "fnet_finetune" (the official FNet fine-tuning) with `weights`, else "deit"."""
        return "fnet_finetune" if config.weights is not None else "deit"

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
        self._check_padding(config, name)

    def _check_padding(self, config: TrainConfig, name: Callable[[str], str]) -> None:
        check_choice(name("padding"), config.padding, TEXT_PADDINGS)
        bounds = config.bucket_boundaries
        if bounds is not None and (
            config.padding != "batch"
            or not isinstance(bounds, (tuple, list))
            or not bounds
            or any(isinstance(b, bool) or not isinstance(b, int) for b in bounds)
            or list(bounds) != sorted(set(bounds))
            or not 1 < bounds[0] <= bounds[-1] <= config.sequence_length
        ):
            shown = list(bounds) if isinstance(bounds, tuple) else bounds
            raise ValueError(
                f"`{name('bucket_boundaries')}` must be increasing lengths from 2 to "
                f"{name('sequence_length')} ({config.sequence_length}), with "
                f"{name('padding')} batch. Received: {name('bucket_boundaries')}={shown!r}"
            )
        if config.padding == "batch" and config.saved_model:
            length = _saved_sequence_length(resolve_model_file(config.model))
            if length is not None:
                raise ValueError(
                    f"`{name('padding')}` batch needs a model of any length; the saved model "
                    f"{config.model!r} takes {length} tokens. Received: {name('padding')}=batch"
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

    def split_size(self, data: str, split: str, data_dir: str | None = None) -> int | None:
        """The rows of a "csv:" split; None for ListOps (its size is `eval_examples`)."""
        del data_dir
        return None if data == self.LISTOPS else len(read_text_split(data, split).labels)

    def labels(self, config: TrainConfig) -> dict[str, Any]:
        """For "csv:" data, the class names and the tokenizer's record (with its model); with
        per-batch padding, the longest text (the run's sequence length)."""
        labels = {}
        if config.padding == "batch":
            labels[TEXT_LENGTH_KEY] = config.sequence_length
        if config.data == self.LISTOPS:
            return labels
        return {
            CLASS_NAMES_KEY: text_class_names(config.data),
            TOKENIZER_KEY: tokenizer_record(self.tokenizer_spec(config)),
            **labels,
        }

    def model_options(self, config: TrainConfig) -> dict[str, Any]:
        return {
            "sequence_length": config.sequence_length,
            "vocabulary_size": self._vocabulary_size(config),
            "any_length": config.padding == "batch",
        }

    def describe_input(self, config: TrainConfig, model: keras.Model) -> str:
        spec = self.tokenizer_spec(config)
        tokenizer = "" if spec is None else f", tokenizer {spec!r}"
        length = f"{config.sequence_length} tokens"
        if config.padding == "batch":
            buckets = config.bucket_boundaries
            grouped = "" if buckets is None else f" in buckets split at {list(buckets)}"
            length = f"up to {length}, padded per batch{grouped}"
        return f"sequences of {length}{tokenizer}"

    def datasets(self, config: TrainConfig, names: Mapping[str, str] | None = None) -> TaskData:
        if config.data == self.LISTOPS:
            return self._listops(config)
        source = config.data
        train_split, validation_split = run_splits(
            config, *text_training_splits(source, config.eval_split), names
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
            "padding": config.padding,
        }
        train_data = text_split_dataset(
            source,
            train_split,
            training=True,
            seed=config.seed,
            bucket_boundaries=config.bucket_boundaries,
            **options,
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
            padding=config.padding,
            bucket_boundaries=config.bucket_boundaries,
        )
        validation_data = listops_eval_dataset(
            config.sequence_length,
            config.eval_examples,
            config.batch_size,
            "validation",
            padding=config.padding,
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

    def evaluation_data(self, model: keras.Model, request: EvaluationRequest) -> tf.data.Dataset:
        inputs = model.input if isinstance(model.input, dict) else {}
        if "token_ids" not in inputs:
            raise ValueError(
                f"Data source {request.data!r} is text: model {model.name!r} does not take "
                "token ids (an image model?)."
            )
        sequence_length, padding = model_sequence_length(model, request.labels)
        if request.data == self.LISTOPS:
            return listops_eval_dataset(
                sequence_length,
                request.eval_examples,
                request.batch_size,
                request.split,
                padding=padding,
            )
        tokenizer = given_tokenizer(request.labels.get(TOKENIZER_KEY))
        class_names = request.labels.get(CLASS_NAMES_KEY)
        rows = model_vocabulary_size(model)
        if rows is not None and rows != tokenizer.vocabulary_size:
            raise ValueError(
                f"Model {model.name!r} has a word table of {rows} rows but the tokenizer has "
                f"{tokenizer.vocabulary_size} ids: pass the tokenizer it was trained with "
                "(a run stores it in its model.keras)."
            )
        return text_split_dataset(
            request.data,
            request.split,
            tokenizer=tokenizer,
            class_names=text_class_names(request.data) if class_names is None else class_names,
            sequence_length=sequence_length,
            batch_size=request.batch_size,
            padding=padding,
        )

    def predict(self, model: keras.Model, request: PredictRequest) -> list[str]:
        """The top classes of each text, by a model whose run stored its tokenizer and classes."""
        tokenizer = stored_tokenizer(request.record)
        class_names = request.record.get(CLASS_NAMES_KEY)
        if tokenizer is None or class_names is None:
            raise ValueError(
                f"Model {model.name!r} stores no tokenizer and class names: predicting texts "
                "needs a text model trained by `keras-fourier train` on csv: data."
            )
        inputs = model.input if isinstance(model.input, dict) else {}
        if "token_ids" not in inputs:
            raise ValueError(f"Model {model.name!r} does not take token ids: not a text model.")
        if len(class_names) != model.output_shape[-1]:
            raise ValueError(
                f"The stored class names ({len(class_names)}) do not match the model's "
                f"{model.output_shape[-1]} outputs."
            )
        texts = list(request.inputs)
        sequence_length, padding = model_sequence_length(model, request.record)
        features = tokenize_and_pack(texts, tokenizer=tokenizer, sequence_length=sequence_length)
        # A model of any length reads the texts padded to the longest of them, as in training.
        longest = int(keras.ops.max(keras.ops.sum(features["padding_mask"], axis=-1)))
        width = longest if padding == "batch" else sequence_length
        batch = {name: features[name][:, :width] for name in inputs}
        probabilities = keras.ops.convert_to_numpy(model(batch, training=False))
        order = np.argsort(-probabilities, axis=-1, kind="stable")[:, : request.top]
        lines = []
        for text, row, indices in zip(texts, probabilities, order, strict=True):
            lines.append(repr(text))
            for rank, index in enumerate(indices, start=1):
                lines.append(f"  {rank}. {float(row[index]):7.2%}  {class_names[index]}")
        return lines


def model_sequence_length(
    model: keras.Model, record: Mapping[str, Any] | None = None
) -> tuple[int, str]:
    """The length a text model reads and its padding: (its fixed length, "fixed"), or, for a
    model of any length, (the longest text its run read, else its position table's rows,
    "batch"), `record` being what its run stored (`labels`)."""
    length = model.input["token_ids"].shape[1]
    if length is not None:
        return length, "fixed"
    rows = model.get_layer("embeddings").max_sequence_length
    longest = (record or {}).get(TEXT_LENGTH_KEY)
    if isinstance(longest, bool) or not isinstance(longest, int) or not 0 < longest <= rows:
        longest = rows
    return longest, "batch"


def _saved_sequence_length(path: str) -> int | None:
    """The fixed token length of a saved text model (its `token_ids` input), read from its
    `.keras` config without building it; None for any length (or no such input)."""
    try:
        with zipfile.ZipFile(path) as archive:
            config = read_zip_json(archive, "config.json", f"The .keras file {path!r}")
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return None  # loading the model names what is wrong with the file
    stack = [config]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            inner = value.get("config")
            if value.get("class_name") == "InputLayer" and isinstance(inner, dict):
                shape = inner.get("batch_shape") or [None, None]
                if inner.get("name") == "token_ids" and len(shape) == 2:
                    return shape[1]
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return None


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


def given_tokenizer(value: Any) -> Callable:
    """The tokenizer of a stored record, a name or path, or an object; None: "bytes"."""
    if value is None:
        return load_tokenizer(BYTES_TOKENIZER)
    if isinstance(value, Mapping):
        return tokenizer_from_record(value)
    if isinstance(value, (str, os.PathLike)):
        return load_tokenizer(value)
    return value


TASK = TextClassification()
