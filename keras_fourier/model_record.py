"""The record a run stores inside its `.keras` files, keras-free: its member, its keys, its readers.

A training run saves ``model.keras``, ``best.keras`` and ``last.keras`` with
a JSON member, :data:`CHECKPOINT_RECORD`, beside Keras's own (written by
``keras_fourier.training.callbacks.save_model``): the epoch and logs of the
checkpoint and, in ``model.keras``, what labels and feeds the model's
outputs: its class names, the centre crop its evaluation used and, for a
text model, its tokenizer. The writer (training) and the readers (the
`evaluate` and `predict` commands, the trainer) take the names from here;
reading needs neither Keras nor TensorFlow.
"""

from __future__ import annotations

import os
import zipfile
from typing import Any

from keras_fourier.fileio import warn
from keras_fourier.limits import read_zip_json

# Member of a checkpoint's .keras zip holding the record.
CHECKPOINT_RECORD = "keras_fourier_checkpoint.json"
# Keys of the record of model.keras: the run's task (`keras_fourier.tasks`), and what the task
# needs to label the model's outputs for `predict` and `evaluate` (`Task.labels`).
TASK_KEY = "task"
CLASS_NAMES_KEY = "class_names"
CROP_PCT_KEY = "eval_crop_pct"
# The record of the tokenizer of a text model (`keras_fourier.data.text.tokenizer_record`).
TOKENIZER_KEY = "tokenizer"
# The longest text (in tokens) of a text model of any length trained with per-batch padding:
# the run's sequence length, at most its position table.
TEXT_LENGTH_KEY = "sequence_length"
# The normalisation of a field model (the forecast task): per-channel mean and std, channel
# names and the lead of its training pairs.
FIELD_STATS_KEY = "field_stats"


def read_checkpoint_record(path: str | os.PathLike) -> dict[str, Any] | None:
    """The record stored in a checkpoint; None if missing or unreadable (with a warning).

    Args:
        path: a `.keras` file of a run.

    Returns:
        The record, or None (the file is missing, or has no readable record:
        one warning line names it).

    Example:
        >>> read_checkpoint_record("runs/default/best.keras")["epoch"]  # doctest: +SKIP
        3
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            return read_zip_json(archive, CHECKPOINT_RECORD, path)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
        warn(f"ignoring unreadable checkpoint {path} ({type(error).__name__}: {error})")
        return None


def read_model_record(path: str | os.PathLike) -> dict[str, Any]:
    """The record a run stored in a `.keras` file, without warnings.

    Args:
        path: a `.keras` file.

    Returns:
        The record; {} for a file saved by Keras itself (it has none) or one
        that cannot be read (loading the model then names what is wrong).

    Example:
        >>> read_model_record("runs/default/model.keras")[CLASS_NAMES_KEY][:2]  # doctest: +SKIP
        ['0', '1']
    """
    try:
        with zipfile.ZipFile(path) as archive:
            if CHECKPOINT_RECORD not in archive.namelist():
                return {}
            record = read_zip_json(archive, CHECKPOINT_RECORD, path)
    except (OSError, ValueError, zipfile.BadZipFile):
        return {}
    return record if isinstance(record, dict) else {}
