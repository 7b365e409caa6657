"""The arguments of `keras-fourier export` (its run: :mod:`keras_fourier.commands.export`)."""

from __future__ import annotations

import argparse

from keras_fourier.cli.arguments import add_model_arguments, comma_list
from keras_fourier.settings import OUTPUTS, QUANTIZATIONS

NAME = "export"
HELP = "export a model as a TF Serving SavedModel, builtin-only TFLite and ONNX files"
DESCRIPTION = (
    "Write OUT/NAME/VERSION/ (TF Serving SavedModel, signatures serving_default and "
    "serving_bytes), OUT/NAME[_QUANTIZATION].tflite (TFLite builtin ops only) and, with "
    "--format ...,onnx, OUT/NAME.onnx (standard ONNX ops, run in onnxruntime), each "
    "reloaded and checked against Keras. MODEL is a model name built with --weights, "
    "--image-size and --classes, a .keras file or a run folder; see export/README.md."
)
SHOW_DEFAULTS = False
FORMATS = ("saved_model", "tflite", "onnx")
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
        help="comma-separated: saved_model, tflite, onnx (default: saved_model,tflite)",
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
        "--output",
        choices=OUTPUTS,
        default="probabilities",
        help="what the signatures return: softmax probabilities, or the logits before it "
        "(default: probabilities)",
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
        help="image source of keras_fourier.data.load_image_dataset ('digits', 'dir:PATH', "
        "'tfds:NAME'): int8 calibration on its train split, top-1 agreement on --data-split "
        "(default for int8: the data of the run folder holding a .keras MODEL)",
    )
    parser.add_argument(
        "--data-split",
        default="validation",
        help="split of --data on which each TFLite (and ONNX) file's top-1 agreement with "
        "Keras is measured (default: validation)",
    )
    parser.add_argument(
        "--num-batches", type=int, default=10, help="batches of 32 per split (default: 10)"
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
