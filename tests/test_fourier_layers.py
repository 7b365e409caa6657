"""GlobalFilter, AFNO2D and FourierMixing: shared checks and NumPy references."""

import re

import keras
import numpy as np
import pytest

from keras_fourier.layers import AFNO2D, FourierMixing, GlobalFilter
from keras_fourier.layers.fourier import low_frequency_mask
from keras_fourier.weights import resize
from tests.harness import (
    check_run_time_sized_graph,
    fft_and_matmul_outputs,
    random_input,
    run_layer_checks,
    tflite_max_error,
    to_numpy,
)

# The layer, model and weight tests run under every Keras backend (tests/conftest.py).
pytestmark = pytest.mark.multi_backend

AFNO_WEIGHTS = {"w1": (2, 2, 2, 4), "b1": (2, 2, 4), "w2": (2, 2, 4, 2), "b2": (2, 2, 2)}


@pytest.mark.parametrize(
    ("make", "shape", "weights"),
    [
        (GlobalFilter, (2, 6, 5, 4), {"complex_weight": (6, 3, 4, 2)}),
        (GlobalFilter, (2, 4, 8, 3), {"complex_weight": (4, 5, 3, 2)}),
        (
            lambda **kw: GlobalFilter(height=3, width=2, **kw),
            (2, 4, 8, 3),
            {"complex_weight": (3, 2, 3, 2)},
        ),
        (
            lambda **kw: AFNO2D(num_blocks=2, hidden_size_factor=2, **kw),
            (2, 6, 5, 4),
            AFNO_WEIGHTS,
        ),
        (
            lambda **kw: AFNO2D(
                num_blocks=2, hidden_size_factor=2, hard_thresholding_fraction=0.5, **kw
            ),
            (2, 8, 7, 4),
            AFNO_WEIGHTS,
        ),
        (FourierMixing, (2, 6, 5, 4), {}),
        (FourierMixing, (2, 12, 6), {}),
    ],
    ids=["gf-6x5", "gf-4x8", "gf-resized", "afno", "afno-hard", "fnet-image", "fnet-text"],
)
def test_shared_checks(make, shape, weights, tmp_path):
    run_layer_checks(make, shape, weights, str(tmp_path))


def _numpy_global_filter(x, complex_weight):
    height, width = x.shape[1:3]
    spectrum = np.fft.rfft2(x, axes=(1, 2), norm="ortho")
    spectrum = spectrum * (complex_weight[..., 0] + 1j * complex_weight[..., 1])
    return np.fft.irfft2(spectrum, s=(height, width), axes=(1, 2), norm="ortho")


@pytest.mark.parametrize("impl", ["fft", "matmul"])
@pytest.mark.parametrize("size", [(6, 6), (7, 5), (4, 9)])
def test_global_filter_matches_numpy(impl, size):
    x = random_input((2, *size, 3))
    layer = GlobalFilter(fft_impl=impl)
    out = to_numpy(layer(x))
    weight = layer.complex_weight.numpy()
    assert np.std(weight) == pytest.approx(0.02, rel=0.35)
    np.testing.assert_allclose(out, _numpy_global_filter(x, weight), atol=1e-5)


def test_global_filter_is_a_depthwise_circular_convolution():
    # With ortho rfft2/irfft2, y = x (*) k where k = irfft2(K) (backward norm),
    # a full-size circular depthwise kernel per channel.
    x = random_input((1, 5, 6, 2))
    layer = GlobalFilter()
    out = to_numpy(layer(x))
    weight = layer.complex_weight.numpy()
    kernel = np.fft.irfft2(weight[..., 0] + 1j * weight[..., 1], s=(5, 6), axes=(0, 1))
    expected = np.zeros_like(out)
    for dy in range(5):
        for dx in range(6):
            shifted = np.roll(x, shift=(dy, dx), axis=(1, 2))
            expected += shifted * kernel[dy, dx][None, None, None, :]
    np.testing.assert_allclose(out, expected, atol=1e-5)


def _numpy_afno(x, w1, b1, w2, b2, num_blocks, threshold, fraction):
    batch, height, width, channels = x.shape
    spectrum = np.fft.rfft2(x, axes=(1, 2), norm="ortho")
    spectrum = spectrum.reshape(batch, height, width // 2 + 1, num_blocks, -1)
    w1c, b1c = w1[0] + 1j * w1[1], b1[0] + 1j * b1[1]
    w2c, b2c = w2[0] + 1j * w2[1], b2[0] + 1j * b2[1]
    hidden = np.einsum("...bi,bio->...bo", spectrum, w1c) + b1c
    hidden = np.maximum(hidden.real, 0) + 1j * np.maximum(hidden.imag, 0)
    out = np.einsum("...bi,bio->...bo", hidden, w2c) + b2c
    out = out * low_frequency_mask(height, width, fraction)[:, :, None, None]

    def shrink(v):
        return np.sign(v) * np.maximum(np.abs(v) - threshold, 0)

    out = (shrink(out.real) + 1j * shrink(out.imag)).reshape(
        batch, height, width // 2 + 1, channels
    )
    return np.fft.irfft2(out, s=(height, width), axes=(1, 2), norm="ortho") + x


@pytest.mark.parametrize("impl", ["fft", "matmul"])
@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_afno2d_matches_numpy(impl, fraction):
    x = random_input((2, 8, 6, 8))
    layer = AFNO2D(
        num_blocks=4,
        sparsity_threshold=0.01,
        hard_thresholding_fraction=fraction,
        hidden_size_factor=2,
        fft_impl=impl,
    )
    out = to_numpy(layer(x))
    # Larger weights than the 0.02 init so the MLP, ReLU and shrink all act.
    rng = np.random.default_rng(3)
    layer.set_weights([rng.standard_normal(w.shape).astype("float32") * 0.5 for w in layer.weights])
    out = to_numpy(layer(x))
    w1, b1, w2, b2 = (w.numpy() for w in (layer.w1, layer.b1, layer.w2, layer.b2))
    expected = _numpy_afno(x, w1, b1, w2, b2, 4, 0.01, fraction)
    np.testing.assert_allclose(out, expected, atol=1e-4)


def test_low_frequency_mask_keeps_lowest_modes_on_both_axes():
    mask = low_frequency_mask(8, 8, 0.5)
    # H: frequencies min(k, 8 - k) = 0,1,2,3,4,3,2,1; 5 distinct, keep int(2.5) = 2 -> {0, 1}.
    np.testing.assert_array_equal(mask[:, 0], [1, 1, 0, 0, 0, 0, 0, 1])
    # W: 5 half-spectrum bins, keep 2.
    np.testing.assert_array_equal(mask[0], [1, 1, 0, 0, 0])
    assert low_frequency_mask(7, 9, 1.0).all()


@pytest.mark.parametrize("shape", [(2, 16, 8), (2, 5, 6, 4)])
def test_fourier_mixing_matches_numpy(shape):
    x = random_input(shape)
    expected = np.fft.fftn(x, axes=tuple(range(1, len(shape)))).real
    for impl in ("fft", "matmul"):
        out = to_numpy(FourierMixing(fft_impl=impl)(x))
        np.testing.assert_allclose(out, expected, atol=1e-4)


@pytest.mark.parametrize(
    "make",
    [GlobalFilter, lambda **kw: AFNO2D(num_blocks=2, **kw), FourierMixing],
    ids=["global_filter", "afno", "fourier_mixing"],
)
@pytest.mark.parametrize("size", [(6, 6), (7, 5), (8, 9)])
def test_fft_and_matmul_agree(make, size):
    out_fft, out_mm = fft_and_matmul_outputs(make, random_input((2, *size, 4)))
    scale = max(1.0, np.abs(out_fft).max())
    np.testing.assert_allclose(out_mm / scale, out_fft / scale, atol=1e-5)


@pytest.mark.parametrize(
    "make",
    [GlobalFilter, lambda **kw: AFNO2D(num_blocks=4, **kw), FourierMixing],
    ids=["global_filter", "afno", "fourier_mixing"],
)
@pytest.mark.parametrize("size", [(14, 14), (12, 10)])
@pytest.mark.single_backend
def test_tflite_builtin_ops_only(make, size):
    error = tflite_max_error(lambda **kw: make(fft_impl="matmul", **kw), (1, *size, 8))
    assert error <= 1e-4


def test_parameter_counts_follow_official_shapes():
    afno = AFNO2D(num_blocks=8)
    afno.build((None, 14, 14, 768))
    assert afno.count_params() == 297_984
    gf = GlobalFilter()
    gf.build((None, 14, 14, 384))
    assert gf.count_params() == 14 * 8 * 384 * 2


def test_fourier_weights_stay_float32_under_mixed_precision():
    for layer in (
        GlobalFilter(dtype="mixed_float16"),
        AFNO2D(num_blocks=2, dtype="mixed_bfloat16"),
    ):
        out = layer(random_input((1, 4, 4, 4)))
        assert keras.backend.standardize_dtype(out.dtype) == layer.compute_dtype
        assert all(w.dtype == "float32" for w in layer.weights)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: GlobalFilter(fft_impl="fftw"), "fft_impl='fftw'"),
        (lambda: AFNO2D(num_blocks=0), "num_blocks=0"),
        (lambda: AFNO2D(sparsity_threshold=-1.0), "sparsity_threshold=-1.0"),
        (lambda: AFNO2D(hard_thresholding_fraction=1.5), "hard_thresholding_fraction=1.5"),
        (lambda: AFNO2D(hidden_size_factor=0), "hidden_size_factor=0"),
        (lambda: FourierMixing(fft_impl=None), "fft_impl=None"),
    ],
)
def test_bad_arguments_name_argument_and_value(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_afno2d_channels_must_divide_into_blocks():
    with pytest.raises(ValueError, match=r"received 12 channels with num_blocks=8"):
        AFNO2D(num_blocks=8).build((None, 4, 4, 12))


def test_global_filter_without_a_size_needs_a_static_input_size():
    with pytest.raises(ValueError, match=r"H and W must then be static.*None"):
        GlobalFilter().build((None, None, 8, 4))


@pytest.mark.parametrize("make", [GlobalFilter, lambda: AFNO2D(num_blocks=2)], ids=["gf", "afno"])
def test_layer_built_for_one_channel_count_refuses_another(make):
    layer = make()
    layer(random_input((1, 6, 6, 2)))
    expected = "C = 2; received inputs of shape (1, 6, 6, 4)"
    with pytest.raises(ValueError, match=re.escape(expected)):
        layer(random_input((1, 6, 6, 4)))


@pytest.mark.parametrize("size", [(6, 6), (9, 5), (4, 10)])
def test_global_filter_at_any_size_equals_a_filter_built_there_from_resized_weights(size):
    # The in-graph resize (bicubic, align_corners=True) agrees with the checkpoint
    # conversion's NumPy resize; at the built size the filter is used as it is.
    layer = GlobalFilter(height=6, width=4)
    layer.build((None, None, None, 3))
    weight = random_input((6, 4, 3, 2), seed=3)
    layer.complex_weight.assign(weight)
    x = random_input((2, *size, 3))
    resized = resize.resize_global_filter(weight, (size[0], size[1] // 2 + 1))
    fixed = GlobalFilter()
    fixed.build(x.shape)
    fixed.complex_weight.assign(resized)
    np.testing.assert_allclose(to_numpy(layer(x)), to_numpy(fixed(x)), atol=1e-5)
    np.testing.assert_allclose(to_numpy(layer(x)), _numpy_global_filter(x, resized), atol=1e-5)
    if size == (6, 6):
        np.testing.assert_array_equal(to_numpy(layer(x)), to_numpy(fixed(x)))


def test_afno2d_runs_at_any_size_with_the_same_weights():
    layer = AFNO2D(num_blocks=2, hard_thresholding_fraction=0.5)
    layer(random_input((1, 8, 8, 4)))
    for size in [(6, 10), (8, 8)]:
        x = random_input((2, *size, 4), seed=4)
        fixed = AFNO2D(num_blocks=2, hard_thresholding_fraction=0.5)
        fixed.build(x.shape)
        fixed.set_weights(layer.get_weights())
        np.testing.assert_array_equal(to_numpy(layer(x)), to_numpy(fixed(x)))


@pytest.mark.single_backend
@pytest.mark.parametrize("impl", ["fft", "matmul"])
def test_run_time_sized_graph_equals_eager(impl):
    # A TensorFlow graph traced with unknown H and W (an any-size model under
    # tf.function or model.predict) resizes and transforms at the run-time size.
    layers = [
        GlobalFilter(height=6, width=4, fft_impl=impl),
        AFNO2D(num_blocks=2, hard_thresholding_fraction=0.5, fft_impl=impl),
    ]
    for layer in layers:
        layer.build((None, None, None, 4))
        check_run_time_sized_graph(layer, [(2, 6, 6, 4), (2, 9, 5, 4)])


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -0.1, "0.1", True])
def test_afno_sparsity_threshold_must_be_finite_and_non_negative(value):
    with pytest.raises(ValueError, match=re.escape(f"Received: sparsity_threshold={value!r}")):
        AFNO2D(sparsity_threshold=value)


def test_fourier_mixing_rejects_other_ranks():
    with pytest.raises(ValueError, match=r"received input_shape=\(None, 8\)"):
        FourierMixing().build((None, 8))


@pytest.mark.slow
def test_global_filter_trains_under_xla_in_a_model():
    inputs = keras.Input((6, 6, 4))
    outputs = keras.layers.GlobalAveragePooling2D()(GlobalFilter()(inputs))
    model = keras.Model(inputs, keras.layers.Dense(2)(outputs))
    model.compile("adam", "mse", jit_compile=True)
    x, y = random_input((8, 6, 6, 4)), random_input((8, 2), seed=1)
    history = model.fit(x, y, epochs=3, batch_size=4, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert np.all(np.isfinite(model.layers[1].complex_weight.numpy()))
