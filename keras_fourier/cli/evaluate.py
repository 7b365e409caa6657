"""`keras-fourier evaluate`: accuracy, top-5 accuracy and loss of a model on a data split."""

from __future__ import annotations

import argparse

from keras_fourier.cli.arguments import DATA_HELP, CommandError, metrics_line
from keras_fourier.model_record import CLASS_NAMES_KEY, read_model_record
from keras_fourier.run_folder import resolve_model_file
from keras_fourier.settings import TrainSettings
from keras_fourier.validation import check_positive_int

NAME = "evaluate"
HELP = "evaluate a saved model: accuracy, top-5 accuracy (more than 5 classes) and loss"
DESCRIPTION = (
    "Print the accuracy, top-5 accuracy (models with more than 5 classes) and "
    "cross-entropy of a .keras classifier, of the model of a run folder of train, or of a "
    "model name (random weights), on a split of a data source; images are resized to its "
    "input size, texts tokenized with the tokenizer and labelled with the class names its "
    "run stored in the .keras file."
)
SHOW_DEFAULTS = True
_DEFAULTS = TrainSettings()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `keras-fourier evaluate` to `parser`."""
    add = parser.add_argument
    add(
        "--model",
        required=True,
        metavar="MODEL",
        help="a .keras file, the run folder that train printed (its model.keras), or a model "
        "name (random weights)",
    )
    add("--image-size", type=int, default=None, help="input size of a model name (224)")
    add(
        "--data",
        default="digits",
        metavar="SOURCE",
        help=DATA_HELP,
    )
    add("--split", default="test", help="image or csv: split; 'validation' or 'test' for listops")
    add(
        "--tokenizer",
        default=None,
        help="text of csv: data: bytes, official or a SentencePiece .model path (default: the "
        "tokenizer the model's run stored, else bytes)",
    )
    add("--batch-size", type=int, default=256, help="global batch size")
    add("--data-dir", default=None, help="TFDS data directory")
    add(
        "--eval-examples",
        type=int,
        default=_DEFAULTS.eval_examples,
        help="ListOps held-out examples (as in training)",
    )


def run(args: argparse.Namespace) -> int:
    """Runs `keras-fourier evaluate`; returns the exit status."""
    from keras_fourier.data import count_examples
    from keras_fourier.data.text import load_tokenizer
    from keras_fourier.data.text_files import is_text_source, read_text_split
    from keras_fourier.models import resolve_model
    from keras_fourier.models.catalog import is_model_name
    from keras_fourier.training import NonFiniteLossError, evaluate, task_for_data
    from keras_fourier.training.tasks import stored_tokenizer

    check_positive_int("--batch-size", args.batch_size)
    check_positive_int("--eval-examples", args.eval_examples)
    # A model name is built with the data's classes (random weights).
    named = is_model_name(args.model)
    classes = task_for_data(args.data).num_classes(args.data, args.data_dir) if named else None
    # A run's .keras file carries its text model's tokenizer and class names.
    record = {} if named else read_model_record(resolve_model_file(args.model))
    tokenizer = (
        load_tokenizer(args.tokenizer) if args.tokenizer is not None else stored_tokenizer(record)
    )
    model = resolve_model(
        args.model,
        image_size=args.image_size,
        classes=classes,
        names={"image_size": "--image-size"},
    )
    try:
        metrics = evaluate(
            model,
            args.data,
            split=args.split,
            batch_size=args.batch_size,
            data_dir=args.data_dir,
            eval_examples=args.eval_examples,
            tokenizer=tokenizer,
            class_names=record.get(CLASS_NAMES_KEY),
        )
    except NonFiniteLossError as error:
        raise CommandError(str(error)) from error
    if is_text_source(args.data):
        count = len(read_text_split(args.data, args.split).labels)
    elif args.data != "listops":
        count = count_examples(args.data, args.split, args.data_dir)
    else:
        count = None
    size = "" if count is None else f", {count:,} examples"
    scored = args.model if named else resolve_model_file(args.model)
    print(f"scored {scored} on data {args.data!r}, split {args.split!r}{size}:")
    print(metrics_line(metrics))
    return 0
