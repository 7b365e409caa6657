"""`keras-fourier predict IMAGE... --model M`: the top classes of images or texts, with scores.

A trained model (run folder or `.keras` file) is labelled with the class
names its run stored; a model name is an ImageNet classifier (see
:mod:`keras_fourier.imagenet.predict`). ``--text "..."`` classifies texts
with a text model trained on "csv:" data, tokenized by the tokenizer its run
stored. Its arguments are declared in :mod:`keras_fourier.cli.predict`.
"""

from __future__ import annotations

import argparse
import os

import keras
import numpy as np

from keras_fourier.cli.predict import NAME
from keras_fourier.commands.arguments import fail, load_model
from keras_fourier.data.text import tokenize_and_pack
from keras_fourier.imagenet import NUM_CLASSES
from keras_fourier.imagenet.predict import predict
from keras_fourier.models.catalog import is_model_name, variant
from keras_fourier.models.vision_weights import imagenet_checkpoint
from keras_fourier.run_folder import resolve_model_file
from keras_fourier.training.callbacks import read_model_record
from keras_fourier.training.tasks import CLASS_NAMES_KEY, CROP_PCT_KEY, stored_tokenizer


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
    if args.text is not None:
        return _run_texts(args)
    missing = [path for path in args.images if not os.path.isfile(path)]
    try:
        if not args.images:
            raise ValueError("Give IMAGE files, or --text TEXT for a text model.")
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


def _run_texts(args: argparse.Namespace) -> int:
    """`predict --text`: the top classes of each text, by a text model's run."""
    try:
        if args.images:
            raise ValueError("Give either IMAGE files or --text, not both.")
        if is_model_name(args.model) and not os.path.exists(args.model):
            raise ValueError(
                f"--text needs a text model trained by `keras-fourier train` on csv: data (its "
                f"run folder or .keras file); received the model name {args.model!r}."
            )
        model_file, record = _trained_model(args.model)
        tokenizer = stored_tokenizer(record)
        if tokenizer is None:
            raise ValueError(
                f"{model_file!r} stores no tokenizer: --text needs a text model trained by "
                "`keras-fourier train` on csv: data."
            )
        args.model = model_file
        model = load_model(args)
        results = _predict_texts(model, args.text, tokenizer, args.top, record[CLASS_NAMES_KEY])
    except ValueError as error:
        return fail(NAME, error)
    for text, classes in zip(args.text, results, strict=True):
        print(repr(text))
        for rank, (name, probability) in enumerate(classes, start=1):
            print(f"  {rank}. {probability:7.2%}  {name}")
    return 0


def _predict_texts(
    model: keras.Model, texts: list[str], tokenizer, top: int, class_names: list[str]
) -> list[list[tuple[str, float]]]:
    """The `top` (class name, probability) pairs of each text, best first."""
    inputs = model.input if isinstance(model.input, dict) else {}
    if "token_ids" not in inputs:
        raise ValueError(f"Model {model.name!r} does not take token ids: not a text model.")
    if len(class_names) != model.output_shape[-1]:
        raise ValueError(
            f"The stored class names ({len(class_names)}) do not match the model's "
            f"{model.output_shape[-1]} outputs."
        )
    features = tokenize_and_pack(
        texts, tokenizer=tokenizer, sequence_length=inputs["token_ids"].shape[1]
    )
    batch = {name: features[name] for name in inputs}
    probabilities = keras.ops.convert_to_numpy(model(batch, training=False))
    order = np.argsort(-probabilities, axis=-1)[:, :top]
    return [
        [(class_names[index], float(row[index])) for index in indices]
        for row, indices in zip(probabilities, order, strict=True)
    ]


def _trained_model(path: str) -> tuple[str, dict]:
    """The `.keras` file of a run folder (or the file itself), and the record a run stored in it.

    A `.keras` file saved by Keras itself has no record: {} then.
    """
    try:
        model_file = resolve_model_file(path)
    except FileNotFoundError as error:
        raise ValueError(str(error)) from error
    return model_file, read_model_record(model_file)
