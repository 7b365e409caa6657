"""The arguments of `keras-fourier predict` (its run: :mod:`keras_fourier.commands.predict`)."""

from __future__ import annotations

import argparse

from keras_fourier.cli.arguments import add_model_arguments

NAME = "predict"
HELP = "print the top classes of images or texts, with probabilities"
DESCRIPTION = (
    "Print the top classes of each IMAGE with their probabilities. MODEL is the run "
    "folder that train printed or a .keras file (a trained model knows its class names "
    "and is fed images as its run evaluated them), or a model name built with "
    "--weights (default 'imagenet') and --image-size: ImageNet-1k classes, images "
    "resized (bicubic) and centre-cropped as the official release was evaluated. With "
    "--text, the texts are classified by a text model trained on csv: data, tokenized as "
    "its run stored."
)
SHOW_DEFAULTS = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `keras-fourier predict` to `parser`.

    Args:
        parser: the subcommand's parser.

    Example:
        >>> add_arguments(subcommands.add_parser("predict"))
    """
    parser.add_argument("images", nargs="*", metavar="IMAGE", help="image files")
    parser.add_argument(
        "--text",
        action="append",
        default=None,
        metavar="TEXT",
        help="a text to classify (repeat for more) with a text model's run folder or .keras file",
    )
    add_model_arguments(
        parser,
        model_flag=True,
        weights_help="builders: 'imagenet' (default), an official .pth or a .weights.h5/.keras "
        "file; a run folder of train or a .keras file takes none",
    )
    parser.add_argument("--top", type=int, default=5, help="classes per image (default 5)")
    parser.add_argument(
        "--crop-pct",
        type=float,
        default=None,
        help="centre-crop fraction (default: the release's evaluation, 0.875 at 224, 1.0 at 384)",
    )
