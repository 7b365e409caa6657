"""`keras-fourier flops`: a model's FLOPs in the papers' convention (`keras_fourier.flops`)."""

from __future__ import annotations

import argparse

from keras_fourier.cli.arguments import MODEL_HELP, model_options

NAME = "flops"
HELP = "count a model's FLOPs in the papers' convention (one multiply-add = one FLOP)"
DESCRIPTION = (
    "Print the FLOPs of one input as GFNet's and HorNet's tables count them: "
    "one multiply-add = one FLOP, plus N*C*ceil(log2 N) per 2D FFT. MODEL is a "
    "model name built with random weights, a .keras file or a run folder (a detector's: "
    "its raw model, shared head at every level, no NMS)."
)
SHOW_DEFAULTS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `keras-fourier flops` to `parser`.

    Args:
        parser: the subcommand's parser.
    """
    parser.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    parser.add_argument(
        "--image-size",
        type=int,
        default=None,
        help="names: input height and width (224; at most what KERAS_FOURIER_MAX_MEMORY allows)",
    )
    parser.add_argument("--classes", type=int, default=None, help="names: head size (1000)")
    parser.add_argument(
        "--sequence-length", type=int, default=None, help="FNet names: input length (512)"
    )
    parser.add_argument("--by-layer", action="store_true", help="print a per-layer table")


def run(args: argparse.Namespace) -> int:
    """Runs `keras-fourier flops`: prints the total (and the table with --by-layer)."""
    from keras_fourier.flop_count import flops
    from keras_fourier.models.resolve import resolve_model

    model = resolve_model(args.model, **model_options(args))
    table = flops(model, by_layer=True)
    total = sum(row[2] for row in table)
    if args.by_layer:
        width = max(len(row[0]) for row in table)
        for name, cls, count in table:
            if count:
                print(f"{name:<{width}}  {cls:<24} {count / 1e6:12.2f} M")
    print(f"{model.name}: {total / 1e9:.3f} GFLOPs ({total} multiply-adds per input)")
    return 0
