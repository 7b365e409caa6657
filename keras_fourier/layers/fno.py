"""The Fourier Neural Operator's spectral convolution, the mixer AFNO is compared with.

FNO (Li et al., 2021) mixes channels with a full complex matrix per kept
Fourier mode: no block-diagonal structure and no weight sharing across
modes, which is what AFNO changes (Guibas et al., Table 1 and Table 6: FNO
has N d^2 parameters over N modes, AFNO (1 + 4/k) d^2 + 4d). The layouts
are those of the official FNO code (``fourier_1d.py``, ``fourier_2d.py``):
complex ``weights1`` (and ``weights2``) of shape (in, out, modes...), kept
here with real and imaginary parts on a last axis of 2 (``torch.view_as_real``),
initialised uniform in [0, 1 / (in * out)) for both parts as there.

The official layer transforms with the unnormalised FFT and its 1 / N
inverse; these use the orthonormal pair of :mod:`keras_fourier.layers.spectral`,
which gives the same outputs (the two scalings cancel in a linear map).
"""

from __future__ import annotations

import keras
from keras import ops

from keras_fourier.layers import spectral
from keras_fourier.layers.contraction import contract_axis
from keras_fourier.layers.fourier import _image_shape, check_channels
from keras_fourier.layers.fourier1d import _sequence_channels, check_sequence_channels
from keras_fourier.layers.layout import keep_float
from keras_fourier.validation import check_positive_int, is_static_size


def _complex_mode_matmul(real, imag, weight):
    """(B, M, C) modes times (M, C, C', 2) complex matrices, one per mode."""
    weight = ops.cast(weight, "float32")
    w_real, w_imag = weight[..., 0], weight[..., 1]

    def product(x, w):
        return contract_axis(x, w, axis=-1, group_axis=1)

    # In int8 TFLite files float32: sums of complex products (see layers.layout), and
    # block-diagonal products, which XNNPACK runs in float32 but not in int8.
    with keep_float():
        return (
            product(real, w_real) - product(imag, w_imag),
            product(real, w_imag) + product(imag, w_real),
        )


class _FNOBase(keras.layers.Layer):
    def _add_modes_weight(self, name: str, channels: int, modes: tuple[int, ...]):
        scale = 1.0 / (channels * channels)
        return self.add_weight(
            name=name,
            shape=(channels, channels, *modes, 2),
            initializer=keras.initializers.RandomUniform(0.0, scale),
            autocast=False,
        )

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)


@keras.saving.register_keras_serializable(package="keras_fourier")
class FNO2D(_FNOBase):
    """FNO's 2D spectral convolution: a full complex channel matrix per kept mode.

    ``y = irfft2(R . rfft2(x))`` over the spatial axes of (B, H, W, C), where
    ``R`` is a learned complex C x C matrix for each of the kept modes, the
    rows ``[:modes_height]`` (weights ``weights1``) and ``[H - modes_height:]``
    (``weights2``) of the half spectrum's columns ``[:modes_width]``; every
    other mode is zeroed. The weights do not depend on H and W, so the layer
    runs at any size with ``2 * modes_height <= H`` and ``modes_width <= W // 2
    + 1``. No residual: the blocks around the mixer add one.

    Weights: ``weights1`` and ``weights2``, (C, C, modes_height,
    modes_width, 2), real and imaginary parts last (FNO's complex (in, out,
    modes1, modes2) through ``torch.view_as_real``), uniform in [0, 1 / C^2).

    Args:
        modes_height: modes kept at each end of the H axis (FNO's
            ``modes1``), a positive int. Default None: H // 2 of the grid
            the layer is built for (every mode; the grid must be known).
        modes_width: modes kept along the W half spectrum (``modes2``), a
            positive int. Default None: W // 2 + 1 of the built grid.
        fft_impl: "auto" (default), "fft" or "matmul".
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, H, W, C) tensor with the C the layer was built for.

    Returns:
        Tensor of the same shape and the layer's compute dtype.

    Example:
        >>> layer = FNO2D(modes_height=2, modes_width=3)
        >>> layer(keras.ops.ones((2, 8, 8, 4))).shape
        TensorShape([2, 8, 8, 4])

    Reference:
        Li et al., "Fourier Neural Operator for Parametric Partial
        Differential Equations", ICLR 2021, Eq. (4)-(5); Guibas et al.,
        "Adaptive Fourier Neural Operators", ICLR 2022, Table 1.
    """

    def __init__(
        self,
        modes_height: int | None = None,
        modes_width: int | None = None,
        fft_impl: str = "auto",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.modes_height = (
            None if modes_height is None else check_positive_int("modes_height", modes_height)
        )
        self.modes_width = (
            None if modes_width is None else check_positive_int("modes_width", modes_width)
        )
        self.fft_impl = spectral.validate_fft_impl(fft_impl)

    def _check_size(self, height, width) -> None:
        if not is_static_size(height, width):
            return
        m1, m2 = self._kept
        if 2 * m1 > height or m2 > width // 2 + 1:
            raise ValueError(
                f"FNO2D with modes_height={m1} and modes_width={m2} needs H >= {2 * m1} and "
                f"W // 2 + 1 >= {m2}. Received: inputs of size H={height}, W={width}"
            )

    def build(self, input_shape):
        height, width, channels = _image_shape("FNO2D", input_shape)
        if None in (self.modes_height, self.modes_width) and not is_static_size(height, width):
            raise ValueError(
                "FNO2D without modes_height and modes_width keeps every mode of the grid it is "
                f"built for, which must be known. Received: input_shape={input_shape}"
            )
        self._kept = (
            self.modes_height or max(1, height // 2),
            self.modes_width or width // 2 + 1,
        )
        self._check_size(height, width)
        self._channels = channels
        self.weights1 = self._add_modes_weight("weights1", channels, self._kept)
        self.weights2 = self._add_modes_weight("weights2", channels, self._kept)

    def _mix(self, real, imag, weight):
        """Kept modes (B, m1, m2, C) times their matrices."""
        (m1, m2), channels = self._kept, self._channels
        flat = (-1, m1 * m2, channels)
        weight = ops.reshape(ops.transpose(weight, (2, 3, 0, 1, 4)), (m1 * m2, channels, -1, 2))
        real, imag = _complex_mode_matmul(ops.reshape(real, flat), ops.reshape(imag, flat), weight)
        return ops.reshape(real, (-1, m1, m2, channels)), ops.reshape(imag, (-1, m1, m2, channels))

    def call(self, inputs):
        check_channels("FNO2D", self._channels, inputs)
        height, width = spectral.spatial_dims(inputs, (1, 2))
        self._check_size(height, width)
        m1, m2 = self._kept
        real, imag = spectral.rfft2(inputs, self.fft_impl)
        top = self._mix(real[:, :m1, :m2], imag[:, :m1, :m2], self.weights1)
        bottom = self._mix(real[:, height - m1 :, :m2], imag[:, height - m1 :, :m2], self.weights2)
        columns = [0, width // 2 + 1 - m2]
        top_pad = [[0, 0], [0, height - m1], columns, [0, 0]]
        bottom_pad = [[0, 0], [height - m1, 0], columns, [0, 0]]
        with keep_float():  # int8 TFLite: the two halves' ranges differ
            real, imag = (
                ops.pad(t, top_pad) + ops.pad(b, bottom_pad)
                for t, b in zip(top, bottom, strict=True)
            )
        out = spectral.irfft2(real, imag, width, self.fft_impl)
        return ops.cast(out, self.compute_dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "modes_height": self.modes_height,
            "modes_width": self.modes_width,
            "fft_impl": self.fft_impl,
        }


@keras.saving.register_keras_serializable(package="keras_fourier")
class FNO1D(_FNOBase):
    """FNO's 1D spectral convolution: a full complex channel matrix per kept mode.

    ``y = irfft(R . rfft(x))`` along the sequence axis of (B, L, C), ``R`` a
    learned complex C x C matrix for each of the lowest ``modes``
    frequencies (weight ``weights1``), every other frequency zeroed. Runs at
    any L with ``modes <= L // 2 + 1``. No residual.

    Weight: ``weights1`` (C, C, modes, 2), real and imaginary parts last
    (FNO's complex (in, out, modes1)), uniform in [0, 1 / C^2).

    Args:
        modes: frequencies kept (FNO's ``modes1``), a positive int.
        fft_impl: "auto" (default), "fft" or "matmul".
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: (B, L, C) tensor with the C the layer was built for.

    Returns:
        Tensor of the same shape and the layer's compute dtype.

    Example:
        >>> FNO1D(modes=4)(keras.ops.ones((2, 16, 8))).shape
        TensorShape([2, 16, 8])

    Reference:
        Li et al., "Fourier Neural Operator for Parametric Partial
        Differential Equations", ICLR 2021.
    """

    def __init__(self, modes: int, fft_impl: str = "auto", **kwargs):
        super().__init__(**kwargs)
        self.modes = check_positive_int("modes", modes)
        self.fft_impl = spectral.validate_fft_impl(fft_impl)

    def _check_size(self, length) -> None:
        if is_static_size(length) and self.modes > length // 2 + 1:
            raise ValueError(
                f"FNO1D with modes={self.modes} needs L // 2 + 1 >= {self.modes}. "
                f"Received: inputs of length L={length}"
            )

    def build(self, input_shape):
        self._channels = _sequence_channels("FNO1D", input_shape)
        if input_shape[1] is not None:
            self._check_size(int(input_shape[1]))
        self.weights1 = self._add_modes_weight("weights1", self._channels, (self.modes,))

    def call(self, inputs):
        check_sequence_channels("FNO1D", self._channels, inputs)
        (length,) = spectral.spatial_dims(inputs, (1,))
        self._check_size(length)
        real, imag = spectral.rfft(inputs, self.fft_impl)
        weight = ops.transpose(self.weights1, (2, 0, 1, 3))
        real, imag = _complex_mode_matmul(real[:, : self.modes], imag[:, : self.modes], weight)
        pad = [[0, 0], [0, length // 2 + 1 - self.modes], [0, 0]]
        out = spectral.irfft(ops.pad(real, pad), ops.pad(imag, pad), length, self.fft_impl)
        return ops.cast(out, self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), "modes": self.modes, "fft_impl": self.fft_impl}
