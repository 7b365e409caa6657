"""keras_fourier: Fourier-domain and gated token mixers for Keras 3 on TensorFlow."""

from keras_fourier import layers

__version__ = "0.1.0"

__all__ = ["__version__", "layers"]
