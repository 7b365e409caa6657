"""Model builders of keras_fourier, in the keras.applications style.

Every public builder name is a key of `catalog.BUILDERS` (the vision ones made
from it here, FNet's in `models.fnet`); tests/test_models.py checks that the
two lists are the same.
"""

from keras_fourier.models.builder import build_model
from keras_fourier.models.catalog import BUILDERS, FAMILIES, VARIANTS, make_builder
from keras_fourier.models.fnet import FNet, FNetBase, FNetLarge, FNetPretraining
from keras_fourier.models.resolve import resolve_model
from keras_fourier.models.vision import feature_extractor

GFNetTi = make_builder("GFNetTi")
GFNetXS = make_builder("GFNetXS")
GFNetS = make_builder("GFNetS")
GFNetB = make_builder("GFNetB")
GFNetHTi = make_builder("GFNetHTi")
GFNetHS = make_builder("GFNetHS")
GFNetHB = make_builder("GFNetHB")
HorNetT7x7 = make_builder("HorNetT7x7")
HorNetTGF = make_builder("HorNetTGF")
HorNetS7x7 = make_builder("HorNetS7x7")
HorNetSGF = make_builder("HorNetSGF")
HorNetB7x7 = make_builder("HorNetB7x7")
HorNetBGF = make_builder("HorNetBGF")
HorNetL7x7 = make_builder("HorNetL7x7")
HorNetLGF = make_builder("HorNetLGF")
AFNONetS4 = make_builder("AFNONetS4")

__all__ = [
    "BUILDERS",
    "FAMILIES",
    "VARIANTS",
    "AFNONetS4",
    "FNet",
    "FNetBase",
    "FNetLarge",
    "FNetPretraining",
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
    "build_model",
    "feature_extractor",
    "resolve_model",
]
