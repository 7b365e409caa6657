"""All FFT and DFT code of keras_fourier.

Every Fourier layer calls the functions of this module and nothing else for
its transforms, so the two implementations below stay interchangeable:

* ``"fft"``: TensorFlow's FFT kernels (``tf.signal``), O(N log N).
* ``"matmul"``: the same transforms as products with precomputed real DFT
  matrices (cosine and sine tables). Only real matmuls, transposes, reshapes
  and element-wise ops appear in the graph, so a TFLite converter restricted to
  ``TFLITE_BUILTINS`` accepts it, and TPUs run it on their matrix units.
* ``"auto"``: ``"matmul"`` when the computation is placed on a TPU, else
  ``"fft"``.

Complex tensors are passed around as ``(real, imag)`` pairs of float32
tensors, the convention of ``keras.ops.fft``. Inputs are cast to float32
before any transform: ``tf.signal`` rejects float16 and bfloat16, and the
spectral products of half-precision inputs lose too many bits. Callers cast
the result back to their compute dtype.

Conventions follow the official PyTorch code of the papers:

* :func:`rfft2` / :func:`irfft2` are ``torch.fft.rfft2`` / ``irfft2`` over the
  spatial axes of a channels-last ``(B, H, W, C)`` tensor with
  ``norm="ortho"``. The inverse treats the input as numpy and PyTorch do:
  an inverse complex DFT along H, then an inverse real DFT along W that
  ignores the imaginary parts of the DC bin and, for even W, of the Nyquist
  bin.
* :func:`fourier_mix_real` is FNet's ``Re(F_seq(F_hidden(x)))``: the real part
  of the unnormalised DFT over every non-batch axis.
"""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf

from keras_fourier.validation import check_choice

FFT_IMPLS = ("auto", "fft", "matmul")


def validate_fft_impl(fft_impl: str) -> str:
    """Returns `fft_impl` if it names an implementation, else raises ValueError."""
    return check_choice("fft_impl", fft_impl, FFT_IMPLS)


def _on_tpu() -> bool:
    if tf.distribute.has_strategy():
        strategy = tf.distribute.get_strategy()
        if isinstance(strategy, tf.distribute.TPUStrategy):
            return True
    return bool(tf.config.list_logical_devices("TPU"))


def resolve_fft_impl(fft_impl: str) -> str:
    """Maps ``"auto"`` to ``"matmul"`` on a TPU and ``"fft"`` elsewhere."""
    validate_fft_impl(fft_impl)
    if fft_impl == "auto":
        return "matmul" if _on_tpu() else "fft"
    return fft_impl


@functools.lru_cache(maxsize=128)
def _dft_tables(n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2*pi*j*k/n for j < n, k < m, exact modular phases."""
    phase = np.outer(np.arange(n), np.arange(m)) % n
    angle = 2.0 * np.pi * phase / n
    return np.cos(angle), np.sin(angle)


@functools.lru_cache(maxsize=128)
def _irfft_tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(K, n) tables of the inverse real DFT along one axis, K = n // 2 + 1.

    Row k carries the Hermitian weight of bin k (1 for DC and an even-n
    Nyquist bin, 2 otherwise); the sine rows of DC and Nyquist are zero,
    which is how their imaginary parts are ignored.
    """
    k = n // 2 + 1
    cos, sin = _dft_tables(n, k)
    weight = np.full((k,), 2.0)
    weight[0] = 1.0
    if n % 2 == 0:
        weight[-1] = 1.0
    return (cos * weight).T, (sin * weight).T


def _const(array: np.ndarray) -> tf.Tensor:
    return tf.constant(array.astype(np.float32))


def _matmul_axis(x: tf.Tensor, matrix: np.ndarray, axis: int) -> tf.Tensor:
    """Contracts `axis` of `x` (length n) with `matrix` (n, m); axis keeps its place."""
    rank = x.shape.rank
    axis = axis % rank
    perm = [i for i in range(rank) if i != axis] + [axis]
    moved = tf.transpose(x, perm) if axis != rank - 1 else x
    n, m = matrix.shape
    flat = tf.reshape(moved, [-1, n])
    out = tf.matmul(flat, _const(matrix))
    out_shape = tf.concat([tf.shape(moved)[:-1], [m]], axis=0)
    out = tf.reshape(out, out_shape)
    if axis == rank - 1:
        return out
    inverse = np.argsort(perm).tolist()
    return tf.transpose(out, inverse)


def _complex_dft_axis(
    real: tf.Tensor, imag: tf.Tensor | None, axis: int, inverse: bool = False
) -> tuple[tf.Tensor, tf.Tensor]:
    """Unnormalised complex DFT (or its unscaled inverse) along `axis` by matmul."""
    n = real.shape[axis]
    cos, sin = _dft_tables(n, n)
    sign = 1.0 if inverse else -1.0
    # (r + i q) (cos + i*sign*sin) = r cos - sign q sin + i (q cos + sign r sin)
    out_real = _matmul_axis(real, cos, axis)
    out_imag = sign * _matmul_axis(real, sin, axis)
    if imag is not None:
        out_real -= sign * _matmul_axis(imag, sin, axis)
        out_imag += _matmul_axis(imag, cos, axis)
    return out_real, out_imag


def _spatial_size(x: tf.Tensor, name: str) -> tuple[int, int]:
    height, width = x.shape[1], x.shape[2]
    if height is None or width is None:
        raise ValueError(
            f"{name} needs static spatial dimensions; received a tensor of shape {x.shape}."
        )
    return int(height), int(width)


def rfft2(x: tf.Tensor, fft_impl: str = "auto") -> tuple[tf.Tensor, tf.Tensor]:
    """Orthonormal 2D real FFT over axes 1 and 2 of a (B, H, W, C) tensor.

    Args:
        x: real tensor (B, H, W, C) with static H and W; cast to float32.
        fft_impl: "auto", "fft" or "matmul".

    Returns:
        (real, imag), each float32 (B, H, W // 2 + 1, C).
    """
    height, width = _spatial_size(x, "rfft2")
    x = tf.cast(x, tf.float32)
    scale = 1.0 / np.sqrt(height * width)
    if resolve_fft_impl(fft_impl) == "fft":
        spectrum = tf.signal.rfft2d(tf.transpose(x, [0, 3, 1, 2]))
        spectrum = tf.transpose(spectrum, [0, 2, 3, 1])
        return tf.math.real(spectrum) * scale, tf.math.imag(spectrum) * scale
    cos, sin = _dft_tables(width, width // 2 + 1)
    real = _matmul_axis(x, cos * scale, axis=2)
    imag = _matmul_axis(x, -sin * scale, axis=2)
    return _complex_dft_axis(real, imag, axis=1)


def _hermitian_edge_columns(
    real: tf.Tensor, imag: tf.Tensor, width: int
) -> tuple[tf.Tensor, tf.Tensor]:
    """Makes the DC (and even-W Nyquist) column Hermitian along H.

    Those columns of a real signal's half spectrum satisfy Z[k] = conj(Z[-k]).
    A learned filter breaks that; numpy and PyTorch then drop the imaginary
    part after the inverse DFT along H, which equals replacing each such
    column by its Hermitian part (Z[k] + conj(Z[-k])) / 2. Doing that
    explicitly gives every FFT backend (pocketfft on CPU, cuFFT on GPU) a
    valid input, so all of them agree with numpy and with the matmul path.
    """
    height = real.shape[1]
    edges = np.zeros((1, 1, width // 2 + 1, 1), dtype=np.float32)
    edges[..., 0, :] = 1.0
    if width % 2 == 0:
        edges[..., -1, :] = 1.0
    mirror = [0, *range(height - 1, 0, -1)]
    real_part = (real + tf.gather(real, mirror, axis=1)) / 2
    imag_part = (imag - tf.gather(imag, mirror, axis=1)) / 2
    edges = tf.constant(edges)
    return real + edges * (real_part - real), imag + edges * (imag_part - imag)


def irfft2(real: tf.Tensor, imag: tf.Tensor, width: int, fft_impl: str = "auto") -> tf.Tensor:
    """Inverse of :func:`rfft2`: (B, H, W // 2 + 1, C) spectrum to (B, H, W, C).

    Args:
        real: real part of the half spectrum, float32.
        imag: imaginary part, same shape.
        width: W of the output (needed because W // 2 + 1 is not invertible).
        fft_impl: "auto", "fft" or "matmul".

    Returns:
        float32 tensor (B, H, W, C).
    """
    height = real.shape[1]
    if height is None:
        raise ValueError(f"irfft2 needs a static height; received shape {real.shape}.")
    real = tf.cast(real, tf.float32)
    imag = tf.cast(imag, tf.float32)
    scale = 1.0 / np.sqrt(height * width)
    if resolve_fft_impl(fft_impl) == "fft":
        real, imag = _hermitian_edge_columns(real, imag, width)
        spectrum = tf.complex(tf.transpose(real, [0, 3, 1, 2]), tf.transpose(imag, [0, 3, 1, 2]))
        out = tf.signal.irfft2d(spectrum, fft_length=[height, width])
        return tf.transpose(out, [0, 2, 3, 1]) * (height * width * scale)
    real, imag = _complex_dft_axis(real, imag, axis=1, inverse=True)
    cos, sin = _irfft_tables(width)
    return _matmul_axis(real, cos * scale, axis=2) - _matmul_axis(imag, sin * scale, axis=2)


def global_filter(x: tf.Tensor, weight: tf.Tensor, fft_impl: str = "auto") -> tf.Tensor:
    """GFNet's spectral filtering: ``irfft2(rfft2(x) * K)``, orthonormal.

    Args:
        x: real tensor (B, H, W, C) with static H and W; cast to float32.
        weight: the complex filter K as (H, W // 2 + 1, C, 2), real and
            imaginary parts last (or broadcastable to it).
        fft_impl: "auto", "fft" or "matmul".

    Returns:
        float32 tensor (B, H, W, C).
    """
    real, imag = rfft2(x, fft_impl)
    weight = tf.cast(weight, tf.float32)
    w_real, w_imag = weight[..., 0], weight[..., 1]
    out_real = real * w_real - imag * w_imag
    out_imag = real * w_imag + imag * w_real
    return irfft2(out_real, out_imag, x.shape[2], fft_impl)


def fourier_mix_real(x: tf.Tensor, fft_impl: str = "auto") -> tf.Tensor:
    """Real part of the unnormalised DFT over every axis but the batch axis.

    For (B, L, D) this is FNet's ``Re(F_seq(F_hidden(x)))``; for image tokens
    (B, H, W, D) it adds the second spatial axis.

    Args:
        x: real tensor of rank 3 or 4 with static non-batch dimensions.
        fft_impl: "auto", "fft" or "matmul".

    Returns:
        float32 tensor of the same shape.
    """
    rank = x.shape.rank
    if rank not in (3, 4) or any(d is None for d in x.shape[1:]):
        raise ValueError(
            "fourier_mix_real needs a rank-3 or rank-4 tensor with static non-batch "
            f"dimensions; received shape {x.shape}."
        )
    x = tf.cast(x, tf.float32)
    if resolve_fft_impl(fft_impl) == "fft":
        spectrum = tf.complex(x, tf.zeros_like(x))
        transform = tf.signal.fft2d if rank == 3 else tf.signal.fft3d
        return tf.math.real(transform(spectrum))
    axes = list(range(1, rank))
    real, imag = _complex_dft_axis(x, None, axes[0])
    for axis in axes[1:-1]:
        real, imag = _complex_dft_axis(real, imag, axis)
    n = x.shape[axes[-1]]
    cos, sin = _dft_tables(n, n)
    # Re((r + i q)(cos - i sin)) = r cos + q sin: the last axis needs only the real part.
    return _matmul_axis(real, cos, axes[-1]) + _matmul_axis(imag, sin, axes[-1])
