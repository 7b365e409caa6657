"""`train` and `evaluate`: resumable, distributed training of keras_fourier classifiers.

A run writes to its output directory:

* ``history.csv``: one row per completed epoch (first column the epoch),
  never repeated or lost across a kill and restart;
* ``backup/``: `keras.callbacks.BackupAndRestore` state (weights, optimizer
  and epoch), from which a killed run restarts after its last completed
  epoch;
* ``last.keras`` (the latest epoch) and ``best.keras`` (the epoch of best
  validation accuracy) checkpoints;
* ``logs/``: TensorBoard summaries (``tensorboard --logdir OUT/logs``);
* ``model.keras``: the model selected on the validation split (the weights
  of ``best.keras``), written when training completes; the test split is
  evaluated once, on it. A run whose ``model.keras`` exists and whose
  history covers every epoch is complete: training it again only evaluates
  it.

Three disjoint splits: the model trains on the train split, ``best.keras``
is selected on the validation split (held out of the training data when the
source has none, see `keras_fourier.data.training_splits`), and the test
split (``eval_split``) is evaluated once, at the end.

In a multi-worker run the chief writes there and every other worker under
``workers/<task_type>_<task_id>/`` of the output directory.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from typing import Any

import keras
import tensorflow as tf

from keras_fourier.data import (
    LISTOPS_NUM_CLASSES,
    LISTOPS_VOCABULARY,
    AugmentConfig,
    WordTokenizer,
    count_examples,
    generate_listops,
    get_num_classes,
    load_image_dataset,
    text_dataset,
    training_splits,
)
from keras_fourier.training.callbacks import ResumableCSVLogger, read_history
from keras_fourier.training.catalog import (
    ARCHITECTURE_OPTIONS,
    VISION_PRESETS,
    check_model_name,
    create_model,
    is_text_model,
    vision_stride,
)
from keras_fourier.training.recipe import check_precision, create_optimizer, warmup_cosine_schedule
from keras_fourier.training.strategy import check_strategy_name, get_strategy, worker_id

TEXT_SOURCES = ("listops",)
# The ListOps held-out set is generated with this fixed seed; training examples equal to
# a held-out one are dropped.
LISTOPS_EVAL_SEED = 1_000_003
LISTOPS_VALIDATION_SEED = 1_000_033
LISTOPS_SPLITS = ("validation", "test")
MODEL_FILE = "model.keras"
BEST_FILE = "best.keras"
LAST_FILE = "last.keras"
LOGS_FOLDER = "logs"
# Training reports the cross-entropy without label smoothing under this name.
CROSS_ENTROPY = "cross_entropy"
HISTORY_FILE = "history.csv"


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
        eval_examples: ListOps validation and test examples (each). Default 500.
        mixer, ffn, depths, dims, patch_size: `build_model` overrides of a
            vision preset. Default None: the preset's.
        seed: random seed of weights, data order and augmentation. Default 0.
        deterministic: reproducible image pipelines (same order and
            augmentation every run, slower with augmentation). Default False.
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

    def validate(self) -> None:
        """Checks names and sizes before any TensorFlow work.

        Raises:
            ValueError: naming the value, for an unknown model, strategy or
                mixed-precision policy, data that does not suit the model,
                architecture options of a non-preset model, or a
                non-positive `epochs` or `batch_size`.

        Example:
            >>> TrainConfig(strategy="gpu").validate()
            Traceback (most recent call last):
            ValueError: Unknown strategy 'gpu'; expected one of (...).
        """
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
        for name in ("epochs", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")

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
        trained: False when the run was already complete and was only
            evaluated.
    """

    model: keras.Model
    metrics: dict[str, float]
    history: list[dict[str, float]]
    out: str
    model_path: str
    trained: bool = True


def _listops_examples(sequence_length: int, num_examples: int, seed: int):
    max_length = sequence_length - 2
    return generate_listops(
        num_examples, min_length=max(1, max_length // 4), max_length=max_length, seed=seed
    )


def _one_hot(dataset: tf.data.Dataset, num_classes: int) -> tf.data.Dataset:
    return dataset.map(lambda features, labels: (features, tf.one_hot(labels, num_classes)))


def _listops_held_out(sequence_length: int, num_examples: int, split: str):
    """The ListOps validation or test examples; validation drops those in the test set."""
    if split not in LISTOPS_SPLITS:
        raise ValueError(f"Unknown ListOps split {split!r}; expected one of {LISTOPS_SPLITS}.")
    test = _listops_examples(sequence_length, num_examples, LISTOPS_EVAL_SEED)
    if split == "test":
        return test
    texts, labels = _listops_examples(sequence_length, num_examples, LISTOPS_VALIDATION_SEED)
    keep = [index for index, text in enumerate(texts) if text not in set(test[0])]
    return [texts[index] for index in keep], labels[keep]


def listops_eval_dataset(
    sequence_length: int = 128,
    num_examples: int = 500,
    batch_size: int = 256,
    split: str = "test",
) -> tf.data.Dataset:
    """A ListOps held-out set, generated with a fixed seed, with one-hot labels.

    Expressions have between (sequence_length - 2) // 4 and
    sequence_length - 2 tokens (room for [CLS] and [SEP]). The validation
    and test sets come from different seeds, and validation drops any
    expression that is also a test one.

    Args:
        sequence_length: the model's static sequence length. Default 128.
        num_examples: number of examples generated. Default 500.
        batch_size: global batch size. Default 256.
        split: "validation" or "test". Default "test".

    Returns:
        A `tf.data.Dataset` of ({"token_ids", "segment_ids", "padding_mask"},
        (B, 10) one-hot) batches.

    Example:
        >>> features, labels = next(iter(listops_eval_dataset(32, 8, batch_size=4)))
        >>> features["token_ids"].shape, labels.shape
        (TensorShape([4, 32]), TensorShape([4, 10]))
    """
    texts, labels = _listops_held_out(sequence_length, num_examples, split)
    dataset = text_dataset(
        texts,
        labels,
        tokenizer=WordTokenizer(LISTOPS_VOCABULARY),
        sequence_length=sequence_length,
        batch_size=batch_size,
    )
    return _one_hot(dataset, LISTOPS_NUM_CLASSES)


def _listops_train_dataset(config: TrainConfig) -> tuple[tf.data.Dataset, int]:
    held_out = {
        text
        for split in LISTOPS_SPLITS
        for text in _listops_held_out(config.sequence_length, config.eval_examples, split)[0]
    }
    texts, labels = _listops_examples(config.sequence_length, config.train_examples, config.seed)
    keep = [index for index, text in enumerate(texts) if text not in held_out]
    dataset = text_dataset(
        [texts[index] for index in keep],
        labels[keep],
        tokenizer=WordTokenizer(LISTOPS_VOCABULARY),
        sequence_length=config.sequence_length,
        batch_size=config.batch_size,
        training=True,
        seed=config.seed,
    )
    return _one_hot(dataset, LISTOPS_NUM_CLASSES), len(keep)


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
        train_data, train_size = _listops_train_dataset(config)
        validation_data = listops_eval_dataset(
            config.sequence_length, config.eval_examples, config.batch_size, "validation"
        )
        sizes = {
            split: len(_listops_held_out(config.sequence_length, config.eval_examples, split)[1])
            for split in LISTOPS_SPLITS
        }
        return _Data(
            train_data,
            validation_data,
            LISTOPS_NUM_CLASSES,
            {
                "train": f"{train_size:,} expressions (seed {config.seed})",
                "validation": f"{sizes['validation']:,} expressions (seed "
                f"{LISTOPS_VALIDATION_SEED})",
                "test": f"{sizes['test']:,} expressions (seed {LISTOPS_EVAL_SEED})",
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
    options = {"image_size": image_size, "batch_size": config.batch_size, "one_hot": True}
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
        eval_examples: examples of the ListOps held-out sets (as in
            training). Default 500.
        verbose: `Model.evaluate` verbosity. Default 0.

    Returns:
        {"loss": ..., "accuracy": ...} plus "top5_accuracy" when the model
        has more than 5 classes.

    Example:
        >>> metrics = evaluate("runs/default", "digits")  # doctest: +SKIP
        >>> sorted(metrics)  # doctest: +SKIP
        ['accuracy', 'loss', 'top5_accuracy']
    """
    if not isinstance(model, keras.Model):
        model = keras.saving.load_model(resolve_model_file(model), compile=False)
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
        )
    scorer = keras.Model(model.input, model.output, name=f"{model.name}_scorer")
    scorer.compile(loss=keras.losses.CategoricalCrossentropy(), metrics=_metrics(num_classes))
    return {
        key: float(value)
        for key, value in scorer.evaluate(dataset, verbose=verbose, return_dict=True).items()
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


def _callbacks(config: TrainConfig, out: str) -> list[keras.callbacks.Callback]:
    history_path = os.path.join(out, HISTORY_FILE)
    best_so_far = [
        row["val_accuracy"] for row in read_history(history_path) if "val_accuracy" in row
    ]
    # The CSV row of an epoch is written before its backup and checkpoints (see
    # ResumableCSVLogger); a kill in between redoes the epoch and rewrites the row. With
    # EMA, the backup keeps the raw weights, then the EMA weights are swapped in for the
    # checkpoints, so that best.keras holds the weights its val_accuracy was measured on.
    callbacks = [
        ResumableCSVLogger(history_path),
        keras.callbacks.BackupAndRestore(os.path.join(out, "backup"), delete_checkpoint=False),
        keras.callbacks.ModelCheckpoint(os.path.join(out, LAST_FILE)),
        keras.callbacks.ModelCheckpoint(
            os.path.join(out, BEST_FILE),
            monitor="val_accuracy",
            mode="max",
            save_best_only=True,
            initial_value_threshold=max(best_so_far, default=None),
        ),
    ]
    if config.use_ema:
        callbacks.insert(2, keras.callbacks.SwapEMAWeights(swap_on_epoch=True))
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


def _print_header(config: TrainConfig, model: keras.Model, data: _Data, out: str) -> None:
    strategy = model.distribute_strategy
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
        f"model {config.model}: {model.count_params():,} parameters, input {shape}, "
        f"{data.num_classes} classes",
        f"data {config.data!r}:",
        *(
            f"  {role:<10}  {text}" + (f" ({roles[role]})" if role in roles else "")
            for role, text in data.splits.items()
        ),
        f"strategy {type(strategy).__name__} ({replicas} replica(s) in sync)",
        f"output folder: {out}",
    ]
    print("\n".join(lines), flush=True)


def _is_complete(out: str, epochs: int) -> bool:
    history = read_history(os.path.join(out, HISTORY_FILE))
    return (
        os.path.exists(os.path.join(out, MODEL_FILE))
        and bool(history)
        and (history[-1]["epoch"] >= epochs - 1)
    )


def train(config: TrainConfig | None = None, **overrides: Any) -> TrainResult:
    """Trains (or resumes, or just evaluates a finished run) and evaluates on the test split.

    Creates the strategy first, then builds the model and optimizer inside
    its scope, fits with `keras.callbacks.BackupAndRestore` so that running
    again after a kill resumes from the last completed epoch, validates
    after every epoch on the validation split, saves the epoch with the best
    validation accuracy as the run's model and evaluates it once on the
    test split (see the module docstring for the files).
    The global dtype policy is set to `config.mixed_precision` while the
    model is built and restored afterwards.

    Args:
        config: the run's settings. Default None: `TrainConfig()`, the
            README's main job.
        **overrides: `TrainConfig` fields replacing those of `config`.

    Returns:
        A `TrainResult`.

    Raises:
        ValueError: for an unknown model, strategy or mixed-precision value,
            or a model that does not fit the data.

    Example:
        >>> result = train(epochs=1, out="runs/quick")  # doctest: +SKIP
        >>> 0 <= result.metrics["accuracy"] <= 1  # doctest: +SKIP
        True
    """
    config = dataclasses.replace(config or TrainConfig(), **overrides)
    config.validate()
    strategy = get_strategy(config.strategy)
    worker = worker_id(strategy)
    out = config.out if worker is None else os.path.join(config.out, "workers", worker)
    os.makedirs(out, exist_ok=True)
    keras.utils.set_random_seed(config.seed)
    model_path = os.path.join(out, MODEL_FILE)

    trained = not _is_complete(out, config.epochs)
    if trained:
        data = _datasets(config)
        train_data = data.train.repeat() if config.steps_per_epoch else data.train
        steps_per_epoch = config.steps_per_epoch or int(train_data.cardinality())
        if steps_per_epoch < 1:
            raise ValueError(
                f"Cannot infer the steps per epoch of data {config.data!r} "
                f"(cardinality {steps_per_epoch}); set `steps_per_epoch`."
            )
        previous_policy = keras.config.dtype_policy()
        keras.config.set_dtype_policy(config.mixed_precision)
        try:
            with strategy.scope():
                model = _build(config, data.num_classes, steps_per_epoch)
        finally:
            keras.config.set_dtype_policy(previous_policy)
        verbose = _fit_verbosity(config.verbose)
        if verbose:
            _print_header(config, model, data, out)
        model.fit(
            train_data,
            epochs=config.epochs,
            steps_per_epoch=config.steps_per_epoch,
            validation_data=data.validation,
            callbacks=_callbacks(config, out),
            shuffle=False,
            verbose=verbose,
        )
        # The model selected on the validation split becomes the run's model.
        selected = keras.saving.load_model(os.path.join(out, BEST_FILE), compile=False)
        partial = os.path.join(out, "model.partial.keras")
        selected.save(partial)
        os.replace(partial, model_path)
    with strategy.scope():
        model = keras.saving.load_model(model_path, compile=False)
        metrics = evaluate(
            model,
            config.data,
            split=config.eval_split,
            batch_size=config.batch_size,
            data_dir=config.data_dir,
            eval_examples=config.eval_examples,
        )

    return TrainResult(
        model=model,
        metrics=metrics,
        history=read_history(os.path.join(out, HISTORY_FILE)),
        out=out,
        model_path=model_path,
        trained=trained,
    )
