"""`train` and `evaluate`: resumable, distributed training of keras_fourier classifiers.

A run writes to its output directory:

* ``history.csv``: one row per completed epoch (first column the epoch),
  never repeated or lost across a kill and restart;
* ``backup/``: `keras.callbacks.BackupAndRestore` state (weights, optimizer
  and epoch), from which a killed run restarts after its last completed
  epoch;
* ``last.keras`` and ``best.keras`` (best validation accuracy) checkpoints;
* ``logs/``: TensorBoard summaries;
* ``model.keras``: the final model, written when training completes. A run
  whose ``model.keras`` exists and whose history covers every epoch is
  complete: training it again only evaluates it.

In a multi-worker run the chief writes there and every other worker under
``workers/<task_type>_<task_id>/`` of the output directory.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import keras
import tensorflow as tf

from keras_fourier.data import (
    LISTOPS_NUM_CLASSES,
    LISTOPS_VOCABULARY,
    AugmentConfig,
    WordTokenizer,
    generate_listops,
    get_num_classes,
    load_image_dataset,
    text_dataset,
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
MODEL_FILE = "model.keras"
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
        eval_split: held-out split of image data, used for validation after
            every epoch and for the final evaluation. Default "test".
        data_dir: TFDS data directory. Default None.
        sequence_length: ListOps sequence length (FNet models). Default 128.
        train_examples: ListOps training examples. Default 4000.
        eval_examples: ListOps held-out examples. Default 500.
        mixer, ffn, depths, dims, patch_size: `build_model` overrides of a
            vision preset. Default None: the preset's.
        seed: random seed of weights, data order and augmentation. Default 0.
        deterministic: reproducible image pipelines (same order and
            augmentation every run, slower with augmentation). Default False.
        tensorboard: write TensorBoard logs. Default True.
        verbose: `fit` verbosity ("auto", 0, 1 or 2). Default "auto".

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
        model: the trained model (EMA weights when `use_ema`).
        metrics: held-out metrics of the final model: "loss" (cross-entropy
            without label smoothing), "accuracy" and, with more than 5
            classes, "top5_accuracy".
        history: the rows of ``history.csv``, one per epoch.
        out: the directory this worker wrote to.
        model_path: path of the saved final model.
    """

    model: keras.Model
    metrics: dict[str, float]
    history: list[dict[str, float]]
    out: str
    model_path: str


def _listops_examples(sequence_length: int, num_examples: int, seed: int):
    max_length = sequence_length - 2
    return generate_listops(
        num_examples, min_length=max(1, max_length // 4), max_length=max_length, seed=seed
    )


def _one_hot(dataset: tf.data.Dataset, num_classes: int) -> tf.data.Dataset:
    return dataset.map(lambda features, labels: (features, tf.one_hot(labels, num_classes)))


def listops_eval_dataset(
    sequence_length: int = 128, num_examples: int = 500, batch_size: int = 256
) -> tf.data.Dataset:
    """The ListOps held-out set, generated with a fixed seed, with one-hot labels.

    Expressions have between (sequence_length - 2) // 4 and
    sequence_length - 2 tokens (room for [CLS] and [SEP]).

    Args:
        sequence_length: the model's static sequence length. Default 128.
        num_examples: number of examples. Default 500.
        batch_size: global batch size. Default 256.

    Returns:
        A `tf.data.Dataset` of ({"token_ids", "segment_ids", "padding_mask"},
        (B, 10) one-hot) batches.

    Example:
        >>> features, labels = next(iter(listops_eval_dataset(32, 8, batch_size=4)))
        >>> features["token_ids"].shape, labels.shape
        (TensorShape([4, 32]), TensorShape([4, 10]))
    """
    texts, labels = _listops_examples(sequence_length, num_examples, LISTOPS_EVAL_SEED)
    dataset = text_dataset(
        texts,
        labels,
        tokenizer=WordTokenizer(LISTOPS_VOCABULARY),
        sequence_length=sequence_length,
        batch_size=batch_size,
    )
    return _one_hot(dataset, LISTOPS_NUM_CLASSES)


def _listops_train_dataset(config: TrainConfig) -> tf.data.Dataset:
    held_out = set(
        _listops_examples(config.sequence_length, config.eval_examples, LISTOPS_EVAL_SEED)[0]
    )
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
    return _one_hot(dataset, LISTOPS_NUM_CLASSES)


def _datasets(config: TrainConfig) -> tuple[tf.data.Dataset, tf.data.Dataset, int]:
    if is_text_model(config.model):
        train_data = _listops_train_dataset(config)
        eval_data = listops_eval_dataset(
            config.sequence_length, config.eval_examples, config.batch_size
        )
        return train_data, eval_data, LISTOPS_NUM_CLASSES
    image_size = config.resolved_image_size()
    options = {"image_size": image_size, "batch_size": config.batch_size, "one_hot": True}
    train_data = load_image_dataset(
        config.data,
        "train",
        augment=config.augment,
        data_dir=config.data_dir,
        deterministic=config.deterministic,
        seed=config.seed,
        **options,
    )
    eval_data = load_image_dataset(
        config.data, config.eval_split, training=False, data_dir=config.data_dir, **options
    )
    return train_data, eval_data, get_num_classes(config.data, data_dir=config.data_dir)


def _metrics(num_classes: int) -> list[keras.metrics.Metric]:
    metrics = [keras.metrics.CategoricalAccuracy(name="accuracy")]
    if num_classes > 5:
        metrics.append(keras.metrics.TopKCategoricalAccuracy(5, name="top5_accuracy"))
    return metrics


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
        model: a classifier with probability outputs, or the path of a
            `.keras` file saved by `train`.
        data: an image source ("digits", "tfds:<name>", "dir:<path>") or
            "listops". Default "digits".
        split: image split. Default "test".
        batch_size: global batch size. Default 256.
        data_dir: TFDS data directory. Default None.
        eval_examples: size of the ListOps held-out set (as in training).
            Default 500.
        verbose: `Model.evaluate` verbosity. Default 0.

    Returns:
        {"loss": ..., "accuracy": ...} plus "top5_accuracy" when the model
        has more than 5 classes.

    Example:
        >>> metrics = evaluate("runs/default/model.keras", "digits")  # doctest: +SKIP
        >>> sorted(metrics)  # doctest: +SKIP
        ['accuracy', 'loss', 'top5_accuracy']
    """
    if not isinstance(model, keras.Model):
        model = keras.saving.load_model(model, compile=False)
    num_classes = model.output_shape[-1]
    if isinstance(model.input, dict) and "token_ids" in model.input:
        if data not in TEXT_SOURCES:
            raise ValueError(f"Text model {model.name!r} needs a text source {TEXT_SOURCES}.")
        sequence_length = model.input["token_ids"].shape[1]
        dataset = listops_eval_dataset(sequence_length, eval_examples, batch_size)
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
    # The CSV row of an epoch is written before its checkpoints and backup (see
    # ResumableCSVLogger); a kill in between redoes the epoch and rewrites the row.
    callbacks = [
        ResumableCSVLogger(history_path),
        keras.callbacks.ModelCheckpoint(os.path.join(out, "last.keras")),
        keras.callbacks.ModelCheckpoint(
            os.path.join(out, "best.keras"),
            monitor="val_accuracy",
            mode="max",
            save_best_only=True,
            initial_value_threshold=max(best_so_far, default=None),
        ),
        keras.callbacks.BackupAndRestore(os.path.join(out, "backup"), delete_checkpoint=False),
    ]
    if config.use_ema:
        callbacks.insert(0, keras.callbacks.SwapEMAWeights())
    if config.tensorboard:
        callbacks.append(keras.callbacks.TensorBoard(os.path.join(out, "logs"), write_graph=False))
    return callbacks


def _is_complete(out: str, epochs: int) -> bool:
    history = read_history(os.path.join(out, HISTORY_FILE))
    return (
        os.path.exists(os.path.join(out, MODEL_FILE))
        and bool(history)
        and (history[-1]["epoch"] >= epochs - 1)
    )


def train(config: TrainConfig | None = None, **overrides: Any) -> TrainResult:
    """Trains (or resumes, or just evaluates a finished run) and evaluates on the held-out split.

    Creates the strategy first, then builds the model and optimizer inside
    its scope, fits with `keras.callbacks.BackupAndRestore` so that running
    again after a kill resumes from the last completed epoch, saves the
    final model and evaluates it (see the module docstring for the files).
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

    if _is_complete(out, config.epochs):
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
    else:
        train_data, eval_data, num_classes = _datasets(config)
        if config.steps_per_epoch:
            train_data = train_data.repeat()
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
                model = _build(config, num_classes, steps_per_epoch)
        finally:
            keras.config.set_dtype_policy(previous_policy)
        model.fit(
            train_data,
            epochs=config.epochs,
            steps_per_epoch=config.steps_per_epoch,
            validation_data=eval_data,
            callbacks=_callbacks(config, out),
            shuffle=False,
            verbose=config.verbose,
        )
        partial = os.path.join(out, "model.partial.keras")
        model.save(partial)
        os.replace(partial, model_path)
        metrics = model.evaluate(eval_data, verbose=0, return_dict=True)
        metrics["loss"] = metrics.pop(CROSS_ENTROPY)

    return TrainResult(
        model=model,
        metrics=metrics,
        history=read_history(os.path.join(out, HISTORY_FILE)),
        out=out,
        model_path=model_path,
    )
