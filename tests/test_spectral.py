"""The spectral core against numpy.fft, for both implementations."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_fourier.layers import spectral
from tests.harness import random_input, to_numpy

# The layer, model and weight tests run under every Keras backend (tests/conftest.py).
pytestmark = pytest.mark.multi_backend

# Up to 256 tokens the matmul path is one dense 2D DFT matrix; (17, 16) and (16, 18) take the
# per-axis matrices.
SIZES = [(4, 6), (5, 7), (6, 5), (7, 7), (8, 8), (14, 14), (12, 10), (17, 16), (16, 18)]


@pytest.mark.parametrize("impl", ["fft", "matmul"])
@pytest.mark.parametrize("size", SIZES)
def test_rfft2_matches_numpy_ortho(impl, size):
    x = random_input((2, *size, 3))
    expected = np.fft.rfft2(x, axes=(1, 2), norm="ortho")
    real, imag = spectral.rfft2(ops.convert_to_tensor(x), impl)
    assert keras.backend.standardize_dtype(real.dtype) == "float32"
    assert tuple(real.shape) == expected.shape
    np.testing.assert_allclose(to_numpy(real), expected.real, atol=1e-5)
    np.testing.assert_allclose(to_numpy(imag), expected.imag, atol=1e-5)


@pytest.mark.parametrize("impl", ["fft", "matmul"])
@pytest.mark.parametrize("size", SIZES)
def test_irfft2_matches_numpy_on_non_hermitian_spectra(impl, size):
    # A random half spectrum has non-zero imaginary parts in the DC column
    # and (even W) the Nyquist column; numpy/torch ignore them after the
    # inverse DFT along H, and so must both implementations.
    height, width = size
    rng = np.random.default_rng(1)
    shape = (2, height, width // 2 + 1, 3)
    spectrum = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    expected = np.fft.irfft2(spectrum, s=size, axes=(1, 2), norm="ortho")
    out = spectral.irfft2(
        ops.convert_to_tensor(spectrum.real, "float32"),
        ops.convert_to_tensor(spectrum.imag, "float32"),
        width,
        impl,
    )
    np.testing.assert_allclose(to_numpy(out), expected, atol=1e-5)


@pytest.mark.parametrize("impl", ["fft", "matmul"])
def test_round_trip_is_identity(impl):
    x = random_input((1, 6, 9, 2))
    real, imag = spectral.rfft2(ops.convert_to_tensor(x), impl)
    np.testing.assert_allclose(to_numpy(spectral.irfft2(real, imag, 9, impl)), x, atol=1e-5)


@pytest.mark.parametrize("impl", ["fft", "matmul"])
@pytest.mark.parametrize("shape", [(2, 16, 8), (2, 7, 5, 6), (1, 5, 4, 3)])
def test_fourier_mix_real_is_real_part_of_unnormalised_dft(impl, shape):
    x = random_input(shape)
    expected = np.fft.fftn(x, axes=tuple(range(1, len(shape)))).real
    out = to_numpy(spectral.fourier_mix_real(ops.convert_to_tensor(x), impl))
    scale = np.sqrt(np.prod(shape[1:]))
    np.testing.assert_allclose(out / scale, expected / scale, atol=1e-5)


def test_half_precision_inputs_are_transformed_in_float32():
    x = random_input((1, 4, 4, 2))
    expected = np.fft.rfft2(x.astype(np.float16).astype(np.float64), axes=(1, 2), norm="ortho")
    for impl in ("fft", "matmul"):
        real, _ = spectral.rfft2(ops.convert_to_tensor(x, "float16"), impl)
        assert keras.backend.standardize_dtype(real.dtype) == "float32"
        np.testing.assert_allclose(to_numpy(real), expected.real, atol=1e-5)
        mixed = spectral.fourier_mix_real(ops.convert_to_tensor(x, "bfloat16"), impl)
        assert keras.backend.standardize_dtype(mixed.dtype) == "float32"


def test_auto_resolves_by_device_and_size(monkeypatch):
    assert spectral.resolve_fft_impl("auto") == "fft"
    assert spectral.resolve_fft_impl("matmul") == "matmul"
    monkeypatch.setattr(spectral, "_on_cpu", lambda: True)
    assert spectral.resolve_fft_impl("auto", 14 * 14) == "matmul"
    assert spectral.resolve_fft_impl("auto", spectral.DENSE_DFT_MAX_TOKENS + 1) == "fft"
    monkeypatch.setattr(spectral, "_on_cpu", lambda: False)
    assert spectral.resolve_fft_impl("auto", 14 * 14) == "fft"
    monkeypatch.setattr(spectral, "_on_tpu", lambda: True)
    assert spectral.resolve_fft_impl("auto") == "matmul"
    assert spectral.resolve_fft_impl("fft") == "fft"


def test_auto_resolves_with_the_real_device_queries_of_this_machine():
    # The same choice as above, with nothing replaced: what a user's "auto" gets here.
    if keras.config.backend() == "torch":
        import torch

        accelerated = torch.cuda.is_available()
    else:
        accelerated = any(not d.startswith("cpu") for d in keras.distribution.list_devices())
    assert spectral._on_cpu() is not accelerated
    assert not spectral._on_tpu() or accelerated
    assert spectral.resolve_fft_impl("auto", 14 * 14) == ("fft" if accelerated else "matmul")
    assert spectral.resolve_fft_impl("auto", spectral.DENSE_DFT_MAX_TOKENS + 1) == (
        "matmul" if spectral._on_tpu() else "fft"
    )


def test_bad_fft_impl_names_the_value():
    with pytest.raises(ValueError, match=r"fft_impl='cufft'"):
        spectral.validate_fft_impl("cufft")


def test_auto_is_matmul_on_backends_without_an_fft(monkeypatch):
    monkeypatch.setattr(keras.config, "backend", lambda: "openvino")
    assert spectral.resolve_fft_impl("auto") == "matmul"
    with pytest.raises(ValueError, match="Received: fft_impl='fft'"):
        spectral.resolve_fft_impl("fft")


@pytest.mark.single_backend
@pytest.mark.parametrize("impl", ["fft", "matmul"])
def test_run_time_spatial_size_matches_numpy(impl):
    # Any-size models trace with unknown H and W: the FFT takes the run-time size, the
    # matmul path builds its DFT tables in the graph; both keep the static channel count.
    import tensorflow as tf

    weight = random_input((1, 1, 3, 2), seed=1)
    traced = tf.function(
        lambda t: spectral.global_filter(t, weight, impl),
        input_signature=[tf.TensorSpec((None, None, None, 3), tf.float32)],
    )
    assert tuple(traced.get_concrete_function().structured_outputs.shape) == (None, None, None, 3)
    for size in [(6, 8), (5, 7)]:
        x = random_input((2, *size, 3))
        spectrum = np.fft.rfft2(x, axes=(1, 2), norm="ortho") * (
            weight[..., 0] + 1j * weight[..., 1]
        )
        expected = np.fft.irfft2(spectrum, s=size, axes=(1, 2), norm="ortho")
        np.testing.assert_allclose(traced(x).numpy(), expected, atol=1e-5)


@pytest.mark.parametrize("size", [(6, 8), (5, 7)])
def test_fft_path_hands_the_backend_a_hermitian_spectrum(size):
    # So cuFFT and pocketfft, which may treat invalid edge columns differently,
    # both reproduce numpy's irfft2.
    height, width = size
    rng = np.random.default_rng(2)
    shape = (1, height, width // 2 + 1, 2)
    spectrum = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    real, imag = spectral._hermitian_edge_columns(
        ops.convert_to_tensor(spectrum.real, "float32"),
        ops.convert_to_tensor(spectrum.imag, "float32"),
        width,
    )
    projected = to_numpy(real) + 1j * to_numpy(imag)
    edges = [0, width // 2] if width % 2 == 0 else [0]
    mirror = [0, *range(height - 1, 0, -1)]
    for column in edges:
        np.testing.assert_allclose(
            projected[:, :, column], np.conj(projected[:, mirror, column]), atol=1e-6
        )
    interior = [k for k in range(width // 2 + 1) if k not in edges]
    np.testing.assert_array_equal(
        projected[:, :, interior], spectrum[:, :, interior].astype("complex64")
    )
    np.testing.assert_allclose(
        np.fft.irfft2(projected, s=size, axes=(1, 2)),
        np.fft.irfft2(spectrum, s=size, axes=(1, 2)),
        atol=1e-6,
    )


@pytest.mark.single_backend
@pytest.mark.parametrize("size", [(6, 8), (5, 7)])
def test_tensorflow_fft_gradient_is_the_adjoint_without_an_int32_transpose(size):
    # TensorFlow's own RFFT2D gradient builds an int32 transpose, which oneDNN-enabled builds
    # (the default on AVX-512 CPUs) report as "oneDNN supports DT_INT32 only on platforms with
    # AVX-512" once sizes are known only at run time; the fft path's gradient is one irfft2.
    import tensorflow as tf

    x = tf.constant(random_input((2, *size, 3)))
    cotangents = [
        tf.constant(random_input((2, size[0], size[1] // 2 + 1, 3), seed=s)) for s in (1, 2)
    ]

    def loss(t, impl):
        if impl == "tensorflow":
            spectrum = tf.signal.rfft2d(tf.transpose(t, [0, 3, 1, 2])) / np.sqrt(size[0] * size[1])
            parts = [
                tf.transpose(part(spectrum), [0, 2, 3, 1]) for part in (tf.math.real, tf.math.imag)
            ]
        else:
            parts = spectral.rfft2(t, impl)
        return sum(tf.reduce_sum(part * c) for part, c in zip(parts, cotangents, strict=True))

    traced = tf.function(
        lambda t: tf.gradients(loss(t, "fft"), t)[0],
        input_signature=[tf.TensorSpec((None, None, None, 3), tf.float32)],
    )
    for impl in ("tensorflow", "matmul"):
        with tf.GradientTape() as tape:
            tape.watch(x)
            expected = tape.gradient(loss(x, impl), x)
        np.testing.assert_allclose(traced(x).numpy(), expected.numpy(), atol=2e-6)
    graph = traced.get_concrete_function().graph.get_operations()
    assert any(op.type == "IRFFT2D" for op in graph)  # the gradient, traced
    int32 = [op.name for op in graph if op.type == "Transpose" and op.get_attr("T") == tf.int32]
    assert not int32


# bfloat16 rounds each product to 8 significant bits: the transforms stay within 3% of the
# largest output value (2 to 3 roundings in a row on the per-axis path).
BF16_DFT_TOLERANCE = 0.03


def _relative_error(actual, expected) -> float:
    return float(np.max(np.abs(to_numpy(actual) - expected)) / np.max(np.abs(expected)))


@pytest.mark.parametrize("size", [(14, 14), (17, 16)])
def test_bfloat16_dft_products_agree_with_float32(size):
    x = random_input((2, *size, 4))
    weight = random_input((size[0], size[1] // 2 + 1, 4, 2))
    expected_real, _ = (to_numpy(part) for part in spectral.rfft2(ops.convert_to_tensor(x)))
    expected = to_numpy(spectral.global_filter(x, weight, "matmul"))
    assert spectral.get_dft_precision() == "float32"
    with spectral.dft_precision_scope("bfloat16"):
        real, _ = spectral.rfft2(ops.convert_to_tensor(x), "matmul")
        out = spectral.global_filter(x, weight, "matmul")
        sequence = spectral.global_filter_1d(x[:, 0], weight[0], "matmul")
        mixed = spectral.fourier_mix_real(x[:, :5], "matmul")
        # The FFT path has no bfloat16 products: unchanged.
        exact = spectral.global_filter(x, weight, "fft")
    assert spectral.get_dft_precision() == "float32"
    # Spectra stay float32 for the filters; the inverse transform ends in bfloat16.
    assert keras.backend.standardize_dtype(real.dtype) == "float32"
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    assert keras.backend.standardize_dtype(exact.dtype) == "float32"
    assert 0 < _relative_error(real, expected_real) < BF16_DFT_TOLERANCE
    assert 0 < _relative_error(ops.cast(out, "float32"), expected) < BF16_DFT_TOLERANCE
    np.testing.assert_allclose(to_numpy(exact), expected, atol=1e-5)
    expected_1d = to_numpy(spectral.global_filter_1d(x[:, 0], weight[0], "matmul"))
    assert _relative_error(ops.cast(sequence, "float32"), expected_1d) < BF16_DFT_TOLERANCE
    expected_mixed = to_numpy(spectral.fourier_mix_real(x[:, :5], "matmul"))
    assert _relative_error(ops.cast(mixed, "float32"), expected_mixed) < BF16_DFT_TOLERANCE


def test_bad_dft_precision_names_the_value():
    with pytest.raises(ValueError, match="Received: precision='float16'"):
        spectral.set_dft_precision("float16")
    assert spectral.get_dft_precision() == "float32"
