"""SCFBO and AFBO: shared checks, a NumPy reference, TFLite and DeiT-T parameter counts."""

import math

import keras
import numpy as np
import pytest

from keras_fourier.layers.afbo import AFBO, SCFBO
from keras_fourier.layers.attention import SelfAttention
from keras_fourier.layers.ffn import Mlp
from keras_fourier.layers.layout import tflite_layout
from tests.harness import random_input, run_layer_checks, tflite_max_error, to_numpy

# The layer, model and weight tests run under every Keras backend (tests/conftest.py).
pytestmark = pytest.mark.multi_backend

SHAPE = (2, 6, 5, 8)
_erf = np.vectorize(math.erf)


def _expected_weights(branches, kernel_shapes, spatial_mixing="dwconv", hidden=32, channels=8):
    weights = {"proj/kernel": (hidden, channels), "proj/bias": (channels,)}
    for branch, shape in zip(branches, kernel_shapes, strict=True):
        weights[f"{branch}_kernel"] = shape
        weights[f"{branch}_bias"] = (hidden,)
        if spatial_mixing == "dwconv":
            weights[f"{branch}_dwconv/kernel"] = (3, 3, hidden, 1)
            weights[f"{branch}_dwconv/bias"] = (hidden,)
    return weights


_SCFBO_GCCM = ("left", "right"), ((2, 4, 8), (2, 4, 8))
_SCFBO_OCCM = ("left", "right"), ((4, 6, 8), (4, 6, 8))
_AFBO = ("occm", "gccm"), ((4, 6, 8), (2, 4, 8))


@pytest.mark.parametrize("spatial_mixing", ["dwconv", "avg_pool", "max_pool", None])
def test_shared_checks_scfbo_gccm(spatial_mixing, tmp_path):
    run_layer_checks(
        lambda **kw: SCFBO("gccm", spatial_mixing=spatial_mixing, **kw),
        SHAPE,
        _expected_weights(*_SCFBO_GCCM, spatial_mixing),
        str(tmp_path),
    )


def test_shared_checks_scfbo_occm(tmp_path):
    run_layer_checks(
        lambda **kw: SCFBO("occm", **kw), SHAPE, _expected_weights(*_SCFBO_OCCM), str(tmp_path)
    )


@pytest.mark.parametrize("spatial_mixing", ["dwconv", None])
def test_shared_checks_afbo(spatial_mixing, tmp_path):
    run_layer_checks(
        lambda **kw: AFBO(spatial_mixing=spatial_mixing, **kw),
        SHAPE,
        _expected_weights(*_AFBO, spatial_mixing),
        str(tmp_path),
    )


def _dense_gccm(kernel: np.ndarray, channels: int) -> np.ndarray:
    """Eq. 6 as a dense (C, hidden) matrix: W(i) maps x_i to out_i and x_{G-1-i} to out_{G+i}."""
    groups, width, out = kernel.shape
    dense = np.zeros((channels, 2 * groups * out))
    for i in range(groups):
        mirror = groups - 1 - i
        dense[i * width : (i + 1) * width, i * out : (i + 1) * out] = kernel[i]
        dense[
            mirror * width : (mirror + 1) * width, (groups + i) * out : (groups + i + 1) * out
        ] = kernel[i]
    return dense


def _dense_occm(kernel: np.ndarray, channels: int) -> np.ndarray:
    """Eq. 7 with (G - 1)-group windows: out_g reads x_g, ..., x_{g+G-2} (mod G)."""
    groups, _, out = kernel.shape
    width = channels // groups
    dense = np.zeros((channels, groups * out))
    for g in range(groups):
        for j in range(groups - 1):
            src = (g + j) % groups
            dense[src * width : (src + 1) * width, g * out : (g + 1) * out] = kernel[
                g, j * width : (j + 1) * width
            ]
    return dense


def _windows(z: np.ndarray, size: int, fill: float) -> np.ndarray:
    """(B, H, W, C) -> (B, H, W, C, size, size) centred windows, padded with `fill`."""
    pad = size // 2
    padded = np.pad(z, ((0, 0), (pad, pad), (pad, pad), (0, 0)), constant_values=fill)
    return np.lib.stride_tricks.sliding_window_view(padded, (size, size), axis=(1, 2))


def _spatial(z, spatial_mixing, size, weights, branch):
    if spatial_mixing is None:
        return z
    if spatial_mixing == "dwconv":
        kernel = weights[f"{branch}_dwconv/kernel"][..., 0]
        windows = _windows(z, size, 0.0)
        return np.einsum("bhwcij,ijc->bhwc", windows, kernel) + weights[f"{branch}_dwconv/bias"]
    windows = _windows(z, size, np.nan)
    reduce = np.nanmean if spatial_mixing == "avg_pool" else np.nanmax
    return reduce(windows, axis=(-2, -1))


def _reference(layer, x: np.ndarray, mappings: dict, act) -> np.ndarray:
    """proj(act(SM(CM_1 x)) * SM(CM_2 x)) in float64, mappings {branch: "gccm" | "occm"}."""
    weights = {v.path.removeprefix(layer.path + "/"): v.numpy() for v in layer.weights}
    config = layer.get_config()
    dense = {"gccm": _dense_gccm, "occm": _dense_occm}
    branches = []
    for branch, mapping in mappings.items():
        z = x @ dense[mapping](weights[f"{branch}_kernel"], x.shape[-1])
        z = z + weights[f"{branch}_bias"]
        branches.append(
            _spatial(z, config["spatial_mixing"], config["kernel_size"], weights, branch)
        )
    return (act(branches[0]) * branches[1]) @ weights["proj/kernel"] + weights["proj/bias"]


def _silu(x):
    return x / (1.0 + np.exp(-x))


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


@pytest.mark.parametrize(
    ("make", "shape", "mappings", "act"),
    [
        (AFBO, SHAPE, {"occm": "occm", "gccm": "gccm"}, _silu),
        (
            lambda: AFBO(3, 3, hidden_ratio=2, kernel_size=5, activation="gelu"),
            (2, 5, 7, 12),
            {"occm": "occm", "gccm": "gccm"},
            _gelu,
        ),
        (
            lambda: AFBO(occm_groups=2, spatial_mixing=None),
            SHAPE,
            {"occm": "occm", "gccm": "gccm"},
            _silu,
        ),
        (
            lambda: SCFBO("gccm", groups=4, spatial_mixing="max_pool"),
            SHAPE,
            {"left": "gccm", "right": "gccm"},
            _silu,
        ),
        (
            lambda: SCFBO("occm", spatial_mixing="avg_pool"),
            SHAPE,
            {"left": "occm", "right": "occm"},
            _silu,
        ),
    ],
    ids=["afbo", "afbo_g3_k5_gelu", "afbo_occm2_no_sm", "scfbo_gccm4_max", "scfbo_occm_avg"],
)
def test_matches_numpy_reference(make, shape, mappings, act):
    x = random_input(shape)
    layer = make()
    layer.build(shape)
    rng = np.random.default_rng(1)
    layer.set_weights([rng.standard_normal(w.shape).astype("float32") for w in layer.weights])
    expected = _reference(layer, x.astype("float64"), mappings, act)
    np.testing.assert_allclose(to_numpy(layer(x)), expected, rtol=1e-4, atol=1e-3)
    # Traced for TFLite, the mappings are one 2D product per slot, wrapping windows included.
    with tflite_layout():
        np.testing.assert_allclose(to_numpy(layer(x)), expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    ("make", "shape"),
    [
        (AFBO, (1, 14, 14, 16)),
        (AFBO, (1, 12, 10, 16)),
        (lambda **kw: SCFBO("occm", spatial_mixing="avg_pool", **kw), (1, 12, 10, 16)),
        (lambda **kw: SCFBO("gccm", spatial_mixing="max_pool", **kw), (1, 14, 14, 16)),
    ],
    ids=["afbo_14x14", "afbo_12x10", "scfbo_occm_avg_12x10", "scfbo_gccm_max_14x14"],
)
@pytest.mark.single_backend
def test_tflite_builtin_ops_only(make, shape):
    assert tflite_max_error(make, shape) <= 1e-4


class _TokenEmbedding(keras.layers.Layer):
    """DeiT's cls token and 197 x C learned position embedding on a 14 x 14 token grid.

    The FFNs under test take (B, H, W, C) grids, so the 196 patch tokens flow
    through the blocks as a grid and the cls token is held as a weight only:
    parameter counts do not depend on which tokens flow. (Test only.)
    """

    def build(self, input_shape):
        _, height, width, channels = input_shape
        self._grid = (height, width, channels)
        self.cls_token = self.add_weight(name="cls_token", shape=(1, channels))
        self.pos_embed = self.add_weight(name="pos_embed", shape=(height * width + 1, channels))

    def call(self, inputs):
        return inputs + keras.ops.reshape(self.pos_embed[1:], self._grid)


def _deit_tiny(make_ffn) -> keras.Model:
    """DeiT-T: 16x16 patches of 224 px, dim 192, 12 blocks, 3 heads, 1000 classes."""
    inputs = keras.Input((224, 224, 3))
    x = keras.layers.Conv2D(192, 16, strides=16, name="patch_embed")(inputs)
    x = _TokenEmbedding()(x)
    for _ in range(12):
        x = x + SelfAttention(num_heads=3)(keras.layers.LayerNormalization(epsilon=1e-6)(x))
        x = x + make_ffn()(keras.layers.LayerNormalization(epsilon=1e-6)(x))
    x = keras.layers.LayerNormalization(epsilon=1e-6)(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(1000, name="head")(x))


OUTSIDE_FFN = 2_166_952


@pytest.mark.parametrize(
    ("make_ffn", "expected", "table_1"),
    [
        (Mlp, 5_717_416, 5.7e6),
        (lambda: SCFBO("gccm", groups=2), 5_026_216, 5.1e6),
        (lambda: SCFBO("occm", groups=4), 6_795_688, 6.7e6),
        (lambda: AFBO(gccm_groups=2, occm_groups=4), 5_910_952, 6.0e6),
    ],
    ids=["ffn", "scfbo_gc", "scfbo_oc", "afbo"],
)
def test_deit_tiny_parameter_counts_match_table_1(make_ffn, expected, table_1):
    model = _deit_tiny(make_ffn)
    assert model.count_params() == expected
    assert abs(expected / table_1 - 1) < 0.03


@pytest.mark.parametrize(
    ("kwargs", "paper"),
    [
        ({"occm_groups": 2}, 5.6e6),
        ({"occm_groups": 3}, 5.8e6),
        ({"occm_groups": 6}, 6.2e6),
        ({"gccm_groups": 4}, 5.7e6),
        ({"spatial_mixing": "avg_pool"}, 5.7e6),
        ({"spatial_mixing": "max_pool"}, 5.7e6),
        ({"spatial_mixing": None}, 5.7e6),
        ({"kernel_size": 5}, 6.2e6),
        ({"kernel_size": 7}, 6.5e6),
    ],
    ids=["t7_g2_2", "t7_g2_3", "t7_g2_6", "t7_g1_4", "t8_avg", "t8_max", "t5_c", "t9_k5", "t9_k7"],
)
def test_deit_tiny_ablation_counts_match_tables_5_7_8_9(kwargs, paper):
    ffn = AFBO(**kwargs)
    ffn.build((None, 14, 14, 192))
    total = OUTSIDE_FFN + 12 * ffn.count_params()
    assert abs(total / paper - 1) < 0.03, total


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: SCFBO(channel_mapping="x"), "channel_mapping='x'"),
        (lambda: SCFBO(groups=1), "groups=1"),
        (lambda: SCFBO(groups=2.0), "groups=2.0"),
        (lambda: SCFBO(hidden_ratio=0), "hidden_ratio=0"),
        (lambda: SCFBO(hidden_ratio=-1.5), "hidden_ratio=-1.5"),
        (lambda: SCFBO(spatial_mixing="conv"), "spatial_mixing='conv'"),
        (lambda: SCFBO(kernel_size=4), "kernel_size=4"),
        (lambda: SCFBO(kernel_size=0), "kernel_size=0"),
        (lambda: SCFBO(activation="nope"), "activation='nope'"),
        (lambda: AFBO(gccm_groups=0), "gccm_groups=0"),
        (lambda: AFBO(occm_groups=1), "occm_groups=1"),
        (lambda: AFBO(spatial_mixing="dw"), "spatial_mixing='dw'"),
        (lambda: AFBO(activation="nope"), "activation='nope'"),
        (lambda: SCFBO(groups=3).build((None, 4, 4, 8)), "groups=3"),
        (lambda: AFBO(gccm_groups=3).build((None, 4, 4, 8)), "gccm_groups=3"),
        (lambda: AFBO(occm_groups=2, hidden_ratio=0.75).build((None, 4, 4, 8)), "gccm_groups=2"),
        (lambda: SCFBO("occm", groups=4, hidden_ratio=0.25).build((None, 4, 4, 8)), "groups=4"),
        (lambda: AFBO().build((None, 5, 8)), "channels-last"),
    ],
)
def test_bad_arguments_name_argument_and_value(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_groups_default_per_mapping_and_config_keeps_none():
    layer = SCFBO("occm")
    layer.build(SHAPE)
    assert layer.get_config()["groups"] is None
    assert tuple(layer.left_kernel.shape) == (4, 6, 8)
