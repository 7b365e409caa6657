"""`keras-fourier evaluate`: accuracy, top-5 accuracy and loss of a model on a data split.

Its arguments are declared in :mod:`keras_fourier.cli.evaluate`.
"""

from __future__ import annotations

import argparse

from keras_fourier.cli.evaluate import NAME
from keras_fourier.commands.arguments import fail, metrics_line
from keras_fourier.data import count_examples
from keras_fourier.data.text import load_tokenizer
from keras_fourier.data.text_files import is_text_source, read_text_split
from keras_fourier.models import resolve_model
from keras_fourier.models.catalog import is_model_name
from keras_fourier.run_folder import resolve_model_file
from keras_fourier.training import NonFiniteLossError, evaluate, task_for_data
from keras_fourier.training.callbacks import read_model_record
from keras_fourier.training.tasks import CLASS_NAMES_KEY, stored_tokenizer
from keras_fourier.validation import check_positive_int


def run(args: argparse.Namespace) -> int:
    """Runs `keras-fourier evaluate`; returns the exit status."""
    try:
        check_positive_int("--batch-size", args.batch_size)
        check_positive_int("--eval-examples", args.eval_examples)
        # A model name is built with the data's classes (random weights).
        named = is_model_name(args.model)
        classes = task_for_data(args.data).num_classes(args.data, args.data_dir) if named else None
        # A run's .keras file carries its text model's tokenizer and class names.
        record = {} if named else read_model_record(resolve_model_file(args.model))
        tokenizer = (
            load_tokenizer(args.tokenizer)
            if args.tokenizer is not None
            else stored_tokenizer(record)
        )
        model = resolve_model(
            args.model,
            image_size=args.image_size,
            classes=classes,
            names={"image_size": "--image-size"},
        )
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
    except (FileNotFoundError, ValueError) as error:
        return fail(NAME, error)
    except NonFiniteLossError as error:
        return fail(NAME, error, 1)
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
