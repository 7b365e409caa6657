"""The `keras-fourier` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _demo(args: argparse.Namespace) -> int:
    import keras
    import numpy as np

    from keras_fourier.layers import GlobalFilter, Mlp

    inputs = keras.Input((args.image_size, args.image_size, 3))
    x = keras.layers.Conv2D(32, 4, strides=4, name="patch_embed")(inputs)
    x = x + Mlp(name="mlp")(GlobalFilter(name="global_filter")(x))
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))
    batch = np.random.default_rng(0).uniform(0, 255, (2, args.image_size, args.image_size, 3))
    out = model.predict(batch.astype("float32"), verbose=0)
    print(f"params={model.count_params()} output_shape={tuple(out.shape)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `keras-fourier`."""
    parser = argparse.ArgumentParser(prog="keras-fourier", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="build a small global-filter model and run it")
    demo.add_argument("--image-size", type=int, default=32)
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `keras-fourier` console script."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
