"""The arguments of `keras-fourier flops` (its run: :mod:`keras_fourier.commands.flops`)."""

from __future__ import annotations

import argparse

from keras_fourier.cli.arguments import MODEL_HELP

NAME = "flops"
HELP = "count a model's FLOPs in the papers' convention (one multiply-add = one FLOP)"
DESCRIPTION = (
    "Print the FLOPs of one input as GFNet's and HorNet's tables count them: "
    "one multiply-add = one FLOP, plus N*C*ceil(log2 N) per 2D FFT. MODEL is a "
    "model name built with random weights, a .keras file or a run folder."
)
SHOW_DEFAULTS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `keras-fourier flops` to `parser`.

    Args:
        parser: the subcommand's parser.
    """
    parser.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    parser.add_argument(
        "--image-size", type=int, default=None, help="names: input height and width (224)"
    )
    parser.add_argument("--classes", type=int, default=None, help="names: head size (1000)")
    parser.add_argument(
        "--sequence-length", type=int, default=None, help="FNet names: input length (512)"
    )
    parser.add_argument("--by-layer", action="store_true", help="print a per-layer table")
