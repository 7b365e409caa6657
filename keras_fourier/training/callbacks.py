"""Callbacks of a crash-safe run: CSV history, model checkpoints, backups, non-finite losses.

Every file is written atomically (`keras_fourier.fileio.atomic_save`), and
every reader tolerates a file that something else truncated: a partial
last CSV row is dropped, an unreadable checkpoint is reported in one
warning line and skipped. The callbacks use backend-neutral Keras APIs only
(`model.save`, `model.save_weights`, `model.load_weights`).
"""

from __future__ import annotations

import json
import math
import os
import re
import zipfile
from collections.abc import Callable
from typing import Any

import keras

from keras_fourier.fileio import atomic_save, atomic_write_text, warn
from keras_fourier.model_record import CHECKPOINT_RECORD, read_checkpoint_record
from keras_fourier.run_folder import read_history, write_history
from keras_fourier.weights.convert import assign_atomically
from keras_fourier.weights.hdf5 import dataset_headers

_SLOT = re.compile(r"epoch-(\d+)\.json$")


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss."""


class ResumableCSVLogger(keras.callbacks.Callback):
    """Writes one CSV row per completed epoch, exactly once across kills and restarts.

    The first column is the (0-based) epoch, then the epoch's logs in sorted
    order. The whole file is rewritten atomically at the end of every epoch,
    so it always ends with a complete row. When `fit` starts (or resumes with
    ``initial_epoch``) at epoch ``e``, rows of epochs ``>= e`` are dropped:
    they belong to epochs that ran but whose backup was not saved, and are
    about to be redone. Place it *before* the backup callback, so a row is
    always written before its epoch's backup.

    Args:
        filename: path of the CSV file; its folder must exist.

    Example:
        >>> logger = ResumableCSVLogger("runs/demo/history.csv")
        >>> model.fit(dataset, epochs=10, callbacks=[logger])  # doctest: +SKIP
    """

    def __init__(self, filename: str | os.PathLike):
        super().__init__()
        self.filename = os.fspath(filename)
        self._rows: list[dict[str, float]] | None = None

    def on_train_begin(self, logs=None):
        self._rows = None

    def on_epoch_begin(self, epoch, logs=None):
        if self._rows is not None:
            return
        rows = read_history(self.filename)
        self._rows = [row for row in rows if row["epoch"] < epoch]
        if self._rows != rows or not os.path.exists(self.filename):
            write_history(self.filename, self._rows)

    def on_epoch_end(self, epoch, logs=None):
        if self._rows is None:
            self.on_epoch_begin(epoch)
        self._rows.append(
            {"epoch": epoch, **{k: float(v) for k, v in sorted((logs or {}).items())}}
        )
        write_history(self.filename, self._rows)


def save_model(model: keras.Model, path: str | os.PathLike, record: dict[str, Any]) -> None:
    """Saves `model` as a `.keras` file atomically, with `record` stored inside the zip.

    Args:
        model: the model.
        path: the `.keras` file.
        record: JSON-serialisable facts about the checkpoint (epoch, metrics),
            read back by :func:`read_checkpoint_record`.
    """

    def write(temporary: str) -> None:
        model.save(temporary)
        with zipfile.ZipFile(temporary, "a") as archive:
            archive.writestr(CHECKPOINT_RECORD, json.dumps(record))

    atomic_save(path, write)


class ModelCheckpoint(keras.callbacks.Callback):
    """Saves the model atomically after every epoch, or only when a monitored metric improves.

    Unlike `keras.callbacks.ModelCheckpoint`, the file is never rewritten in
    place (a kill while saving leaves the previous file), and the epoch and
    logs are stored inside it, so a resumed run takes its "best so far" from
    the saved best model (:func:`read_checkpoint_record`).

    Args:
        filepath: the `.keras` file.
        monitor: a log key, or None to save every epoch. Default None.
        mode: "max" or "min" for `monitor`. Default "max".

    Example:
        >>> best = ModelCheckpoint("runs/a/best.keras", monitor="val_accuracy")
    """

    def __init__(self, filepath: str | os.PathLike, monitor: str | None = None, mode: str = "max"):
        super().__init__()
        self.filepath = os.fspath(filepath)
        self.monitor = monitor
        self.mode = mode
        self.best: float | None = None

    def on_train_begin(self, logs=None):
        record = read_checkpoint_record(self.filepath) if self.monitor else None
        value = (record or {}).get("logs", {}).get(self.monitor)
        self.best = value if isinstance(value, (int, float)) and math.isfinite(value) else None

    def _improved(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.best is None:
            return True
        return value > self.best if self.mode == "max" else value < self.best

    def on_epoch_end(self, epoch, logs=None):
        logs = {key: float(value) for key, value in (logs or {}).items()}
        if self.monitor is not None:
            if self.monitor not in logs or not self._improved(logs[self.monitor]):
                return
            self.best = logs[self.monitor]
        save_model(self.model, self.filepath, {"epoch": epoch, "logs": logs})


def complete_checkpoints(
    model: keras.Model,
    last_path: str | os.PathLike,
    best_path: str | os.PathLike,
    epoch: int,
    rows: list[dict[str, float]],
    *,
    monitor: str = "val_accuracy",
    mode: str = "max",
    use_ema: bool = False,
) -> list[str]:
    """Writes the checkpoints of a restored epoch that an interruption left out.

    The backup of an epoch is written before its checkpoints; a kill or a
    full disk in between leaves ``last.keras`` (and ``best.keras`` when the
    epoch improved `monitor`) at an older epoch, or missing. Called with
    the model restored from that backup (`EpochBackup.restore`), this
    writes them from it, so the best model always agrees with the history.
    A missing or unreadable best model is rewritten only when `epoch` is
    the best of `rows`.

    Args:
        model: the model holding the restored epoch's weights (and its
            optimizer, whose EMA weights are saved when `use_ema`).
        last_path: the ``last.keras`` file.
        best_path: the ``best.keras`` file.
        epoch: the restored epoch (-1: nothing to do).
        rows: the history rows up to `epoch`.
        monitor: the log selecting the best model. Default "val_accuracy".
        mode: "max" or "min" for `monitor`. Default "max".
        use_ema: checkpoints hold the optimizer's EMA weights. Default False.

    Returns:
        The paths written.

    Example:
        >>> complete_checkpoints(model, "run/last.keras", "run/best.keras", 1, rows)
        []
    """
    if epoch < 0 or len(rows) <= epoch:
        return []
    logs = {key: float(value) for key, value in rows[epoch].items() if key != "epoch"}
    record = {"epoch": epoch, "logs": logs}
    written = []
    last = read_checkpoint_record(last_path)
    if last is None or not isinstance(last.get("epoch"), int) or last["epoch"] < epoch:
        written.append(os.fspath(last_path))
    value = logs.get(monitor)
    sign = 1.0 if mode == "max" else -1.0  # compared as maxima
    if value is not None and math.isfinite(value):
        best = read_checkpoint_record(best_path)
        if best is None:
            finite = [row.get(monitor) for row in rows if math.isfinite(row.get(monitor, math.nan))]
            if sign * value >= max(sign * other for other in finite):
                written.append(os.fspath(best_path))
        elif isinstance(best.get("epoch"), int) and best["epoch"] < epoch:
            stored = (best.get("logs") or {}).get(monitor)
            if not isinstance(stored, (int, float)) or not sign * value <= sign * stored:
                written.append(os.fspath(best_path))
    if not written:
        return []
    swap = keras.callbacks.SwapEMAWeights() if use_ema else None
    if swap is not None:
        swap.set_model(model)
        swap.on_test_begin()  # the EMA weights into the model, as for the epoch's checkpoints
    try:
        for path in written:
            save_model(model, path, record)
    finally:
        if swap is not None:
            swap.on_test_end()
    return written


class EpochBackup(keras.callbacks.Callback):
    """Backs up the training state after every epoch in two slots; restores the newest intact one.

    After epoch ``e`` it writes ``epoch-<e>.weights.h5`` (`model.save_weights`:
    the model's and the optimizer's variables, including its step counter)
    and then ``epoch-<e>.json`` (the history rows so far) into `directory`,
    each atomically, and deletes every slot but the two newest.
    :meth:`restore` loads the newest slot whose two files read back, so a
    truncated or unreadable slot (copied folder, full disk) falls back to the
    previous one.

    Args:
        directory: the backup folder, created if missing.
        history: the CSV history whose rows each slot records.

    Example:
        >>> backup = EpochBackup("runs/a/backup", "runs/a/history.csv")
        >>> epoch, rows = backup.restore(model)  # doctest: +SKIP
        >>> fit = model.fit(data, epochs=9, initial_epoch=epoch + 1, callbacks=[backup])
    """

    KEEP = 2

    def __init__(self, directory: str | os.PathLike, history: str | os.PathLike):
        super().__init__()
        self.directory = os.fspath(directory)
        self.history = os.fspath(history)

    def _slots(self) -> list[int]:
        if not os.path.isdir(self.directory):
            return []
        epochs = (_SLOT.match(name) for name in os.listdir(self.directory))
        return sorted((int(match.group(1)) for match in epochs if match), reverse=True)

    def _paths(self, epoch: int) -> tuple[str, str]:
        stem = os.path.join(self.directory, f"epoch-{epoch:05d}")
        return f"{stem}.weights.h5", f"{stem}.json"

    def on_epoch_end(self, epoch, logs=None):
        os.makedirs(self.directory, exist_ok=True)
        weights, record = self._paths(epoch)
        atomic_save(weights, self.model.save_weights)
        rows = [row for row in read_history(self.history) if row["epoch"] <= epoch]
        atomic_write_text(record, json.dumps({"epoch": epoch, "history": rows}))
        for old in self._slots()[self.KEEP :]:
            for path in self._paths(old):
                if os.path.exists(path):
                    os.remove(path)

    def _read_slot(self, epoch: int) -> list[dict[str, float]]:
        """The history rows of a slot's record; raises if it is unreadable or inconsistent."""
        with open(self._paths(epoch)[1]) as file:
            record = json.load(file)
        rows = record["history"]
        if record["epoch"] != epoch or [row["epoch"] for row in rows] != list(range(epoch + 1)):
            raise ValueError("its history does not end with this epoch")
        return rows

    def stored_history(self) -> list[dict[str, float]]:
        """The history rows of the newest slot whose record reads back ([] if none)."""
        for epoch in self._slots():
            try:
                return self._read_slot(epoch)
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return []

    def restore(self, model: keras.Model) -> tuple[int, list[dict[str, float]]]:
        """Loads the newest intact slot into `model` (compiled, optimizer built or not).

        Returns:
            (last completed epoch, its history rows), or (-1, []) when no
            slot is intact (the model is then left as it was).
        """
        slots = self._slots()
        if slots and model.optimizer is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        unreadable = []
        for epoch in slots:
            weights, record = self._paths(epoch)
            try:
                rows = self._read_slot(epoch)
            except (OSError, ValueError, KeyError, TypeError) as error:
                unreadable.append(f"{record} ({type(error).__name__}: {error})")
                continue
            try:
                dataset_headers(weights)  # refuses a file that reads outside itself
                assign_atomically(model, lambda path=weights: model.load_weights(path), weights)
            except (OSError, ValueError) as error:
                unreadable.append(f"{weights} ({type(error).__name__}: {error})")
                continue
            if unreadable:
                warn(
                    f"cannot resume from the backup of epoch {slots[0]}: "
                    f"{'; '.join(unreadable)}; resuming after epoch {epoch} instead"
                )
            return epoch, rows
        if unreadable:
            warn(
                f"no intact backup in {self.directory!r} ({'; '.join(unreadable)}); "
                "training restarts from epoch 0"
            )
        return -1, []


class StopOnUnscoredSplit(keras.callbacks.Callback):
    """Raises the task's error when an epoch's training or validation scores mean nothing.

    After each epoch, the training logs and the validation logs (``val_``)
    are each given to `check` (a task's `check_scored`, which raises, e.g.,
    for a segmentation split without a labelled pixel), before any
    callback after it writes the epoch's row, backup or checkpoints.

    Args:
        check: ``check(metrics, what)``, raising ValueError for `metrics`
            (names without ``val_``) that mean nothing.
        splits: {"train": what the training logs score, "validation": what
            the ``val_`` logs score}, e.g. "the train split ('train', 12 images)".

    Example:
        >>> StopOnUnscoredSplit(TASK.check_scored, {"train": "...", "validation": "..."})
        ... # doctest: +SKIP
    """

    def __init__(self, check: Callable[[dict[str, float], str], None], splits: dict[str, str]):
        super().__init__()
        self.check = check
        self.splits = splits

    def on_epoch_end(self, epoch, logs=None):
        logs = dict(logs or {})
        validation = {key[4:]: value for key, value in logs.items() if key.startswith("val_")}
        training = {key: value for key, value in logs.items() if not key.startswith("val_")}
        for role, values in (("train", training), ("validation", validation)):
            if values and role in self.splits:
                self.check({key: float(value) for key, value in values.items()}, self.splits[role])


class StopOnNonFiniteLoss(keras.callbacks.Callback):
    """Raises `NonFiniteLossError` as soon as a batch's loss is NaN or infinite.

    Raising (unlike `keras.callbacks.TerminateOnNaN`) ends `fit` before the
    epoch's end, so no checkpoint or backup of the broken weights is written:
    the run keeps its last good ones. Place it first among the callbacks.

    Example:
        >>> model.fit(data, callbacks=[StopOnNonFiniteLoss(), backup])  # doctest: +SKIP
    """

    def __init__(self):
        super().__init__()
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            raise NonFiniteLossError(
                f"The training loss became {float(loss)} at epoch {self._epoch + 1}, step "
                f"{batch + 1}; training stopped and kept the last good checkpoint (the backup "
                "of the last completed epoch). Lower the learning rate or check the data, and "
                "start a new run."
            )
