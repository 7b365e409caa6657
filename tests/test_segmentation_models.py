"""Decode heads and segmentation models: shared harnesses, a NumPy UPerHead, mmseg checkpoints."""

import io
import os

import keras
import numpy as np
import pytest

from keras_fourier import segmentation
from keras_fourier.layers import (
    ConvModule,
    FCNHead,
    FPNHead,
    FPNNeck,
    MultiScaleNeck,
    SegFormerHead,
    UPerHead,
)
from keras_fourier.layers.decode_heads import adaptive_pool_matrix
from keras_fourier.layers.interpolation import interpolation_matrix
from keras_fourier.segmentation.checkpoints import mmseg_key_map
from keras_fourier.weights.convert import load_tensors
from keras_fourier.weights.pth import read_pth
from tests.harness import random_input, run_layer_checks, run_model_checks, to_numpy

pytestmark = pytest.mark.multi_backend


def _conv_module_weights(prefix: str, cin: int, cout: int, k: int) -> dict[str, tuple]:
    return {
        f"{prefix}conv/kernel": (k, k, cin, cout),
        f"{prefix}bn/gamma": (cout,),
        f"{prefix}bn/beta": (cout,),
    }


def test_conv_module_shared_checks(tmp_path):
    run_layer_checks(
        lambda **kw: ConvModule(6, 3, **kw),
        (2, 5, 4, 3),
        _conv_module_weights("", 3, 6, 3),
        str(tmp_path),
        learning_rate=0.2,  # large enough to outweigh the first update of BatchNorm's statistics
    )


def test_fcn_head_shared_checks(tmp_path):
    weights = _conv_module_weights("convs_0/", 8, 6, 3)
    weights.update({"conv_seg/kernel": (1, 1, 6, 3), "conv_seg/bias": (3,)})
    run_layer_checks(
        lambda **kw: FCNHead(3, channels=6, **kw), (2, 4, 6, 8), weights, str(tmp_path), 0.2
    )


def test_multi_scale_neck_shared_checks(tmp_path):
    weights = {
        "up0_0/kernel": (2, 2, 4, 4),
        "up0_0/bias": (4,),
        "up0_norm1/gamma": (4,),
        "up0_norm1/beta": (4,),
        "up0_1/kernel": (2, 2, 4, 4),
        "up0_1/bias": (4,),
    }

    class First(MultiScaleNeck):  # the harness takes one output: the stride-4 map of a 16 one
        def call(self, inputs, training=None):
            return super().call(inputs, training)[0]

        def compute_output_shape(self, input_shape):
            return super().compute_output_shape(input_shape)[0]

    keras.saving.register_keras_serializable("keras_fourier_tests")(First)
    run_layer_checks(lambda **kw: First(16, (4,), **kw), (2, 2, 4, 4), weights, str(tmp_path), 0.2)


def _pyramid(batch=2, size=(8, 12), channels=(4, 6, 8, 10), seed=0):
    return [
        random_input((batch, size[0] // 2**i, size[1] // 2**i, c), seed=seed + i)
        for i, c in enumerate(channels)
    ]


@pytest.mark.parametrize(
    "make",
    [
        lambda: UPerHead(3, channels=4, pool_scales=(1, 2, 3)),
        lambda: FPNHead(3, channels=4),
        lambda: SegFormerHead(3, channels=4),
        lambda: FPNNeck(5),
    ],
    ids=["uper", "fpn", "segformer", "fpn_neck"],
)
def test_pyramid_layers_config_and_any_size(make):
    """Config round trip; the same weights give the same outputs at a fixed and a run-time size."""
    layer = make()
    maps = _pyramid()
    expected = keras.tree.map_structure(to_numpy, layer(maps))
    clone = type(layer).from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    inputs = [keras.Input((None, None, m.shape[-1])) for m in maps]
    any_size = keras.Model(inputs, layer(inputs))
    actual = keras.tree.map_structure(to_numpy, any_size(maps))
    for a, e in zip(keras.tree.flatten(actual), keras.tree.flatten(expected), strict=True):
        np.testing.assert_allclose(a, e, atol=1e-5)
    assert tuple(keras.tree.flatten(expected)[0].shape[:3]) == (2, 8, 12)


def test_adaptive_pool_bins_overlap_as_pytorch():
    # AdaptiveAvgPool over 4 with 6 bins: [0,1) [0,2) [1,3) [2,3)... per floor/ceil bounds.
    np.testing.assert_allclose(
        adaptive_pool_matrix(4, 6).T,
        [
            [1, 0, 0, 0],
            [0.5, 0.5, 0, 0],
            [0, 1, 0, 0],
            [0, 0, 1, 0],
            [0, 0, 0.5, 0.5],
            [0, 0, 0, 1],
        ],
    )


# --------------------------------------------------------------------- NumPy reference of UPerHead


def _np_conv(x, w, bias=None):
    """NHWC x, PyTorch (out, in, k, k) w, zero padding k // 2, stride 1."""
    k = w.shape[-1]
    pad = k // 2
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    h, wd = x.shape[1:3]
    out = np.zeros((*x.shape[:3], w.shape[0]))
    for i in range(k):
        for j in range(k):
            out += xp[:, i : i + h, j : j + wd, :] @ w[:, :, i, j].T
    return out if bias is None else out + bias


def _np_conv_module(x, sd, prefix):
    y = _np_conv(x, sd[f"{prefix}.conv.weight"])
    scale = sd[f"{prefix}.bn.weight"] / np.sqrt(sd[f"{prefix}.bn.running_var"] + 1e-5)
    y = (y - sd[f"{prefix}.bn.running_mean"]) * scale + sd[f"{prefix}.bn.bias"]
    return np.maximum(y, 0)


def _np_resize(x, size):
    rows = interpolation_matrix(x.shape[1], size[0], "bilinear", align_corners=False)
    cols = interpolation_matrix(x.shape[2], size[1], "bilinear", align_corners=False)
    return np.einsum("ah,bw,nhwc->nabc", rows, cols, x)


def _np_uper_head(maps, sd, pool_scales, fuse=_np_conv_module):
    """mmsegmentation's UPerHead forward in NumPy (NHWC), inference mode.

    `fuse(x, sd, prefix)` is the ``fpn_bottleneck`` module (HorFPN's gnConv replaces it).
    """
    last = maps[-1]
    size = last.shape[1:3]
    pooled = []
    for i, s in enumerate(pool_scales):
        p = np.einsum(
            "hs,wt,nhwc->nstc",
            adaptive_pool_matrix(size[0], s),
            adaptive_pool_matrix(size[1], s),
            last,
        )
        pooled.append(_np_resize(_np_conv_module(p, sd, f"decode_head.psp_modules.{i}.1"), size))
    laterals = [
        _np_conv_module(m, sd, f"decode_head.lateral_convs.{i}") for i, m in enumerate(maps[:-1])
    ]
    laterals.append(
        _np_conv_module(np.concatenate([last, *pooled], -1), sd, "decode_head.bottleneck")
    )
    for i in range(len(laterals) - 1, 0, -1):
        laterals[i - 1] = laterals[i - 1] + _np_resize(laterals[i], laterals[i - 1].shape[1:3])
    outs = [
        _np_conv_module(x, sd, f"decode_head.fpn_convs.{i}") for i, x in enumerate(laterals[:-1])
    ]
    outs.append(laterals[-1])
    outs = [outs[0], *(_np_resize(x, outs[0].shape[1:3]) for x in outs[1:])]
    fused = fuse(np.concatenate(outs, -1), sd, "decode_head.fpn_bottleneck")
    return _np_conv(fused, sd["decode_head.conv_seg.weight"], sd["decode_head.conv_seg.bias"])


def _mmseg_head_state(channels_in, channels, classes, pool_scales, seed=0):
    """A random decode_head.* state dict in mmsegmentation's UPerHead layout."""
    rng = np.random.default_rng(seed)
    sd = {}

    def conv_module(prefix, cin, k):
        sd[f"{prefix}.conv.weight"] = rng.normal(0, 0.3, (channels, cin, k, k))
        sd[f"{prefix}.bn.weight"] = rng.normal(1, 0.2, channels)
        sd[f"{prefix}.bn.bias"] = rng.normal(0, 0.2, channels)
        sd[f"{prefix}.bn.running_mean"] = rng.normal(0, 0.2, channels)
        sd[f"{prefix}.bn.running_var"] = rng.uniform(0.5, 1.5, channels)
        sd[f"{prefix}.bn.num_batches_tracked"] = np.array(7)

    for i in range(len(pool_scales)):
        conv_module(f"decode_head.psp_modules.{i}.1", channels_in[-1], 1)
    conv_module("decode_head.bottleneck", channels_in[-1] + len(pool_scales) * channels, 3)
    for i, cin in enumerate(channels_in[:-1]):
        conv_module(f"decode_head.lateral_convs.{i}", cin, 1)
        conv_module(f"decode_head.fpn_convs.{i}", channels, 3)
    conv_module("decode_head.fpn_bottleneck", len(channels_in) * channels, 3)
    sd["decode_head.conv_seg.weight"] = rng.normal(0, 0.3, (classes, channels, 1, 1))
    sd["decode_head.conv_seg.bias"] = rng.normal(0, 0.3, classes)
    return sd


def _save_mmseg(path, state_dict):
    import torch

    torch.save(
        {
            "meta": {"CLASSES": ("a", "b", "c"), "iter": 160000},
            "state_dict": {k: torch.tensor(np.asarray(v)) for k, v in state_dict.items()},
        },
        path,
    )
    return path


def _head_model(channels_in, channels, classes, pool_scales):
    inputs = [keras.Input((None, None, c)) for c in channels_in]
    head = UPerHead(classes, channels=channels, pool_scales=pool_scales, name="decode_head")
    return keras.Model(inputs, head(inputs), name="head_only")


def test_mmseg_checkpoint_of_the_head_matches_a_numpy_uperhead(tmp_path):
    channels_in, channels, classes, scales = (4, 6, 8, 10), 5, 3, (1, 2, 3, 6)
    sd = _mmseg_head_state(channels_in, channels, classes, scales)
    path = _save_mmseg(tmp_path / "head.pth", sd)
    model = _head_model(channels_in, channels, classes, scales)
    load_tensors(model, read_pth(path), mmseg_key_map("head_only"), source=str(path))
    maps = _pyramid(size=(16, 8), channels=channels_in)  # a 2 x 1 top map: 6 bins overlap
    expected = _np_uper_head([m.astype(np.float64) for m in maps], sd, scales)
    actual = to_numpy(model(maps, training=False))
    np.testing.assert_allclose(actual, expected, atol=1e-4, rtol=1e-4)
    assert np.abs(expected).max() > 1.0  # the comparison is not of near-zero maps


def test_mismatched_checkpoints_are_refused_in_one_line_listing_the_keys(tmp_path):
    channels_in, scales = (4, 6, 8, 10), (1, 2)
    sd = _mmseg_head_state(channels_in, 5, 3, scales)
    model = _head_model(channels_in, 5, 3, scales)
    wrong_classes = {**sd, "decode_head.conv_seg.weight": np.zeros((4, 5, 1, 1))}
    wrong_classes["decode_head.conv_seg.bias"] = np.zeros(4)
    renamed = {
        k.replace("decode_head.bottleneck.conv", "decode_head.bottleneck.conv2"): v
        for k, v in sd.items()
    }
    cases = [
        (wrong_classes, "wrong shapes (2): decode_head.conv_seg.weight"),
        (renamed, "missing keys (1): decode_head.bottleneck.conv.weight"),
        (renamed, "unexpected keys (1): decode_head.bottleneck.conv2.weight"),
    ]
    for state, expected in cases:
        with pytest.raises(ValueError) as error:
            load_tensors(model, state, mmseg_key_map("head_only"), source="test")
        assert expected in str(error.value)
        assert "\n" not in str(error.value)


# ------------------------------------------------------------------------------------ models


def _frozen_statistics(model: keras.Model) -> keras.Model:
    """BatchNorm in inference mode (frozen statistics), as when fine-tuning with small batches.

    The model harness measures its one training step in inference mode; a step
    that also moves BatchNorm's running statistics 10% of the way towards the
    statistics of one random batch changes the inference outputs by more than
    the step lowers the loss.
    """
    for layer in model._flatten_layers():
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.trainable = False
    return model


@pytest.mark.parametrize(
    "build",
    [
        lambda **kw: segmentation.UPerNet(
            backbone="hornet_tiny", num_classes=3, channels=8, input_shape=(32, 32, 3), **kw
        ),
        lambda **kw: segmentation.SegFormer(
            backbone="gfnet_tiny", num_classes=3, channels=8, input_shape=(32, 32, 3), **kw
        ),
    ],
    ids=["upernet_hornet", "segformer_isotropic_gfnet"],
)
@pytest.mark.slow
def test_segmentation_models_shared_checks(build, tmp_path):
    run_model_checks(
        lambda **kw: _frozen_statistics(build(**kw)),
        random_input((2, 32, 32, 3)) * 50 + 128,
        str(tmp_path),
        # Adam moves every global-filter coefficient by the step: 1e-3 (and on some
        # initialisations 1e-4) changes the spatial filters of these per-pixel models
        # several times over.
        learning_rate=1e-5,
    )


def test_semantic_fpn_on_a_pyramid_at_any_size():
    model = segmentation.SemanticFPN(backbone="gfnet_h_tiny", num_classes=4, channels=8)
    assert [layer.name for layer in model.layers if layer.name in ("neck", "decode_head")] == [
        "neck",
        "decode_head",
    ]
    out = model.predict(random_input((1, 16, 24, 3)) * 50 + 128, verbose=0)
    assert out.shape == (1, 16, 24, 4) and np.all(np.isfinite(out))


def test_auxiliary_output_for_training_and_the_inference_model(tmp_path):
    model = segmentation.UPerNet(
        backbone="hornet_tiny",
        num_classes=3,
        channels=8,
        input_shape=(None, None, 3),
        auxiliary=True,
    )
    images = random_input((1, 64, 32, 3)) * 50 + 128
    outputs = model.predict(images, verbose=0)
    assert sorted(outputs) == ["auxiliary", "logits"]
    assert outputs["logits"].shape == outputs["auxiliary"].shape == (1, 64, 32, 3)
    inference = segmentation.without_auxiliary(model)
    np.testing.assert_array_equal(inference.predict(images, verbose=0), outputs["logits"])
    assert not np.allclose(outputs["logits"], outputs["auxiliary"])


def test_bad_arguments_are_one_line_errors():
    cases = [
        ({"input_shape": (36, 36, 3)}, "input_shape=(36, 36, 3)"),
        ({"backbone": "resnet50"}, "backbone='resnet50'"),
        ({"weights": "ade20k", "backbone": "hornet_tiny"}, "backbone='hornet_tiny'"),
        ({"weights": "ade20k", "backbone": "hornet_t_gf", "num_classes": 19}, "num_classes=19"),
        ({"weights": "nothing.pth"}, "weights='nothing.pth'"),
    ]
    for kwargs, expected in cases:
        with pytest.raises(ValueError) as error:
            segmentation.UPerNet(**{"backbone": "hornet_tiny", **kwargs})
        assert expected in str(error.value)
        assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="auxiliary=True"):
        segmentation.SegFormer(backbone="gfnet_h_tiny", auxiliary=True)


def test_ade20k_class_names_ship_with_the_package():
    names = segmentation.class_names()
    assert len(names) == 150 and len(set(names)) == 150
    assert (names[0], names[12], names[149]) == ("wall", "person", "flag")


def test_ade20k_weights_come_from_the_mirror_and_a_mismatch_is_refused(tmp_path, monkeypatch):
    """The download path of weights='ade20k' (a temporary KERAS_HOME, a 127.0.0.1 mirror)."""
    from tests.release_server import serve

    release = segmentation.RELEASES["hornet_t_7x7"]
    buffer = io.BytesIO()
    _save_mmseg(buffer, _mmseg_head_state((4, 6, 8, 10), 5, 150, (1, 2)))
    monkeypatch.setenv("KERAS_HOME", os.fspath(tmp_path / "keras_home"))
    with serve({release.file_name: buffer.getvalue()}) as server:
        monkeypatch.setenv("KERAS_FOURIER_MIRROR", server.url)
        with pytest.raises(ValueError) as error:
            segmentation.UPerNet(backbone="hornet_t_7x7", weights="ade20k", input_shape=(32, 32, 3))
    message = str(error.value)
    assert "\n" not in message and "model was left unchanged" in message
    assert "missing keys (" in message and "backbone.downsample_layers.0.0.bias" in message
    assert server.requests == [f"/{release.file_name}"]
    cached = tmp_path / "keras_home" / "keras_fourier" / release.file_name
    assert cached.read_bytes() == buffer.getvalue()
