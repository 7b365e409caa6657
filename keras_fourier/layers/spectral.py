"""All FFT and DFT code of keras_fourier, on every Keras backend.

Every Fourier layer calls the functions of this module and nothing else for
its transforms, so the two implementations below stay interchangeable, and
this is the only module of the package that reaches a backend's own FFT:

* ``"fft"``: the backend's FFT kernels, O(N log N): ``tf.signal`` on
  TensorFlow, ``jax.numpy.fft`` on JAX (pocketfft on CPU, cuFFT on GPU),
  ``torch.fft`` on PyTorch (pocketfft/MKL on CPU, cuFFT on GPU),
  ``numpy.fft`` on the NumPy backend. Each is called directly rather than
  composed from `keras.ops.rfft`/`fft` (which act on the last axis only and
  have no 2D real transforms): the composition needs four transposes and
  two calls per transform and measured slower on every backend (see the
  issue-10 note).
* ``"matmul"``: the same transforms as products with precomputed real DFT
  matrices (cosine and sine tables) through
  :func:`keras_fourier.layers.contraction.contract_axis`. Only real matmuls,
  transposes, reshapes and element-wise `keras.ops` appear, so every
  backend runs it, a TFLite converter restricted to ``TFLITE_BUILTINS``
  accepts it, and TPUs run it on their matrix units.
* ``"auto"``: ``"matmul"`` when the computation is placed on a TPU
  (TensorFlow: a TPU device or a ``TPUStrategy``; JAX: a TPU default
  backend) or the backend has no FFT here; on a CPU, ``"matmul"`` for 2D
  transforms of at most :data:`DENSE_DFT_MAX_TOKENS` tokens (14x14 and
  smaller grids), where one dense DFT matrix per direction beats the FFT;
  else ``"fft"``. GPUs therefore use ``"fft"`` (cuFFT wins there).

Complex tensors are passed around as ``(real, imag)`` pairs of float32
tensors, the convention of ``keras.ops.fft``. Inputs are cast to float32
before any transform: ``tf.signal`` rejects float16 and bfloat16, and the
spectral products of half-precision inputs lose too many bits. Callers cast
the result back to their compute dtype.

The one exception is explicit: :func:`set_dft_precision` ``("bfloat16")``
(or the :func:`dft_precision_scope` context) runs the products of the
``"matmul"`` path in bfloat16, float32 accumulation inside the kernels
(TensorFlow's and XLA's CPU matmuls; the results are rounded to bfloat16).
Forward transforms still return float32 spectra (the spectral filters and
MLPs stay float32); inverse transforms, :func:`global_filter` and
:func:`fourier_mix_real` return bfloat16, which the layers cast to their
compute dtype: under ``mixed_bfloat16`` no cast to float32 is left around
the transforms' inputs and outputs. It is off by default ("float32"): the
error is that of bfloat16 rounding, about 2**-8 of each product's magnitude
(the tests hold it to 3% of the output's largest value on small layers),
and it changes nothing on the ``"fft"`` path. The setting is read when a
layer is traced (its first call, ``fit``, ``predict`` or an export), like
Keras's dtype policies.

Conventions follow the official PyTorch code of the papers:

* :func:`rfft2` / :func:`irfft2` are ``torch.fft.rfft2`` / ``irfft2`` over the
  spatial axes of a channels-last ``(B, H, W, C)`` tensor with
  ``norm="ortho"``. The inverse treats the input as numpy and PyTorch on CPU
  do: an inverse complex DFT along H, then an inverse real DFT along W that
  ignores the imaginary parts of the DC bin and, for even W, of the Nyquist
  bin. The FFT path makes those columns Hermitian before the call
  (:func:`_hermitian_edge_columns`), so every backend's kernel, cuFFT
  included, gets a valid half spectrum and gives the same numbers.
* :func:`rfft` / :func:`irfft` are ``torch.fft.rfft`` / ``irfft`` over axis 1
  of a channels-last sequence ``(B, L, C)`` with ``norm="ortho"`` (the
  official AFNO1D); the inverse ignores the imaginary parts of the DC and,
  for even L, the Nyquist bin, as numpy and PyTorch do (the FFT path zeroes
  them before the call, so every backend's kernel agrees).
* :func:`fourier_mix_real` is FNet's ``Re(F_seq(F_hidden(x)))``: the real part
  of the unnormalised DFT over every non-batch axis.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import keras
import numpy as np
from keras import ops

from keras_fourier.layers.contraction import contract_axis
from keras_fourier.layers.layout import in_tflite_layout, keep_float
from keras_fourier.settings import DFT_PRECISIONS, FFT_IMPLS
from keras_fourier.validation import check_choice, is_static_size

FFT_BACKENDS = ("tensorflow", "jax", "torch", "numpy")


def validate_fft_impl(fft_impl: str) -> str:
    """Returns `fft_impl` if it names an implementation, else raises ValueError."""
    return check_choice("fft_impl", fft_impl, FFT_IMPLS)


_DFT_PRECISION = {"value": "float32"}


def set_dft_precision(precision: str) -> None:
    """Sets the dtype of the matmul DFT's products for layers traced from now on.

    Args:
        precision: "float32" (the default) or "bfloat16" (bfloat16 operands,
            float32 accumulation in the matmul kernels, bfloat16 results).
            Only the ``"matmul"`` path of the transforms reads it.

    Raises:
        ValueError: for another name.

    Example:
        >>> set_dft_precision("bfloat16")
        >>> get_dft_precision()
        'bfloat16'
    """
    _DFT_PRECISION["value"] = check_choice("precision", precision, DFT_PRECISIONS)


def get_dft_precision() -> str:
    """The dtype of the matmul DFT's products: "float32" (default) or "bfloat16"."""
    return _DFT_PRECISION["value"]


@contextlib.contextmanager
def dft_precision_scope(precision: str) -> Iterator[None]:
    """Runs the matmul DFT's products at `precision` inside the ``with`` block.

    Args:
        precision: "float32" or "bfloat16" (see :func:`set_dft_precision`).

    Example:
        >>> with dft_precision_scope("bfloat16"):
        ...     outputs = model.predict(images)
    """
    previous = get_dft_precision()
    set_dft_precision(precision)
    try:
        yield
    finally:
        set_dft_precision(previous)


_FULLY_CONNECTED = {"value": False}


@contextlib.contextmanager
def fully_connected_dft() -> Iterator[None]:
    """Inside: the dense 2D DFTs contract the token axis with a constant matrix on the right.

    By default the dense matmul DFT (grids of at most
    :data:`DENSE_DFT_MAX_TOKENS` tokens) is one batched product with the
    DFT matrix on the left, ``M @ x`` for each (H * W, C) example: no
    transposes, twice as fast as the alternative in TensorFlow on a CPU.
    TFLite's converter turns that into a BATCH_MATMUL with a broadcast
    constant, which XNNPACK runs in float32 but not in int8, so a
    full-integer file ran those products in LiteRT's own kernels, outside
    the XNNPACK graph (cut in pieces around them). Traced inside this
    context, the same product is ``x^T @ M^T``: a transpose, a 2D product
    with a constant matrix, which the converter lowers to FULLY_CONNECTED
    with per-channel int8 weights (one scale per frequency row) that XNNPACK
    takes, and a transpose back. The TFLite export traces its int8 files
    this way; the numbers are the same up to float32 summation order.
    """
    previous = _FULLY_CONNECTED["value"]
    _FULLY_CONNECTED["value"] = True
    try:
        yield
    finally:
        _FULLY_CONNECTED["value"] = previous


def _dft_operand(x):
    """`x` in the dtype of the matmul DFT's products."""
    return ops.cast(x, get_dft_precision())


def _contract(x, matrix, axis: int):
    """:func:`contract_axis` with `matrix` (an array or a float32 table) in the dtype of `x`."""
    if not isinstance(matrix, np.ndarray):
        matrix = ops.cast(matrix, keras.backend.standardize_dtype(x.dtype))
    return contract_axis(x, matrix, axis)


def _on_tpu() -> bool:
    backend = keras.config.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        if tf.distribute.has_strategy() and isinstance(
            tf.distribute.get_strategy(), tf.distribute.TPUStrategy
        ):
            return True
        return bool(tf.config.list_logical_devices("TPU"))
    if backend == "jax":
        import jax

        return jax.default_backend() == "tpu"
    return False


def _on_cpu() -> bool:
    backend = keras.config.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return not tf.config.list_logical_devices("GPU") and not _on_tpu()
    if backend == "jax":
        import jax

        return jax.default_backend() == "cpu"
    if backend == "torch":
        import torch

        return not torch.cuda.is_available()
    return True


def resolve_fft_impl(fft_impl: str, tokens: int | None = None) -> str:
    """Maps ``"auto"`` to ``"fft"`` or ``"matmul"`` for this device and size.

    ``"auto"`` is ``"matmul"`` on a TPU, on a backend without FFT, and on a
    CPU for transforms of at most :data:`DENSE_DFT_MAX_TOKENS` tokens (where
    the dense DFT matrix beats the FFT); else ``"fft"``.

    Args:
        fft_impl: "auto", "fft" or "matmul".
        tokens: H * W of the 2D transform, if known. Default None.

    Raises:
        ValueError: for an unknown name, or ``"fft"`` on a backend with no
            FFT dispatch here (use ``"matmul"``).
    """
    validate_fft_impl(fft_impl)
    backend = keras.config.backend()
    if fft_impl == "auto":
        if backend not in FFT_BACKENDS or _on_tpu():
            return "matmul"
        small = tokens is not None and tokens <= DENSE_DFT_MAX_TOKENS
        return "matmul" if small and _on_cpu() else "fft"
    if fft_impl == "fft" and backend not in FFT_BACKENDS:
        raise ValueError(
            f"`fft_impl` must be 'matmul' or 'auto' on the {backend!r} backend, which has no "
            f"FFT here (FFT backends: {FFT_BACKENDS}). Received: fft_impl='fft'"
        )
    return fft_impl


# Up to this many tokens (H * W), the "matmul" path transforms with one dense
# 2D DFT matrix per direction, (2HK, HW) forward and (HW, 2HK) inverse with
# K = W // 2 + 1, instead of one matrix per axis: a single product per
# transform, no transposes. "auto" picks it on CPUs. Measured on the 2-core
# CI machine, batch 16 (issue-11 note): a 14x14x384 global filter forward
# takes 41 ms this way against 197 ms with TensorFlow's FFT (forward and
# backward 109 vs 181 ms); at 28x28 the two tie, at 56x56 the FFT is 9x
# faster.
DENSE_DFT_MAX_TOKENS = 256


@functools.lru_cache(maxsize=64)
def _dense_phase(height: int, width: int) -> np.ndarray:
    """2*pi*(h*k/H + w*l/W) as an (H*W, H*K) table with exact modular phases."""
    k = width // 2 + 1
    rows = (np.outer(np.arange(height), np.arange(height)) % height) / height
    cols = (np.outer(np.arange(width), np.arange(k)) % width) / width
    phase = rows[:, None, :, None] + cols[None, :, None, :]
    return (2.0 * np.pi * phase).reshape(height * width, height * k)


@functools.lru_cache(maxsize=64)
def _dense_rfft2_matrix(height: int, width: int) -> np.ndarray:
    """(2*H*K, H*W): rows [real; imag] of the orthonormal 2D real DFT."""
    phase = _dense_phase(height, width)
    scale = 1.0 / np.sqrt(height * width)
    return np.concatenate([np.cos(phase), -np.sin(phase)], axis=1).T * scale


@functools.lru_cache(maxsize=64)
def _dense_irfft2_matrix(height: int, width: int) -> np.ndarray:
    """(H*W, 2*H*K): the orthonormal inverse of a [real; imag] half spectrum.

    Column (k, l) carries the Hermitian weight of bin l along W (1 for DC and
    an even-W Nyquist bin, 2 otherwise); the imaginary parts of the DC and
    Nyquist bins enter through the inverse DFT along H only, as in numpy's
    and PyTorch's irfft2.
    """
    weight = np.full((width // 2 + 1,), 2.0)
    weight[0] = 1.0
    if width % 2 == 0:
        weight[-1] = 1.0
    weight = np.tile(weight, height)
    phase = _dense_phase(height, width)
    scale = 1.0 / np.sqrt(height * width)
    return np.concatenate([np.cos(phase) * weight, -np.sin(phase) * weight], axis=1) * scale


def _channels(x):
    return x.shape[-1] if x.shape[-1] is not None else ops.shape(x)[-1]


def _right_product(x, matrix: np.ndarray):
    """(B, N, C) x (N, M) -> (B, M, C) as transpose, product with the constant on the right,
    transpose: FULLY_CONNECTED in TFLite (see :func:`fully_connected_dft`)."""
    n, m = matrix.shape
    rows = ops.reshape(ops.transpose(x, (0, 2, 1)), (-1, n))
    out = ops.matmul(rows, _const(matrix, keras.backend.standardize_dtype(x.dtype)))
    return ops.transpose(ops.reshape(out, (-1, _channels(x), m)), (0, 2, 1))


def _dense_rfft2(x, height: int, width: int):
    k = width // 2 + 1
    channels = _channels(x)
    x = ops.reshape(_dft_operand(x), (-1, height * width, channels))
    if _FULLY_CONNECTED["value"]:
        spectrum = _float32(_right_product(x, _dense_rfft2_matrix(height, width).T))
    else:
        matrix = _const(_dense_rfft2_matrix(height, width), get_dft_precision())
        spectrum = _float32(ops.matmul(matrix, x))
    # A split, not two slices: its gradient is one concat, not two zero-padded copies.
    real, imag = ops.split(spectrum, 2, axis=1)
    return (
        ops.reshape(real, (-1, height, k, channels)),
        ops.reshape(imag, (-1, height, k, channels)),
    )


def _dense_irfft2(real, imag, height: int, width: int):
    k = width // 2 + 1
    channels = _channels(real)
    stacked = ops.concatenate(
        [
            ops.reshape(_dft_operand(real), (-1, height * k, channels)),
            ops.reshape(_dft_operand(imag), (-1, height * k, channels)),
        ],
        axis=1,
    )
    if _FULLY_CONNECTED["value"]:
        out = _right_product(stacked, _dense_irfft2_matrix(height, width).T)
    else:
        out = ops.matmul(_const(_dense_irfft2_matrix(height, width), get_dft_precision()), stacked)
    return ops.reshape(out, (-1, height, width, channels))


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


def _const(array: np.ndarray, dtype: str = "float32"):
    return ops.convert_to_tensor(np.asarray(array, dtype=np.float32), dtype=dtype)


def _float32(x):
    return ops.cast(x, "float32")


def _contract_sum(real, imag, real_matrix, imag_matrix, axis: int):
    """``contract(real, real_matrix) + contract(imag, imag_matrix)`` along `axis`.

    Traced for TFLite (:func:`~keras_fourier.layers.layout.tflite_layout`)
    with tables known when tracing, one contraction of `real` and `imag`
    concatenated along `axis` with the matrices stacked: the sum happens in
    the product's accumulator (int32 in a full-integer file) rather than in
    an ADD of two int8 products, whose ranges may differ by orders of
    magnitude. The same values up to float32 summation order.
    """
    if in_tflite_layout() and isinstance(real_matrix, np.ndarray):
        stacked = np.concatenate([real_matrix, imag_matrix], axis=0)
        return _contract(ops.concatenate([real, imag], axis=axis), stacked, axis)
    return _contract(real, real_matrix, axis) + _contract(imag, imag_matrix, axis)


def _complex_dft_axis(real, imag, axis: int, inverse: bool = False):
    """Unnormalised complex DFT (or its unscaled inverse) along `axis` by matmul."""
    (n,) = spatial_dims(real, (axis,))
    cos, sin = _tables(n, n)
    sign = 1.0 if inverse else -1.0
    # (r + i q) (cos + i*sign*sin) = r cos - sign q sin + i (q cos + sign r sin)
    real = _dft_operand(real)
    if imag is None:
        return _contract(real, cos, axis), _contract(real, sign * sin, axis)
    imag = _dft_operand(imag)
    return (
        _contract_sum(real, imag, cos, -sign * sin, axis),
        _contract_sum(real, imag, sign * sin, cos, axis),
    )


def spatial_dims(x, axes) -> list:
    """Lengths of `axes`: Python ints where static, scalar tensors where known only at run time."""
    shape = ops.shape(x)
    return [int(x.shape[a]) if x.shape[a] is not None else shape[a] for a in axes]


def _with_dims(x, dims):
    """`x` reshaped to `dims` (ints or run-time scalars): restores the static lengths
    that TensorFlow's shape inference loses through run-time-sized FFTs and reshapes."""
    return ops.reshape(x, list(dims))


def _ortho_scale(height, width):
    if is_static_size(height, width):
        return 1.0 / np.sqrt(height * width)
    return ops.rsqrt(ops.cast(height * width, "float32"))


def _dynamic_dft_tables(n, m):
    """Run-time twin of :func:`_dft_tables` (float32 phases): for lengths unknown when tracing."""
    phase = ops.mod(ops.arange(n)[:, None] * ops.arange(m)[None, :], n)
    angle = ops.cast(phase, "float32") * (2.0 * np.pi) / ops.cast(n, "float32")
    return ops.cos(angle), ops.sin(angle)


def _tables(n, m):
    return _dft_tables(n, m) if is_static_size(n, m) else _dynamic_dft_tables(n, m)


def _inverse_tables(n):
    """(K, n) inverse real DFT tables of :func:`_irfft_tables`, static or run-time."""
    if is_static_size(n):
        return _irfft_tables(n)
    k = n // 2 + 1
    cos, sin = _dynamic_dft_tables(n, k)
    bins = ops.arange(k)
    single = ops.logical_or(
        ops.equal(bins, 0), ops.logical_and(ops.equal(n % 2, 0), ops.equal(bins, k - 1))
    )
    weight = ops.where(single, 1.0, 2.0)
    return ops.transpose(cos * weight), ops.transpose(sin * weight)


# The backends' own 2D FFTs, reached here and nowhere else. keras.ops has no
# rfft2/irfft2; composing its 1D rfft and fft on TensorFlow (which would avoid
# importing TensorFlow here) measured 215 ms against tf.signal's 128 ms for a
# 56x56x384 global filter at batch 16 on the 2-core CI machine (30.5 vs 28.1 ms
# at 28x28), so the faster native kernels stay, as issue 10 asked.
def _native_rfft2(x):
    """Orthonormal rfft2 over axes 1, 2 of float32 (B, H, W, C) with the backend's FFT."""
    backend = keras.config.backend()
    if backend == "jax":
        import jax.numpy as jnp

        spectrum = jnp.fft.rfft2(x, axes=(1, 2), norm="ortho")
        return jnp.real(spectrum), jnp.imag(spectrum)
    if backend == "torch":
        import torch

        # pocketfft is about twice as fast on contiguous channels-first planes.
        spectrum = torch.fft.rfft2(x.permute(0, 3, 1, 2).contiguous(), norm="ortho")
        spectrum = spectrum.permute(0, 2, 3, 1)
        return spectrum.real, spectrum.imag
    if backend == "numpy":
        spectrum = np.fft.rfft2(x, axes=(1, 2), norm="ortho").astype(np.complex64)
        return spectrum.real, spectrum.imag
    import tensorflow as tf

    height, width = spatial_dims(x, (1, 2))
    scale = _ortho_scale(height, width)

    @tf.custom_gradient
    def transform(x):
        spectrum = tf.transpose(tf.signal.rfft2d(tf.transpose(x, [0, 3, 1, 2])), [0, 2, 3, 1])

        def gradient(d_real, d_imag):
            return _rfft2_adjoint(d_real, d_imag, height, width)

        return (tf.math.real(spectrum) * scale, tf.math.imag(spectrum) * scale), gradient

    return transform(x)


def _rfft2_adjoint(d_real, d_imag, height, width):
    """The gradient of the orthonormal rfft2 with respect to its real input (TensorFlow's path).

    For upstream gradients G = d_real + i d_imag of the half spectrum, the
    input's gradient is Re of the orthonormal inverse DFT of G over the half
    spectrum alone: the orthonormal irfft2 of G with the bins the half
    spectrum stands for twice (all but the DC and even-W Nyquist columns)
    halved and the DC and Nyquist columns made Hermitian
    (:func:`_hermitian_edge_columns`), whose inverse DFT along H is then the
    real part that is wanted. TensorFlow's own RFFT2D gradient gives the same
    numbers through an H x H twiddle matrix built with an int32 transpose,
    which oneDNN-enabled TensorFlow (the default on AVX-512 CPUs) reports once
    per process when sizes are known only at run time ("oneDNN supports
    DT_INT32 only on platforms with AVX-512"); this is one irfft2.
    """
    halves = 0.5 + 0.5 * _edge_columns(width)
    real, imag = _hermitian_edge_columns(d_real * halves, d_imag * halves, width)
    return _native_irfft2(real, imag, height, width)


def _native_irfft2(real, imag, height: int, width: int):
    """Orthonormal irfft2 of a Hermitian-edged (B, H, W // 2 + 1, C) spectrum."""
    backend = keras.config.backend()
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        spectrum = jax.lax.complex(real, imag)
        return jnp.fft.irfft2(spectrum, s=(height, width), axes=(1, 2), norm="ortho")
    if backend == "torch":
        import torch

        spectrum = torch.complex(real, imag).permute(0, 3, 1, 2).contiguous()
        out = torch.fft.irfft2(spectrum, s=(height, width), norm="ortho")
        return out.permute(0, 2, 3, 1)
    if backend == "numpy":
        out = np.fft.irfft2(real + 1j * imag, s=(height, width), axes=(1, 2), norm="ortho")
        return out.astype(np.float32)
    import tensorflow as tf

    spectrum = tf.complex(tf.transpose(real, [0, 3, 1, 2]), tf.transpose(imag, [0, 3, 1, 2]))
    out = tf.transpose(tf.signal.irfft2d(spectrum, fft_length=[height, width]), [0, 2, 3, 1])
    if is_static_size(height, width):
        return out * np.float32(np.sqrt(height * width))
    return out * ops.sqrt(ops.cast(height * width, "float32"))


def _native_fft_real(x):
    """Re of the unnormalised DFT of float32 `x` over every axis but the first."""
    backend = keras.config.backend()
    axes = tuple(range(1, len(x.shape)))
    if backend == "jax":
        import jax.numpy as jnp

        return jnp.real(jnp.fft.fftn(x, axes=axes))
    if backend == "torch":
        import torch

        return torch.fft.fftn(x, dim=axes).real
    if backend == "numpy":
        return np.fft.fftn(x, axes=axes).real.astype(np.float32)
    import tensorflow as tf

    transform = tf.signal.fft2d if len(axes) == 2 else tf.signal.fft3d
    return tf.math.real(transform(tf.complex(x, tf.zeros_like(x))))


def rfft2(x, fft_impl: str = "auto"):
    """Orthonormal 2D real FFT over axes 1 and 2 of a (B, H, W, C) tensor.

    Args:
        x: real tensor (B, H, W, C); cast to float32. H and W may be
            unknown when tracing (any-size models): "auto" then picks
            "fft" (except on a TPU), and "matmul" builds its DFT tables in
            the graph from the run-time sizes.
        fft_impl: "auto", "fft" or "matmul".

    Returns:
        (real, imag), each float32 (B, H, W // 2 + 1, C).
    """
    height, width = spatial_dims(x, (1, 2))
    static = is_static_size(height, width)
    if resolve_fft_impl(fft_impl, height * width if static else None) == "fft":
        real, imag = _native_rfft2(_float32(x))
        if static:
            return real, imag
        dims = (*spatial_dims(x, (0, 1)), width // 2 + 1, *spatial_dims(x, (3,)))
        return _with_dims(real, dims), _with_dims(imag, dims)
    if static and height * width <= DENSE_DFT_MAX_TOKENS:
        return _dense_rfft2(x, height, width)
    scale = _ortho_scale(height, width)
    cos, sin = _tables(width, width // 2 + 1)
    x = _dft_operand(x)
    real = _contract(x, cos * scale, axis=2)
    imag = _contract(x, -sin * scale, axis=2)
    real, imag = _complex_dft_axis(real, imag, axis=1)
    return _float32(real), _float32(imag)


def _hermitian_edge_columns(real, imag, width: int):
    """Makes the DC (and even-W Nyquist) column Hermitian along H.

    Those columns of a real signal's half spectrum satisfy Z[k] = conj(Z[-k]).
    A learned filter breaks that; numpy and PyTorch on CPU then drop the
    imaginary part after the inverse DFT along H, which equals replacing each
    such column by its Hermitian part (Z[k] + conj(Z[-k])) / 2. Doing that
    explicitly gives every FFT backend (pocketfft on CPU, cuFFT on GPU) a
    valid input, so all of them agree with numpy and with the matmul path.
    """
    (height,) = spatial_dims(real, (1,))
    edges = _edge_columns(width)
    if is_static_size(height):
        mirror = np.array([0, *range(height - 1, 0, -1)], dtype="int32")
    else:
        mirror = ops.mod(-ops.arange(height), height)
    real_part = (real + ops.take(real, mirror, axis=1)) * 0.5
    imag_part = (imag - ops.take(imag, mirror, axis=1)) * 0.5
    return real + edges * (real_part - real), imag + edges * (imag_part - imag)


def _edge_columns(width):
    """(1, 1, W // 2 + 1, 1) float32: 1 on the DC and even-W Nyquist columns, 0 elsewhere."""
    if is_static_size(width):
        edges = np.zeros((1, 1, width // 2 + 1, 1), dtype=np.float32)
        edges[..., 0, :] = 1.0
        if width % 2 == 0:
            edges[..., -1, :] = 1.0
        return _const(edges)
    bins = ops.arange(width // 2 + 1)
    last = ops.logical_and(ops.equal(width % 2, 0), ops.equal(bins, width // 2))
    return ops.cast(ops.logical_or(ops.equal(bins, 0), last), "float32")[None, None, :, None]


def irfft2(real, imag, width: int, fft_impl: str = "auto"):
    """Inverse of :func:`rfft2`: (B, H, W // 2 + 1, C) spectrum to (B, H, W, C).

    Args:
        real: real part of the half spectrum, float32.
        imag: imaginary part, same shape.
        width: W of the output (needed because W // 2 + 1 is not invertible),
            an int or, for sizes unknown when tracing, a scalar tensor.
        fft_impl: "auto", "fft" or "matmul".

    Returns:
        float32 tensor (B, H, W, C) (bfloat16 on the
        "matmul" path under :func:`set_dft_precision` ("bfloat16")).
    """
    (height,) = spatial_dims(real, (1,))
    static = is_static_size(height, width)
    real = _float32(real)
    imag = _float32(imag)
    if resolve_fft_impl(fft_impl, height * width if static else None) == "fft":
        batch, channels = spatial_dims(real, (0, 3))
        real, imag = _hermitian_edge_columns(real, imag, width)
        out = _native_irfft2(real, imag, height, width)
        return out if static else _with_dims(out, (batch, height, width, channels))
    if static and height * width <= DENSE_DFT_MAX_TOKENS:
        return _dense_irfft2(real, imag, height, width)
    scale = _ortho_scale(height, width)
    real, imag = _complex_dft_axis(real, imag, axis=1, inverse=True)
    cos, sin = _inverse_tables(width)
    return _contract_sum(real, imag, cos * scale, -sin * scale, axis=2)


def _filtered(real, imag, weight):
    """A half spectrum times a complex filter (real and imaginary parts last), as (real, imag)."""
    weight = _float32(weight)
    w_real, w_imag = weight[..., 0], weight[..., 1]
    with keep_float():  # sums of products of unlike ranges: no int8 scale holds both
        return real * w_real - imag * w_imag, real * w_imag + imag * w_real


def global_filter(x, weight, fft_impl: str = "auto"):
    """GFNet's spectral filtering: ``irfft2(rfft2(x) * K)``, orthonormal.

    Args:
        x: real tensor (B, H, W, C); cast to float32 (H and W may be
            unknown when tracing, see :func:`rfft2`).
        weight: the complex filter K as (H, W // 2 + 1, C, 2), real and
            imaginary parts last (or broadcastable to it).
        fft_impl: "auto", "fft" or "matmul".

    Returns:
        float32 tensor (B, H, W, C) (bfloat16 on the
        "matmul" path under :func:`set_dft_precision` ("bfloat16")).
    """
    real, imag = _filtered(*rfft2(x, fft_impl), weight)
    return irfft2(real, imag, spatial_dims(x, (2,))[0], fft_impl)


def fourier_mix_real(x, fft_impl: str = "auto"):
    """Real part of the unnormalised DFT over every axis but the batch axis.

    For (B, L, D) this is FNet's ``Re(F_seq(F_hidden(x)))``; for image tokens
    (B, H, W, D) it adds the second spatial axis. The result grows with the
    number of mixed elements (up to L * D times the input mean), so it is
    returned in float32 and may exceed the float16 range.

    Args:
        x: real tensor of rank 3 or 4 with a static last dimension; the
            others may be unknown until run time (any-length FNet): "fft"
            needs no length, "matmul" builds its DFT tables in the graph
            from the run-time length.
        fft_impl: "auto", "fft" or "matmul".

    Returns:
        float32 tensor of the same shape (bfloat16 on the
        "matmul" path under :func:`set_dft_precision` ("bfloat16")).
    """
    rank = len(x.shape)
    if rank not in (3, 4) or x.shape[-1] is None:
        raise ValueError(
            "fourier_mix_real needs a rank-3 or rank-4 tensor with a static last "
            f"dimension; received shape {tuple(x.shape)}."
        )
    if resolve_fft_impl(fft_impl) == "fft":
        return _native_fft_real(_float32(x))
    axes = list(range(1, rank))
    real, imag = _complex_dft_axis(x, None, axes[0])
    for axis in axes[1:-1]:
        real, imag = _complex_dft_axis(real, imag, axis)
    n = x.shape[axes[-1]]
    cos, sin = _dft_tables(n, n)
    # Re((r + i q)(cos - i sin)) = r cos + q sin: the last axis needs only the real part.
    return _contract_sum(real, imag, cos, sin, axes[-1])


# ----------------------------------------------------------------------------- 1D


def _native_rfft(x):
    """Orthonormal rfft over axis 1 of float32 (B, L, C) with the backend's FFT."""
    backend = keras.config.backend()
    if backend == "jax":
        import jax.numpy as jnp

        spectrum = jnp.fft.rfft(x, axis=1, norm="ortho")
        return jnp.real(spectrum), jnp.imag(spectrum)
    if backend == "torch":
        import torch

        spectrum = torch.fft.rfft(x, dim=1, norm="ortho")
        return spectrum.real, spectrum.imag
    if backend == "numpy":
        spectrum = np.fft.rfft(x, axis=1, norm="ortho").astype(np.complex64)
        return spectrum.real, spectrum.imag
    import tensorflow as tf

    (length,) = spatial_dims(x, (1,))
    scale = _ortho_scale(length, 1)

    @tf.custom_gradient
    def transform(x):
        spectrum = tf.transpose(tf.signal.rfft(tf.transpose(x, [0, 2, 1])), [0, 2, 1])

        def gradient(d_real, d_imag):
            # The adjoint of the orthonormal rfft: the orthonormal irfft of the upstream
            # gradient with every bin the half spectrum stands for twice halved.
            halves = 0.5 + 0.5 * _edge_columns(length)[0]
            return _native_irfft(d_real * halves, d_imag * halves, length)

        return (tf.math.real(spectrum) * scale, tf.math.imag(spectrum) * scale), gradient

    return transform(x)


def _native_irfft(real, imag, length):
    """Orthonormal irfft over axis 1 of a (B, L // 2 + 1, C) spectrum whose edge bins are real."""
    backend = keras.config.backend()
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        return jnp.fft.irfft(jax.lax.complex(real, imag), n=length, axis=1, norm="ortho")
    if backend == "torch":
        import torch

        return torch.fft.irfft(torch.complex(real, imag), n=length, dim=1, norm="ortho")
    if backend == "numpy":
        out = np.fft.irfft(real + 1j * imag, n=length, axis=1, norm="ortho")
        return out.astype(np.float32)
    import tensorflow as tf

    spectrum = tf.complex(tf.transpose(real, [0, 2, 1]), tf.transpose(imag, [0, 2, 1]))
    out = tf.transpose(tf.signal.irfft(spectrum, fft_length=[length]), [0, 2, 1])
    return out / _ortho_scale(length, 1)


def rfft(x, fft_impl: str = "auto"):
    """Orthonormal real FFT over axis 1 of a (B, L, C) sequence.

    Args:
        x: real tensor (B, L, C); cast to float32. L may be unknown when
            tracing: "auto" then picks "fft" (except on a TPU), and "matmul"
            builds its DFT tables in the graph from the run-time length.
        fft_impl: "auto", "fft" or "matmul". "matmul" is one product with
            the (L, L // 2 + 1) cosine and sine tables per part, which a
            builtin-only TFLite converter accepts.

    Returns:
        (real, imag), each float32 (B, L // 2 + 1, C).
    """
    (length,) = spatial_dims(x, (1,))
    static = is_static_size(length)
    if resolve_fft_impl(fft_impl, length if static else None) == "fft":
        real, imag = _native_rfft(_float32(x))
        if static:
            return real, imag
        dims = (*spatial_dims(x, (0,)), length // 2 + 1, *spatial_dims(x, (2,)))
        return _with_dims(real, dims), _with_dims(imag, dims)
    scale = _ortho_scale(length, 1)
    cos, sin = _tables(length, length // 2 + 1)
    x = _dft_operand(x)
    return _float32(_contract(x, cos * scale, axis=1)), _float32(_contract(x, -sin * scale, axis=1))


def irfft(real, imag, length, fft_impl: str = "auto"):
    """Inverse of :func:`rfft`: (B, L // 2 + 1, C) spectrum to (B, L, C).

    The imaginary parts of the DC bin and (even L) the Nyquist bin are
    ignored, as by ``numpy.fft.irfft`` and ``torch.fft.irfft``.

    Args:
        real: real part of the half spectrum, float32.
        imag: imaginary part, same shape.
        length: L of the output, an int or, for lengths unknown when
            tracing, a scalar tensor.
        fft_impl: "auto", "fft" or "matmul".

    Returns:
        float32 tensor (B, L, C) (bfloat16 on the
        "matmul" path under :func:`set_dft_precision` ("bfloat16")).
    """
    static = is_static_size(length)
    real = _float32(real)
    imag = _float32(imag)
    if resolve_fft_impl(fft_impl, length if static else None) == "fft":
        batch, channels = spatial_dims(real, (0, 2))
        imag = imag * (1.0 - _edge_columns(length)[0])
        out = _native_irfft(real, imag, length)
        return out if static else _with_dims(out, (batch, length, channels))
    scale = _ortho_scale(length, 1)
    cos, sin = _inverse_tables(length)
    real, imag = _dft_operand(real), _dft_operand(imag)
    return _contract(real, cos * scale, axis=1) - _contract(imag, sin * scale, axis=1)


def global_filter_1d(x, weight, fft_impl: str = "auto"):
    """The 1D global filter ``irfft(rfft(x) * K)``, orthonormal, over axis 1 of (B, L, C).

    Args:
        x: real tensor (B, L, C); cast to float32.
        weight: the complex filter K as (L // 2 + 1, C, 2), real and
            imaginary parts last (or broadcastable to it).
        fft_impl: "auto", "fft" or "matmul".

    Returns:
        float32 tensor (B, L, C) (bfloat16 on the
        "matmul" path under :func:`set_dft_precision` ("bfloat16")).
    """
    real, imag = _filtered(*rfft(x, fft_impl), weight)
    return irfft(real, imag, spatial_dims(x, (1,))[0], fft_impl)
