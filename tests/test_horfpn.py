"""DetectionFPN (mmdetection's FPN), HorFPN's gnConv blocks and UPerNet's gnConv head.

NumPy references of mmdetection's ``FPN`` / HorNet's ``GNFPN`` and ``GNUPerHead`` forwards, fed
random checkpoints in the official key layout through the package's key map; the shared layer
checks; configs, any-size graphs and one-line errors.
"""

import keras
import numpy as np
import pytest

from keras_fourier import flops, segmentation
from keras_fourier.layers import DetectionFPN, GnConvModule, UPerHead
from keras_fourier.segmentation.checkpoints import mmseg_key_map
from keras_fourier.weights.convert import load_tensors
from tests.harness import random_input, run_layer_checks, to_numpy
from tests.test_segmentation_models import (
    _mmseg_head_state,
    _np_conv,
    _np_uper_head,
)

pytestmark = pytest.mark.multi_backend

CHANNELS_IN = (4, 6, 8, 10)


# ----------------------------------------------------------------------------- NumPy references


def _np_depthwise(x, w, bias):
    """NHWC x, PyTorch (C, 1, k, k) w, zero padding k // 2."""
    k = w.shape[-1]
    pad = k // 2
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    h, wd = x.shape[1:3]
    out = np.zeros(x.shape)
    for i in range(k):
        for j in range(k):
            out += xp[:, i : i + h, j : j + wd, :] * w[:, 0, i, j]
    return out + bias


def _np_gnconv(x, sd, prefix):
    """HorNet's GNConvModule ("gnconv", order 2, proj_out, no norm) in NumPy."""
    dim = sd[f"{prefix}.proj_out.weight"].shape[0]
    dims = [dim // 2, dim]

    def conv(name, y):
        return _np_conv(y, sd[f"{prefix}.{name}.weight"], sd[f"{prefix}.{name}.bias"])

    fused = conv("proj_in", x)
    p, q = fused[..., : dims[0]], fused[..., dims[0] :]
    q = _np_depthwise(q, sd[f"{prefix}.dwconv.weight"], sd[f"{prefix}.dwconv.bias"])
    y = p * q[..., : dims[0]]
    y = conv("pws.0", y) * q[..., dims[0] :]
    return conv("proj_out", y)


def _np_gnconv_module(x, sd, prefix):
    """GNConvModule with BatchNorm and ReLU (the GNUPerHead's fpn_bottleneck)."""
    y = _np_gnconv(x, sd, prefix)
    scale = sd[f"{prefix}.bn.weight"] / np.sqrt(sd[f"{prefix}.bn.running_var"] + 1e-5)
    return np.maximum((y - sd[f"{prefix}.bn.running_mean"]) * scale + sd[f"{prefix}.bn.bias"], 0)


def _np_nearest(x, size):
    """``F.interpolate(mode="nearest")`` to `size`: output j reads input floor(j * H / h)."""
    rows = np.arange(size[0]) * x.shape[1] // size[0]
    cols = np.arange(size[1]) * x.shape[2] // size[1]
    return x[:, rows][:, :, cols]


def _np_fpn(maps, sd, start_level, num_outs, source, relu, block):
    """mmdetection's FPN (block None) or HorNet's GNFPN (block "gnconv_7x7") in NumPy."""

    def conv(prefix, x):
        return _np_conv(x, sd[f"{prefix}.conv.weight"], sd[f"{prefix}.conv.bias"])

    def fusion(prefix, x):
        return conv(prefix, x) if block is None else _np_gnconv(x, sd, prefix)

    maps = maps[start_level:]
    laterals = [conv(f"neck.lateral_convs.{i}", m) for i, m in enumerate(maps)]
    for i in range(len(laterals) - 1, 0, -1):
        laterals[i - 1] = laterals[i - 1] + _np_nearest(laterals[i], laterals[i - 1].shape[1:3])
    outs = [fusion(f"neck.fpn_convs.{i}", x) for i, x in enumerate(laterals)]
    x = {"on_input": maps[-1], "on_lateral": laterals[-1], "on_output": outs[-1]}.get(source)
    for k in range(len(outs), num_outs):
        if source is None:
            outs.append(outs[-1][:, ::2, ::2])
            continue
        if k > len(laterals):
            x = np.maximum(outs[-1], 0) if relu else outs[-1]
        # A 3x3 conv of stride 2 and padding 1 is the stride-1 conv read at even positions.
        if block is None:
            x = conv(f"neck.fpn_convs.{k}", x)[:, ::2, ::2]
        else:
            x = conv(f"neck.fpn_convs.{k}.0", x)[:, ::2, ::2]
            x = _np_gnconv(x, sd, f"neck.fpn_convs.{k}.1")
        outs.append(x)
    return outs


def _gnconv_state(sd, prefix, cin, dim, rng, norm=False):
    """Random GNConvModule tensors ("gnconv" 7x7, order 2) in the official layout."""
    shapes = {
        "proj_in": (2 * dim, cin, 1, 1),
        "dwconv": (dim // 2 + dim, 1, 7, 7),
        "pws.0": (dim, dim // 2, 1, 1),
        "proj_out": (dim, dim, 1, 1),
    }
    for name, shape in shapes.items():
        sd[f"{prefix}.{name}.weight"] = rng.normal(0, 1 / np.sqrt(np.prod(shape[1:])), shape)
        sd[f"{prefix}.{name}.bias"] = rng.normal(0, 0.3, shape[0])
    if norm:
        sd[f"{prefix}.bn.weight"] = rng.normal(1, 0.2, dim)
        sd[f"{prefix}.bn.bias"] = rng.normal(0, 0.2, dim)
        sd[f"{prefix}.bn.running_mean"] = rng.normal(0, 0.2, dim)
        sd[f"{prefix}.bn.running_var"] = rng.uniform(0.5, 1.5, dim)
        sd[f"{prefix}.bn.num_batches_tracked"] = np.array(3)


def _fpn_state(channels, start_level, num_outs, source, block, seed=0):
    """A random neck.* state dict in mmdetection's FPN / HorNet's GNFPN layout."""
    rng = np.random.default_rng(seed)
    sd = {}

    def conv(prefix, cin, k):
        sd[f"{prefix}.conv.weight"] = rng.normal(0, 1 / np.sqrt(cin * k * k), (channels, cin, k, k))
        sd[f"{prefix}.conv.bias"] = rng.normal(0, 0.3, channels)

    used = CHANNELS_IN[start_level:]
    for i, cin in enumerate(used):
        conv(f"neck.lateral_convs.{i}", cin, 1)
        if block is None:
            conv(f"neck.fpn_convs.{i}", channels, 3)
        else:
            _gnconv_state(sd, f"neck.fpn_convs.{i}", channels, channels, rng)
    for k in range(len(used), num_outs if source else 0):
        cin = used[-1] if k == len(used) and source == "on_input" else channels
        if block is None:
            conv(f"neck.fpn_convs.{k}", cin, 3)
        else:
            conv(f"neck.fpn_convs.{k}.0", cin, 3)
            _gnconv_state(sd, f"neck.fpn_convs.{k}.1", channels, channels, rng)
    return sd


def _odd_pyramid(seed=0):
    sizes = [(19, 26), (10, 13), (5, 7), (3, 4)]
    return [
        random_input((2, h, w, c), seed=seed + i)
        for i, ((h, w), c) in enumerate(zip(sizes, CHANNELS_IN, strict=True))
    ]


# ----------------------------------------------------------------------------------- numerics


@pytest.mark.parametrize(
    ("start_level", "source", "relu", "block"),
    [
        (1, "on_input", False, None),  # RetinaNet
        (1, "on_output", True, None),
        (0, None, False, None),  # Faster / Mask R-CNN: max-pooled P6
        (1, "on_lateral", False, "gnconv_7x7"),
        (0, None, False, "gnconv_7x7"),  # the HorFPN Mask R-CNN config
    ],
    ids=["retinanet", "on_output_relu", "maxpool", "horfpn_on_lateral", "horfpn_maxpool"],
)
def test_detection_fpn_matches_numpy_mmdetection_fpn(start_level, source, relu, block):
    channels, num_outs = 8, 5
    sd = _fpn_state(channels, start_level, num_outs, source, block)
    maps = _odd_pyramid()
    inputs = [keras.Input((None, None, c)) for c in CHANNELS_IN]
    neck = DetectionFPN(channels, num_outs, start_level, source, block, relu, name="neck")
    model = keras.Model(inputs, neck(inputs), name="neck_only")
    load_tensors(model, sd, mmseg_key_map("neck_only"), source="test")
    expected = _np_fpn([m.astype(np.float64) for m in maps], sd, start_level, num_outs, source,
                       relu, block)  # fmt: skip
    actual = [to_numpy(x) for x in model(maps)]
    assert [a.shape for a in actual] == [e.shape for e in expected]
    assert actual[-1].shape[1:3] == ((1, 1) if start_level else (2, 2))  # ceil halvings of 3 x 4
    for a, e in zip(actual, expected, strict=True):
        np.testing.assert_allclose(a, e, atol=1e-4, rtol=1e-4)
    assert max(np.abs(e).max() for e in expected) > 1.0


def test_mmseg_checkpoint_of_a_gnconv_uperhead_matches_numpy():
    channels, classes, scales = 8, 3, (1, 2, 3, 6)
    sd = _mmseg_head_state(CHANNELS_IN, channels, classes, scales)
    for key in [k for k in sd if k.startswith("decode_head.fpn_bottleneck.")]:
        del sd[key]
    rng = np.random.default_rng(1)
    _gnconv_state(sd, "decode_head.fpn_bottleneck", 4 * channels, channels, rng, norm=True)
    inputs = [keras.Input((None, None, c)) for c in CHANNELS_IN]
    head = UPerHead(classes, channels, scales, block="gnconv_7x7", name="decode_head")
    model = keras.Model(inputs, head(inputs), name="head_only")
    load_tensors(model, sd, mmseg_key_map("head_only"), source="test")
    maps = _odd_pyramid(seed=4)
    expected = _np_uper_head([m.astype(np.float64) for m in maps], sd, scales, _np_gnconv_module)
    actual = to_numpy(model(maps, training=False))
    np.testing.assert_allclose(actual, expected, atol=1e-4, rtol=1e-4)
    assert np.abs(expected).max() > 1.0


# ------------------------------------------------------------------------------ shared checks


@keras.saving.register_keras_serializable("keras_fourier_tests")
class PyramidOfOneMap(DetectionFPN):
    """The harness takes one tensor in and one out: a stride-1..8 pyramid of strided reads of
    one map in, every output level flattened to (B, N, channels) and concatenated out."""

    def build(self, input_shape):
        super().build(self._pyramid_shapes(input_shape))

    def _pyramid_shapes(self, input_shape):
        batch, height, width, channels = input_shape

        def size(n, k):
            return None if n is None else -(-n // 2**k)

        return [(batch, size(height, k), size(width, k), channels) for k in range(4)]

    def call(self, inputs):
        maps = [inputs[:, :: 2**k, :: 2**k] for k in range(4)]
        outs = super().call(maps)
        return keras.ops.concatenate(
            [keras.ops.reshape(x, (keras.ops.shape(x)[0], -1, self.channels)) for x in outs], 1
        )

    def compute_output_shape(self, input_shape):
        outs = super().compute_output_shape(self._pyramid_shapes(input_shape))
        if any(None in shape[1:3] for shape in outs):
            return (input_shape[0], None, self.channels)
        return (input_shape[0], sum(s[1] * s[2] for s in outs), self.channels)


def _conv_weights(prefix, cin, cout, k):
    return {f"{prefix}conv/kernel": (k, k, cin, cout), f"{prefix}conv/bias": (cout,)}


@pytest.mark.slow
def test_detection_fpn_shared_checks(tmp_path):
    weights = {}
    for i in range(3):
        weights.update(_conv_weights(f"lateral_convs_{i}/", 4, 4, 1))
        weights.update(_conv_weights(f"fpn_convs_{i}/", 4, 4, 3))
    weights.update(_conv_weights("fpn_convs_3/", 4, 4, 3))
    run_layer_checks(lambda **kw: PyramidOfOneMap(4, 4, **kw), (2, 9, 8, 4), weights, str(tmp_path))


def test_gnconv_module_shared_checks(tmp_path):
    weights = {
        "proj_in/kernel": (1, 1, 12, 8),
        "proj_in/bias": (8,),
        "dwconv/kernel": (7, 7, 6, 1),
        "dwconv/bias": (6,),
        "pws_0/kernel": (1, 1, 2, 4),
        "pws_0/bias": (4,),
        "proj_out/kernel": (1, 1, 4, 4),
        "proj_out/bias": (4,),
        "bn/gamma": (4,),
        "bn/beta": (4,),
    }
    run_layer_checks(lambda **kw: GnConvModule(4, **kw), (2, 5, 6, 12), weights, str(tmp_path), 0.2)


# ------------------------------------------------------------------- configs, models, errors


@pytest.mark.parametrize(
    "make",
    [
        lambda: DetectionFPN(8, block="gnconv_gf"),
        lambda: UPerHead(3, channels=8, pool_scales=(1, 2), block="gnconv_gf"),
    ],
    ids=["horfpn_gf", "uperhead_gf"],
)
def test_gnconv_pyramid_layers_config_and_any_size(make):
    layer = make()
    maps = _odd_pyramid()
    expected = keras.tree.flatten(keras.tree.map_structure(to_numpy, layer(maps)))
    clone = type(layer).from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    inputs = [keras.Input((None, None, m.shape[-1])) for m in maps]
    any_size = keras.Model(inputs, layer(inputs))
    actual = keras.tree.flatten(keras.tree.map_structure(to_numpy, any_size(maps)))
    for a, e in zip(actual, expected, strict=True):
        np.testing.assert_allclose(a, e, atol=1e-5)


@pytest.mark.single_backend  # the builder's plumbing; the head's numerics run on every backend
def test_upernet_takes_the_gnconv_head():
    model = segmentation.UPerNet(
        backbone="hornet_tiny", num_classes=3, channels=8, head_block="gnconv_7x7"
    )
    assert isinstance(model.get_layer("decode_head").fpn_bottleneck, GnConvModule)
    out = model.predict(random_input((1, 64, 32, 3)) * 50 + 128, verbose=0)
    assert out.shape == (1, 64, 32, 3) and np.all(np.isfinite(out))


@pytest.mark.single_backend  # argument checks, before any backend op
def test_bad_horfpn_arguments_are_one_line_errors():
    maps = _odd_pyramid()
    cases = [
        (lambda: DetectionFPN(add_extra_convs="on_top"), "add_extra_convs='on_top'"),
        (lambda: DetectionFPN(block="gnconv_5x5"), "block='gnconv_5x5'"),
        (lambda: DetectionFPN(start_level=-1), "start_level=-1"),
        (lambda: DetectionFPN(num_outputs=2)(maps), "num_outputs=2"),
        (lambda: DetectionFPN(start_level=4)(maps), "start_level=4"),
        (lambda: UPerHead(3, block="conv"), "block='conv'"),
        (lambda: GnConvModule(8, block=None), "block=None"),
        (lambda: segmentation.UPerNet(head_block="gnconv"), "head_block='gnconv'"),
        (lambda: segmentation.SegFormer(head_block="gnconv_gf"), "head_block='gnconv_gf'"),
        (
            lambda: segmentation.UPerNet(weights="ade20k", head_block="gnconv_gf"),
            "head_block='gnconv_gf'",
        ),
    ]
    for make, expected in cases:
        with pytest.raises(ValueError) as error:
            make()
        assert expected in str(error.value)
        assert "\n" not in str(error.value)


@pytest.mark.single_backend  # shape arithmetic
def test_gnconv_fusion_flops_replace_the_3x3_convolution():
    """keras_fourier.flops counts HorFPN's saving as the 3x3 conv's MACs minus the gnConv's."""
    channels, (h, w) = 8, (8, 12)
    maps = [keras.Input((h // 2**i, w // 2**i, c), batch_size=1) for i, c in enumerate(CHANNELS_IN)]

    def head_flops(block):
        return flops(keras.Model(maps, UPerHead(3, channels, (1, 2), block=block)(maps)))

    positions, fused = h * w, 4 * channels
    conv = 9 * fused * channels
    gnconv = fused * 2 * channels + 49 * (channels // 2 + channels)
    gnconv += (channels // 2) * channels + channels * channels
    # Both end in BatchNorm and ReLU over (h, w, channels): they cancel in the difference.
    assert head_flops(None) - head_flops("gnconv_7x7") == positions * (conv - gnconv)
