"""`train` and `evaluate`: resumable, distributed training of keras_fourier classifiers.

A run writes to its output directory, every file atomically (a kill, a
full disk or a crash leaves the previous version of a file, never a broken
one):

* ``run.json``: the run's identity (model, data, image size,
  hyper-parameters, package version) and, once finished, its held-out
  result. Rerunning with other settings fails and lists the fields that
  differ; rerunning a finished run reports it as finished and returns the
  stored result;
* ``run.lock``: held (``fcntl.flock``) by the live run; a second run on the
  folder fails at once naming the holder's pid; the lock of a killed run is
  taken over;
* ``history.csv``: one row per completed epoch (first column the epoch),
  never repeated or lost across a kill and restart;
* ``backup/``: the weights and optimizer state of the two newest completed
  epochs (:class:`~keras_fourier.training.callbacks.EpochBackup`), from which
  a killed run resumes; an unreadable newest slot falls back to the other,
  none restarts from epoch 0 with a warning;
* ``last.keras`` (the latest epoch) and ``best.keras`` (the epoch of best
  validation accuracy, whose value is stored inside it and is the threshold
  of a resumed run);
* ``logs/``: TensorBoard summaries (``tensorboard --logdir OUT/logs``);
* ``model.keras``: the model selected on the validation split (the weights
  of ``best.keras``), written when training completes; the test split is
  evaluated once, on it.

Three disjoint splits: the model trains on the train split, ``best.keras``
is selected on the validation split (held out of the training data when the
source has none, see `keras_fourier.data.training_splits`), and the test
split (``eval_split``) is evaluated once, at the end.

A NaN or infinite training loss stops the run with `NonFiniteLossError`
before anything of the broken epoch is saved. In a multi-worker run the
chief writes there and every other worker under
``workers/<task_type>_<task_id>/`` of the output directory.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Mapping
from typing import Any

import keras
import tensorflow as tf

from keras_fourier import __version__
from keras_fourier.data import (
    LISTOPS_NUM_CLASSES,
    LISTOPS_VOCABULARY,
    AugmentConfig,
    WordTokenizer,
    count_examples,
    get_class_names,
    get_num_classes,
    listops_eval_dataset,
    listops_train_dataset,
    load_image_dataset,
    training_splits,
)
from keras_fourier.data.checks import BAD_IMAGE_MODES, UnreadableImageError, unreadable_file
from keras_fourier.data.listops import LISTOPS_EVAL_SEED, LISTOPS_VALIDATION_SEED
from keras_fourier.data.text import select_model_inputs
from keras_fourier.fileio import remove_stale_temporaries, warn
from keras_fourier.flop_count import flops
from keras_fourier.models.weights import load_keras_file
from keras_fourier.training.callbacks import (
    EpochBackup,
    ModelCheckpoint,
    NonFiniteLossError,
    ResumableCSVLogger,
    StopOnNonFiniteLoss,
    complete_checkpoints,
    read_checkpoint_record,
    read_history,
    save_model,
    write_history,
)
from keras_fourier.training.catalog import (
    ARCHITECTURE_OPTIONS,
    VISION_PRESETS,
    check_model_name,
    create_model,
    is_text_model,
    vision_stride,
)
from keras_fourier.training.recipe import check_precision, create_optimizer, warmup_cosine_schedule
from keras_fourier.training.rundir import (
    RunLock,
    check_identity,
    check_writable_folder,
    normalize,
    read_run_record,
    write_run_record,
)
from keras_fourier.training.strategy import check_strategy_name, get_strategy, worker_id
from keras_fourier.validation import (
    check_bool,
    check_choice,
    check_number,
    check_positive_int,
)

TEXT_SOURCES = ("listops",)
MODEL_FILE = "model.keras"
BEST_FILE = "best.keras"
LAST_FILE = "last.keras"
LOGS_FOLDER = "logs"
# Settings that do not change what a run computes: they may differ when resuming.
NOT_IDENTITY = ("out", "verbose", "tensorboard", "strategy", "jit_compile", "data_dir")
TEXT_ONLY = ("sequence_length", "train_examples", "eval_examples")
IMAGE_ONLY = (
    "image_size",
    "augment",
    "eval_split",
    "validation_split",
    "deterministic",
    "on_bad_image",
)
# Training reports the cross-entropy without label smoothing under this name.
CROSS_ENTROPY = "cross_entropy"
HISTORY_FILE = "history.csv"
# Keys of the record inside model.keras (`save_model`) that label its outputs for `predict`.
CLASS_NAMES_KEY = "class_names"
CROP_PCT_KEY = "eval_crop_pct"
# The centre crop of every evaluation pipeline of a run (load_image_dataset's default).
EVAL_CROP_PCT = 0.875


@dataclasses.dataclass
class TrainConfig:
    """Everything `train` needs; the defaults are the README's main job.

    The defaults train `gfnet_tiny` on the embedded digits (16x16) with the
    papers' recipe: AdamW (weight decay 0.05, not on norms, biases, position
    embeddings and Fourier filters), linear warmup then cosine decay, global
    gradient clipping 1.0, label smoothing 0.1.

    Attributes:
        model: a name from `keras_fourier.training.model_names()`. Default
            "gfnet_tiny".
        data: an image source of `keras_fourier.data.load_image_dataset`
            ("digits", "tfds:<name>", "dir:<path>") or, for FNet models,
            "listops". Default "digits".
        out: output directory. Default "runs/default".
        epochs: training epochs. Default 20.
        batch_size: *global* batch size, split across replicas and workers.
            Default 64.
        image_size: image height and width. Default None: for "digits" the
            smallest multiple of the model's stride >= 16, else 32 for presets
            and 224 for the named models.
        learning_rate: peak learning rate. Default 3e-3.
        min_learning_rate: final learning rate of the cosine decay. Default 1e-5.
        warmup_epochs: epochs of linear warmup (fractions allowed). Default 2.
        weight_decay: AdamW weight decay. Default 0.05.
        clipnorm: global gradient norm clip, None for none. Default 1.0.
        label_smoothing: label smoothing of the cross-entropy. Default 0.1.
        drop_path_rate: stochastic depth rate. Default None: the model's.
        augment: training augmentation of image data, e.g. `AugmentConfig()`
            (DeiT). Default None: none.
        strategy: a name of `keras_fourier.training.STRATEGIES`. Default "auto".
        mixed_precision: "float32", "mixed_float16" (with dynamic loss
            scaling) or "mixed_bfloat16". Default "float32".
        jit_compile: XLA-compile the train step: True, False or "auto" (XLA
            when an accelerator is present). Default "auto".
        use_ema: keep an EMA of the weights, used for validation and as the
            final weights. Default False.
        ema_momentum: EMA momentum. Default 0.99.
        steps_per_epoch: steps per epoch, drawn from the repeated training
            data. Default None: one pass over the data per epoch.
        eval_split: the test split of image data, evaluated once at the end
            on the model selected on the validation split. Default "test".
        validation_split: the image split evaluated after every epoch to
            select ``best.keras``. Default None: see
            `keras_fourier.data.training_splits` ("validation", held out of
            the training images when the source has none).
        data_dir: TFDS data directory. Default None.
        sequence_length: ListOps sequence length (FNet models). Default 128.
        train_examples: ListOps training examples. Default 4000.
        eval_examples: ListOps held-out examples. Default 500.
        mixer, ffn, depths, dims, patch_size: `build_model` overrides of a
            vision preset. Default None: the preset's.
        seed: random seed of weights, data order and augmentation. Default 0.
        deterministic: reproducible image pipelines (same order and
            augmentation every run, slower with augmentation). Default False.
        on_bad_image: a corrupt image file of "dir:" data: "error" (named)
            or "skip" (counted and left out). Default "error".
        tensorboard: write TensorBoard logs. Default True.
        verbose: `fit` verbosity: 0 silent, 1 progress bars, 2 one line per
            epoch, "auto" 1 on a terminal and 2 otherwise. Any but 0 also
            prints a header (model, parameters, data splits, output folder).
            Default "auto".

    Example:
        >>> config = TrainConfig(model="afno_tiny", epochs=2, out="runs/afno")
        >>> config.batch_size
        64
    """

    model: str = "gfnet_tiny"
    data: str = "digits"
    out: str = "runs/default"
    epochs: int = 20
    batch_size: int = 64
    image_size: int | None = None
    learning_rate: float = 3e-3
    min_learning_rate: float = 1e-5
    warmup_epochs: float = 2
    weight_decay: float = 0.05
    clipnorm: float | None = 1.0
    label_smoothing: float = 0.1
    drop_path_rate: float | None = None
    augment: AugmentConfig | None = None
    strategy: str = "auto"
    mixed_precision: str = "float32"
    jit_compile: bool | str = "auto"
    use_ema: bool = False
    ema_momentum: float = 0.99
    steps_per_epoch: int | None = None
    eval_split: str = "test"
    validation_split: str | None = None
    data_dir: str | None = None
    sequence_length: int = 128
    train_examples: int = 4000
    eval_examples: int = 500
    mixer: str | None = None
    ffn: str | None = None
    depths: int | tuple[int, ...] | None = None
    dims: int | tuple[int, ...] | None = None
    patch_size: int | None = None
    seed: int = 0
    deterministic: bool = False
    on_bad_image: str = "error"
    tensorboard: bool = True
    verbose: str | int = "auto"

    @property
    def architecture(self) -> dict[str, Any]:
        """The `build_model` overrides that are set.

        Returns:
            {option: value} for the non-None fields among "mixer", "ffn",
            "depths", "dims" and "patch_size".

        Example:
            >>> TrainConfig(dims=32).architecture
            {'dims': 32}
        """
        return {
            key: getattr(self, key)
            for key in ARCHITECTURE_OPTIONS
            if getattr(self, key) is not None
        }

    def validate(self, names: Mapping[str, str] | None = None) -> None:
        """Checks every setting before anything is built or written.

        Args:
            names: {field: name} used in the messages instead of the field
                names, e.g. the command-line flags. Default None.

        Raises:
            ValueError: naming the setting and the value, for an unknown
                model, strategy or mixed-precision policy, data that does not
                suit the model, architecture options of a non-preset model,
                an image size that is not a multiple of the model's stride,
                or a hyper-parameter out of range (learning rates finite and
                > 0, label smoothing and drop path in [0, 1), EMA momentum
                in (0, 1), counts positive, ...).

        Example:
            >>> TrainConfig(learning_rate=float("nan")).validate()
            Traceback (most recent call last):
            ValueError: `learning_rate` must be a finite number > 0. Received: learning_rate=nan
        """
        names = dict(names or {})

        def name(field: str) -> str:
            return names.get(field, field)

        check_model_name(self.model)
        check_strategy_name(self.strategy)
        check_precision(self.mixed_precision)
        text_model = is_text_model(self.model)
        if text_model != (self.data in TEXT_SOURCES):
            kind = "text" if text_model else "vision"
            raise ValueError(
                f"Model {self.model!r} is a {kind} model but data {self.data!r} is "
                f"{'not ' if text_model else ''}a text source {TEXT_SOURCES}."
            )
        if self.architecture and self.model not in VISION_PRESETS:
            raise ValueError(
                f"Architecture options {sorted(self.architecture)} only apply to the presets "
                f"{sorted(VISION_PRESETS)}; received model {self.model!r}."
            )
        for field in ("epochs", "batch_size", "sequence_length", "train_examples"):
            check_positive_int(name(field), getattr(self, field))
        check_positive_int(name("eval_examples"), self.eval_examples)
        for field in ("steps_per_epoch", "image_size", "patch_size"):
            if getattr(self, field) is not None:
                check_positive_int(name(field), getattr(self, field))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            seed = name("seed")
            raise ValueError(f"`{seed}` must be a non-negative int. Received: {seed}={self.seed!r}")
        check_number(name("learning_rate"), self.learning_rate, low=0, low_open=True)
        check_number(
            name("min_learning_rate"), self.min_learning_rate, low=0, high=self.learning_rate
        )
        check_number(name("warmup_epochs"), self.warmup_epochs, low=0)
        check_number(name("weight_decay"), self.weight_decay, low=0)
        if self.clipnorm is not None:
            check_number(name("clipnorm"), self.clipnorm, low=0, low_open=True)
        check_number(name("label_smoothing"), self.label_smoothing, low=0, high=1, high_open=True)
        if self.drop_path_rate is not None:
            check_number(name("drop_path_rate"), self.drop_path_rate, low=0, high=1, high_open=True)
        check_number(
            name("ema_momentum"), self.ema_momentum, low=0, high=1, low_open=True, high_open=True
        )
        for field in ("use_ema", "deterministic", "tensorboard"):
            check_bool(name(field), getattr(self, field))
        check_choice(name("jit_compile"), self.jit_compile, (True, False, "auto"))
        check_choice(name("on_bad_image"), self.on_bad_image, BAD_IMAGE_MODES)
        check_choice(name("verbose"), self.verbose, ("auto", 0, 1, 2))
        if self.augment is not None and not isinstance(self.augment, AugmentConfig):
            raise ValueError(
                f"`{name('augment')}` must be None or an AugmentConfig. "
                f"Received: {name('augment')}={self.augment!r}"
            )
        if not isinstance(self.eval_split, str) or not self.eval_split:
            raise ValueError(
                f"`{name('eval_split')}` must be a split name. "
                f"Received: {name('eval_split')}={self.eval_split!r}"
            )
        if self.validation_split is not None and (
            not isinstance(self.validation_split, str) or not self.validation_split
        ):
            raise ValueError(
                f"`{name('validation_split')}` must be None or a split name. "
                f"Received: {name('validation_split')}={self.validation_split!r}"
            )
        if not text_model and self.image_size is not None:
            stride = vision_stride(self.model, **self.architecture)
            if self.image_size % stride:
                raise ValueError(
                    f"`{name('image_size')}` must be a multiple of {stride}, the stride of model "
                    f"{self.model!r}. Received: {name('image_size')}={self.image_size}"
                )

    def identity(self) -> dict[str, Any]:
        """The settings that define what the run computes, as recorded in ``run.json``.

        Returns:
            Every field but those of `NOT_IDENTITY` and those that do not
            apply to the model (`TEXT_ONLY` or `IMAGE_ONLY`), with `augment`
            as a dict and the resolved image size of vision models, as JSON
            values.

        Example:
            >>> TrainConfig().identity()["image_size"]
            16
        """
        text = is_text_model(self.model)
        skipped = (*NOT_IDENTITY, *(IMAGE_ONLY if text else TEXT_ONLY))
        values = {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.name not in skipped
        }
        if not text:
            values["image_size"] = self.resolved_image_size()
            if self.augment is not None:
                values["augment"] = dataclasses.asdict(self.augment)
        return normalize(values)

    def resolved_image_size(self) -> int:
        """`image_size`, or its default for the model and data.

        Returns:
            The image size: `image_size` if set, else the smallest multiple
            of the model's stride that is at least 16 for "digits" (8x8
            images), 32 for presets and 224 for the named models.

        Example:
            >>> TrainConfig(model="gfnet_h_ti").resolved_image_size()
            32
        """
        if self.image_size is not None:
            return self.image_size
        stride = vision_stride(self.model, **self.architecture)
        base = 16 if self.data == "digits" else 32 if self.model in VISION_PRESETS else 224
        return stride * math.ceil(base / stride)


@dataclasses.dataclass
class TrainResult:
    """What `train` returns.

    Attributes:
        model: the model selected on the validation split (EMA weights when
            `use_ema`), without optimizer.
        metrics: its test-split metrics: "loss" (cross-entropy without label
            smoothing), "accuracy" and, with more than 5 classes,
            "top5_accuracy".
        history: the rows of ``history.csv``, one per epoch.
        out: the directory this worker wrote to.
        model_path: path of the selected model, ``model.keras``.
        already_finished: True when the run was finished before this call,
            which then only loaded it and returned the stored metrics.
    """

    model: keras.Model
    metrics: dict[str, float]
    history: list[dict[str, float]]
    out: str
    model_path: str
    already_finished: bool = False


@dataclasses.dataclass
class _Data:
    """The train and validation pipelines of a run, and a line per split for the header."""

    train: tf.data.Dataset
    validation: tf.data.Dataset
    num_classes: int
    splits: dict[str, str]


def _size(count: int | None, unit: str) -> str:
    return f"{count:,} {unit}" if count is not None else f"? {unit}"


def _datasets(config: TrainConfig) -> _Data:
    if is_text_model(config.model):
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
        return _Data(
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
    image_size = config.resolved_image_size()
    options = {
        "image_size": image_size,
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
    return _Data(
        train_data,
        validation_data,
        get_num_classes(config.data, data_dir=config.data_dir),
        splits,
    )


def _metrics(num_classes: int) -> list[keras.metrics.Metric]:
    metrics = [keras.metrics.CategoricalAccuracy(name="accuracy")]
    if num_classes > 5:
        metrics.append(keras.metrics.TopKCategoricalAccuracy(5, name="top5_accuracy"))
    return metrics


def resolve_model_file(path: str | os.PathLike) -> str:
    """The `.keras` file behind a path given to `evaluate`: the file, or a run folder's model.

    Args:
        path: a `.keras` file, or a folder written by `train` (its
            ``model.keras``, the model selected on the validation split).

    Returns:
        The path of the `.keras` file.

    Raises:
        FileNotFoundError: for a missing path, or a run folder without
            ``model.keras`` (its run has not finished).
        ValueError: for a folder that is not a run folder (a SavedModel, say).

    Example:
        >>> resolve_model_file("runs/default")  # doctest: +SKIP
        'runs/default/model.keras'
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        if not os.path.exists(path):
            raise FileNotFoundError(f"No model file or run folder at {path!r}.")
        return path
    model_file = os.path.join(path, MODEL_FILE)
    if os.path.exists(model_file):
        return model_file
    if os.path.exists(os.path.join(path, HISTORY_FILE)):
        raise FileNotFoundError(
            f"Run folder {path!r} has no {MODEL_FILE}: its run has not finished. Resume it with "
            f"the same `train` command, or evaluate {os.path.join(path, BEST_FILE)!r} or "
            f"{os.path.join(path, LAST_FILE)!r}."
        )
    kind = (
        "a SavedModel (export one with keras-fourier export)"
        if os.path.exists(os.path.join(path, "saved_model.pb"))
        else "not a run folder of `train`"
    )
    raise ValueError(
        f"Folder {path!r} is {kind}; expected a .keras file or a run folder holding {MODEL_FILE}."
    )


def evaluate(
    model: keras.Model | str | os.PathLike,
    data: str = "digits",
    *,
    split: str = "test",
    batch_size: int = 256,
    data_dir: str | None = None,
    eval_examples: int = 500,
    verbose: str | int = 0,
    on_bad_image: str = "error",
) -> dict[str, float]:
    """Held-out loss, top-1 and top-5 accuracy of a classifier.

    The input size comes from the model: images are resized to its input
    size, ListOps is generated at its sequence length. The loss is the
    cross-entropy without label smoothing. `model` is not modified (it is
    scored through a new `keras.Model` sharing its layers); call this inside
    the strategy's scope to evaluate distributed.

    Args:
        model: a classifier with probability outputs, the path of a
            `.keras` file, or a run folder written by `train` (its
            ``model.keras``).
        data: an image source ("digits", "tfds:<name>", "dir:<path>") or
            "listops". Default "digits".
        split: the split: an image split, or "validation"/"test" for
            ListOps. Default "test".
        batch_size: global batch size. Default 256.
        data_dir: TFDS data directory. Default None.
        eval_examples: size of the ListOps held-out set (as in training).
            Default 500.
        verbose: `Model.evaluate` verbosity. Default 0.
        on_bad_image: a corrupt image file of "dir:" data: "error" or "skip".
            Default "error".

    Returns:
        {"loss": ..., "accuracy": ...} plus "top5_accuracy" when the model
        has more than 5 classes.

    Raises:
        ValueError: a bad argument, or data whose class count is not the
            model's.
        NonFiniteLossError: the loss is NaN or infinite.

    Example:
        >>> metrics = evaluate("runs/default", "digits")  # doctest: +SKIP
        >>> sorted(metrics)  # doctest: +SKIP
        ['accuracy', 'loss', 'top5_accuracy']
    """
    if not isinstance(model, keras.Model):
        model = load_keras_file(resolve_model_file(model), compile=False)
    num_classes = model.output_shape[-1]
    if isinstance(model.input, dict) and "token_ids" in model.input:
        if data not in TEXT_SOURCES:
            raise ValueError(f"Text model {model.name!r} needs a text source {TEXT_SOURCES}.")
        sequence_length = model.input["token_ids"].shape[1]
        dataset = listops_eval_dataset(sequence_length, eval_examples, batch_size, split)
    else:
        dataset = load_image_dataset(
            data,
            split,
            image_size=model.input_shape[1],
            batch_size=batch_size,
            training=False,
            one_hot=True,
            data_dir=data_dir,
            on_bad_image=on_bad_image,
        )
    data_classes = dataset.element_spec[1].shape[-1]
    if data_classes is not None and data_classes != num_classes:
        raise ValueError(
            f"Data {data!r} has {data_classes} classes but model {model.name!r} outputs "
            f"{num_classes}: evaluate it on data with its own classes. Received: data={data!r}"
        )
    scorer = keras.Model(model.input, model.output, name=f"{model.name}_scorer")
    scorer.compile(loss=keras.losses.CategoricalCrossentropy(), metrics=_metrics(num_classes))
    metrics = {
        key: float(value)
        for key, value in scorer.evaluate(
            select_model_inputs(dataset, model), verbose=verbose, return_dict=True
        ).items()
    }
    if not math.isfinite(metrics["loss"]):
        raise NonFiniteLossError(
            f"Model {model.name!r} gives a {metrics['loss']} loss on split {split!r} of "
            f"{data!r}: its outputs are not finite (NaN or inf weights?); the result means "
            "nothing."
        )
    return metrics


def _labels(config: TrainConfig) -> dict[str, Any]:
    """What `keras-fourier predict` needs to label the run's images, stored in model.keras.

    The class names of the data ("0"-"9", folder names, TFDS label names)
    and the centre-crop fraction of the run's evaluation pipelines
    (`load_image_dataset`'s default); none for text models.
    """
    if is_text_model(config.model):
        return {}
    return {
        CLASS_NAMES_KEY: get_class_names(config.data, data_dir=config.data_dir),
        CROP_PCT_KEY: EVAL_CROP_PCT,
    }


def _build(config: TrainConfig, num_classes: int, steps_per_epoch: int) -> keras.Model:
    if is_text_model(config.model):
        inputs = {
            "sequence_length": config.sequence_length,
            "vocabulary_size": WordTokenizer(LISTOPS_VOCABULARY).vocabulary_size,
        }
    else:
        inputs = {"image_size": config.resolved_image_size()}
    model = create_model(
        config.model,
        num_classes=num_classes,
        drop_path_rate=config.drop_path_rate,
        **inputs,
        **config.architecture,
    )
    total_steps = config.epochs * steps_per_epoch
    schedule = warmup_cosine_schedule(
        config.learning_rate,
        total_steps,
        warmup_steps=min(round(config.warmup_epochs * steps_per_epoch), total_steps - 1),
        min_learning_rate=config.min_learning_rate,
    )
    optimizer = create_optimizer(
        model,
        learning_rate=schedule,
        weight_decay=config.weight_decay,
        clipnorm=config.clipnorm,
        use_ema=config.use_ema,
        ema_momentum=config.ema_momentum,
    )
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.CategoricalCrossentropy(label_smoothing=config.label_smoothing),
        metrics=[*_metrics(num_classes), keras.metrics.CategoricalCrossentropy(name=CROSS_ENTROPY)],
        jit_compile=config.jit_compile,
    )
    return model


def _callbacks(
    config: TrainConfig, out: str, backup: EpochBackup
) -> list[keras.callbacks.Callback]:
    # Order matters: a non-finite loss raises before anything of its epoch is saved, and an
    # epoch's CSV row is written before its backup and checkpoints; a kill in between redoes
    # the epoch and rewrites its row. With EMA, the backup keeps the raw weights, then the EMA
    # weights are swapped in for the checkpoints, so that best.keras holds the weights its
    # val_accuracy was measured on (a kill between the backup and the checkpoints leaves
    # best.keras at the previous best, with its own stored value).
    callbacks = [
        StopOnNonFiniteLoss(),
        ResumableCSVLogger(os.path.join(out, HISTORY_FILE)),
        backup,
        ModelCheckpoint(os.path.join(out, LAST_FILE)),
        ModelCheckpoint(os.path.join(out, BEST_FILE), monitor="val_accuracy", mode="max"),
    ]
    if config.use_ema:
        callbacks.insert(3, keras.callbacks.SwapEMAWeights(swap_on_epoch=True))
    if config.tensorboard:
        callbacks.append(
            keras.callbacks.TensorBoard(os.path.join(out, LOGS_FOLDER), write_graph=False)
        )
    return callbacks


def _fit_verbosity(verbose: str | int) -> int:
    """`verbose` of `fit`: "auto" is a progress bar on a terminal, else one line per epoch."""
    if verbose == "auto":
        return 1 if sys.stdout.isatty() else 2
    return int(verbose)


def _print_header(
    config: TrainConfig, model: keras.Model, data: _Data, out: str, strategy: Any
) -> None:
    replicas = strategy.num_replicas_in_sync
    shape = (
        f"sequences of {config.sequence_length} tokens"
        if is_text_model(config.model)
        else "x".join(str(size) for size in model.input_shape[1:])
    )
    roles = {
        "validation": "selects best.keras",
        "test": "evaluated once, at the end",
    }
    lines = [
        f"model {config.model}: {model.count_params():,} parameters, "
        f"{flops(model) / 1e6:,.1f} MFLOPs per example (papers' convention), input {shape}, "
        f"{data.num_classes} classes",
        f"data {config.data!r}:",
        *(
            f"  {role:<10}  {text}" + (f" ({roles[role]})" if role in roles else "")
            for role, text in data.splits.items()
        ),
        f"strategy {type(strategy).__name__.strip('_')} ({replicas} replica(s) in sync)",
        f"output folder: {out}",
    ]
    print("\n".join(lines), flush=True)


def _record(config: TrainConfig, **extra: Any) -> dict[str, Any]:
    return {"identity": config.identity(), "keras_fourier_version": __version__, **extra}


def _check_folder(out: str, config: TrainConfig, names: Mapping[str, str]) -> dict | None:
    """The folder's run record after checking it is this run's; None for a new run."""
    record = read_run_record(out)
    if record is None:
        return None
    stored = record.get("identity")
    if not isinstance(stored, dict):
        warn(f"{os.path.join(out, 'run.json')} has no run identity; it is rewritten")
        return None
    check_identity(out, stored, config.identity(), names)
    version = record.get("keras_fourier_version")
    if version != __version__:
        warn(f"run folder {out!r} was written by keras_fourier {version}, this is {__version__}")
    return record


def _finished(out: str, record: dict | None) -> TrainResult | None:
    """The stored result of a finished run, or None (not finished, or its model is unreadable).

    A damaged ``history.csv`` is rewritten from the newest backup's rows.
    """
    if record is None or record.get("status") != "finished":
        return None
    model_path = os.path.join(out, MODEL_FILE)
    try:
        model = load_keras_file(model_path, compile=False)
    except ValueError as error:
        warn(f"{error}; resuming from the last backup to rewrite it")
        return None
    history_path = os.path.join(out, HISTORY_FILE)
    history = read_history(history_path)
    rows = EpochBackup(os.path.join(out, "backup"), history_path).stored_history()
    if len(rows) > len(history):
        warn(f"{history_path} was damaged; rewritten from the backup")
        write_history(history_path, rows)
        history = rows
    return TrainResult(
        model=model,
        metrics=dict(record["metrics"]),
        history=history,
        out=out,
        model_path=model_path,
        already_finished=True,
    )


def train(
    config: TrainConfig | None = None, *, names: Mapping[str, str] | None = None, **overrides: Any
) -> TrainResult:
    """Trains (or resumes, or returns a finished run) and evaluates on the held-out split.

    Checks every setting first (`TrainConfig.validate`), then the output
    folder: it must not be held by another live run and must hold this
    run's settings if it holds a run at all; a finished run is returned as
    stored. Data problems (a `dir:` source with one class or mismatched
    split folders, a split smaller than a batch) are found before anything
    is written. Then the strategy is created, the model and optimizer are
    built inside its scope, restored from the newest intact backup, fitted
    (resuming after the last completed epoch), saved and evaluated (see the
    module docstring for the files). The global dtype policy is set to
    `config.mixed_precision` while the model is built and restored
    afterwards.

    Args:
        config: the run's settings. Default None: `TrainConfig()`, the
            README's main job.
        names: {field: name} for error messages, e.g. command-line flags.
            Default None: the field names.
        **overrides: `TrainConfig` fields replacing those of `config`.

    Returns:
        A `TrainResult`.

    Raises:
        ValueError: for a bad setting or data that cannot make sense;
            `RunConfigError` (a ValueError) when the folder holds a run with
            other settings, listing them. Nothing is written.
        RunFolderBusyError: another live run holds the folder.
        NonFiniteLossError: the loss became NaN or infinite; the folder
            keeps the last completed epoch's checkpoints.

    Example:
        >>> result = train(epochs=1, out="runs/quick")  # doctest: +SKIP
        >>> 0 <= result.metrics["accuracy"] <= 1  # doctest: +SKIP
        True
    """
    config = dataclasses.replace(config or TrainConfig(), **overrides)
    names = dict(names or {})
    config.validate(names)
    strategy = get_strategy(config.strategy)
    worker = worker_id(strategy)
    out = config.out if worker is None else os.path.join(config.out, "workers", worker)
    check_writable_folder(out, names.get("out", "out"))
    lock = RunLock(out)
    try:
        if os.path.isdir(out):
            lock.acquire()
            finished = _finished(out, _check_folder(out, config, names))
            if finished is not None:
                return finished
        data = _datasets(config)
        if config.steps_per_epoch:
            data.train = data.train.repeat()
        steps_per_epoch = config.steps_per_epoch or int(data.train.cardinality())
        if steps_per_epoch < 1:
            raise ValueError(
                f"Cannot infer the steps per epoch of data {config.data!r} "
                f"(cardinality {steps_per_epoch}); set "
                f"`{names.get('steps_per_epoch', 'steps_per_epoch')}`."
            )
        if not lock.held:
            os.makedirs(out, exist_ok=True)
            lock.acquire()
            _check_folder(out, config, names)
        return _fit(config, strategy, out, data, steps_per_epoch)
    finally:
        lock.release()


def _fit(
    config: TrainConfig,
    strategy: tf.distribute.Strategy,
    out: str,
    data: _Data,
    steps_per_epoch: int,
) -> TrainResult:
    for folder in (out, os.path.join(out, "backup")):
        remove_stale_temporaries(folder)
    write_run_record(out, _record(config, status="running"))
    keras.utils.set_random_seed(config.seed)
    history_path = os.path.join(out, HISTORY_FILE)
    backup = EpochBackup(os.path.join(out, "backup"), history_path)
    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(config.mixed_precision)
    try:
        with strategy.scope():
            model = _build(config, data.num_classes, steps_per_epoch)
            last_epoch, rows = backup.restore(model)
            completed = complete_checkpoints(
                model,
                os.path.join(out, LAST_FILE),
                os.path.join(out, BEST_FILE),
                last_epoch,
                rows,
                use_ema=config.use_ema,
            )
            if completed:
                warn(f"rewrote {', '.join(completed)} from the backup of epoch {last_epoch + 1}")
    finally:
        keras.config.set_dtype_policy(previous_policy)
    if rows != read_history(history_path)[: len(rows)]:
        write_history(history_path, rows)
    verbose = _fit_verbosity(config.verbose)
    if verbose:
        _print_header(config, model, data, out, strategy)
    try:
        model.fit(
            select_model_inputs(data.train, model),
            epochs=config.epochs,
            initial_epoch=last_epoch + 1,
            steps_per_epoch=config.steps_per_epoch,
            validation_data=select_model_inputs(data.validation, model),
            callbacks=_callbacks(config, out, backup),
            shuffle=False,
            verbose=verbose,
        )
    except tf.errors.InvalidArgumentError as error:
        file = unreadable_file(error)
        if file is None:
            raise
        raise UnreadableImageError(
            f"Cannot decode image file {file!r} of data {config.data!r} (corrupt, truncated or "
            "not an image): remove or replace it, or pass on_bad_image='skip' "
            "(--on-bad-image skip) to skip unreadable files. The run keeps its last "
            "completed epoch."
        ) from None
    # The epoch selected on the validation split becomes the run's model, and the test split
    # is evaluated once, on it.
    best_path = os.path.join(out, BEST_FILE)
    selected = load_keras_file(best_path, compile=False)
    model_path = os.path.join(out, MODEL_FILE)
    save_model(
        selected, model_path, {**(read_checkpoint_record(best_path) or {}), **_labels(config)}
    )
    with strategy.scope():
        selected = load_keras_file(model_path, compile=False)
        metrics = evaluate(
            selected,
            config.data,
            split=config.eval_split,
            batch_size=config.batch_size,
            data_dir=config.data_dir,
            eval_examples=config.eval_examples,
            on_bad_image=config.on_bad_image,
        )
    write_run_record(out, _record(config, status="finished", metrics=metrics))
    return TrainResult(
        model=selected,
        metrics=metrics,
        history=read_history(history_path),
        out=out,
        model_path=model_path,
    )
