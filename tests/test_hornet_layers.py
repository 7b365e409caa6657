"""GnConv and GlobalLocalFilter: shared checks, NumPy references, TFLite and validation."""

import keras
import numpy as np
import pytest

from keras_fourier.layers.hornet import GlobalLocalFilter, GnConv
from keras_fourier.layers.interpolation import resize_2d
from tests.harness import (
    check_run_time_sized_graph,
    fft_and_matmul_outputs,
    random_input,
    relative_error,
    run_layer_checks,
    tflite_max_error,
    to_numpy,
)

# The layer, model and weight tests run under every Keras backend (tests/conftest.py).
pytestmark = pytest.mark.multi_backend


def _gnconv_weights(channels: int, order: int, kernel_size: int) -> dict[str, tuple]:
    dims = [channels // 2**i for i in range(order)][::-1]
    mixed = sum(dims)
    weights = {
        "proj_in/kernel": (1, 1, channels, 2 * channels),
        "proj_in/bias": (2 * channels,),
        "dwconv/kernel": (kernel_size, kernel_size, mixed, 1),
        "dwconv/bias": (mixed,),
        "proj_out/kernel": (1, 1, channels, channels),
        "proj_out/bias": (channels,),
    }
    for i in range(order - 1):
        weights[f"pws_{i}/kernel"] = (1, 1, dims[i], dims[i + 1])
        weights[f"pws_{i}/bias"] = (dims[i + 1],)
    return weights


def _glf_weights(channels: int, filter_hw: tuple[int, int], prefix: str = "") -> dict[str, tuple]:
    return {
        f"{prefix}pre_norm/gamma": (channels,),
        f"{prefix}pre_norm/beta": (channels,),
        f"{prefix}dw/kernel": (3, 3, channels // 2, 1),
        f"{prefix}complex_weight": (channels // 2, *filter_hw, 2),
        f"{prefix}post_norm/gamma": (channels,),
        f"{prefix}post_norm/beta": (channels,),
    }


@pytest.mark.parametrize("order", [1, 2, 3])
def test_gnconv_dwconv_shared_checks(order, tmp_path):
    run_layer_checks(
        lambda **kw: GnConv(order=order, kernel_size=3, **kw),
        (2, 5, 6, 8),
        _gnconv_weights(8, order, 3),
        str(tmp_path),
    )


@pytest.mark.parametrize("filter_size", [None, (4, 2)], ids=["own", "resized"])
@pytest.mark.slow
def test_gnconv_global_local_shared_checks(filter_size, tmp_path):
    weights = {key: shape for key, shape in _gnconv_weights(8, 2, 3).items() if "dwconv" not in key}
    weights.update(_glf_weights(12, filter_size or (6, 3), prefix="dwconv/"))
    run_layer_checks(
        lambda **kw: GnConv(order=2, spatial_mixing="global_local", filter_size=filter_size, **kw),
        (2, 6, 5, 8),
        weights,
        str(tmp_path),
    )


@pytest.mark.parametrize(
    ("filter_hw", "shape"),
    [((None, None), (2, 6, 5, 4)), ((4, 2), (2, 5, 6, 4))],
    ids=["own", "resized"],
)
def test_global_local_filter_shared_checks(filter_hw, shape, tmp_path):
    height, width = filter_hw
    own = (shape[1], shape[2] // 2 + 1)
    run_layer_checks(
        lambda **kw: GlobalLocalFilter(height=height, width=width, **kw),
        shape,
        _glf_weights(shape[-1], own if height is None else filter_hw),
        str(tmp_path),
    )


def _randomise(layer: keras.layers.Layer, seed: int, std: float = 0.5) -> dict[str, np.ndarray]:
    """Gives every weight N(0, std^2) values; returns {path relative to the layer: value}."""
    rng = np.random.default_rng(seed)
    values = {}
    for variable in layer.weights:
        value = rng.normal(0.0, std, variable.shape).astype("float32")
        variable.assign(value)
        values[variable.path.removeprefix(layer.path + "/")] = value.astype("float64")
    return values


def _pointwise(x, weights, name):
    return x @ weights[f"{name}/kernel"][0, 0] + weights[f"{name}/bias"]


def _depthwise_same(x, kernel):
    """Cross-correlation with a (k, k, C, 1) kernel and zero padding (k - 1) // 2."""
    size = kernel.shape[0]
    pad = (size - 1) // 2
    height, width = x.shape[1:3]
    padded = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    out = np.zeros_like(x)
    for i in range(size):
        for j in range(size):
            out += padded[:, i : i + height, j : j + width, :] * kernel[i, j, :, 0]
    return out


def _layer_norm(x, gamma, beta):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-6) * gamma + beta


def _numpy_global_local(x, weights):
    height, width, channels = x.shape[1:]
    x = _layer_norm(x, weights["pre_norm/gamma"], weights["pre_norm/beta"])
    local = _depthwise_same(x[..., : channels // 2], weights["dw/kernel"])
    spectrum_hw = (height, width // 2 + 1)
    filt = weights["complex_weight"]
    if filt.shape[1:3] != spectrum_hw:
        filt = resize_2d(filt, spectrum_hw, axes=(1, 2), mode="bilinear")
    filt = np.transpose(filt[..., 0] + 1j * filt[..., 1], (1, 2, 0))
    spectrum = np.fft.rfft2(x[..., channels // 2 :], axes=(1, 2), norm="ortho") * filt
    glob = np.fft.irfft2(spectrum, s=(height, width), axes=(1, 2), norm="ortho")
    mixed = np.empty_like(x)
    mixed[..., 0::2] = local
    mixed[..., 1::2] = glob
    return _layer_norm(mixed, weights["post_norm/gamma"], weights["post_norm/beta"])


def _numpy_gnconv(x, weights, order, scale, global_local=False):
    channels = x.shape[-1]
    dims = [channels // 2**i for i in range(order)][::-1]
    fused = _pointwise(x, weights, "proj_in")
    p, q = fused[..., : dims[0]], fused[..., dims[0] :]
    if global_local:
        prefix = "dwconv/"
        inner = {k.removeprefix(prefix): v for k, v in weights.items() if k.startswith(prefix)}
        q = _numpy_global_local(q, inner)
    else:
        q = _depthwise_same(q, weights["dwconv/kernel"]) + weights["dwconv/bias"]
    q = np.split(q * scale, np.cumsum(dims)[:-1], axis=-1)
    out = p * q[0]
    for i in range(order - 1):
        out = _pointwise(out, weights, f"pws_{i}") * q[i + 1]
    return _pointwise(out, weights, "proj_out")


@pytest.mark.parametrize("order", [1, 2, 3])
def test_gnconv_matches_numpy_recursion(order):
    x = random_input((2, 9, 8, 16))
    layer = GnConv(order=order, kernel_size=7, scale=0.5)
    layer.build(x.shape)
    weights = _randomise(layer, seed=order)
    expected = _numpy_gnconv(x.astype("float64"), weights, order, 0.5)
    assert np.abs(expected).max() > 1.0
    assert relative_error(to_numpy(layer(x)), expected) < 1e-5


@pytest.mark.parametrize("impl", ["fft", "matmul"])
def test_gnconv_global_local_matches_numpy(impl):
    x = random_input((2, 6, 7, 16))
    layer = GnConv(order=3, spatial_mixing="global_local", fft_impl=impl)
    layer.build(x.shape)
    weights = _randomise(layer, seed=4)
    expected = _numpy_gnconv(x.astype("float64"), weights, 3, 1 / 3, global_local=True)
    assert relative_error(to_numpy(layer(x)), expected) < 1e-5


@pytest.mark.parametrize("impl", ["fft", "matmul"])
@pytest.mark.parametrize(
    ("filter_hw", "input_hw"),
    [((None, None), (8, 6)), ((None, None), (7, 9)), ((6, 4), (8, 6)), ((14, 8), (12, 10))],
    ids=["own-8x6", "own-7x9", "6x4-on-8x6", "14x8-on-12x10"],
)
def test_global_local_filter_matches_numpy(impl, filter_hw, input_hw):
    x = random_input((2, *input_hw, 6))
    layer = GlobalLocalFilter(*filter_hw, fft_impl=impl)
    layer.build(x.shape)
    weights = _randomise(layer, seed=5)
    if filter_hw[0] is not None:
        assert weights["complex_weight"].shape == (3, *filter_hw, 2)
    expected = _numpy_global_local(x.astype("float64"), weights)
    assert relative_error(to_numpy(layer(x)), expected) < 1e-5


def test_global_local_filter_interleaves_local_and_global_channels():
    # Identity-like halves: dw is the centre tap, the filter is 1, the norms are plain.
    x = random_input((1, 4, 5, 4))
    layer = GlobalLocalFilter()
    layer.build(x.shape)
    kernel = np.zeros((3, 3, 2, 1), "float32")
    kernel[1, 1] = [[2.0], [3.0]]
    layer.dw.kernel.assign(kernel)
    filt = np.zeros((2, 4, 3, 2), "float32")
    filt[0, ..., 0], filt[1, ..., 0] = 5.0, 7.0
    layer.complex_weight.assign(filt)
    n = _layer_norm(x.astype("float64"), 1.0, 0.0)
    interleaved = np.stack([2 * n[..., 0], 5 * n[..., 2], 3 * n[..., 1], 7 * n[..., 3]], axis=-1)
    expected = _layer_norm(interleaved, 1.0, 0.0)
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=1e-5)


def test_one_global_local_filter_runs_at_several_resolutions():
    layer = GlobalLocalFilter(height=14, width=8)
    layer.build((None, 14, 14, 4))
    weights = _randomise(layer, seed=6)
    for size in [(14, 14), (24, 20), (9, 5)]:
        x = random_input((1, *size, 4))
        expected = _numpy_global_local(x.astype("float64"), weights)
        assert relative_error(to_numpy(layer(x)), expected) < 1e-5


@pytest.mark.single_backend
def test_global_local_filter_in_a_run_time_sized_graph_equals_eager():
    # gnConv with `filter_size` builds for inputs of unknown size (any-size HorNet GF); a
    # TensorFlow graph traced with unknown H and W resizes the filter in the graph.
    layer = GnConv(order=2, spatial_mixing="global_local", filter_size=(4, 3))
    layer.build((None, None, None, 8))
    assert tuple(layer.dwconv.complex_weight.shape) == (6, 4, 3, 2)  # (C/2, h, w, 2)
    check_run_time_sized_graph(layer, [(2, 4, 4, 8), (2, 6, 10, 8)], seed=7)


def test_complex_weight_initialisation_follows_official():
    # timm's trunc_normal_(std=0.02) cuts at the absolute bounds +-2 (100 std): N(0, 0.02^2).
    layer = GlobalLocalFilter()
    layer.build((None, 14, 14, 256))
    weight = layer.complex_weight.numpy()
    assert weight.shape == (128, 14, 8, 2)
    assert np.std(weight) == pytest.approx(0.02, rel=0.05)
    assert np.mean(np.abs(weight) > 0.04) == pytest.approx(0.0455, abs=0.01)


def test_parameter_counts_follow_official_shapes():
    gnconv = GnConv(order=3, kernel_size=7)
    gnconv.build((None, 14, 14, 64))
    assert gnconv.count_params() == 20_736
    # proj_in 8320 + GF over 112 channels (56*14*8*2 + 9*56 + 4*112) + pws 544 + 2112 + 4160.
    gf = GnConv(order=3, spatial_mixing="global_local")
    gf.build((None, 14, 14, 64))
    assert gf.count_params() == 8320 + 12544 + 504 + 448 + 544 + 2112 + 4160


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: GlobalLocalFilter(height=14, width=8, **kw),
        lambda **kw: GnConv(order=2, spatial_mixing="global_local", **kw),
    ],
    ids=["global_local_filter", "gnconv_global_local"],
)
@pytest.mark.parametrize("size", [(14, 14), (12, 10)])
def test_fft_and_matmul_agree(make, size):
    x = random_input((2, *size, 8))
    out_fft, out_mm = fft_and_matmul_outputs(make, x, lambda layer: _randomise(layer, seed=7))
    assert relative_error(out_mm, out_fft) <= 1e-5


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: GlobalLocalFilter(height=14, width=8, fft_impl="matmul", **kw),
        lambda **kw: GnConv(order=2, spatial_mixing="global_local", fft_impl="matmul", **kw),
    ],
    ids=["global_local_filter", "gnconv_global_local"],
)
@pytest.mark.parametrize("size", [(14, 14), (12, 10)])
@pytest.mark.single_backend
def test_tflite_builtin_ops_only(make, size):
    assert tflite_max_error(make, (1, *size, 8)) <= 1e-4


def test_fourier_weights_stay_float32_under_mixed_precision():
    layer = GnConv(order=2, spatial_mixing="global_local", dtype="mixed_float16")
    out = layer(random_input((1, 6, 6, 8)))
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    assert layer.dwconv.complex_weight.dtype == "float32"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: GnConv(order=0), "`order` must be an int >= 1. Received: order=0"),
        (lambda: GnConv(order=2.0), "Received: order=2.0"),
        (lambda: GnConv(order=True), "Received: order=True"),
        (
            lambda: GnConv(spatial_mixing="gf"),
            "`spatial_mixing` must be one of ('dwconv', 'global_local'). "
            "Received: spatial_mixing='gf'",
        ),
        (
            lambda: GnConv(kernel_size=4),
            "`kernel_size` must be a positive odd int. Received: kernel_size=4",
        ),
        (lambda: GnConv(kernel_size=-3), "Received: kernel_size=-3"),
        (
            lambda: GnConv(scale=float("nan")),
            "`scale` must be a finite number. Received: scale=nan",
        ),
        (lambda: GnConv(scale="1/3"), "Received: scale='1/3'"),
        (lambda: GnConv(fft_impl="cufft"), "Received: fft_impl='cufft'"),
        (
            lambda: GlobalLocalFilter(height=0),
            "`height` must be None or a positive int. Received: height=0",
        ),
        (
            lambda: GlobalLocalFilter(width=7.5),
            "`width` must be None or a positive int. Received: width=7.5",
        ),
        (lambda: GlobalLocalFilter(fft_impl="np"), "Received: fft_impl='np'"),
    ],
)
def test_bad_arguments_name_argument_and_value(make, message):
    with pytest.raises(ValueError) as error:
        make()
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("layer", "shape", "message"),
    [
        (
            GnConv(order=3),
            (None, 8, 8, 6),
            "divisible by 2**(order - 1) = 4; received C=6 with order=3",
        ),
        (
            GnConv(order=2),
            (None, 8, 8, None),
            "with a static C; received input_shape=(None, 8, 8, None)",
        ),
        (GnConv(order=2), (None, 8, 8), "received input_shape=(None, 8, 8)"),
        (
            GnConv(order=3, spatial_mixing="global_local"),
            (None, 8, 8, 12),
            "divisible by 2**order = 8 so that the global-local filter's channels split in "
            "halves; received C=12 with order=3",
        ),
        (
            GlobalLocalFilter(),
            (None, 8, 8, 5),
            "C must be even; received input_shape=(None, 8, 8, 5)",
        ),
        (
            GlobalLocalFilter(height=8),
            (None, 8, None, 4),
            "H and W must then be static; received input_shape=(None, 8, None, 4) with "
            "height=8, width=None",
        ),
        (GlobalLocalFilter(), (None, 8, 4), "received input_shape=(None, 8, 4)"),
    ],
)
def test_bad_input_shapes_name_the_received_shape(layer, shape, message):
    with pytest.raises(ValueError) as error:
        layer.build(shape)
    assert message in str(error.value)


def test_global_local_filter_refuses_another_channel_count():
    layer = GlobalLocalFilter(height=4, width=3)
    layer(random_input((1, 4, 4, 8)))
    with pytest.raises(ValueError, match=r"C = 8; received inputs of shape \(1, 4, 4, 6\)"):
        layer(random_input((1, 4, 4, 6)))
