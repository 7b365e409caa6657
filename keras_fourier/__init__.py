"""keras_fourier: Fourier-domain and gated token mixers for Keras 3 on TensorFlow."""

import importlib

# First, before TensorFlow loads: hides TensorFlow's C++ start-up lines, names a missing backend.
from keras_fourier import _startup

__version__ = "0.1.0"

if not _startup.is_command_line():
    # The whole API at once, as a program or a notebook expects it; importing the layers
    # registers them, so that `keras.saving.load_model` finds them after `import
    # keras_fourier`. The keras-fourier command skips this: it parses its arguments (and
    # answers --help) without loading TensorFlow, then imports what its subcommand runs.
    from keras_fourier import layers, models
    from keras_fourier.flop_count import flops
    from keras_fourier.imagenet import decode_predictions, preprocess_input
    from keras_fourier.models import (
        AFNONetS4,
        FNet,
        FNetBase,
        FNetLarge,
        FNetPretraining,
        FourCastNet,
        GFNetB,
        GFNetHB,
        GFNetHS,
        GFNetHTi,
        GFNetS,
        GFNetTi,
        GFNetXS,
        HorNetB7x7,
        HorNetBGF,
        HorNetL7x7,
        HorNetLGF,
        HorNetS7x7,
        HorNetSGF,
        HorNetT7x7,
        HorNetTGF,
        build_model,
        feature_extractor,
    )
    from keras_fourier.plots import plot_filters, plot_history

_SUBMODULES = ("data", "export", "training")


def __getattr__(name: str):
    """Imports `data`, `export` and `training` on first use (they pull in more of TF)."""
    if name in _SUBMODULES:
        return importlib.import_module(f"keras_fourier.{name}")
    raise AttributeError(f"module 'keras_fourier' has no attribute {name!r}")


__all__ = [
    "AFNONetS4",
    "FNet",
    "FNetBase",
    "FNetLarge",
    "FNetPretraining",
    "FourCastNet",
    "GFNetB",
    "GFNetHB",
    "GFNetHS",
    "GFNetHTi",
    "GFNetS",
    "GFNetTi",
    "GFNetXS",
    "HorNetB7x7",
    "HorNetBGF",
    "HorNetL7x7",
    "HorNetLGF",
    "HorNetS7x7",
    "HorNetSGF",
    "HorNetT7x7",
    "HorNetTGF",
    "__version__",
    "build_model",
    "data",
    "decode_predictions",
    "export",
    "feature_extractor",
    "flops",
    "layers",
    "models",
    "plot_filters",
    "plot_history",
    "preprocess_input",
    "training",
]
