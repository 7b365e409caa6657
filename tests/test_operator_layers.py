"""AFNO1D, GlobalFilter1D, the FNO mixers and FourCastNet's AFNO2D mode slicing.

Shared checks through the harness, NumPy references of the official
PyTorch code (NVlabs/AFNO-transformer ``afno1d.py``, NVlabs/FourCastNet
``networks/afnonet.py``, FNO's ``fourier_1d.py``/``fourier_2d.py``) written
here from their rules, fft vs matmul, and builtin-only TFLite export.
"""

import re

import numpy as np
import pytest

from keras_fourier.layers import AFNO1D, AFNO2D, FNO1D, FNO2D, GlobalFilter1D, PeriodicPad2D
from keras_fourier.layers.fourier import fourcastnet_mode_mask
from tests.harness import (
    check_run_time_sized_graph,
    fft_and_matmul_outputs,
    random_input,
    run_layer_checks,
    tflite_max_error,
    to_numpy,
)

pytestmark = pytest.mark.multi_backend

AFNO_WEIGHTS = {"w1": (2, 2, 2, 4), "b1": (2, 2, 4), "w2": (2, 2, 4, 2), "b2": (2, 2, 2)}


@pytest.mark.parametrize(
    ("make", "shape", "weights"),
    [
        (GlobalFilter1D, (2, 9, 4), {"complex_weight": (5, 4, 2)}),
        (lambda **kw: GlobalFilter1D(length=3, **kw), (2, 8, 3), {"complex_weight": (3, 3, 2)}),
        (lambda **kw: AFNO1D(num_blocks=2, hidden_size_factor=2, **kw), (2, 9, 4), AFNO_WEIGHTS),
        (
            lambda **kw: AFNO1D(
                num_blocks=2, hidden_size_factor=2, hard_thresholding_fraction=0.5, **kw
            ),
            (2, 8, 4),
            AFNO_WEIGHTS,
        ),
        (
            lambda **kw: AFNO2D(
                num_blocks=2,
                hidden_size_factor=2,
                hard_thresholding_fraction=0.5,
                mode_slicing="fourcastnet",
                **kw,
            ),
            (2, 6, 8, 4),
            AFNO_WEIGHTS,
        ),
        (lambda **kw: FNO1D(modes=3, **kw), (2, 8, 4), {"weights1": (4, 4, 3, 2)}),
        (
            lambda **kw: FNO2D(modes_height=2, modes_width=2, **kw),
            (2, 6, 5, 3),
            {"weights1": (3, 3, 2, 2, 2), "weights2": (3, 3, 2, 2, 2)},
        ),
        (lambda **kw: PeriodicPad2D(2, **kw), (2, 4, 6, 3), {}),
    ],
    ids=[
        "gf1d",
        "gf1d-resized",
        "afno1d",
        "afno1d-hard",
        "afno2d-fourcastnet",
        "fno1d",
        "fno2d",
        "periodic-pad",
    ],
)
def test_shared_checks(make, shape, weights, tmp_path):
    run_layer_checks(make, shape, weights, str(tmp_path))


def test_periodic_pad_wraps_longitude_and_zero_pads_latitude():
    x = random_input((1, 3, 5, 2))
    expected = np.pad(
        np.concatenate([x[:, :, -2:], x, x[:, :, :2]], axis=2), [(0, 0), (2, 2)] + [(0, 0)] * 2
    )
    np.testing.assert_array_equal(to_numpy(PeriodicPad2D(2)(x)), expected)


def _shrink(v, threshold):
    return np.sign(v) * np.maximum(np.abs(v) - threshold, 0)


def _afno_mlp(modes, w1, b1, w2, b2, num_blocks):
    """The official block MLP on complex modes (..., C): einsum per block, complex ReLU."""
    shape = modes.shape
    modes = modes.reshape(*shape[:-1], num_blocks, shape[-1] // num_blocks)
    w1c, b1c = w1[0] + 1j * w1[1], b1[0] + 1j * b1[1]
    w2c, b2c = w2[0] + 1j * w2[1], b2[0] + 1j * b2[1]
    hidden = np.einsum("...bi,bio->...bo", modes, w1c) + b1c
    hidden = np.maximum(hidden.real, 0) + 1j * np.maximum(hidden.imag, 0)
    return (np.einsum("...bi,bio->...bo", hidden, w2c) + b2c).reshape(shape)


def _randomise(layer, seed=3):
    # Larger weights than the 0.02 init so the MLP, ReLU and shrink all act.
    rng = np.random.default_rng(seed)
    layer.set_weights([rng.standard_normal(w.shape).astype("float32") * 0.5 for w in layer.weights])
    return [w.numpy() if hasattr(w, "numpy") else to_numpy(w) for w in layer.weights]


def _numpy_afno1d(x, weights, num_blocks, threshold, fraction):
    # afno/afno1d.py: modes [:kept] with kept = int((N // 2 + 1) * fraction), zeros elsewhere.
    length = x.shape[1]
    spectrum = np.fft.rfft(x, axis=1, norm="ortho")
    kept = int((length // 2 + 1) * fraction)
    out = np.zeros_like(spectrum)
    out[:, :kept] = _afno_mlp(spectrum[:, :kept], *weights, num_blocks)
    out = _shrink(out.real, threshold) + 1j * _shrink(out.imag, threshold)
    return np.fft.irfft(out, n=length, axis=1, norm="ortho") + x


@pytest.mark.parametrize("impl", ["fft", "matmul"])
@pytest.mark.parametrize(("length", "fraction"), [(8, 1.0), (11, 0.5)])
def test_afno1d_matches_the_official_rule(impl, fraction, length):
    x = random_input((2, length, 8))
    layer = AFNO1D(
        num_blocks=4, hard_thresholding_fraction=fraction, hidden_size_factor=2, fft_impl=impl
    )
    layer.build(x.shape)
    weights = _randomise(layer)
    expected = _numpy_afno1d(x, weights, 4, 0.01, fraction)
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=1e-4)


def _numpy_fourcastnet_afno(x, weights, num_blocks, threshold, fraction):
    # networks/afnonet.py: T = H // 2 + 1, K = int(T * fraction); only [T-K:T+K, :K] is processed.
    height, width = x.shape[1:3]
    spectrum = np.fft.rfft2(x, axes=(1, 2), norm="ortho")
    total = height // 2 + 1
    kept = int(total * fraction)
    rows, cols = slice(total - kept, total + kept), slice(None, kept)
    out = np.zeros_like(spectrum)
    out[:, rows, cols] = _afno_mlp(spectrum[:, rows, cols], *weights, num_blocks)
    out = _shrink(out.real, threshold) + 1j * _shrink(out.imag, threshold)
    return np.fft.irfft2(out, s=(height, width), axes=(1, 2), norm="ortho") + x


@pytest.mark.parametrize("impl", ["fft", "matmul"])
@pytest.mark.parametrize(
    ("size", "fraction"),
    [((8, 8), 1.0), ((6, 12), 1.0), ((6, 12), 0.5), ((7, 5), 0.3), ((4, 16), 0.3)],
)
def test_afno2d_fourcastnet_slicing_matches_the_official_rule(impl, fraction, size):
    x = random_input((2, *size, 8))
    layer = AFNO2D(
        num_blocks=4,
        hard_thresholding_fraction=fraction,
        hidden_size_factor=1,
        fft_impl=impl,
        mode_slicing="fourcastnet",
    )
    layer.build(x.shape)
    weights = _randomise(layer)
    expected = _numpy_fourcastnet_afno(x, weights, 4, 0.01, fraction)
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=1e-4)


def test_fourcastnet_mask_on_its_grid_and_below_one():
    # FourCastNet's 90 x 180 token grid at fraction 1: every row, columns 0-45 of 0-90.
    mask = fourcastnet_mode_mask(90, 180, 1.0)
    assert mask.shape == (90, 91)
    assert mask[:, :46].all() and not mask[:, 46:].any()
    # Square grids at 1: every mode, as the default rule.
    assert fourcastnet_mode_mask(8, 8, 1.0).all()
    # 16 rows at 0.5: T = 9, K = 4, rows 5-12 (the Nyquist row 8 in the middle, ky = 0 dropped).
    mask = fourcastnet_mode_mask(16, 16, 0.5)
    np.testing.assert_array_equal(np.flatnonzero(mask[:, 0]), np.arange(5, 13))
    np.testing.assert_array_equal(np.flatnonzero(mask[5]), np.arange(4))


def test_default_and_fourcastnet_slicing_differ_on_wide_grids_only():
    for size, same in [((8, 8), True), ((6, 12), False)]:
        x = random_input((1, *size, 4))
        default = AFNO2D(num_blocks=2)
        fourcastnet = AFNO2D(num_blocks=2, mode_slicing="fourcastnet")
        default.build(x.shape)
        fourcastnet.build(x.shape)
        _randomise(default)
        fourcastnet.set_weights(default.get_weights())
        a, b = to_numpy(default(x)), to_numpy(fourcastnet(x))
        assert np.array_equal(a, b) == same, size


def _numpy_global_filter_1d(x, weight):
    spectrum = np.fft.rfft(x, axis=1, norm="ortho") * (weight[..., 0] + 1j * weight[..., 1])
    return np.fft.irfft(spectrum, n=x.shape[1], axis=1, norm="ortho")


@pytest.mark.parametrize("impl", ["fft", "matmul"])
@pytest.mark.parametrize("length", [6, 9])
def test_global_filter_1d_matches_numpy(impl, length):
    x = random_input((2, length, 3))
    layer = GlobalFilter1D(fft_impl=impl)
    out = to_numpy(layer(x))
    weight = to_numpy(layer.complex_weight)
    assert weight.shape == (length // 2 + 1, 3, 2)
    np.testing.assert_allclose(out, _numpy_global_filter_1d(x, weight), atol=1e-5)


def test_global_filter_1d_is_a_circular_convolution():
    x = random_input((1, 7, 2))
    layer = GlobalFilter1D()
    out = to_numpy(layer(x))
    weight = to_numpy(layer.complex_weight)
    kernel = np.fft.irfft(weight[..., 0] + 1j * weight[..., 1], n=7, axis=0)
    expected = sum(np.roll(x, shift, axis=1) * kernel[shift] for shift in range(7))
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_global_filter_1d_resizes_its_filter_to_other_lengths():
    layer = GlobalFilter1D(length=5)
    layer.build((None, None, 3))
    x = random_input((2, 14, 3))
    out = to_numpy(layer(x))
    assert out.shape == (2, 14, 3) and np.all(np.isfinite(out))
    x8 = random_input((2, 8, 3))  # 8 // 2 + 1 = 5 bins: the filter as it is
    np.testing.assert_allclose(
        to_numpy(layer(x8)), _numpy_global_filter_1d(x8, to_numpy(layer.complex_weight)), atol=1e-5
    )


def _numpy_fno2d(x, weights1, weights2, m1, m2):
    # fourier_2d.py SpectralConv2d, channels first, unnormalised rfft2 / irfft2.
    xc = np.moveaxis(x, -1, 1)
    x_ft = np.fft.rfft2(xc)
    w1 = weights1[..., 0] + 1j * weights1[..., 1]
    w2 = weights2[..., 0] + 1j * weights2[..., 1]
    out = np.zeros_like(x_ft)
    out[:, :, :m1, :m2] = np.einsum("bixy,ioxy->boxy", x_ft[:, :, :m1, :m2], w1)
    out[:, :, -m1:, :m2] = np.einsum("bixy,ioxy->boxy", x_ft[:, :, -m1:, :m2], w2)
    return np.moveaxis(np.fft.irfft2(out, s=xc.shape[-2:]), 1, -1)


@pytest.mark.parametrize("impl", ["fft", "matmul"])
@pytest.mark.parametrize("size", [(6, 9), (9, 4)])
def test_fno2d_matches_the_official_spectral_conv(impl, size):
    x = random_input((2, *size, 4))
    layer = FNO2D(modes_height=2, modes_width=3, fft_impl=impl)
    layer.build(x.shape)
    w1, w2 = _randomise(layer)
    np.testing.assert_allclose(to_numpy(layer(x)), _numpy_fno2d(x, w1, w2, 2, 3), atol=1e-4)


@pytest.mark.parametrize("impl", ["fft", "matmul"])
@pytest.mark.parametrize("length", [8, 9])
def test_fno1d_matches_the_official_spectral_conv(impl, length):
    x = random_input((2, length, 4))
    layer = FNO1D(modes=3, fft_impl=impl)
    layer.build(x.shape)
    (w1,) = _randomise(layer)
    x_ft = np.fft.rfft(np.moveaxis(x, -1, 1))
    out = np.zeros_like(x_ft)
    out[:, :, :3] = np.einsum("bix,iox->box", x_ft[:, :, :3], w1[..., 0] + 1j * w1[..., 1])
    expected = np.moveaxis(np.fft.irfft(out, n=length), 1, -1)
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=1e-4)


def test_fno_parameter_count_is_modes_times_channels_squared():
    layer = FNO2D(modes_height=4, modes_width=5)
    layer.build((None, 16, 16, 8))
    assert layer.count_params() == 2 * (8 * 8 * 4 * 5 * 2)
    afno = AFNO1D(num_blocks=4)
    afno.build((None, 16, 32))
    # (1 + 4/k) d^2 + 4d of the paper's Table 1, with d^2/k per complex matrix part: 2 * 2 * d^2/k
    # for w1 and w2 plus 4d for the biases.
    assert afno.count_params() == 4 * 32 * 32 // 4 + 4 * 32


@pytest.mark.parametrize(
    "make",
    [
        GlobalFilter1D,
        lambda **kw: AFNO1D(num_blocks=2, hard_thresholding_fraction=0.7, **kw),
        lambda **kw: FNO1D(modes=3, **kw),
    ],
    ids=["gf1d", "afno1d", "fno1d"],
)
@pytest.mark.parametrize("length", [7, 8])
def test_fft_and_matmul_agree_1d(make, length):
    out_fft, out_mm = fft_and_matmul_outputs(make, random_input((2, length, 4)))
    np.testing.assert_allclose(out_mm, out_fft, atol=1e-5)


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: FNO2D(modes_height=2, modes_width=3, **kw),
        lambda **kw: AFNO2D(num_blocks=2, hard_thresholding_fraction=0.6, **kw),
    ],
    ids=["fno2d", "afno2d-fourcastnet"],
)
@pytest.mark.parametrize("size", [(7, 5), (8, 12)])
def test_fft_and_matmul_agree_2d(make, size):
    out_fft, out_mm = fft_and_matmul_outputs(make, random_input((2, *size, 4)))
    np.testing.assert_allclose(out_mm, out_fft, atol=1e-5)


@pytest.mark.parametrize(
    ("make", "shape"),
    [
        (GlobalFilter1D, (1, 16, 8)),
        (lambda **kw: AFNO1D(num_blocks=4, hard_thresholding_fraction=0.5, **kw), (1, 15, 8)),
        (lambda **kw: FNO1D(modes=4, **kw), (1, 16, 8)),
        (lambda **kw: FNO2D(modes_height=3, modes_width=4, **kw), (1, 12, 10, 8)),
        (
            lambda **kw: AFNO2D(num_blocks=4, mode_slicing="fourcastnet", **kw),
            (1, 6, 12, 8),
        ),
    ],
    ids=["gf1d", "afno1d", "fno1d", "fno2d", "afno2d-fourcastnet"],
)
@pytest.mark.single_backend
def test_tflite_builtin_ops_only(make, shape):
    error = tflite_max_error(lambda **kw: make(fft_impl="matmul", **kw), shape)
    assert error <= 1e-4


@pytest.mark.single_backend
@pytest.mark.parametrize("impl", ["fft", "matmul"])
def test_run_time_length_graph_equals_eager(impl):
    # A TensorFlow graph traced with an unknown L transforms at the run-time length.
    for layer in [
        GlobalFilter1D(length=5, fft_impl=impl),
        AFNO1D(num_blocks=2, hard_thresholding_fraction=0.5, fft_impl=impl),
        FNO1D(modes=3, fft_impl=impl),
    ]:
        layer.build((None, None, 4))
        check_run_time_sized_graph(layer, [(2, 8, 4), (2, 11, 4)])
    layer = AFNO2D(num_blocks=2, hard_thresholding_fraction=0.5, mode_slicing="fourcastnet")
    layer.build((None, None, None, 4))
    check_run_time_sized_graph(layer, [(2, 6, 6, 4), (2, 5, 9, 4)])


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: AFNO2D(mode_slicing="afno"), "mode_slicing='afno'"),
        (lambda: AFNO1D(num_blocks=0), "num_blocks=0"),
        (lambda: GlobalFilter1D(length=0), "length=0"),
        (lambda: FNO2D(modes_height=0, modes_width=2), "modes_height=0"),
        (lambda: FNO2D(modes_height=2, modes_width=-1), "modes_width=-1"),
        (lambda: FNO1D(modes=2.5), "modes=2.5"),
        (lambda: FNO1D(modes=2, fft_impl="fftw"), "fft_impl='fftw'"),
    ],
)
def test_bad_arguments_name_argument_and_value(make, match):
    with pytest.raises(ValueError, match=re.escape(match)):
        make()


def test_fno_refuses_inputs_with_fewer_modes_than_it_keeps():
    with pytest.raises(ValueError, match=re.escape("Received: inputs of size H=6, W=8")):
        FNO2D(modes_height=4, modes_width=2).build((None, 6, 8, 3))
    layer = FNO1D(modes=4)
    layer(random_input((1, 8, 2)))
    with pytest.raises(ValueError, match=re.escape("Received: inputs of length L=5")):
        layer(random_input((1, 5, 2)))


@pytest.mark.parametrize("make", [AFNO1D, GlobalFilter1D, lambda: FNO1D(modes=2)])
def test_sequence_layers_refuse_images_and_other_channel_counts(make):
    with pytest.raises(ValueError, match=r"expects sequences \(B, L, C\)"):
        make().build((None, 4, 4, 8))
    layer = make()
    layer(random_input((1, 8, 8)))
    with pytest.raises(ValueError, match=re.escape("C = 8; received inputs of shape (1, 8, 4)")):
        layer(random_input((1, 8, 4)))
