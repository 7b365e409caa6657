"""Reusable token mixers, FFNs, decode heads and helpers of keras_fourier (all channels-last)."""

from keras_fourier.layers.afbo import AFBO, SCFBO
from keras_fourier.layers.attention import SelfAttention
from keras_fourier.layers.decode_heads import (
    ConvModule,
    FCNHead,
    FPNHead,
    FPNNeck,
    MultiScaleNeck,
    SegFormerHead,
    UPerHead,
)
from keras_fourier.layers.ffn import GLU, Mlp
from keras_fourier.layers.fnet import FNetEmbeddings, FNetEncoderBlock, FNetMaskedLMHead
from keras_fourier.layers.fourier import AFNO2D, FourierMixing, GlobalFilter
from keras_fourier.layers.hornet import GlobalLocalFilter, GnConv
from keras_fourier.layers.position import PositionEmbedding, StrideCheck
from keras_fourier.layers.regularization import DropPath, LayerScale

__all__ = [
    "AFBO",
    "AFNO2D",
    "GLU",
    "SCFBO",
    "ConvModule",
    "DropPath",
    "FCNHead",
    "FNetEmbeddings",
    "FNetEncoderBlock",
    "FNetMaskedLMHead",
    "FPNHead",
    "FPNNeck",
    "FourierMixing",
    "GlobalFilter",
    "GlobalLocalFilter",
    "GnConv",
    "LayerScale",
    "Mlp",
    "MultiScaleNeck",
    "PositionEmbedding",
    "SegFormerHead",
    "SelfAttention",
    "StrideCheck",
    "UPerHead",
]
