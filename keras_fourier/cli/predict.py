"""`keras-fourier predict IMAGE... --model M`: the top classes of images or texts, with scores.

A trained model (run folder or `.keras` file) is labelled with the class
names its run stored; a model name is an ImageNet classifier (see
:mod:`keras_fourier.imagenet.predict`). ``--text "..."`` classifies texts
with a text model trained on "csv:" data, tokenized by the tokenizer its run
stored.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from keras_fourier.cli.arguments import add_model_arguments, model_options
from keras_fourier.model_record import CLASS_NAMES_KEY, CROP_PCT_KEY, read_model_record
from keras_fourier.run_folder import resolve_model_file

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


def run(args: argparse.Namespace) -> int:
    """Runs `keras-fourier predict`: prints the top classes of each image or text.

    MODEL is a run folder of `keras-fourier train` or a `.keras` file (its
    stored class names and crop, if any), or a model name (ImageNet).

    Args:
        args: arguments parsed by a parser set up with :func:`add_arguments`.

    Returns:
        0 on success.

    Raises:
        ValueError: a bad argument or an unreadable image (exit status 2).

    Example:
        >>> run(parser.parse_args(["cat.jpg", "--model", "gfnet_ti"]))  # doctest: +SKIP
        0
    """
    import keras

    from keras_fourier.data.text import tokenize_and_pack
    from keras_fourier.imagenet import NUM_CLASSES
    from keras_fourier.imagenet.predict import predict
    from keras_fourier.models.catalog import is_model_name, variant
    from keras_fourier.models.resolve import resolve_model
    from keras_fourier.models.vision_weights import imagenet_checkpoint
    from keras_fourier.training.tasks import stored_tokenizer

    named = is_model_name(args.model) and not os.path.exists(args.model)
    if args.text is not None:
        if args.images:
            raise ValueError("Give either IMAGE files or --text, not both.")
        if named:
            raise ValueError(
                f"--text needs a text model trained by `keras-fourier train` on csv: data (its "
                f"run folder or .keras file); received the model name {args.model!r}."
            )
        args.model = resolve_model_file(args.model)
        record = read_model_record(args.model)
        tokenizer = stored_tokenizer(record)
        if tokenizer is None:
            raise ValueError(
                f"{args.model!r} stores no tokenizer: --text needs a text model trained by "
                "`keras-fourier train` on csv: data."
            )
        model = resolve_model(args.model, **model_options(args))
        class_names = record[CLASS_NAMES_KEY]
        length = _text_length(model, class_names)
        features = tokenize_and_pack(args.text, tokenizer=tokenizer, sequence_length=length)
        batch = {name: features[name] for name in model.input}
        probabilities = keras.ops.convert_to_numpy(model(batch, training=False))
        for text, row in zip(args.text, probabilities, strict=True):
            print(repr(text))
            for rank, (name, probability) in enumerate(_top(row, args.top, class_names), 1):
                print(f"  {rank}. {probability:7.2%}  {name}")
        return 0
    missing = [path for path in args.images if not os.path.isfile(path)]
    if not args.images:
        raise ValueError("Give IMAGE files, or --text TEXT for a text model.")
    if missing:
        raise ValueError(f"No such image file(s): {', '.join(missing)}")
    labels = {}
    if named:
        args.weights = "imagenet" if args.weights is None else args.weights
        args.classes = NUM_CLASSES
    else:
        args.model = resolve_model_file(args.model)
        labels = read_model_record(args.model)
    model = resolve_model(args.model, **model_options(args))
    crop_pct = args.crop_pct
    if crop_pct is None:
        crop_pct = labels.get(CROP_PCT_KEY)
    if crop_pct is None and args.weights == "imagenet":
        crop_pct = imagenet_checkpoint(variant(model.name), model).crop_pct
    class_names = labels.get(CLASS_NAMES_KEY)
    results = predict(model, args.images, args.top, crop_pct, class_names)
    imagenet = class_names is None and model.output_shape[-1] == NUM_CLASSES
    for path, classes in zip(args.images, results, strict=True):
        print(path)
        for rank, (identifier, name, probability) in enumerate(classes, start=1):
            suffix = f" ({identifier})" if imagenet else ""
            print(f"  {rank}. {probability:7.2%}  {name}{suffix}")
    return 0


def _text_length(model, class_names: Sequence[str]) -> int:
    """The token ids' length of a text model whose outputs are `class_names`."""
    inputs = model.input if isinstance(model.input, dict) else {}
    if "token_ids" not in inputs:
        raise ValueError(f"Model {model.name!r} does not take token ids: not a text model.")
    if len(class_names) != model.output_shape[-1]:
        raise ValueError(
            f"The stored class names ({len(class_names)}) do not match the model's "
            f"{model.output_shape[-1]} outputs."
        )
    return inputs["token_ids"].shape[1]


def _top(probabilities: Any, top: int, class_names: Sequence[str]) -> list[tuple[str, float]]:
    """The `top` (class name, probability) pairs of one row of probabilities, best first."""
    order = sorted(range(len(class_names)), key=lambda index: -probabilities[index])
    return [(class_names[index], float(probabilities[index])) for index in order[:top]]
