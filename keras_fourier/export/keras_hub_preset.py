"""keras-hub preset folders of FNet models: :func:`keras_hub_preset`, the ``keras_hub`` format.

The folder is what keras-hub's ``save_to_preset`` writes
(:func:`keras_fourier.models.fnet_weights.save_keras_hub_preset`), so that
``keras_hub.models.FNetBackbone.from_preset(folder)`` (and, for a
classifier, ``FNetTextClassifier.from_preset``) loads it; keras-hub is not
needed to write it. :func:`check_arguments` refuses, before anything is
written, a model keras-hub's FNet cannot express and a tokenizer that is
not a SentencePiece model of the model's vocabulary.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import keras

from keras_fourier.data.text import BYTES_TOKENIZER, SentencePieceTokenizer, tokenizer_from_record
from keras_fourier.model_record import TOKENIZER_KEY
from keras_fourier.models.fnet import encoder_of
from keras_fourier.models.fnet_weights import check_keras_hub_model, save_keras_hub_preset


@dataclasses.dataclass(frozen=True)
class KerasHubPresetReport:
    """What :func:`keras_hub_preset` wrote.

    Attributes:
        path: the preset folder.
        class_name: the keras-hub class that ``from_preset`` of the folder
            builds: "FNetBackbone", or "FNetTextClassifier" for a classifier.
        files: the folder's files, relative, sorted.
        parameter_count: the backbone's parameters (``metadata.json``).
        size_bytes: the files' total size.
    """

    path: str
    class_name: str
    files: tuple[str, ...]
    parameter_count: int
    size_bytes: int

    def summary(self) -> str:
        """One line: the folder, what keras-hub builds from it, its size and files."""
        return (
            f"Wrote keras-hub preset {self.path} ({self.class_name}, "
            f"{self.parameter_count:,} backbone parameters, {self.size_bytes:,} bytes): "
            f"{', '.join(self.files)}"
        )


def check_arguments(model: keras.Model, tokenizer: str | os.PathLike | bytes | None = None) -> None:
    """Raises ValueError, before anything is written, for a preset that cannot be written.

    Args:
        model: see :func:`keras_hub_preset`.
        tokenizer: see :func:`keras_hub_preset`.

    Raises:
        ValueError: a model keras-hub's FNet cannot express
            (:func:`~keras_fourier.models.fnet_weights.check_keras_hub_model`),
            or a `tokenizer` that is not a SentencePiece model (a ``.model``
            file or its bytes) with FNet's special pieces, whose pieces are
            the model's word table rows.
        ImportError: `tokenizer` given without the ``text`` extra
            (sentencepiece), which counts its pieces.

    Example:
        >>> check_arguments(keras_fourier.FNet("base"))
    """
    check_keras_hub_model(model)
    if tokenizer is None:
        return
    shown = "<the model bytes>" if isinstance(tokenizer, bytes) else os.fspath(tokenizer)
    if not isinstance(tokenizer, bytes) and not os.path.isfile(shown):
        raise ValueError(
            "`tokenizer` must be the path of a SentencePiece .model file. Received: "
            f"tokenizer={shown!r}"
        )
    pieces = SentencePieceTokenizer(tokenizer).vocabulary_size  # ValueError for another file
    rows = encoder_of(model).get_layer("embeddings").vocabulary_size
    if pieces != rows:
        raise ValueError(
            f"`tokenizer` has {pieces} pieces but model {model.name!r} has a word table of "
            f"{rows} rows: pass the tokenizer the model was trained with. Received: "
            f"tokenizer={shown!r}"
        )


def keras_hub_preset(
    model: keras.Model,
    path: str | os.PathLike,
    *,
    tokenizer: str | os.PathLike | bytes | None = None,
    verbose: bool = True,
) -> KerasHubPresetReport:
    """Writes FNet `model` as a keras-hub preset folder, whole or not at all.

    Args:
        model: built by ``keras_fourier.FNet`` (an encoder, a classifier or
            an ``FNetPretraining``, whose encoder is written) or a text run's
            ``model.keras``, with Fourier mixing in every block, the tanh
            GELU and no padding mask input: what keras-hub's FNet computes.
        path: the preset folder; it must not exist or be empty.
        tokenizer: the SentencePiece ``.model`` file (or its bytes) the
            model's texts were encoded with, written as keras-hub's ``FNetTokenizer`` (and a
            classifier's preprocessor). Default None: no tokenizer files.
        verbose: print the report. Default True.

    Returns:
        A :class:`KerasHubPresetReport`.

    Raises:
        ValueError: see :func:`check_arguments`; `path` holds files.
        ImportError: see :func:`check_arguments`.

    Example:
        >>> model = keras_fourier.FNet("base", weights="f_net_base")  # doctest: +SKIP
        >>> keras_hub_preset(model, "f_net_base_en").class_name  # doctest: +SKIP
        'FNetBackbone'
    """
    path = os.fspath(path)
    check_arguments(model, tokenizer)
    save_keras_hub_preset(model, path, tokenizer=tokenizer)
    files = tuple(
        sorted(
            os.path.relpath(os.path.join(root, name), path)
            for root, _, names in os.walk(path)
            for name in names
        )
    )
    with open(os.path.join(path, "metadata.json"), encoding="utf-8") as file:
        parameter_count = int(json.load(file)["parameter_count"])
    report = KerasHubPresetReport(
        path=path,
        class_name="FNetTextClassifier" if "task.json" in files else "FNetBackbone",
        files=files,
        parameter_count=parameter_count,
        size_bytes=sum(os.path.getsize(os.path.join(path, name)) for name in files),
    )
    if verbose:
        print(report.summary())
    return report


def run_tokenizer(record: dict[str, Any]) -> tuple[bytes | None, str]:
    """The SentencePiece model a text run stored in its ``model.keras``, for a preset.

    Args:
        record: the model file's record (``keras_fourier.model_record.read_model_record``).

    Returns:
        (the SentencePiece model's bytes, a one-line note saying so); (None,
        a note) for a run of the ``bytes`` tokenizer, which keras-hub has no
        counterpart of; (None, "") for a model without a stored tokenizer.

    Raises:
        ImportError: a stored SentencePiece model without the ``text`` extra.
    """
    stored = record.get(TOKENIZER_KEY)
    if stored is None:
        return None, ""
    if isinstance(stored, dict) and stored.get("name") == BYTES_TOKENIZER:
        return None, (
            "the run's tokenizer 'bytes' has no keras-hub counterpart; the preset has no "
            "tokenizer files"
        )
    proto = tokenizer_from_record(stored).proto
    return proto, "keras_hub tokenizer: the SentencePiece model the run stored"
