"""What the subcommands share, keras-free: argument types, the model arguments, error lines."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

DATA_HELP = (
    "'digits', 'tfds:<name>', 'dir:<path>', or for FNet models 'listops' or 'csv:<path>' (a "
    ".csv/.tsv file, or a folder of train/validation (or dev)/test files; columns text (or "
    "sentence, sentence1), optionally text_pair (or sentence2), and label)"
)
MODEL_HELP = "a model name (gfnet_ti, GFNetTi, gfnet_tiny, ...), a .keras file or a run folder"
# The flag of each `resolve_model` argument, for its messages.
MODEL_FLAGS = {
    "weights": "--weights",
    "image_size": "--image-size",
    "classes": "--classes",
    "sequence_length": "--sequence-length",
    "family": "--family",
}


class CommandError(Exception):
    """A failure that the command reports as one line, ``keras-fourier NAME: error: MESSAGE``.

    A subcommand's `run` raises it for an error of the library that it
    words for the command line; :func:`keras_fourier.cli.run` prints it and
    exits with `status`.

    Args:
        message: the line's MESSAGE.
        status: the exit status. Default 1 (a failure); 2 for a bad argument.

    Example:
        >>> raise CommandError("the run folder is busy")  # doctest: +SKIP
    """

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def comma_list(
    choices: Sequence[Any] | None = None, cast: Callable[[str], Any] = str
) -> Callable[[str], list]:
    """An argparse `type` for comma-separated values, each cast and, with `choices`, checked.

    Args:
        choices: the allowed values, or None (default) for any.
        cast: converts each value, e.g. `int`. Default `str`.

    Returns:
        The parser: text -> list of values (at least one).

    Example:
        >>> comma_list(("fft", "matmul"))("fft,matmul")
        ['fft', 'matmul']
    """

    def parse(text: str) -> list:
        try:
            values = [cast(value.strip()) for value in text.split(",") if value.strip()]
        except ValueError:
            values = []
        if not values or (choices is not None and any(v not in choices for v in values)):
            expected = f" of {', '.join(map(str, choices))}" if choices is not None else ""
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list{expected}; received {text!r}"
            )
        return values

    return parse


def sizes(text: str) -> int | tuple[int, ...]:
    """Parses --depths and --dims: 4 -> 4 (isotropic), 1,2,1 -> (1, 2, 1) (per stage).

    Example:
        >>> sizes("4"), sizes("1,2,1")
        (4, (1, 2, 1))
    """
    values = tuple(comma_list(cast=int)(text))
    return values[0] if len(values) == 1 and "," not in text else values


def image_size(text: str) -> tuple[int, int]:
    """Parses --image-size: SIZE or HEIGHTxWIDTH -> (height, width).

    Example:
        >>> image_size("224"), image_size("32x48")
        ((224, 224), (32, 48))
    """
    parts = text.lower().split("x")
    if len(parts) not in (1, 2) or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise argparse.ArgumentTypeError(f"expected SIZE or HEIGHTxWIDTH; received {text!r}")
    height, width = (int(parts[0]),) * 2 if len(parts) == 1 else map(int, parts)
    return height, width


def add_model_arguments(
    parser: argparse.ArgumentParser, *, model_flag: bool, weights_help: str
) -> None:
    """Adds the model arguments that :func:`model_options` reads, but `--classes`.

    MODEL (see :data:`MODEL_HELP`), `--weights` and `--image-size` (SIZE or
    HEIGHTxWIDTH), as `keras-fourier export` and `predict` take them.

    Args:
        parser: the subcommand's parser.
        model_flag: MODEL as a required `--model` option, not a positional.
        weights_help: the help of `--weights` (its default differs by command).

    Example:
        >>> add_model_arguments(parser, model_flag=True, weights_help="a weights file")
    """
    parser.add_argument(
        "--model" if model_flag else "model",
        **({"required": True} if model_flag else {}),
        help=MODEL_HELP,
    )
    parser.add_argument("--weights", default=None, help=weights_help)
    parser.add_argument(
        "--image-size", type=image_size, default=None, help="names: SIZE or HxW (default 224)"
    )


def model_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of `resolve_model` for the model named on the command line.

    Args:
        args: parsed arguments; names are built with the `weights`,
            `image_size`, `classes` and `sequence_length` arguments the
            subcommand has (None: the builder's default).

    Returns:
        `resolve_model`'s options, with `names` mapping them to their flags.

    Example:
        >>> resolve_model(args.model, **model_options(args))  # doctest: +SKIP
    """
    return {
        **{key: getattr(args, key, None) for key in MODEL_FLAGS},
        "names": MODEL_FLAGS,
    }


def metrics_line(metrics: dict[str, float]) -> str:
    """Metrics as ``name=value`` pairs, sorted by name, 4 decimals.

    A task's breakdown values (keys with a "/", e.g. ``iou/wall``) are left
    to its `details` lines.

    Example:
        >>> metrics_line({"loss": 0.5, "accuracy": 0.75, "iou/wall": 0.5})
        'accuracy=0.7500 loss=0.5000'
    """
    return " ".join(
        f"{name}={value:.4f}" for name, value in sorted(metrics.items()) if "/" not in name
    )
