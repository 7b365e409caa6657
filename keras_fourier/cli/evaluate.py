"""The arguments of `keras-fourier evaluate` (its run: :mod:`keras_fourier.commands.evaluate`)."""

from __future__ import annotations

import argparse

from keras_fourier.cli.train import DATA_HELP
from keras_fourier.settings import TrainSettings

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
