"""`keras-fourier predict IMAGE... --model M --weights W`: the top ImageNet classes of images.

Images are read as the release was evaluated (see
:mod:`keras_fourier.imagenet.predict`).
"""

from __future__ import annotations

import argparse
import os

from keras_fourier.commands.arguments import add_model_arguments, fail, load_model
from keras_fourier.imagenet import NUM_CLASSES
from keras_fourier.imagenet.predict import predict
from keras_fourier.models.catalog import is_model_name, variant
from keras_fourier.models.weights import imagenet_checkpoint

NAME = "predict"
HELP = "print the top ImageNet classes of images, with probabilities"
DESCRIPTION = (
    "Print the top ImageNet-1k classes of each IMAGE with their probabilities. Images "
    "are resized (bicubic) and centre-cropped as the official release was evaluated. "
    "MODEL is a model name built with --weights (default 'imagenet') and --image-size, "
    "or a 1000-class .keras file or run folder."
)
SHOW_DEFAULTS = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `keras-fourier predict` to `parser`.

    Args:
        parser: the subcommand's parser.

    Example:
        >>> add_arguments(subcommands.add_parser("predict"))
    """
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="image files")
    add_model_arguments(
        parser,
        model_flag=True,
        weights_help="builders: 'imagenet' (default), an official .pth or a .weights.h5/.keras "
        "file",
    )
    parser.add_argument("--top", type=int, default=5, help="classes per image (default 5)")
    parser.add_argument(
        "--crop-pct",
        type=float,
        default=None,
        help="centre-crop fraction (default: the release's evaluation, 0.875 at 224, 1.0 at 384)",
    )


def run(args: argparse.Namespace) -> int:
    """Runs `keras-fourier predict`: prints the top classes of each image.

    Args:
        args: arguments parsed by a parser set up with :func:`add_arguments`.

    Returns:
        0 on success, 2 (after printing the message) on a bad argument or an
        unreadable image.

    Example:
        >>> run(parser.parse_args(["cat.jpg", "--model", "gfnet_ti"]))
        0
    """
    missing = [path for path in args.images if not os.path.isfile(path)]
    try:
        if missing:
            raise ValueError(f"No such image file(s): {', '.join(missing)}")
        named = is_model_name(args.model)
        if named and args.weights is None:
            args.weights = "imagenet"
        args.classes = NUM_CLASSES if named else None
        model = load_model(args)
        crop_pct = args.crop_pct
        if crop_pct is None and args.weights == "imagenet":
            crop_pct = imagenet_checkpoint(variant(model.name), model).crop_pct
        results = predict(model, args.images, args.top, crop_pct)
    except ValueError as error:
        return fail(NAME, error)
    for path, classes in zip(args.images, results, strict=True):
        print(path)
        for rank, (wnid, name, probability) in enumerate(classes, start=1):
            print(f"  {rank}. {probability:7.2%}  {name} ({wnid})")
    return 0
