"""`keras-fourier export`: SavedModel, TFLite, ONNX, keras-hub files of a model (`export.export`).

MODEL is a model name (``gfnet_ti`` or ``GFNetTi``, see
:func:`keras_fourier.models.resolve_model`), a ``.keras`` file or a run
folder; names are built with ``--weights`` (None, "imagenet" or a weights
file), ``--image-size`` and ``--classes``. The outputs, their checks and the
journaled commit are :func:`keras_fourier.export.export`'s; this module adds
the image batches of ``--data`` and the TF Serving instructions.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from keras_fourier.cli.arguments import CommandError, add_model_arguments, comma_list, model_options
from keras_fourier.run_folder import RunFolder
from keras_fourier.settings import OUTPUTS, QUANTIZATIONS
from keras_fourier.validation import check_positive_int

NAME = "export"
HELP = "export a model as a TF Serving SavedModel, builtin TFLite, ONNX or a keras-hub preset"
DESCRIPTION = (
    "Write OUT/NAME/VERSION/ (TF Serving SavedModel, signatures serving_default and "
    "serving_bytes), OUT/NAME[_QUANTIZATION].tflite (TFLite builtin ops only) and, with "
    "--format ...,onnx, OUT/NAME.onnx (standard ONNX ops, run in onnxruntime), each "
    "reloaded and checked against Keras; with --format keras_hub, OUT/NAME_keras_hub/ (an "
    "FNet as a keras-hub preset folder, with --tokenizer's SentencePiece files). MODEL is a "
    "model name built with --weights, --image-size and --classes, a .keras file or a run "
    "folder; see export/README.md."
)
SHOW_DEFAULTS = False
# The names of keras_fourier.export.FORMATS (tests/test_cli_startup.py checks them).
FORMATS = ("saved_model", "tflite", "onnx", "keras_hub")
DEFAULT_FORMATS = ("saved_model", "tflite")
# --quantize names float32 (no quantization, None) "none".
QUANTIZE_CHOICES = tuple("none" if name is None else name for name in QUANTIZATIONS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `keras-fourier export` to `parser`.

    Args:
        parser: the subcommand's parser.

    Example:
        >>> add_arguments(subcommands.add_parser("export"))
    """
    parser.add_argument(
        "--format",
        type=comma_list(FORMATS),
        default=DEFAULT_FORMATS,
        help=f"comma-separated: {', '.join(FORMATS)} (default: {','.join(DEFAULT_FORMATS)})",
    )
    parser.add_argument(
        "--quantize",
        type=comma_list(QUANTIZE_CHOICES),
        default=("none",),
        help="TFLite quantizations, comma-separated: none (float32), float16, dynamic, int8 "
        "(default: none)",
    )
    parser.add_argument("--version", type=int, default=1, help="SavedModel version (default 1)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument(
        "--name",
        default=None,
        help="the served model's name, naming its folder and files (default: the model's "
        "Keras name); letters, digits, '.', '_', '-'",
    )
    add_model_arguments(
        parser, model_flag=False, weights_help="builders: 'imagenet' or a weights file"
    )
    parser.add_argument(
        "--classes", type=int, default=None, help="builders: head size (default 1000)"
    )
    parser.add_argument(
        "--sequence-length",
        type=int,
        default=None,
        help="text models: the exported input length (names: default 512; required for a "
        "model that takes any length)",
    )
    parser.add_argument(
        "--tokenizer",
        default=None,
        help="keras_hub: the SentencePiece .model file the FNet's texts were encoded with "
        "(or 'official': the official FNet vocabulary, downloaded once), written as the "
        "preset's FNetTokenizer (default: the SentencePiece model a text run stored in its "
        "model.keras, else no tokenizer files)",
    )
    parser.add_argument(
        "--output",
        choices=OUTPUTS,
        default="probabilities",
        help="what a classifier's signatures return: softmax probabilities, or the logits "
        "before it (default: probabilities); segmentation models return per-pixel logits and, "
        "from serving_bytes, the class map",
    )
    parser.add_argument(
        "--crop-pct",
        type=float,
        default=0.875,
        help="serving_bytes centre-crop fraction (default: 0.875)",
    )
    parser.add_argument(
        "--max-pixels",
        type=int,
        default=40_000_000,
        help="serving_bytes refuses images of more pixels (read from the header, before decoding)",
    )
    parser.add_argument(
        "--data",
        default=None,
        help="image source of the model's task ('digits', 'dir:PATH', 'tfds:NAME'; a "
        "segmentation model's: 'digits', 'segdir:PATH', 'tfds:oxford_iiit_pet', ...): int8 "
        "calibration on its train split, top-1 (segmentation: pixel) agreement on --data-split "
        "(default for int8: the data of the run folder holding a .keras MODEL)",
    )
    parser.add_argument(
        "--data-split",
        default="validation",
        help="split of --data on which each TFLite (and ONNX) file's agreement with "
        "Keras is measured (default: validation)",
    )
    parser.add_argument(
        "--num-batches",
        type=int,
        default=10,
        help="batches of 32 per split (default: 10); int8 calibration runs each image "
        "through TensorFlow's one-thread calibrator (AFNONet-S4: about 8 s per image on "
        "2 AVX2 cores)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing SavedModel version or file (default: refuse)",
    )
    parser.add_argument(
        "--no-verify",
        dest="verify",
        action="store_false",
        help="write TFLite files without running them in LiteRT (the 'export' extra)",
    )


# How the library's messages name export()'s arguments: by their flags.
FLAGS = {
    "formats": "--format",
    "name": "--name",
    "version": "--version",
    "quantizations": "--quantize",
    "calibration_data": "--data",
    "crop_pct": "--crop-pct",
    "max_pixels": "--max-pixels",
    "overwrite": "--overwrite",
    "out": "--out",
    "image_size": "--image-size",
    "tokenizer": "--tokenizer",
}


def run(args: argparse.Namespace) -> int:
    """Runs `keras-fourier export`: the SavedModel, TFLite, ONNX and keras-hub files of a model.

    Args:
        args: arguments parsed by a parser set up with :func:`add_arguments`.

    Returns:
        0 on success.

    Raises:
        ValueError: a bad argument or missing prerequisite (exit status 2,
            nothing written), such as an existing version without
            ``--overwrite``, ``--quantize int8`` without ``--data``, or a
            read-only ``--out``.
        CommandError: an output failed its parity check against Keras, or a
            write error (exit status 1, nothing placed).

    Example:
        >>> run(parser.parse_args(["gfnet_ti", "--weights", "imagenet", "--out", "models"]))
        0
    """
    import keras

    from keras_fourier.data.text import official_sentencepiece_model
    from keras_fourier.export import ParityError, export
    from keras_fourier.export.keras_hub_preset import run_tokenizer
    from keras_fourier.export.serving_config import CONTAINER_ROOT
    from keras_fourier.export.signatures import is_dense_model
    from keras_fourier.model_record import TASK_KEY, read_model_record
    from keras_fourier.models.names import is_model_name
    from keras_fourier.models.resolve import resolve_model
    from keras_fourier.run_folder import resolve_model_file
    from keras_fourier.tasks import select_task
    from keras_fourier.tasks.base import EvaluationRequest
    from keras_fourier.training.rundir import read_run_record

    def image_batches(model: keras.Model, split: str) -> Any:
        """`--num-batches` image batches of `--data`, read by the model's task; None without it.

        The task is the one the model's run stored, else segmentation for a
        dense model, else the one `--data` tells (image classification).
        """
        if args.data is None:
            return None
        shape = model.input_shape
        if not isinstance(shape, tuple) or len(shape) != 4 or shape[-1] != 3:
            raise ValueError(f"--data needs a model of RGB images. Received: input_shape={shape}")
        named = record.get(TASK_KEY) or ("segmentation" if is_dense_model(model) else None)
        task = select_task(args.data, task=named)
        request = EvaluationRequest(args.data, split, 32, None, 0, "error", record)
        dataset = task.evaluation_data(model, request).take(args.num_batches)
        height, width = image_size or shape[1:3]
        if height is None or width is None:
            return dataset.map(lambda images, targets: images)
        crop = keras.layers.CenterCrop(height, width)
        return dataset.map(lambda images, targets: crop(images))

    check_positive_int("--num-batches", args.num_batches)
    if args.classes is not None:
        check_positive_int("--classes", args.classes)
    identity = _identity(args)
    options = model_options(args)
    saved = not is_model_name(args.model) or os.path.exists(args.model)
    if saved:
        options["sequence_length"] = None  # a saved model's length is fixed at export
    # A saved model of any input size is exported at --image-size (names are built at it).
    image_size = options.pop("image_size") if saved else None
    model = resolve_model(args.model, **options)
    # A run's model.keras names its task (and what labels its outputs).
    record = read_model_record(resolve_model_file(args.model)) if saved else {}
    # --tokenizer official: the official SentencePiece model (downloaded once).
    tokenizer = official_sentencepiece_model() if args.tokenizer == "official" else args.tokenizer
    if tokenizer is None and "keras_hub" in args.format:
        try:
            tokenizer, note = run_tokenizer(record)
        except ImportError as error:  # its message names the [text] extra
            raise CommandError(str(error), 2) from error
        if note:
            print(f"keras-fourier export: {note}")
    quantizations = [None if quantize == "none" else quantize for quantize in args.quantize]
    if args.data is None and "int8" in quantizations and args.model.endswith(".keras"):
        # Without --data, int8 calibrates on the images a run folder's model was trained on.
        record = read_run_record(os.path.dirname(os.path.abspath(args.model))) or {}
        data = (record.get("identity") or {}).get("data")
        if isinstance(data, str) and data != "listops":
            args.data = data
            note = f"int8 calibration on --data {data!r}, the run's training data"
            print(f"keras-fourier export: {note}")
    validation_data = calibration_data = None
    if "tflite" in args.format or "onnx" in args.format:
        validation_data = image_batches(model, args.data_split)
    if "tflite" in args.format and "int8" in quantizations:
        calibration_data = image_batches(model, "train")
        if calibration_data is not None and next(iter(calibration_data), None) is None:
            raise ValueError(f"--data {args.data!r} has no calibration images.")
    try:
        result = export(
            model,
            args.out,
            args.format,
            name=args.name,
            version=args.version,
            quantizations=quantizations,
            output=args.output,
            crop_pct=args.crop_pct,
            max_pixels=args.max_pixels,
            calibration_data=calibration_data,
            validation_data=validation_data,
            overwrite=args.overwrite,
            verify=args.verify,
            identity=identity,
            names=FLAGS,
            sequence_length=args.sequence_length,
            image_size=image_size,
            tokenizer=tokenizer,
        )
    except ParityError as error:  # a converted model that disagrees with Keras: nothing placed
        raise CommandError(str(error)) from error
    except ImportError as error:  # LiteRT or tf2onnx missing: its message names the extra
        raise CommandError(str(error), 2) from error
    except ValueError as error:  # the library's message names its keyword; the command's a flag
        message = str(error).replace("pass overwrite=True", "pass --overwrite")
        message = message.replace("Received: sequence_length=", "Received: --sequence-length=")
        message = message.replace("Received: tokenizer=", "Received: --tokenizer=")
        raise ValueError(message) from error
    except OSError as error:
        raise CommandError(f"{error.strerror or error}: {error.filename or args.out}") from error
    if result.recovered:
        print(f"Completed the interrupted export of {result.name!r} into {args.out!r}.")
    for report in result.reports:
        print(report.summary())
    if result.reports and "saved_model" in args.format:
        saved = result.reports[0]  # the SavedModel is the first output (see export.FORMATS)
        print(saved.signatures)
        for line in saved.parity_lines():
            print(line)
    if result.models_config is not None:
        print(
            f"TF Serving: {result.models_config} lists {', '.join(result.served)}; model "
            f"{result.name!r} is served from {CONTAINER_ROOT}/{result.name} with the export "
            f"folder mounted at {CONTAINER_ROOT}:\n"
            f"  docker run --rm -p 8500:8500 -p 8501:8501 --mount type=bind,"
            f'source="{os.path.abspath(args.out)}",target={CONTAINER_ROOT} tensorflow/serving '
            f"--model_config_file={CONTAINER_ROOT}/models.config\n"
            f"  curl http://localhost:8501/v1/models/{result.name}   # ready when its state is "
            "AVAILABLE"
        )
    return 0


def _identity(args: argparse.Namespace) -> dict[str, Any]:
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
