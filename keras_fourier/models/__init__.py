"""Model builders of keras_fourier, in the keras.applications style.

Every public builder name is a key of `catalog.BUILDERS` (the vision ones made
by `catalog.make_builder`, FNet's in `catalog` too); tests/test_models.py
checks that the two lists are the same.

The builders, and Keras with them, load on first use (PEP 562, as
``import keras_fourier`` does for all of them): the families and their names
(:mod:`~keras_fourier.models.names`) are keras-free data, which the command
line reads without loading TensorFlow.
"""

import importlib
from typing import Any

from keras_fourier.models.names import BUILDERS
from keras_fourier.models.names import FAMILIES as FAMILIES
from keras_fourier.models.names import VARIANTS as VARIANTS

# The module of each public name but the vision builders, which catalog.make_builder makes.
_MODULES = {
    "FNet": "catalog",
    "FNetBase": "catalog",
    "FNetLarge": "catalog",
    "FNetPretraining": "fnet",
    "FourCastNet": "fourcastnet",
    "build_model": "builder",
    "feature_extractor": "vision",
    "resolve_model": "resolve",
    "rollout": "fourcastnet",
}


def __getattr__(name: str) -> Any:
    """Loads a builder (and Keras) when it is first used."""
    if name in _MODULES:
        value = getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
    elif name in BUILDERS:
        value = importlib.import_module(f"{__name__}.catalog").make_builder(name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, the builders not loaded yet included (completion in notebooks)."""
    return sorted({*globals(), *__all__})


# Every public builder of the catalog, and the names of _MODULES: a new family's builders are
# exported by its row in models.names.FAMILIES alone.
__all__ = sorted(["BUILDERS", "FAMILIES", "VARIANTS", *BUILDERS, *_MODULES])
