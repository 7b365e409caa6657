"""keras_fourier: Fourier-domain and gated token mixers for Keras 3 on TensorFlow.

``import keras_fourier`` is the same in every process, a program, a notebook
or the `keras-fourier` command: it loads neither Keras nor TensorFlow. Each
name below loads its module, and Keras with it, on first use (PEP 562); the
command answers ``--help`` from keras-free tables this way. Once Keras is
loaded, before or after this import, the package's layers and models are
registered with it, so that ``keras.saving.load_model`` finds them; under
the TensorFlow backend, TensorFlow loads with its C++ start-up lines hidden
(see :mod:`keras_fourier._startup`).
"""

import importlib
from typing import Any

# First, before anything loads TensorFlow: hides its C++ start-up lines, names a missing backend.
from keras_fourier import _startup, models

__version__ = "0.1.0"

# The module of each name of the API that is not a submodule.
_API = {
    # The public builders (every row of models.names.BUILDERS) and the rest of models' API.
    **dict.fromkeys(
        (name for name in models.__all__ if name not in ("BUILDERS", "FAMILIES", "VARIANTS")),
        "keras_fourier.models",
    ),
    "flops": "keras_fourier.flop_count",
    "decode_predictions": "keras_fourier.imagenet",
    "preprocess_input": "keras_fourier.imagenet",
    "plot_filters": "keras_fourier.plots",
    "plot_history": "keras_fourier.plots",
}
_SUBMODULES = ("data", "detection", "export", "layers", "models", "segmentation", "training")
# The modules whose classes a saved model names: every layer, and each family's model classes
# (the catalog of builders imports every family).
_SERIALIZABLE = ("keras_fourier.layers", "keras_fourier.models.catalog", "keras_fourier.detection")


def __getattr__(name: str) -> Any:
    """Loads a name of the API, or a submodule, on first use."""
    if name in _SUBMODULES:
        module = f"{__name__}.{name}"
    elif name in _API:
        module = _API[name]
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    message = _startup.missing_backend()
    if message is not None:
        raise ImportError(message)
    _startup.start_tensorflow()
    value = importlib.import_module(module)
    if name in _API:
        value = getattr(value, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The package's names, those not loaded yet included (completion in notebooks)."""
    return sorted({*globals(), *__all__})


def _register_with_keras() -> None:
    for module in _SERIALIZABLE:
        importlib.import_module(module)


_startup.when_keras_loads(_register_with_keras)

__all__ = sorted([*_API, *_SUBMODULES, "__version__"])
