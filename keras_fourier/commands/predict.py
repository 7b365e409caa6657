"""`keras-fourier predict IMAGE... --model M`: the top classes of images, with probabilities.

A trained model (run folder or `.keras` file) is labelled with the class
names its run stored; a model name is an ImageNet classifier (see
:mod:`keras_fourier.imagenet.predict`). Its arguments are declared in
:mod:`keras_fourier.cli.predict`.
"""

from __future__ import annotations

import argparse
import json
import os
import zipfile

from keras_fourier.cli.predict import NAME
from keras_fourier.commands.arguments import fail, load_model
from keras_fourier.imagenet import NUM_CLASSES
from keras_fourier.imagenet.predict import predict
from keras_fourier.models.catalog import is_model_name, variant
from keras_fourier.models.weights import imagenet_checkpoint
from keras_fourier.run_folder import resolve_model_file
from keras_fourier.training.callbacks import CHECKPOINT_RECORD
from keras_fourier.training.tasks import CLASS_NAMES_KEY, CROP_PCT_KEY


def run(args: argparse.Namespace) -> int:
    """Runs `keras-fourier predict`: prints the top classes of each image.

    MODEL is a run folder of `keras-fourier train` or a `.keras` file (its
    stored class names and crop, if any), or a model name (ImageNet).

    Args:
        args: arguments parsed by a parser set up with
            :func:`keras_fourier.cli.predict.add_arguments`.

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
        labels = {}
        named = is_model_name(args.model) and not os.path.exists(args.model)
        if named:
            args.weights = "imagenet" if args.weights is None else args.weights
            args.classes = NUM_CLASSES
        else:
            args.model, labels = _trained_model(args.model)
        model = load_model(args)
        crop_pct = args.crop_pct
        if crop_pct is None:
            crop_pct = labels.get(CROP_PCT_KEY)
        if crop_pct is None and args.weights == "imagenet":
            crop_pct = imagenet_checkpoint(variant(model.name), model).crop_pct
        class_names = labels.get(CLASS_NAMES_KEY)
        results = predict(model, args.images, args.top, crop_pct, class_names)
    except ValueError as error:
        return fail(NAME, error)
    imagenet = class_names is None and model.output_shape[-1] == NUM_CLASSES
    for path, classes in zip(args.images, results, strict=True):
        print(path)
        for rank, (identifier, name, probability) in enumerate(classes, start=1):
            suffix = f" ({identifier})" if imagenet else ""
            print(f"  {rank}. {probability:7.2%}  {name}{suffix}")
    return 0


def _trained_model(path: str) -> tuple[str, dict]:
    """The `.keras` file of a run folder (or the file itself), and the record a run stored in it.

    A `.keras` file saved by Keras itself has no record: {} then.
    """
    try:
        model_file = resolve_model_file(path)
    except FileNotFoundError as error:
        raise ValueError(str(error)) from error
    try:
        with zipfile.ZipFile(model_file) as archive:
            if CHECKPOINT_RECORD not in archive.namelist():
                return model_file, {}
            record = json.loads(archive.read(CHECKPOINT_RECORD))
    except (OSError, ValueError, zipfile.BadZipFile):
        return model_file, {}  # load_model names what is wrong with the file
    return model_file, record if isinstance(record, dict) else {}
