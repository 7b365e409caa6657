"""The `keras-fourier export` subcommand: SavedModel, TFLite and ONNX files of a model.

``keras-fourier export MODEL --format saved_model,tflite,onnx --out DIR`` writes,
for a model named NAME (its Keras name; the variant key for builders):

* ``DIR/NAME/<version>/``: the TF Serving SavedModel (``DIR`` is the folder
  mounted as ``/models`` in export/README.md, ``DIR/NAME`` the base path in
  models.config);
* ``DIR/NAME.tflite`` (float32) and ``DIR/NAME_<quantization>.tflite``;
* ``DIR/NAME.onnx`` (float32, standard ONNX ops, checked in onnxruntime).

MODEL is a model name (``gfnet_ti`` or ``GFNetTi``, see
:func:`keras_fourier.models.resolve_model`), a ``.keras`` file or a run
folder; names are built with ``--weights`` (None, "imagenet" or a weights file),
``--image-size`` and ``--classes``.

All or nothing: every argument and every output's prerequisites (int8
calibration data with at least one batch, an output folder that is a
writable folder, free versions and file names, LiteRT for the checks) are
checked before anything is written; if a later step fails, what this call
wrote is removed. The arguments are declared in :mod:`keras_fourier.cli.export`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import sys

import keras

from keras_fourier import export
from keras_fourier.commands.arguments import load_model
from keras_fourier.data import load_image_dataset
from keras_fourier.export import litert, savedmodel
from keras_fourier.export.journal import Transaction, locked, recover
from keras_fourier.export.parity import ParityError
from keras_fourier.export.serving_config import (
    CONTAINER_ROOT,
    merge_models_config,
    read_models_config,
)
from keras_fourier.fileio import check_writable_folder, make_folders
from keras_fourier.run_folder import RunFolder
from keras_fourier.training.rundir import read_run_record
from keras_fourier.validation import check_number, check_positive_int


def _image_batches(args: argparse.Namespace, model, split: str):
    """`--num-batches` image batches of `--data`, or None without `--data`."""
    if args.data is None:
        return None
    shape = model.input_shape
    if not isinstance(shape, tuple) or len(shape) != 4 or shape[-1] != 3:
        raise ValueError(f"--data needs a model of RGB images. Received: input_shape={shape}")
    _, height, width, _ = shape
    crop = keras.layers.CenterCrop(height, width)
    dataset = load_image_dataset(
        args.data, split, image_size=max(height, width), batch_size=32, training=False
    )
    return dataset.take(args.num_batches).map(lambda images, labels: crop(images))


def _default_calibration_data(args: argparse.Namespace) -> None:
    """Without --data, int8 calibrates on the images a run folder's model was trained on.

    A ``.keras`` file inside a `keras-fourier train` run folder (its
    ``run.json`` names the data, "digits" for the README's main job) sets
    `args.data` to that source; any other model keeps --data unset.
    """
    if args.data is not None or "int8" not in args.quantize or not args.model.endswith(".keras"):
        return
    record = read_run_record(os.path.dirname(os.path.abspath(args.model))) or {}
    data = (record.get("identity") or {}).get("data")
    if isinstance(data, str) and data != "listops":
        args.data = data
        print(f"keras-fourier export: int8 calibration on --data {data!r}, the run's training data")


def _outputs(args: argparse.Namespace, name: str) -> list[tuple[str, str | None, str]]:
    """(format, TFLite quantization, final path) of every requested output, in export order.

    The SavedModel is the version folder ``OUT/NAME/VERSION``, TFLite files
    ``OUT/NAME[_QUANTIZATION].tflite``, the ONNX file ``OUT/NAME.onnx``.
    """
    outputs: list[tuple[str, str | None, str]] = []
    if "saved_model" in args.format:
        outputs.append(("saved_model", None, os.path.join(args.out, name, str(args.version))))
    if "tflite" in args.format:
        for quantize in args.quantize:
            quantization = None if quantize == "none" else quantize
            suffix = "" if quantization is None else f"_{quantization}"
            path = os.path.join(args.out, f"{name}{suffix}.tflite")
            outputs.append(("tflite", quantization, path))
    if "onnx" in args.format:
        outputs.append(("onnx", None, os.path.join(args.out, f"{name}.onnx")))
    return outputs


def _check(args: argparse.Namespace, model, name: str) -> None:
    """Every check that can be made before writing (see the module docstring)."""
    check_positive_int("--num-batches", args.num_batches)
    if args.classes is not None:
        check_positive_int("--classes", args.classes)
    check_positive_int("--max-pixels", args.max_pixels)
    check_number("--crop-pct", args.crop_pct, low=0, high=1, low_open=True)
    savedmodel.check_version(args.version, "--version")
    check_writable_folder(args.out, "--out")
    config = os.path.join(args.out, "models.config")
    if "saved_model" in args.format and os.path.exists(config):
        read_models_config(config)
    for kind, quantization, path in _outputs(args, name):
        if kind == "saved_model":
            savedmodel.version_path(os.path.dirname(path), args.version, args.overwrite)
            continue
        if quantization == "int8" and args.data is None:
            raise ValueError(
                "--quantize int8 needs calibration images: pass --data ('digits', "
                "'dir:PATH' or 'tfds:NAME'). Received: --data=None"
            )
        if os.path.exists(path) and not args.overwrite:
            raise ValueError(f"{path!r} already exists; pass --overwrite to replace it.")
        if kind == "tflite":
            calibration = args.data if quantization == "int8" else None
            litert.check_arguments(path, quantization, calibration, True, args.verify)


_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_name(name: str, flag: str) -> str:
    """Validates a model name that becomes a folder and file names of the export.

    Letters, digits, ``.``, ``_`` and ``-``, starting with a letter or
    digit (so never ``.``, ``..``, hidden, or a path), at most 200
    characters.

    Raises:
        ValueError: naming `flag` and the name.
    """
    if not isinstance(name, str) or len(name) > 200 or not _SAFE_NAME.fullmatch(name):
        raise ValueError(
            f"{flag} must be a model name of letters, digits, '.', '_' and '-' starting with a "
            f"letter or digit (it names the export's folder and files). Received: {name!r}"
        )
    return name


def _inside(out: str, path: str) -> str:
    """`path`, after checking that it resolves inside `out`."""
    root = os.path.realpath(out)
    if os.path.commonpath([root, os.path.realpath(path)]) != root:
        raise ValueError(f"{path!r} resolves outside --out {out!r}; nothing was written.")
    return path


def _command(args: argparse.Namespace) -> dict:
    """What this call is, stored in its journal: its arguments and the model file's identity."""
    values = {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in sorted(vars(args).items())
        if isinstance(value, (str, int, float, bool, tuple, list, type(None)))
    }
    model_file = RunFolder(args.model).model if os.path.isdir(args.model) else args.model
    if model_file.endswith(".keras") and os.path.isfile(model_file):
        stat = os.stat(model_file)
        values["model_file"] = [os.path.abspath(model_file), stat.st_size, stat.st_mtime_ns]
    return values


def run(args: argparse.Namespace) -> int:
    """Runs `keras-fourier export`: the SavedModel and TFLite files of one model.

    Args:
        args: arguments parsed by a parser set up with
            :func:`keras_fourier.cli.export.add_arguments`.

    Returns:
        0 on success; 2 (after printing the message, with nothing written)
        on a bad argument or missing prerequisite, such as an existing
        version without ``--overwrite``, ``--quantize int8`` without
        ``--data``, or a read-only ``--out``; 1 (after printing one line,
        with nothing placed) when an output fails its parity check against
        Keras, or on a write error.

    Example:
        >>> run(parser.parse_args(["gfnet_ti", "--weights", "imagenet", "--out", "models"]))
        0
    """
    created: list[str] = []
    try:
        command = _command(args)
        if os.path.isdir(args.out) and any(
            journal.get("command") == command for journal in recover(args.out)
        ):
            name = args.name or load_model(args).name
            print(f"Completed the interrupted export of {name!r} into {args.out!r}.")
            return _print_serving_config(args, name)
        model = load_model(args)
        name = check_name(args.name or model.name, "--name" if args.name else "the model's name")
        base = _inside(args.out, os.path.join(args.out, name))
        recover(base)
        _default_calibration_data(args)
        _check(args, model, name)
        validation_data = calibration = None
        if "tflite" in args.format:
            validation_data = _image_batches(args, model, args.data_split)
            if "int8" in args.quantize:
                calibration = _image_batches(args, model, "train")
                if next(iter(calibration), None) is None:
                    raise ValueError(f"--data {args.data!r} has no calibration images.")
        created = make_folders(args.out)
        with Transaction(args.out) as staging:
            moves, reports = [], []
            for kind, quantization, path in _outputs(args, name):
                staged = os.path.join(staging.path, os.path.basename(path))
                if kind == "saved_model":
                    report = export.saved_model(
                        model,
                        os.path.join(staging.path, "saved_model"),
                        args.version,
                        output=args.output,
                        crop_pct=args.crop_pct,
                        max_pixels=args.max_pixels,
                        verbose=False,
                    )
                    staged = report.path
                elif kind == "tflite":
                    report = export.tflite(
                        model,
                        staged,
                        quantization,
                        representative_dataset=calibration if quantization == "int8" else None,
                        validation_data=validation_data,
                        output=args.output,
                        verify=args.verify,
                        verbose=False,
                    )
                else:
                    report = export.onnx(
                        model,
                        staged,
                        output=args.output,
                        validation_data=_image_batches(args, model, args.data_split),
                        verbose=False,
                    )
                moves.append((os.path.relpath(staged, staging.path), path))
                reports.append(report)
            if "saved_model" in args.format and not os.path.isdir(base):
                os.mkdir(base)
                created.insert(0, os.path.abspath(base))
            staging.commit(
                [(relative, _inside(args.out, final)) for relative, final in moves],
                overwrite=args.overwrite,
                command=command,
            )
        created = []
        for (_, final), written in zip(moves, reports, strict=True):
            print(dataclasses.replace(written, path=final).summary())  # not the staging path
        if "saved_model" in args.format:
            saved = reports[0]  # the SavedModel is the first output (see _outputs)
            print(saved.signatures)
            for signature, diff in saved.max_abs_diff.items():
                print(f"Parity {signature}: max |SavedModel - Keras| = {diff:.3g}")
    except ParityError as error:  # a converted model that disagrees with Keras: nothing placed
        print(f"keras-fourier export: error: {error}", file=sys.stderr)
        return 1
    except (ValueError, ImportError, OSError) as error:
        # The library's message names its keyword; the command's is a flag.
        message = str(error).replace("pass overwrite=True", "pass --overwrite")
        if isinstance(error, OSError) and not isinstance(error, ImportError):
            message = f"{error.strerror or error}: {error.filename or args.out}"
        print(f"keras-fourier export: error: {message}", file=sys.stderr)
        return 2 if isinstance(error, (ValueError, ImportError)) else 1
    finally:
        for folder in created:  # what this call created, only if still empty
            with contextlib.suppress(OSError):
                os.rmdir(folder)
    if "saved_model" in args.format:
        return _print_serving_config(args, name)
    return 0


def _print_serving_config(args: argparse.Namespace, name: str) -> int:
    """Merges this model into OUT/models.config and says how to serve it; the exit status."""
    out = args.out
    try:
        with locked(out):
            path, names = merge_models_config(out, name)
    except (ValueError, OSError) as error:
        print(f"keras-fourier export: error: {error}", file=sys.stderr)
        return 1
    print(
        f"TF Serving: {path} lists {', '.join(names)}; model {name!r} is served from "
        f"{CONTAINER_ROOT}/{name} with the export folder mounted at {CONTAINER_ROOT}:\n"
        f"  docker run --rm -p 8500:8500 -p 8501:8501 --mount type=bind,"
        f'source="{os.path.abspath(out)}",target={CONTAINER_ROOT} tensorflow/serving '
        f"--model_config_file={CONTAINER_ROOT}/models.config\n"
        f"  curl http://localhost:8501/v1/models/{name}   # ready when its state is AVAILABLE"
    )
    return 0
