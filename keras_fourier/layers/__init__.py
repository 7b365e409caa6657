"""Reusable token mixers, FFNs and helpers of keras_fourier (all channels-last)."""

from keras_fourier.layers.fourier import AFNO2D, FourierMixing, GlobalFilter

__all__ = ["AFNO2D", "FourierMixing", "GlobalFilter"]
