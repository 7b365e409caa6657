"""`keras-fourier predict IMAGE... --model M`: what a model predicts for images, texts or fields.

The model's task shows (or writes) its predictions (`Task.predict`): a
trained model (run folder or `.keras` file) is predicted by the task its run
stored, with the class names (and crop, tokenizer) the run stored; a model
name is an ImageNet classifier (see :mod:`keras_fourier.imagenet.predict`).
``--text "..."`` classifies texts with a text model trained on "csv:" data,
tokenized by the tokenizer its run stored. A forecast model takes ``.npy``
states in place of images and writes ``--steps`` forecast steps into ``--out``.
Files in ``--out`` are written atomically; the temporary files that a killed
predict left there are removed by the next.
"""

from __future__ import annotations

import argparse
import os

from keras_fourier.cli.arguments import add_model_arguments, model_options
from keras_fourier.model_record import read_model_record
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
        "--out",
        default=None,
        help="folder where a task whose predictions are files (label maps, overlays, "
        "forecasts) writes them",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=1,
        help="forecast models: autoregressive steps written per state file (default 1)",
    )
    parser.add_argument(
        "--crop-pct",
        type=float,
        default=None,
        help="centre-crop fraction (default: the release's evaluation, 0.875 at 224, 1.0 at 384)",
    )


def run(args: argparse.Namespace) -> int:
    """Runs `keras-fourier predict`: prints (or writes) the predictions of the model's task.

    MODEL is a run folder of `keras-fourier train` or a `.keras` file (its
    stored task, class names and crop, if any), or a model name (ImageNet).

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
    from keras_fourier.fileio import remove_stale_temporaries
    from keras_fourier.imagenet import NUM_CLASSES
    from keras_fourier.model_record import TASK_KEY
    from keras_fourier.models.catalog import is_model_name, variant
    from keras_fourier.models.resolve import resolve_model
    from keras_fourier.models.vision_weights import imagenet_checkpoint
    from keras_fourier.tasks import PredictRequest, get_task

    named = is_model_name(args.model) and not os.path.exists(args.model)
    if args.text is not None:
        if args.images:
            raise ValueError("Give either IMAGE files or --text, not both.")
        if named:
            raise ValueError(
                f"--text needs a text model trained by `keras-fourier train` on csv: data (its "
                f"run folder or .keras file); received the model name {args.model!r}."
            )
        inputs = args.text
    else:
        if not args.images:
            raise ValueError("Give IMAGE files, or --text TEXT for a text model.")
        missing = [path for path in args.images if not os.path.isfile(path)]
        if missing:
            raise ValueError(f"No such image file(s): {', '.join(missing)}")
        inputs = args.images
    record = {}
    if named:  # an ImageNet classifier
        args.weights = "imagenet" if args.weights is None else args.weights
        args.classes = NUM_CLASSES
    else:
        args.model = resolve_model_file(args.model)
        record = read_model_record(args.model)
    # A file without a stored task (saved by Keras, or by an older run) is a classifier.
    stored = record.get(TASK_KEY)
    task = get_task(stored or ("text_classification" if args.text else "image_classification"))
    if (task.modality == "text") != (args.text is not None):
        raise ValueError(
            f"{args.model!r} is a model of task {task.name!r}: give it "
            + ("--text TEXT." if task.modality == "text" else "IMAGE files, not --text.")
        )
    model = resolve_model(args.model, **model_options(args))
    crop_pct = args.crop_pct
    if crop_pct is None and named and args.weights == "imagenet":
        crop_pct = imagenet_checkpoint(variant(model.name), model).crop_pct
    if args.out is not None:  # what a killed predict left half-written there
        remove_stale_temporaries(args.out)
    request = PredictRequest(
        inputs, record, top=args.top, crop_pct=crop_pct, out=args.out, steps=args.steps
    )
    print("\n".join(task.predict(model, request)))
    return 0
