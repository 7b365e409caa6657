"""Reusable token mixers, FFNs and helpers of keras_fourier (all channels-last)."""

from keras_fourier.layers.attention import SelfAttention
from keras_fourier.layers.ffn import GLU, Mlp
from keras_fourier.layers.fourier import AFNO2D, FourierMixing, GlobalFilter
from keras_fourier.layers.regularization import DropPath, LayerScale

__all__ = [
    "AFNO2D",
    "GLU",
    "DropPath",
    "FourierMixing",
    "GlobalFilter",
    "LayerScale",
    "Mlp",
    "SelfAttention",
]
