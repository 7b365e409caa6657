"""A CSV history that survives a killed and restarted `fit`."""

from __future__ import annotations

import csv
import os

import keras


def read_history(filename: str | os.PathLike) -> list[dict[str, float]]:
    """Reads a history CSV written by `ResumableCSVLogger`.

    Args:
        filename: the CSV path.

    Returns:
        One dict per row, "epoch" an int and the other columns floats
        (empty cells left out); an empty list when the file does not exist.

    Example:
        >>> read_history("no/such/history.csv")
        []
    """
    if not os.path.exists(filename):
        return []
    with open(filename, newline="") as file:
        return [
            {
                key: int(value) if key == "epoch" else float(value)
                for key, value in row.items()
                if value not in ("", None)
            }
            for row in csv.DictReader(file)
        ]


class ResumableCSVLogger(keras.callbacks.Callback):
    """Writes one CSV row per completed epoch, exactly once across kills and restarts.

    The first column is the (0-based) epoch, then the epoch's logs in sorted
    order. Each row is flushed to disk at the end of its epoch. When `fit`
    starts (or resumes, with `keras.callbacks.BackupAndRestore`) at epoch
    ``e``, rows of epochs ``>= e`` are dropped first: they belong to epochs
    that ran but whose backup was not saved, and are about to be redone.
    Place this callback *before* `BackupAndRestore`, so a row is always
    written before its epoch's backup; a kill between the two redoes the
    epoch and rewrites its row.

    Args:
        filename: path of the CSV file; its directory is created.

    Example:
        >>> logger = ResumableCSVLogger("runs/demo/history.csv")
        >>> backup = keras.callbacks.BackupAndRestore("runs/demo/backup")
        >>> model.fit(dataset, epochs=10, callbacks=[logger, backup])  # doctest: +SKIP
    """

    def __init__(self, filename: str | os.PathLike):
        super().__init__()
        self.filename = os.fspath(filename)
        self._resumed = False

    def on_train_begin(self, logs=None):
        self._resumed = False

    def _rewrite(self, rows: list[dict[str, float]]) -> None:
        directory = os.path.dirname(self.filename) or "."
        os.makedirs(directory, exist_ok=True)
        partial = self.filename + ".partial"
        with open(partial, "w", newline="") as file:
            if rows:
                writer = csv.DictWriter(file, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, self.filename)

    def on_epoch_begin(self, epoch, logs=None):
        if self._resumed:
            return
        self._resumed = True
        rows = read_history(self.filename)
        kept = [row for row in rows if row["epoch"] < epoch]
        if len(kept) != len(rows) or not os.path.exists(self.filename):
            self._rewrite(kept)

    def on_epoch_end(self, epoch, logs=None):
        row = {"epoch": epoch, **{key: float(logs[key]) for key in sorted(logs or {})}}
        with open(self.filename, newline="") as file:
            header = next(csv.reader(file), None)
        with open(self.filename, "a", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=header or list(row), extrasaction="ignore")
            if header is None:
                writer.writeheader()
            writer.writerow(row)
            file.flush()
            os.fsync(file.fileno())
