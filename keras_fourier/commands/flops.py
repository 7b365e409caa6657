"""`keras-fourier flops`: a model's FLOPs in the papers' convention (`keras_fourier.flops`).

Its arguments are declared in :mod:`keras_fourier.cli.flops`.
"""

from __future__ import annotations

import argparse

from keras_fourier.cli.flops import NAME
from keras_fourier.commands.arguments import fail, load_model
from keras_fourier.flop_count import flops


def run(args: argparse.Namespace) -> int:
    """Runs `keras-fourier flops`: prints the total (and the table with --by-layer)."""
    try:
        model = load_model(args)
    except ValueError as error:
        return fail(NAME, error)
    table = flops(model, by_layer=True)
    total = sum(row[2] for row in table)
    if args.by_layer:
        width = max(len(row[0]) for row in table)
        for name, cls, count in table:
            if count:
                print(f"{name:<{width}}  {cls:<24} {count / 1e6:12.2f} M")
    print(f"{model.name}: {total / 1e9:.3f} GFLOPs ({total} multiply-adds per input)")
    return 0
