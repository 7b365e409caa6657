"""`keras-fourier evaluate`: the loss and metrics of a model on a split, as its task scores them."""

from __future__ import annotations

import argparse

from keras_fourier.cli.arguments import DATA_HELP, CommandError, metrics_line
from keras_fourier.tasks import TASKS
from keras_fourier.training.config import TrainConfig
from keras_fourier.validation import check_positive_int

NAME = "evaluate"
HELP = "evaluate a saved model: accuracy, top-5 accuracy (more than 5 classes) and loss"
DESCRIPTION = (
    "Print the accuracy, top-5 accuracy (models with more than 5 classes) and "
    "cross-entropy of a .keras classifier, of the model of a run folder of train, or of a "
    "model name (random weights), on a split of a data source; images are resized to its "
    "input size, texts tokenized with the tokenizer and labelled with the class names its "
    "run stored in the .keras file. Other tasks print their own metrics (the task the "
    "model's run stored, else --task, else the one the model and data tell)."
)
SHOW_DEFAULTS = True
_DEFAULTS = TrainConfig()


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
        default=None,
        metavar="SOURCE",
        help=DATA_HELP + " (default: digits; navier_stokes for a forecast model)",
    )
    add(
        "--task",
        default=None,
        choices=tuple(TASKS),
        help="the task the model is scored for (default: the one its run stored, else the "
        "classification task of the model's kind that takes --data, else the only task that "
        "takes --data)",
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
    from keras_fourier.model_record import TASK_KEY, TOKENIZER_KEY, read_model_record
    from keras_fourier.models import resolve_model
    from keras_fourier.models.catalog import is_model_name
    from keras_fourier.run_folder import resolve_model_file
    from keras_fourier.tasks import get_task, select_task
    from keras_fourier.training import NonFiniteLossError, evaluate

    check_positive_int("--batch-size", args.batch_size)
    check_positive_int("--eval-examples", args.eval_examples)
    named = is_model_name(args.model)
    # A run's .keras file carries its task, and what labels its outputs (class names, a text
    # model's tokenizer).
    record = {} if named else read_model_record(resolve_model_file(args.model))
    if args.data is None:  # the stored (or named) task's own data, else the digits
        named_task = args.task or record.get(TASK_KEY)
        args.data = (get_task(named_task).default_data if named_task else None) or "digits"
    task = select_task(
        args.data,
        model=args.model if named else None,
        task=args.task or record.get(TASK_KEY),
        argument="--task",
    )
    if args.tokenizer is not None:
        record[TOKENIZER_KEY] = args.tokenizer
    # A model name is built with the data's classes (random weights).
    classes = task.num_classes(args.data, args.data_dir) if named else None
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
            task=task,
            labels=record,
        )
    except NonFiniteLossError as error:
        raise CommandError(str(error)) from error
    count = task.split_size(args.data, args.split, args.data_dir)
    size = "" if count is None else f", {count:,} examples"
    scored = args.model if named else resolve_model_file(args.model)
    print(f"scored {scored} on data {args.data!r}, split {args.split!r}{size}:")
    print("\n".join([metrics_line(metrics), *task.details(metrics)]))
    return 0
