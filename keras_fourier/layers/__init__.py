"""Reusable token mixers, FFNs, decode heads and helpers of keras_fourier (all channels-last)."""

from keras_fourier.layers.afbo import AFBO, SCFBO
from keras_fourier.layers.attention import SelfAttention
from keras_fourier.layers.composite import MaskComposite
from keras_fourier.layers.decode_heads import (
    ConvModule,
    FCNHead,
    FPNHead,
    FPNNeck,
    GnConvModule,
    MultiScaleNeck,
    SegFormerHead,
    UPerHead,
)
from keras_fourier.layers.detection import AnchorBoxes, DetectionDecoder, RetinaHead
from keras_fourier.layers.ffn import GLU, Mlp
from keras_fourier.layers.fnet import FNetEmbeddings, FNetEncoderBlock, FNetMaskedLMHead
from keras_fourier.layers.fno import FNO1D, FNO2D
from keras_fourier.layers.fourier import AFNO2D, FourierMixing, GlobalFilter
from keras_fourier.layers.fourier1d import AFNO1D, GlobalFilter1D
from keras_fourier.layers.fpn import DetectionFPN
from keras_fourier.layers.hornet import GlobalLocalFilter, GnConv
from keras_fourier.layers.padding import PadToMultiple, PeriodicPad2D
from keras_fourier.layers.position import PositionEmbedding, StrideCheck
from keras_fourier.layers.regularization import DropPath, LayerScale
from keras_fourier.layers.roi import RoIAlign
from keras_fourier.layers.roi_heads import BBoxHead, CascadeRoIHead, MaskHead
from keras_fourier.layers.rpn import RPNHead, RPNProposals
from keras_fourier.layers.sequence_mixing import LinearMixing, RandomMixing

__all__ = [
    "AFBO",
    "AFNO1D",
    "AFNO2D",
    "FNO1D",
    "FNO2D",
    "GLU",
    "SCFBO",
    "AnchorBoxes",
    "BBoxHead",
    "CascadeRoIHead",
    "ConvModule",
    "DetectionDecoder",
    "DetectionFPN",
    "DropPath",
    "FCNHead",
    "FNetEmbeddings",
    "FNetEncoderBlock",
    "FNetMaskedLMHead",
    "FPNHead",
    "FPNNeck",
    "FourierMixing",
    "GlobalFilter",
    "GlobalFilter1D",
    "GlobalLocalFilter",
    "GnConv",
    "GnConvModule",
    "LayerScale",
    "LinearMixing",
    "MaskComposite",
    "MaskHead",
    "Mlp",
    "MultiScaleNeck",
    "PadToMultiple",
    "PeriodicPad2D",
    "PositionEmbedding",
    "RPNHead",
    "RPNProposals",
    "RandomMixing",
    "RetinaHead",
    "RoIAlign",
    "SegFormerHead",
    "SelfAttention",
    "StrideCheck",
    "UPerHead",
]
