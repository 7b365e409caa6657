"""Several export formats of one model in one journaled call: :func:`export`, and `FORMATS`.

``export(model, "models", formats=("saved_model", "tflite", "onnx"))`` writes,
for a model named NAME (its Keras name, or `name`):

* ``models/NAME/<version>/``: the TF Serving SavedModel (``models`` is the
  folder mounted as ``/models`` in export/README.md, ``models/NAME`` the base
  path in ``models.config``, which lists it afterwards);
* ``models/NAME.tflite`` (float32) and ``models/NAME_<quantization>.tflite``;
* ``models/NAME.onnx`` (float32, standard ONNX ops, checked in onnxruntime);
* ``models/NAME_keras_hub/`` (an FNet as a keras-hub preset folder, which
  ``keras_hub.models.FNetBackbone.from_preset`` loads).

All or nothing: every argument and every output's prerequisites (int8
calibration data, an output folder that is a writable folder, free versions
and file names, LiteRT for the checks) are checked before anything is
written; the outputs are written into a staging folder and placed by one
journaled commit (:class:`~keras_fourier.export.journal.Transaction`), so
that an export killed midway is completed or undone by the next call.

Each format is one row of `FORMATS`: where its outputs go, what is checked
before writing, and how one output is written by its module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import keras

from keras_fourier.export import keras_hub_preset, litert, onnx_export, savedmodel
from keras_fourier.export.detections import is_two_stage
from keras_fourier.export.journal import Transaction, locked, recover
from keras_fourier.export.serving_config import merge_models_config, read_models_config
from keras_fourier.export.signatures import (
    MAX_IMAGE_PIXELS,
    PARITY_BATCH,
    at_sequence_length,
    fixed_size,
    is_dense_model,
    model_stride,
)
from keras_fourier.fileio import check_writable_folder, make_folders
from keras_fourier.limits import check_memory, dft_table_bytes
from keras_fourier.models.catalog import activation_elements
from keras_fourier.validation import check_number, check_positive_int


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """The options of :func:`export` that the formats read."""

    version: int
    output: str
    crop_pct: float
    max_pixels: int
    calibration_data: Iterable | None
    validation_data: Iterable | None
    overwrite: bool
    verify: bool
    names: Mapping[str, str]
    tokenizer: str | bytes | None = None

    def flag(self, argument: str) -> str:
        """How messages name `argument`: its entry in `names`, else the argument itself."""
        return self.names.get(argument, argument)


@dataclasses.dataclass(frozen=True)
class ExportFormat:
    """One export format, one row of `FORMATS`.

    Attributes:
        outputs: (out, name, version, quantizations) -> the (TFLite
            quantization or None, final path) of each output, in order.
        check: (model, options, quantization, final path) -> None; raises
            `ValueError` when the output cannot be written (of this model, at
            this quantization, to this path).
        write: (model, staging folder, options, quantization, staged path)
            -> the report (with `path` and `summary()`) of the written output.
        check_model: (model, options) -> None; raises `ValueError` for a
            model the format cannot hold. Default None: every model.
        fixed_length: whether a text model of any length is written at
            ``sequence_length`` (which it then needs). Default True.
    """

    outputs: Callable[[str, str, int, Sequence[str | None]], list[tuple[str | None, str]]]
    check: Callable[[keras.Model, ExportOptions, str | None, str], None]
    write: Callable[[keras.Model, str, ExportOptions, str | None, str], Any]
    check_model: Callable[[keras.Model, ExportOptions], None] | None = None
    fixed_length: bool = True


def _check_free(options: ExportOptions, path: str) -> None:
    if os.path.exists(path) and not options.overwrite:
        raise ValueError(
            f"{path!r} already exists; pass {options.flag('overwrite')} to replace it."
        )


def _check_tflite(
    model: keras.Model, options: ExportOptions, quantization: str | None, path: str
) -> None:
    if quantization == "int8" and is_two_stage(model):
        raise ValueError(
            f"{options.flag('quantizations')} int8 quantizes every activation, a two-stage "
            "detector's box and RoI coordinates too (LiteRT then divides by a quantized zero): "
            f"export it as float32, float16 or dynamic. Received: model={model.name!r}"
        )
    if quantization == "int8" and options.calibration_data is None:
        raise ValueError(
            f"{options.flag('quantizations')} int8 needs calibration images: pass "
            f"{options.flag('calibration_data')}. Received: "
            f"{options.flag('calibration_data')}=None"
        )
    _check_free(options, path)
    calibration = options.calibration_data if quantization == "int8" else None
    litert.check_arguments(path, quantization, calibration, True, options.verify)


def _check_version(_: keras.Model, options: ExportOptions, __: str | None, path: str) -> None:
    savedmodel.version_path(os.path.dirname(path), options.version, options.overwrite)


def _tflite_outputs(
    out: str, name: str, _: int, quantizations: Sequence[str | None]
) -> list[tuple[str | None, str]]:
    """``OUT/NAME.tflite`` (float32) and ``OUT/NAME_QUANTIZATION.tflite``."""
    outputs = []
    for quantization in quantizations:
        suffix = "" if quantization is None else f"_{quantization}"
        outputs.append((quantization, os.path.join(out, f"{name}{suffix}.tflite")))
    return outputs


# The export formats, in the order of their outputs; adding one is a row and its module.
FORMATS: dict[str, ExportFormat] = {
    "saved_model": ExportFormat(
        outputs=lambda out, name, version, _: [(None, os.path.join(out, name, str(version)))],
        check=_check_version,
        write=lambda model, staging, options, _, __: savedmodel.saved_model(
            model,
            os.path.join(staging, "saved_model"),
            options.version,
            output=options.output,
            crop_pct=options.crop_pct,
            max_pixels=options.max_pixels,
            verbose=False,
        ),
    ),
    "tflite": ExportFormat(
        outputs=_tflite_outputs,
        check=_check_tflite,
        write=lambda model, _, options, quantization, staged: litert.tflite(
            model,
            staged,
            quantization,
            representative_dataset=options.calibration_data if quantization == "int8" else None,
            validation_data=options.validation_data,
            output=options.output,
            verify=options.verify,
            verbose=False,
        ),
    ),
    "onnx": ExportFormat(
        outputs=lambda out, name, _, __: [(None, os.path.join(out, f"{name}.onnx"))],
        check=lambda _, options, __, path: _check_free(options, path),
        write=lambda model, _, options, __, staged: onnx_export.onnx(
            model,
            staged,
            output=options.output,
            validation_data=options.validation_data,
            verbose=False,
        ),
    ),
    "keras_hub": ExportFormat(
        outputs=lambda out, name, _, __: [(None, os.path.join(out, f"{name}_keras_hub"))],
        check=lambda _, options, __, path: _check_free(options, path),
        write=lambda model, _, options, __, staged: keras_hub_preset.keras_hub_preset(
            model, staged, tokenizer=options.tokenizer, verbose=False
        ),
        check_model=lambda model, options: keras_hub_preset.check_arguments(
            model, options.tokenizer
        ),
        fixed_length=False,  # keras-hub's FNet takes any length (a given one: the preprocessor's)
    ),
}
DEFAULT_FORMATS = ("saved_model", "tflite")


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """What :func:`export` placed.

    Attributes:
        name: the served model's name (its folder and file names).
        reports: the report of each output, at its final path, in `FORMATS` order;
            empty when `recovered`.
        models_config: ``OUT/models.config`` after a SavedModel, else None.
        served: the model names that models.config lists.
        recovered: True when an interrupted export of the same `identity`
            was completed instead (nothing written anew).
    """

    name: str
    reports: list[Any]
    models_config: str | None = None
    served: list[str] = dataclasses.field(default_factory=list)
    recovered: bool = False


_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_name(name: str, flag: str) -> str:
    """Validates a model name that becomes a folder and file names of the export.

    Letters, digits, ``.``, ``_`` and ``-``, starting with a letter or
    digit (so never ``.``, ``..``, hidden, or a path), at most 200
    characters.

    Raises:
        ValueError: naming `flag` and the name.

    Example:
        >>> check_name("gfnet_ti", "name")
        'gfnet_ti'
    """
    if not isinstance(name, str) or len(name) > 200 or not _SAFE_NAME.fullmatch(name):
        raise ValueError(
            f"{flag} must be a model name of letters, digits, '.', '_' and '-' starting with a "
            f"letter or digit (it names the export's folder and files). Received: {name!r}"
        )
    return name


def _inside(out: str, path: str, flag: str) -> str:
    """`path`, after checking that it resolves inside `out` (named `flag` in the message)."""
    root = os.path.realpath(out)
    if os.path.commonpath([root, os.path.realpath(path)]) != root:
        raise ValueError(f"{path!r} resolves outside {flag} {out!r}; nothing was written.")
    return path


def _served(out: str, name: str, formats: Sequence[str]) -> tuple[str | None, list[str]]:
    """Merges `name` into OUT/models.config after a SavedModel: its path and served names."""
    if "saved_model" not in formats:
        return None, []
    with locked(out):
        return merge_models_config(out, name)


def export_bytes(model: keras.Model) -> int:
    """Estimated bytes of converting a model of a fixed input size and checking its parity.

    Its weights; Keras and the converted file each run on the parity
    check's batch of :data:`PARITY_BATCH` (every layer output of static
    shape, :func:`~keras_fourier.models.catalog.activation_elements`); and
    the matmul DFT tables of its Fourier layers
    (:func:`~keras_fourier.limits.dft_table_bytes`), the path TFLite and
    ONNX files take.

    Example:
        >>> export_bytes(fixed_size(any_size_segmenter, (64, 64), "image_size"))  # doctest: +SKIP
        23904616
    """
    grids = set()
    for layer in model.layers:
        if "fft_impl" not in layer.get_config():
            continue
        shape = tuple(keras.tree.flatten(layer.input)[0].shape)
        grids.add(shape[1:3] if len(shape) == 4 else (1, shape[1]))
    activations = 2 * PARITY_BATCH * activation_elements(model)
    return 4 * (model.count_params() + activations) + sum(
        dft_table_bytes(*grid) for grid in grids if None not in grid
    )


def _fixed_model(
    model: keras.Model,
    formats: Sequence[str],
    image_size: int | tuple[int, int] | None,
    flag: str,
) -> keras.Model:
    """What TFLite and ONNX convert: an any-size model at `image_size`, else `model` itself."""
    if image_size is not None:
        size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        return fixed_size(model, size, flag)
    shapes = [tuple(tensor.shape) for tensor in model.inputs]
    if any(len(shape) == 4 and None in shape[1:3] for shape in shapes) and (
        {"tflite", "onnx"} & set(formats) or not is_dense_model(model)
    ):
        stride = model_stride(model)
        sizes = f" (multiples of its stride {stride})" if stride > 1 else ""
        raise ValueError(
            f"Model {model.name!r} takes images of any size; TFLite, ONNX and the SavedModel "
            f"of a classifier or detector are exported at one size: pass {flag}{sizes}. "
            f"Received: {flag}=None"
        )
    return model


def export(
    model: keras.Model,
    out: str | os.PathLike,
    formats: Sequence[str] = DEFAULT_FORMATS,
    *,
    name: str | None = None,
    version: int = 1,
    quantizations: Sequence[str | None] = (None,),
    output: str = "probabilities",
    crop_pct: float = 0.875,
    max_pixels: int = MAX_IMAGE_PIXELS,
    calibration_data: Iterable | None = None,
    validation_data: Iterable | None = None,
    overwrite: bool = False,
    verify: bool = True,
    identity: dict[str, Any] | None = None,
    names: Mapping[str, str] | None = None,
    sequence_length: int | None = None,
    image_size: int | tuple[int, int] | None = None,
    tokenizer: str | os.PathLike | bytes | None = None,
) -> ExportResult:
    """Exports `model` in several formats into `out`, all or nothing, in one journaled commit.

    Args:
        model: the Keras model.
        out: the output folder (created if missing).
        formats: names of `FORMATS`. Default ("saved_model", "tflite").
        name: the served model's name, naming its folder and files. Default
            None: the model's Keras name.
        version: the SavedModel version. Default 1.
        quantizations: TFLite quantizations (None: float32; see
            `litert.QUANTIZATIONS`). Default (None,).
        output: "probabilities" or "logits": what the exports return.
            Default "probabilities".
        crop_pct: serving_bytes centre-crop fraction. Default 0.875.
        max_pixels: serving_bytes refuses larger images. Default `MAX_IMAGE_PIXELS`.
        calibration_data: image batches for int8 calibration. Default None.
        validation_data: image batches on which each TFLite and ONNX file's
            top-1 agreement with Keras is measured. Default None.
        overwrite: replace an existing version or file. Default False: refuse.
        verify: run the TFLite files in LiteRT. Default True.
        identity: what this call is (e.g. a command's arguments), stored in
            its journal; an interrupted export of the same identity is
            completed instead of exported again. Default None.
        names: how messages name the arguments (e.g. {"overwrite":
            "--overwrite"}). Default None: by their names.
        sequence_length: the length a text model that takes any length
            (``FNet(sequence_length=None)``) is exported at, in every
            format; None (default) for models of fixed input shapes, and
            for a keras-hub preset alone (keras-hub's FNet takes any length;
            given, it is the length of a classifier's preprocessor).
        image_size: for a model of any input size (e.g. a segmenter built
            with ``input_shape=(None, None, 3)``): the input size, an int or
            (height, width), of its TFLite and ONNX files (and of a
            classifier's SavedModel); a segmenter's SavedModel keeps any
            size. Required for those; refused for a model of a fixed size.
            Default None.
        tokenizer: the keras_hub format's SentencePiece ``.model`` file (or
            its bytes), written as the preset's tokenizer
            (:func:`~keras_fourier.export.keras_hub_preset.keras_hub_preset`).
            Default None: none.

    Returns:
        An :class:`ExportResult`.

    Raises:
        ValueError: a bad argument or missing prerequisite, before anything is written.
        ParityError: an output disagrees with Keras; nothing is placed.
        OSError: a write error; what this call wrote is removed.

    Example:
        >>> export(model, "models", ("saved_model", "tflite", "onnx"))  # doctest: +SKIP
    """
    out = os.fspath(out)
    names = dict(names or {})
    unknown = [kind for kind in formats if kind not in FORMATS]
    if unknown or not formats:
        raise ValueError(
            f"{names.get('formats', 'formats')} must be some of {', '.join(FORMATS)}. "
            f"Received: {list(formats)}"
        )
    if sequence_length is not None or any(FORMATS[kind].fixed_length for kind in formats):
        model = at_sequence_length(model, sequence_length)
    if tokenizer is not None and "keras_hub" not in formats:
        flag = names.get("tokenizer", "tokenizer")
        shown = "<the model bytes>" if isinstance(tokenizer, bytes) else os.fspath(tokenizer)
        raise ValueError(
            f"{flag} is the tokenizer of a keras_hub preset; {names.get('formats', 'formats')} "
            f"{','.join(formats)} has none. Received: {flag}={shown!r}"
        )
    name_flag = names.get("name", "name") if name else "the model's name"
    name = check_name(name or model.name, name_flag)
    journals = recover(out) if os.path.isdir(out) else []
    if identity is not None and any(journal.get("command") == identity for journal in journals):
        return ExportResult(name, [], *_served(out, name, formats), recovered=True)
    options = ExportOptions(
        version=version,
        output=output,
        crop_pct=crop_pct,
        max_pixels=max_pixels,
        calibration_data=calibration_data,
        validation_data=validation_data,
        overwrite=overwrite,
        verify=verify,
        names={"overwrite": "overwrite=True", **names},
        tokenizer=tokenizer
        if tokenizer is None or isinstance(tokenizer, bytes)
        else os.fspath(tokenizer),
    )
    base = _inside(out, os.path.join(out, name), options.flag("out"))
    recover(base)
    check_positive_int(options.flag("max_pixels"), max_pixels)
    check_number(options.flag("crop_pct"), crop_pct, low=0, high=1, low_open=True)
    savedmodel.check_version(version, options.flag("version"))
    check_writable_folder(out, options.flag("out"))
    config = os.path.join(out, "models.config")
    if "saved_model" in formats and os.path.exists(config):
        read_models_config(config)
    for kind in formats:
        if FORMATS[kind].check_model is not None:
            FORMATS[kind].check_model(model, options)
    fixed = _fixed_model(model, formats, image_size, names.get("image_size", "image_size"))
    outputs = [
        (row, model if kind == "saved_model" and is_dense_model(model) else fixed, *output)
        for kind, row in FORMATS.items()
        if kind in formats
        for output in row.outputs(out, name, version, quantizations)
    ]
    if image_size is not None and any(source is fixed for _, source, *_ in outputs):
        flag = names.get("image_size", "image_size")
        height, width = fixed.input_shape[1:3]
        check_memory(
            f"Exporting model {model.name!r} at {height}x{width} pixels",
            export_bytes(fixed),
            f"{flag}={height}x{width}",
        )
    for row, source, quantization, path in outputs:
        row.check(source, options, quantization, path)
    created = make_folders(out)
    try:
        with Transaction(out) as staging:
            moves, reports = [], []
            for row, source, quantization, path in outputs:
                staged = os.path.join(staging.path, os.path.basename(path))
                report = row.write(source, staging.path, options, quantization, staged)
                moves.append((os.path.relpath(report.path, staging.path), path))
                reports.append(report)
            if "saved_model" in formats and not os.path.isdir(base):
                os.mkdir(base)
                created.insert(0, os.path.abspath(base))
            staging.commit(
                [(relative, _inside(out, final, options.flag("out"))) for relative, final in moves],
                overwrite=overwrite,
                command=identity,
            )
        created = []
    finally:
        for folder in created:  # what this call created, only if still empty
            with contextlib.suppress(OSError):
                os.rmdir(folder)
    placed = [
        dataclasses.replace(report, path=final)
        for (_, final), report in zip(moves, reports, strict=True)
    ]
    return ExportResult(name, placed, *_served(out, name, formats))
