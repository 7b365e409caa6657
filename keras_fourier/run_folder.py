"""The run folder of `keras-fourier train`: every file name of a run, and its history CSV.

:class:`RunFolder` is the one place that knows what a run folder holds
(see :mod:`keras_fourier.training.trainer` for what each file means):

* ``run.json`` (identity and result), ``run.lock`` (the live run's lock);
* ``history.csv``, one row per completed epoch (:func:`read_history`,
  :func:`write_history`);
* ``backup/`` (the newest epochs' weights and optimizer state);
* ``last.keras``, ``best.keras`` and, once finished, ``model.keras``;
* ``logs/`` (TensorBoard), and ``workers/<task>/`` for non-chief workers.

The trainer, the command line, the plots and the model resolver use it;
this module imports nothing heavier than the standard library and
:mod:`keras_fourier.fileio`.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os

from keras_fourier.fileio import atomic_write_text


@dataclasses.dataclass(frozen=True)
class RunFolder:
    """The files of one run folder.

    Args:
        path: the folder (``--out`` of `keras-fourier train`).

    Example:
        >>> RunFolder("runs/default").model
        'runs/default/model.keras'
    """

    path: str

    # File names inside the folder (class attributes, not fields).
    RUN = "run.json"
    LOCK = "run.lock"
    HISTORY = "history.csv"
    BACKUP = "backup"
    MODEL = "model.keras"
    BEST = "best.keras"
    LAST = "last.keras"
    LOGS = "logs"
    WORKERS = "workers"

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", os.fspath(self.path))

    def file(self, name: str) -> str:
        """The path of the file `name` of the folder."""
        return os.path.join(self.path, name)

    @property
    def run_record(self) -> str:
        """``run.json``: the run's identity and, once finished, its result."""
        return self.file(self.RUN)

    @property
    def lock(self) -> str:
        """``run.lock``: held by the live run."""
        return self.file(self.LOCK)

    @property
    def history(self) -> str:
        """``history.csv``: one row per completed epoch."""
        return self.file(self.HISTORY)

    @property
    def backup(self) -> str:
        """``backup/``: the weights and optimizer state of the newest epochs."""
        return self.file(self.BACKUP)

    @property
    def model(self) -> str:
        """``model.keras``: the model selected on the validation split."""
        return self.file(self.MODEL)

    @property
    def best(self) -> str:
        """``best.keras``: the checkpoint of the best validation accuracy."""
        return self.file(self.BEST)

    @property
    def last(self) -> str:
        """``last.keras``: the checkpoint of the last epoch."""
        return self.file(self.LAST)

    @property
    def logs(self) -> str:
        """``logs/``: TensorBoard summaries."""
        return self.file(self.LOGS)

    def worker(self, worker: str | None) -> RunFolder:
        """The folder a worker writes: this one for the chief (None), else ``workers/<worker>``."""
        return self if worker is None else RunFolder(os.path.join(self.path, self.WORKERS, worker))

    def model_file(self) -> str:
        """The finished run's ``model.keras``, checked to exist.

        Returns:
            Its path.

        Raises:
            FileNotFoundError: the run has not finished (the folder has a
                history but no ``model.keras``).
            ValueError: the folder is not a run folder (a SavedModel, say).

        Example:
            >>> RunFolder("runs/default").model_file()  # doctest: +SKIP
            'runs/default/model.keras'
        """
        if os.path.exists(self.model):
            return self.model
        if os.path.exists(self.history):
            raise FileNotFoundError(
                f"Run folder {self.path!r} has no {self.MODEL}: its run has not finished. Resume "
                f"it with the same `train` command, or evaluate {self.best!r} or {self.last!r}."
            )
        kind = (
            "a SavedModel (export one with keras-fourier export)"
            if os.path.exists(self.file("saved_model.pb"))
            else "not a run folder of `train`"
        )
        raise ValueError(
            f"Folder {self.path!r} is {kind}; expected a .keras file or a run folder holding "
            f"{self.MODEL}."
        )


def resolve_model_file(path: str | os.PathLike) -> str:
    """The `.keras` file behind a path: the file itself, or a run folder's ``model.keras``.

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
    if os.path.isdir(path):
        return RunFolder(path).model_file()
    if not os.path.exists(path):
        raise FileNotFoundError(f"No model file or run folder at {path!r}.")
    return path


def _parse_row(row: dict[str, str | None], fields: list[str]) -> dict[str, float] | None:
    if None in row or any(row.get(key) is None for key in fields):
        return None
    try:
        return {
            key: int(value) if key == "epoch" else float(value)
            for key, value in row.items()
            if value != ""
        }
    except ValueError:
        return None


def read_history(filename: str | os.PathLike) -> list[dict[str, float]]:
    """Reads a history CSV written by `ResumableCSVLogger`.

    Rows that do not parse (a partial last row of a file truncated by
    something else) end the history: they and every row after them are left
    out.

    Args:
        filename: the CSV path.

    Returns:
        One dict per row, "epoch" an int and the other columns floats
        (empty cells left out); an empty list when the file does not exist
        or has no complete header.

    Example:
        >>> read_history("no/such/history.csv")
        []
    """
    if not os.path.exists(filename):
        return []
    with open(filename, newline="") as file:
        text = file.read()
    reader = csv.DictReader(io.StringIO(text))
    fields = list(reader.fieldnames or [])
    if "epoch" not in fields or not text.split("\n", 1)[0].strip():
        return []
    rows = []
    for raw in reader:
        row = _parse_row(raw, fields)
        if row is None or "epoch" not in row or row["epoch"] != len(rows):
            break
        rows.append(row)
    return rows


def write_history(filename: str | os.PathLike, rows: list[dict[str, float]]) -> None:
    """Writes history rows to a CSV atomically (header from the first row's keys)."""
    buffer = io.StringIO()
    if rows:
        fields = list(dict.fromkeys(key for row in rows for key in row))
        writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    atomic_write_text(filename, buffer.getvalue())
