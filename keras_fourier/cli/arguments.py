"""Argument types and the model arguments shared by the subcommands' parsers, keras-free."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

MODEL_HELP = "a model name (gfnet_ti, GFNetTi, gfnet_tiny, ...), a .keras file or a run folder"


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
    """Adds the model arguments that `commands.arguments.load_model` reads, but `--classes`.

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
