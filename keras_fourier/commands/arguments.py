"""What the subcommands' runs share: the model named on the command line, metrics, error lines.

The argument types and the model arguments of their parsers are in
:mod:`keras_fourier.cli.arguments`.
"""

from __future__ import annotations

import argparse
import sys

import keras

from keras_fourier.models.resolve import resolve_model

# The flag of each `resolve_model` argument, for its messages.
MODEL_FLAGS = {
    "weights": "--weights",
    "image_size": "--image-size",
    "classes": "--classes",
    "sequence_length": "--sequence-length",
    "family": "--family",
}


def load_model(args: argparse.Namespace) -> keras.Model:
    """The model named on the command line, through `resolve_model`.

    Args:
        args: parsed arguments; `args.model` is a model name (either
            spelling), a `.keras` file or a run folder; names are built with
            the `weights`, `image_size`, `classes` and `sequence_length`
            arguments the subcommand has (None: the builder's default).

    Returns:
        The Keras model.

    Raises:
        ValueError: an unknown name or a missing file, or builder options
            given with a `.keras` file or run folder.

    Example:
        >>> load_model(build_parser().parse_args(["flops", "GFNetTi"])).name
        'gfnet_ti'
    """
    options = {key: getattr(args, key, None) for key in MODEL_FLAGS}
    try:
        return resolve_model(args.model, names=MODEL_FLAGS, **options)
    except FileNotFoundError as error:
        raise ValueError(str(error)) from error


def metrics_line(metrics: dict[str, float]) -> str:
    """Metrics as ``name=value`` pairs, sorted by name, 4 decimals.

    Example:
        >>> metrics_line({"loss": 0.5, "accuracy": 0.75})
        'accuracy=0.7500 loss=0.5000'
    """
    return " ".join(f"{name}={value:.4f}" for name, value in sorted(metrics.items()))


def fail(command: str, error: BaseException | str, status: int = 2) -> int:
    """Prints ``keras-fourier COMMAND: error: MESSAGE`` on stderr; returns `status`."""
    print(f"keras-fourier {command}: error: {error}", file=sys.stderr)
    return status
