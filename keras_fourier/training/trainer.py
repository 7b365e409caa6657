"""`train` and `evaluate`: resumable, distributed training of keras_fourier models, any task.

The trainer asks the run's task (:mod:`keras_fourier.tasks`) for its data,
model options, loss, metrics, output check and the metric that selects
``best.keras``; everything below holds for every task.

A run writes to its output directory, every file atomically (a kill, a
full disk or a crash leaves the previous version of a file, never a broken
one):

* ``run.json``: the run's identity (model, data, image size,
  hyper-parameters, package version) and, once finished, its held-out
  result. Rerunning with other settings fails and lists the fields that
  differ (a run that stopped before its first epoch, with nothing but
  ``run.json`` written, starts again with them, with a warning);
  rerunning a finished run reports it as finished and returns the stored
  result;
* ``run.lock``: held (``fcntl.flock``) by the live run; a second run on the
  folder fails at once naming the holder's pid; the lock of a killed run is
  taken over;
* ``history.csv``: one row per completed epoch (first column the epoch),
  never repeated or lost across a kill and restart;
* ``backup/``: the weights and optimizer state of the two newest completed
  epochs (:class:`~keras_fourier.training.callbacks.EpochBackup`), from which
  a killed run resumes; an unreadable newest slot falls back to the other,
  none restarts from epoch 0 with a warning;
* ``last.keras`` (the latest epoch) and ``best.keras`` (the epoch of the best
  validation value of the task's selection metric, e.g. the accuracy of a
  classifier, stored inside it: the threshold of a resumed run);
* ``logs/``: TensorBoard summaries (``tensorboard --logdir OUT/logs``);
* ``model.keras``: the model selected on the validation split (the weights
  of ``best.keras``), written when training completes, with the run's task
  and what the task needs to label its outputs (`Task.labels`); the test
  split is evaluated once, on it.

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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf

from keras_fourier import __version__
from keras_fourier.data.checks import UnreadableImageError, data_check_error, unreadable_file
from keras_fourier.data.text import select_model_inputs
from keras_fourier.fileio import check_writable_folder, remove_stale_temporaries, warn
from keras_fourier.flop_count import flops
from keras_fourier.model_record import (
    CLASS_NAMES_KEY,
    TASK_KEY,
    TOKENIZER_KEY,
    read_checkpoint_record,
    read_model_record,
)
from keras_fourier.models.catalog import (
    canonical_name,
    is_model_name,
)
from keras_fourier.models.resolve import resolve_model
from keras_fourier.run_folder import RunFolder, read_history, resolve_model_file, write_history
from keras_fourier.tasks import EvaluationRequest, Task, TaskData, select_task
from keras_fourier.training.callbacks import (
    EpochBackup,
    ModelCheckpoint,
    NonFiniteLossError,
    ResumableCSVLogger,
    StopOnNonFiniteLoss,
    StopOnUnscoredSplit,
    complete_checkpoints,
    save_model,
)
from keras_fourier.training.config import TrainConfig
from keras_fourier.training.optimizer import (
    create_optimizer,
    warmup_cosine_schedule,
    warmup_linear_schedule,
)
from keras_fourier.training.plan import (
    resolve_config,
    run_identity,
    run_task,
    task_defaults,
    validate_config,
)
from keras_fourier.training.recipe import get_recipe
from keras_fourier.training.rundir import (
    RunConfigError,
    RunLock,
    check_identity,
    read_run_record,
    write_run_record,
)
from keras_fourier.training.strategy import get_strategy, worker_id
from keras_fourier.weights.saved import load_keras_file


@dataclasses.dataclass
class TrainResult:
    """What `train` returns.

    Attributes:
        model: the model selected on the validation split (EMA weights when
            `use_ema`), without optimizer.
        metrics: its test-split metrics: "loss" (the task's evaluation loss)
            and the task's metrics; for classification "accuracy" and, with
            more than 5 classes, "top5_accuracy".
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
    tokenizer: str | os.PathLike | Callable | None = None,
    class_names: Sequence[str] | None = None,
    task: str | Task | None = None,
    labels: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """Held-out loss and metrics of a model, as its task scores it (a classifier: accuracy).

    The input size comes from the model: images are resized to its input
    size, ListOps is generated and "csv:" texts are packed at its sequence
    length. The loss is the task's evaluation loss (a classifier's
    cross-entropy without label smoothing), the metrics are computed over the
    whole split. `model` is not modified (it is scored through a new `keras.Model` sharing its
    layers); call this inside the strategy's scope to evaluate distributed.

    A model trained by `train` carries its task in its ``model.keras``, and
    on "csv:" data its tokenizer and class names: given as a path (the file
    or its run folder) it is scored with them, without repeating them.

    Args:
        model: a classifier with probability outputs, the path of a
            `.keras` file, or a run folder written by `train` (its
            ``model.keras``).
        data: an image source ("digits", "tfds:<name>", "dir:<path>"), or a
            text source, "listops" or "csv:<path>". Default "digits".
        split: the split: an image split, or "validation"/"test" for
            ListOps. Default "test".
        batch_size: global batch size. Default 256.
        data_dir: TFDS data directory. Default None.
        eval_examples: size of the ListOps held-out set (as in training).
            Default 500.
        verbose: `Model.evaluate` verbosity. Default 0.
        on_bad_image: a corrupt image file of "dir:" data: "error" or "skip".
            Default "error".
        tokenizer: the tokenizer of "csv:" data: "bytes", "official", a
            SentencePiece `.model` path, or a tokenizer object. Default None:
            the one stored in the model's file, else "bytes".
        class_names: the model's classes in label order, matched against the
            labels of "csv:" data. Default None: those stored in the model's
            file, else the data's (its sorted train labels).
        task: a task name of `keras_fourier.tasks.TASKS` or a `Task`.
            Default None: the one stored in the model's file, else the one
            the model name and data tell (`keras_fourier.tasks.select_task`).
        labels: what the model's run stored to label its outputs
            (`Task.labels`). Default None: read from the model's file.

    Returns:
        {"loss": ...} and the task's metrics: for a classifier "accuracy",
        plus "top5_accuracy" when the model has more than 5 classes; then
        the task's breakdown of them (`Task.breakdown`, keys with a "/": a
        segmenter's per-class IoU ``iou/<class name>``).

    Raises:
        ValueError: a bad argument, or data whose class count is not the
            model's (outputs that do not suit the data).
        NonFiniteLossError: the loss is NaN or infinite.

    Example:
        >>> metrics = evaluate("runs/default", "digits")  # doctest: +SKIP
        >>> sorted(metrics)  # doctest: +SKIP
        ['accuracy', 'loss', 'top5_accuracy']
    """
    labels = dict(labels or {})
    if is_model_name(model):
        task = select_task(data, model=model, task=task)
        model = resolve_model(model, classes=task.num_classes(data, data_dir))
    else:
        if not labels and not isinstance(model, keras.Model):
            labels = read_model_record(resolve_model_file(model))
        task = select_task(data, task=task if task is not None else labels.get(TASK_KEY))
    if tokenizer is not None:
        labels[TOKENIZER_KEY] = tokenizer
    if class_names is not None:
        labels[CLASS_NAMES_KEY] = class_names
    model = resolve_model(model)
    dataset = task.evaluation_data(
        model,
        EvaluationRequest(data, split, batch_size, data_dir, eval_examples, on_bad_image, labels),
    )
    targets = dataset.element_spec[1]  # one-hot (B, classes), else a dense task's (or a dict)
    one_hot = isinstance(targets, tf.TensorSpec) and len(targets.shape) == 2
    classes = targets.shape[-1] if one_hot else task.num_classes(data, data_dir)
    task.check_outputs(model, classes, f"data {data!r}")
    scorer = task.scorer(model)
    outputs = model.output_shape
    task_metrics = task.metrics(outputs[-1] if isinstance(outputs, tuple) else classes)
    scorer.compile(loss=task.loss(), metrics=task_metrics)
    try:
        scores = scorer.evaluate(
            select_model_inputs(dataset, model), verbose=verbose, return_dict=True
        )
    except tf.errors.InvalidArgumentError as error:
        raise _data_error(error, data) from None
    metrics = {key: float(value) for key, value in scores.items()}
    if not math.isfinite(metrics["loss"]):
        raise NonFiniteLossError(
            f"Model {model.name!r} gives a {metrics['loss']} loss on split {split!r} of "
            f"{data!r}: its outputs are not finite (NaN or inf weights?); the result means "
            "nothing."
        )
    task.check_scored(metrics, f"split {split!r} of data {data!r}")
    return {**metrics, **task.breakdown(task_metrics, labels)}


def _data_error(error: tf.errors.InvalidArgumentError, data: str, note: str = "") -> Exception:
    """The one-line error of a pipeline failure naming its file (a bad mask or image), else `error`.

    Args:
        error: what reading `data` raised.
        data: the data source, for the message.
        note: a sentence appended to an unreadable image's message.
    """
    bad_data = data_check_error(error, data)
    if bad_data is not None:
        return bad_data
    file = unreadable_file(error)
    if file is None:
        return error
    return UnreadableImageError(
        f"Cannot decode image file {file!r} of data {data!r} (corrupt, truncated or not an "
        "image): remove or replace it, or pass on_bad_image='skip' (--on-bad-image skip) to "
        f"skip unreadable files.{note}"
    )


def _start_model(config: TrainConfig, task: Task, num_classes: int) -> keras.Model:
    """The model the run starts from: built by name, or the saved model (its weights)."""
    if config.saved_model:
        model = resolve_model(config.model)
        task.check_outputs(model, num_classes, f"data {config.data!r}")
        return model
    return task.build_model(config, num_classes)


def _build(config: TrainConfig, num_classes: int, steps_per_epoch: int) -> keras.Model:
    task = run_task(config)
    model = _start_model(config, task, num_classes)
    recipe = get_recipe(config.recipe)
    total_steps = config.epochs * steps_per_epoch
    schedule = {"cosine": warmup_cosine_schedule, "linear": warmup_linear_schedule}[
        recipe.schedule
    ](
        config.learning_rate,
        total_steps,
        warmup_steps=recipe.warmup_steps(config.warmup_epochs, steps_per_epoch, config.epochs),
        min_learning_rate=config.min_learning_rate,
    )
    optimizer = create_optimizer(
        model,
        learning_rate=schedule,
        weight_decay=config.weight_decay,
        clipnorm=config.clipnorm or None,
        use_ema=config.use_ema,
        ema_momentum=config.ema_momentum,
        decay_all=recipe.decay_all,
        epsilon=recipe.epsilon,
        beta_1=recipe.beta_1,
        beta_2=recipe.beta_2,
    )
    model.compile(
        optimizer=optimizer,
        loss=task.loss(config),
        metrics=task.metrics(num_classes, training=True),
        jit_compile=config.jit_compile,
    )
    return model


def _callbacks(
    config: TrainConfig, task: Task, folder: RunFolder, backup: EpochBackup, data: TaskData
) -> list[keras.callbacks.Callback]:
    # Order matters: a non-finite loss, or a split that scores nothing, raises before anything
    # of its epoch is saved, and an epoch's CSV row is written before its backup and
    # checkpoints; a kill in between redoes the epoch and rewrites its row. With EMA, the
    # backup keeps the raw weights, then the EMA weights are swapped in for the checkpoints,
    # so that best.keras holds the weights its selection metric was measured on (a kill
    # between the backup and the checkpoints leaves best.keras at the previous best, with its
    # own stored value).
    callbacks = [
        StopOnNonFiniteLoss(),
        StopOnUnscoredSplit(
            task.check_scored,
            {
                role: f"the {role} split ({data.splits[role]}) of data {config.data!r}"
                for role in ("train", "validation")
                if role in data.splits
            },
        ),
        ResumableCSVLogger(folder.history),
        backup,
        ModelCheckpoint(folder.last),
        ModelCheckpoint(folder.best, monitor=task.monitor, mode=task.selection_mode),
    ]
    if config.use_ema:
        callbacks.insert(4, keras.callbacks.SwapEMAWeights(swap_on_epoch=True))
    if config.tensorboard:
        callbacks.append(keras.callbacks.TensorBoard(folder.logs, write_graph=False))
    return callbacks


def _fit_verbosity(verbose: str | int) -> int:
    """`verbose` of `fit`: "auto" is a progress bar on a terminal, else one line per epoch."""
    if verbose == "auto":
        return 1 if sys.stdout.isatty() else 2
    return int(verbose)


def _print_header(
    config: TrainConfig, model: keras.Model, data: TaskData, out: str, strategy: Any
) -> None:
    replicas = strategy.num_replicas_in_sync
    shape = run_task(config).describe_input(config, model)
    roles = {
        "validation": "selects best.keras",
        "test": "evaluated once, at the end",
    }
    lines = [
        f"model {config.model}: {model.count_params():,} parameters, "
        f"{flops(model) / 1e6:,.1f} MFLOPs per example (papers' convention), input {shape}, "
        f"{data.num_classes} {run_task(config).outputs}",
        f"recipe {config.recipe}"
        + (
            ""
            if config.weights is None
            else f", from weights {config.weights!r} (all but a new classifier head)"
        ),
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
    return {"identity": run_identity(config), "keras_fourier_version": __version__, **extra}


def _check_folder(out: str, config: TrainConfig, names: Mapping[str, str]) -> dict | None:
    """The folder's run record after checking it is this run's; None for a new run."""
    record = read_run_record(out)
    if record is None:
        return None
    stored = record.get("identity")
    if not isinstance(stored, dict):
        warn(f"{RunFolder(out).run_record} has no run identity; it is rewritten")
        return None
    try:
        check_identity(out, stored, run_identity(config), names)
    except RunConfigError:
        folder = RunFolder(out)
        if (
            record.get("status") == "finished"
            or any(os.path.exists(path) for path in (folder.last, folder.best))
            or read_history(folder.history)
            or EpochBackup(folder.backup, folder.history).stored_history()
        ):
            raise
        warn(
            f"run folder {out!r} holds a run with other settings that stopped before its first "
            "epoch; it starts again with these settings"
        )
        return None
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
    folder = RunFolder(out)
    model_path = folder.model
    try:
        model = load_keras_file(model_path, compile=False)
    except ValueError as error:
        warn(f"{error}; resuming from the last backup to rewrite it")
        return None
    history_path = folder.history
    history = read_history(history_path)
    rows = EpochBackup(folder.backup, history_path).stored_history()
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

    Checks every setting first (`validate_config`), then the output
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
    config = task_defaults(dataclasses.replace(config or TrainConfig(), **overrides))
    names = dict(names or {})
    validate_config(config, names)
    config = resolve_config(config)
    if not config.saved_model:  # either spelling of a name is the same run
        config = dataclasses.replace(config, model=canonical_name(config.model))
    strategy = get_strategy(config.strategy)
    worker = worker_id(strategy)
    out = RunFolder(config.out).worker(worker).path
    check_writable_folder(out, names.get("out", "out"))
    lock = RunLock(out)
    try:
        if os.path.isdir(out):
            lock.acquire()
            finished = _finished(out, _check_folder(out, config, names))
            if finished is not None:
                return finished
        # Seeded before the data as well as before the model: a TF op seed (a shuffle's) pairs
        # with the global seed, which a previous run in this process would otherwise have set.
        keras.utils.set_random_seed(config.seed)
        data = run_task(config).datasets(config, names)
        if config.steps_per_epoch:
            data.train = data.train.repeat()
        steps_per_epoch = config.steps_per_epoch or int(data.train.cardinality())
        if steps_per_epoch < 1:
            raise ValueError(
                f"Cannot infer the steps per epoch of data {config.data!r} "
                f"(cardinality {steps_per_epoch}); set "
                f"`{names.get('steps_per_epoch', 'steps_per_epoch')}`."
            )
        # Built once, before anything is written: a saved model or weights that do not fit
        # the data are refused here.
        model = _build_in(strategy, config, data.num_classes, steps_per_epoch)
        if not lock.held:
            os.makedirs(out, exist_ok=True)
            lock.acquire()
            _check_folder(out, config, names)
        return _fit(config, strategy, out, data, model)
    finally:
        lock.release()


def _build_in(
    strategy: tf.distribute.Strategy, config: TrainConfig, num_classes: int, steps_per_epoch: int
) -> keras.Model:
    """The run's compiled model, seeded, under the run's dtype policy and `strategy`'s scope."""
    keras.utils.set_random_seed(config.seed)
    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(config.mixed_precision)
    try:
        with strategy.scope():
            return _build(config, num_classes, steps_per_epoch)
    finally:
        keras.config.set_dtype_policy(previous_policy)


def _fit(
    config: TrainConfig,
    strategy: tf.distribute.Strategy,
    out: str,
    data: TaskData,
    model: keras.Model,
) -> TrainResult:
    task = run_task(config)
    folder = RunFolder(out)
    for path in (folder.path, folder.backup):
        remove_stale_temporaries(path)
    write_run_record(out, _record(config, status="running"))
    history_path = folder.history
    backup = EpochBackup(folder.backup, history_path)
    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(config.mixed_precision)
    try:
        with strategy.scope():
            last_epoch, rows = backup.restore(model)
            completed = complete_checkpoints(
                model,
                folder.last,
                folder.best,
                last_epoch,
                rows,
                monitor=task.monitor,
                mode=task.selection_mode,
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
            callbacks=_callbacks(config, task, folder, backup, data),
            shuffle=False,
            verbose=verbose,
        )
    except tf.errors.InvalidArgumentError as error:
        raise _data_error(error, config.data, " The run keeps its last completed epoch.") from None
    # The epoch selected on the validation split becomes the run's model, and the test split
    # is evaluated once, on it.
    best_path = folder.best
    selected = task.inference_model(load_keras_file(best_path, compile=False))
    model_path = folder.model
    labels = {TASK_KEY: task.name, **task.labels(config)}
    save_model(selected, model_path, {**(read_checkpoint_record(best_path) or {}), **labels})
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
            task=task,
            labels=labels,
        )
    write_run_record(out, _record(config, status="finished", metrics=metrics))
    return TrainResult(
        model=selected,
        metrics=metrics,
        history=read_history(history_path),
        out=out,
        model_path=model_path,
    )
