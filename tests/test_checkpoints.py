"""Official PyTorch checkpoints and weights="imagenet", read without torch and without network.

Checkpoints are built here in the official layout (keys, shapes and tensor
layouts of the GFNet, HorNet and AFNO reference code), independently of the
key map under test, written by ``torch.save`` (the test extra has PyTorch)
and read by the package's own PyTorch-free reader.
"""

import argparse
import contextlib
import functools
import io
import os
import subprocess
import sys
import urllib.error
import urllib.request

import keras
import numpy as np
import pytest
import torch

import keras_fourier.models as km
from keras_fourier.layers.hornet import GlobalLocalFilter
from keras_fourier.models import build_model, catalog
from keras_fourier.models.vision_weights import (
    imagenet_checkpoint,
    load_variant_weights,
    pytorch_key_map,
)
from keras_fourier.weights import convert, download, resize
from keras_fourier.weights.pipeline import READERS
from keras_fourier.weights.pth import read_pth
from keras_fourier.weights.saved import load_file_weights
from tests.harness import random_input, to_numpy
from tests.release_server import serve

# The layer, model and weight tests run under every Keras backend (tests/conftest.py).
pytestmark = pytest.mark.multi_backend

LEFT_UNCHANGED = "the model was left unchanged"
GFNET_TI_URL = "https://cloud.tsinghua.edu.cn/f/3d0c1579aa524a0a99dd/?dl=1"


# ----------------------------------------------------------------------------- official layouts


class OfficialState:
    """Builds an official state dict of random float32 arrays, key by key."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.state: dict[str, np.ndarray] = {}

    def put(self, key: str, *shape: int, scale: float = 0.05, offset: float = 0.0) -> None:
        value = offset + scale * self.rng.standard_normal(shape)
        self.state[key] = value.astype("float32")

    def linear(self, key: str, fan_in: int, fan_out: int) -> None:
        self.put(f"{key}.weight", fan_out, fan_in)
        self.put(f"{key}.bias", fan_out)

    def conv(self, key: str, fan_in: int, fan_out: int, kernel: int) -> None:
        self.put(f"{key}.weight", fan_out, fan_in, kernel, kernel)
        self.put(f"{key}.bias", fan_out)

    def norm(self, key: str, dim: int) -> None:
        self.put(f"{key}.weight", dim, scale=0.1, offset=1.0)
        self.put(f"{key}.bias", dim)


def gfnet_state(dims, depths, patch: int, grid: int, classes: int = 1000) -> dict:
    """GFNet (one stage) or GFNet-H (four stages) trained with `grid` x `grid` tokens."""
    hierarchical = len(dims) > 1
    out = OfficialState()
    out.conv("patch_embed.0.proj" if hierarchical else "patch_embed.proj", 3, dims[0], patch)
    out.put("pos_embed", 1, grid * grid, dims[0])
    for stage, (dim, depth) in enumerate(zip(dims, depths, strict=True)):
        size = grid // 2**stage
        if stage:
            out.conv(f"patch_embed.{stage}.proj", dims[stage - 1], dim, 2)
        for index in range(depth):
            block = f"blocks.{stage}.{index}" if hierarchical else f"blocks.{index}"
            out.norm(f"{block}.norm1", dim)
            out.put(f"{block}.filter.complex_weight", size, size // 2 + 1, dim, 2, scale=0.3)
            out.norm(f"{block}.norm2", dim)
            out.linear(f"{block}.mlp.fc1", dim, 4 * dim)
            out.linear(f"{block}.mlp.fc2", 4 * dim, dim)
            if hierarchical:
                out.put(f"{block}.gamma", dim, scale=0.1, offset=0.5)
    out.norm("norm", dims[-1])
    out.linear("head", dims[-1], classes)
    return out.state


def hornet_state(base: int, gf: bool, filters=((14, 8), (7, 4)), classes: int = 1000) -> dict:
    """HorNet with depths (2, 3, 18, 2), gnConv orders 2-5; GF filters of size `filters`."""
    dims = [base * 2**stage for stage in range(4)]
    out = OfficialState()
    out.conv("downsample_layers.0.0", 3, dims[0], 4)
    out.norm("downsample_layers.0.1", dims[0])
    for stage in (1, 2, 3):
        out.norm(f"downsample_layers.{stage}.0", dims[stage - 1])
        out.conv(f"downsample_layers.{stage}.1", dims[stage - 1], dims[stage], 2)
    for stage, depth in enumerate((2, 3, 18, 2)):
        dim, order = dims[stage], stage + 2
        widths = [dim // 2**i for i in range(order)][::-1]
        mixed = sum(widths)
        for index in range(depth):
            block = f"stages.{stage}.{index}"
            out.norm(f"{block}.norm1", dim)
            out.conv(f"{block}.gnconv.proj_in", dim, 2 * dim, 1)
            if gf and stage >= 2:
                height, width = filters[stage - 2]
                out.norm(f"{block}.gnconv.dwconv.pre_norm", mixed)
                out.put(f"{block}.gnconv.dwconv.dw.weight", mixed // 2, 1, 3, 3)
                out.put(f"{block}.gnconv.dwconv.complex_weight", mixed // 2, height, width, 2)
                out.norm(f"{block}.gnconv.dwconv.post_norm", mixed)
            else:
                out.put(f"{block}.gnconv.dwconv.weight", mixed, 1, 7, 7)
                out.put(f"{block}.gnconv.dwconv.bias", mixed)
            for i in range(order - 1):
                out.conv(f"{block}.gnconv.pws.{i}", widths[i], widths[i + 1], 1)
            out.conv(f"{block}.gnconv.proj_out", dim, dim, 1)
            out.put(f"{block}.gamma1", dim, scale=0.1, offset=0.5)
            out.norm(f"{block}.norm2", dim)
            out.linear(f"{block}.pwconv1", dim, 4 * dim)
            out.linear(f"{block}.pwconv2", 4 * dim, dim)
            out.put(f"{block}.gamma2", dim, scale=0.1, offset=0.5)
    out.norm("norm", dims[-1])
    out.linear("head", dims[-1], classes)
    return out.state


def afnonet_state(grid: int, classes: int = 1000) -> dict:
    """AFNONet: patch 4, dim 384, 12 blocks, AFNO2D with 16 blocks of 24 channels."""
    out = OfficialState()
    out.conv("patch_embed.proj", 3, 384, 4)
    out.put("pos_embed", 1, grid * grid, 384)
    for index in range(12):
        block = f"blocks.{index}"
        out.norm(f"{block}.norm1", 384)
        for name, shape in (("w1", (24, 24)), ("b1", (24,)), ("w2", (24, 24)), ("b2", (24,))):
            out.put(f"{block}.filter.{name}", 2, 16, *shape)
        out.norm(f"{block}.norm2", 384)
        out.linear(f"{block}.mlp.fc1", 384, 1536)
        out.linear(f"{block}.mlp.fc2", 1536, 384)
    out.norm("norm", 384)
    out.linear("head", 384, classes)
    return out.state


# ---------------------------------------------------------------- direct assignment, layer by layer


def _dense(layer, state, key):
    layer.kernel.assign(state[f"{key}.weight"].T)
    layer.bias.assign(state[f"{key}.bias"])


def _conv(layer, state, key, depthwise=False):
    weight = state[f"{key}.weight"]  # (out, in, kh, kw), depthwise (C, 1, kh, kw)
    layer.kernel.assign(np.transpose(weight, (2, 3, 0, 1) if depthwise else (2, 3, 1, 0)))
    if layer.use_bias:
        layer.bias.assign(state[f"{key}.bias"])


def _norm(layer, state, key):
    layer.gamma.assign(state[f"{key}.weight"])
    layer.beta.assign(state[f"{key}.bias"])


def _head(model, state):
    layers = {layer.name for layer in model.layers}
    if "norm" in layers:
        _norm(model.get_layer("norm"), state, "norm")
    if "head" in layers:
        _dense(model.get_layer("head"), state, "head")


def assign_gfnet(model, state, depths, hierarchical):
    _conv(
        model.get_layer("stem_conv"),
        state,
        "patch_embed.0.proj" if hierarchical else "patch_embed.proj",
    )
    pos = model.get_layer("pos_embed").pos_embed
    pos.assign(state["pos_embed"].reshape(pos.shape))
    for stage, depth in enumerate(depths):
        if stage:
            _conv(model.get_layer(f"downsample{stage}_conv"), state, f"patch_embed.{stage}.proj")
        for index in range(depth):
            block = f"blocks.{stage}.{index}" if hierarchical else f"blocks.{index}"
            name = f"stage{stage}_block{index}"
            _norm(model.get_layer(f"{name}_norm1"), state, f"{block}.norm1")
            mixer = model.get_layer(f"{name}_mixer")
            if hasattr(mixer, "complex_weight"):
                mixer.complex_weight.assign(state[f"{block}.filter.complex_weight"])
            else:
                for weight in ("w1", "b1", "w2", "b2"):
                    getattr(mixer, weight).assign(state[f"{block}.filter.{weight}"])
            _norm(model.get_layer(f"{name}_norm2"), state, f"{block}.norm2")
            ffn = model.get_layer(f"{name}_ffn")
            _dense(ffn.fc1, state, f"{block}.mlp.fc1")
            _dense(ffn.fc2, state, f"{block}.mlp.fc2")
            if hierarchical:
                model.get_layer(f"{name}_ls").gamma.assign(state[f"{block}.gamma"])
    _head(model, state)


def assign_hornet(model, state):
    _conv(model.get_layer("stem_conv"), state, "downsample_layers.0.0")
    _norm(model.get_layer("stem_norm"), state, "downsample_layers.0.1")
    for stage, depth in enumerate((2, 3, 18, 2)):
        if stage:
            _norm(model.get_layer(f"downsample{stage}_norm"), state, f"downsample_layers.{stage}.0")
            _conv(model.get_layer(f"downsample{stage}_conv"), state, f"downsample_layers.{stage}.1")
        for index in range(depth):
            block, name = f"stages.{stage}.{index}", f"stage{stage}_block{index}"
            _norm(model.get_layer(f"{name}_norm1"), state, f"{block}.norm1")
            gnconv = model.get_layer(f"{name}_mixer")
            _conv(gnconv.proj_in, state, f"{block}.gnconv.proj_in")
            if hasattr(gnconv.dwconv, "complex_weight"):
                local = gnconv.dwconv
                _norm(local.pre_norm, state, f"{block}.gnconv.dwconv.pre_norm")
                _conv(local.dw, state, f"{block}.gnconv.dwconv.dw", depthwise=True)
                local.complex_weight.assign(state[f"{block}.gnconv.dwconv.complex_weight"])
                _norm(local.post_norm, state, f"{block}.gnconv.dwconv.post_norm")
            else:
                _conv(gnconv.dwconv, state, f"{block}.gnconv.dwconv", depthwise=True)
            for i, pw in enumerate(gnconv.pws):
                _conv(pw, state, f"{block}.gnconv.pws.{i}")
            _conv(gnconv.proj_out, state, f"{block}.gnconv.proj_out")
            model.get_layer(f"{name}_ls1").gamma.assign(state[f"{block}.gamma1"])
            _norm(model.get_layer(f"{name}_norm2"), state, f"{block}.norm2")
            ffn = model.get_layer(f"{name}_ffn")
            _dense(ffn.fc1, state, f"{block}.pwconv1")
            _dense(ffn.fc2, state, f"{block}.pwconv2")
            model.get_layer(f"{name}_ls2").gamma.assign(state[f"{block}.gamma2"])
    _head(model, state)


# ------------------------------------------------------------------------------- torch.save files


@pytest.fixture
def save_pth():
    """save(path, checkpoint): writes `checkpoint` with torch.save; returns the path."""

    def save(path, checkpoint):
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(checkpoint, path)
        return os.fspath(path)

    return save


def tensors(state):
    return {key: torch.from_numpy(np.ascontiguousarray(value)) for key, value in state.items()}


def snapshot(model):
    return {v.path: np.array(v.numpy()) for v in model.weights}


def assert_same_weights(model, expected):
    actual = snapshot(model)
    assert actual.keys() == expected.keys()
    for path, value in expected.items():
        np.testing.assert_array_equal(actual[path], value, err_msg=path)


# ------------------------------------------------------------------ reference resizing (loops)


def _cubic(x, a=-0.75):
    x = abs(x)
    if x <= 1:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2:
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return 0.0


def reference_resize(x, size, axes, mode, align_corners):
    """PyTorch F.interpolate, one output sample at a time along each axis."""
    x = np.asarray(x, dtype=np.float64)
    for axis, out_size in zip(axes, size, strict=True):
        moved = np.moveaxis(x, axis, 0)
        n = moved.shape[0]
        rows = []
        for j in range(out_size):
            if align_corners:
                source = j * (n - 1) / (out_size - 1) if out_size > 1 else 0.0
            else:
                source = (j + 0.5) * n / out_size - 0.5
            base = int(np.floor(source))
            t = source - base
            if mode == "bilinear":
                taps = [(base, 1 - t), (base + 1, t)]
            else:
                taps = [(base - 1, _cubic(t + 1)), (base, _cubic(t))]
                taps += [(base + 1, _cubic(1 - t)), (base + 2, _cubic(2 - t))]
            rows.append(sum(w * moved[min(max(i, 0), n - 1)] for i, w in taps))
        x = np.moveaxis(np.stack(rows), 0, axis)
    return x


# ------------------------------------------------------------------------------------- tests

DIRECT_CASES = {
    "gfnet_ti": (km.GFNetTi, (32, 32, 3), lambda: gfnet_state((256,), (12,), 16, 2)),
    "gfnet_h_ti": (
        km.GFNetHTi,
        (32, 32, 3),
        lambda: gfnet_state((64, 128, 256, 512), (3, 3, 10, 3), 4, 8),
    ),
    "hornet_t_7x7": (km.HorNetT7x7, (32, 32, 3), lambda: hornet_state(64, gf=False)),
    "hornet_t_gf": (
        km.HorNetTGF,
        (64, 64, 3),
        lambda: hornet_state(64, gf=True, filters=((4, 3), (2, 2))),
    ),
    "afnonet_s4": (km.AFNONetS4, (16, 16, 3), lambda: afnonet_state(4)),
}


def _assign_direct(variant, model, state):
    if variant.startswith("hornet"):
        assign_hornet(model, state)
    else:
        hierarchical = variant == "gfnet_h_ti"
        depths = (3, 3, 10, 3) if hierarchical else (12,)
        assign_gfnet(model, state, depths, hierarchical)


@pytest.mark.parametrize("variant", sorted(DIRECT_CASES))
@pytest.mark.slow
def test_official_checkpoint_loads_like_direct_assignment(variant, tmp_path, save_pth):
    builder, shape, make_state = DIRECT_CASES[variant]
    state = make_state()
    nested = {"model": tensors(state), "epoch": 299, "args": argparse.Namespace(lr=1e-3)}
    path = save_pth(tmp_path / f"{variant}.pth", nested)
    model = builder(weights=path, input_shape=shape, classifier_activation=None)
    x = 255.0 * np.abs(random_input((2, *shape), seed=3))
    loaded_out = to_numpy(model(x, training=False))
    loaded = snapshot(model)

    _assign_direct(variant, model, state)
    assert_same_weights(model, loaded)
    np.testing.assert_array_equal(to_numpy(model(x, training=False)), loaded_out)
    assert np.std(loaded_out) > 1e-3


def test_headless_models_ignore_head_and_unused_final_norm(tmp_path, save_pth):
    state = hornet_state(64, gf=False)
    path = save_pth(tmp_path / "hornet.pt", {"module": tensors(state)})
    features = km.HorNetT7x7(weights=path, input_shape=(32, 32, 3), include_top=False)
    assert "norm" not in {layer.name for layer in features.layers}
    loaded = snapshot(features)
    assign_hornet(features, state)
    assert_same_weights(features, loaded)

    gfnet = gfnet_state((256,), (12,), 16, 2)
    path = save_pth(tmp_path / "gfnet.pth", tensors(gfnet))
    pooled = km.GFNetTi(weights=path, input_shape=(32, 32, 3), include_top=False, pooling="avg")
    np.testing.assert_array_equal(pooled.get_layer("norm").gamma.numpy(), gfnet["norm.weight"])


def test_key_map_covers_every_variable_with_the_official_names():
    model = km.GFNetHTi(input_shape=(32, 32, 3))
    mapped, ignored = pytorch_key_map(catalog.variant("gfnet_h_ti"), model)
    keys = {key: variable.path for key, (variable, _) in mapped.items()}
    official = gfnet_state((64, 128, 256, 512), (3, 3, 10, 3), 4, 8)
    assert keys.keys() == official.keys()
    assert ignored == set()  # the model has its final norm and head
    assert sorted(keys.values()) == sorted(v.path for v in model.weights)
    assert keys["patch_embed.2.proj.weight"] == "downsample2_conv/kernel"
    assert keys["blocks.3.2.gamma"] == "stage3_block2_ls/gamma"
    assert mapped["blocks.3.2.mlp.fc1.weight"][1] == "linear"


def test_gfnet_filter_resize_matches_direct_bicubic():
    weight = np.random.default_rng(1).standard_normal((14, 8, 3, 2)).astype("float32")
    resized = resize.resize_global_filter(weight, (24, 13))
    expected = reference_resize(weight, (24, 13), (0, 1), "bicubic", align_corners=True)
    assert resized.shape == (24, 13, 3, 2)
    assert resized.dtype == np.float32
    np.testing.assert_allclose(resized, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(resized[0, 0], weight[0, 0])  # corners kept
    np.testing.assert_array_equal(resized[-1, -1], weight[-1, -1])
    np.testing.assert_array_equal(resize.resize_global_filter(weight, (14, 8)), weight)


def test_pos_embed_resize_is_bicubic_without_align_corners():
    # F.interpolate([[0, 1]], size=4, mode="bicubic", align_corners=False), by hand with
    # A = -0.75: the ends overshoot by W(1.25) = -0.10546875.
    ramp = np.array([0.0, 1.0, 0.0, 1.0], dtype="float32").reshape(1, 4, 1)
    row = resize.resize_pos_embed(ramp, (4, 4))[0, :, :, 0]
    np.testing.assert_allclose(row, [[-0.10546875, 0.2265625, 0.7734375, 1.10546875]] * 4)

    tokens = np.random.default_rng(2).standard_normal((1, 49, 5)).astype("float32")
    resized = resize.resize_pos_embed(tokens, (12, 5))
    grid = tokens.reshape(1, 7, 7, 5)
    expected = reference_resize(grid, (12, 5), (1, 2), "bicubic", align_corners=False)
    assert resized.shape == (1, 12, 5, 5)
    np.testing.assert_allclose(resized, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(resize.resize_pos_embed(tokens, (7, 7)), grid)
    with pytest.raises(ValueError, match=r"\(1, N, C\) with N a square number.*\(1, 48, 5\)"):
        resize.resize_pos_embed(tokens[:, :48], (7, 7))


def test_gfnet_checkpoint_at_224_loads_at_384(tmp_path, save_pth):
    state = gfnet_state((256,), (12,), 16, 14)
    path = save_pth(tmp_path / "gfnet-ti.pth", {"model": tensors(state)})
    model = km.GFNetTi(weights=path, input_shape=(384, 384, 3))
    for index in (0, 11):
        source = state[f"blocks.{index}.filter.complex_weight"]
        expected = reference_resize(source, (24, 13), (0, 1), "bicubic", align_corners=True)
        actual = model.get_layer(f"stage0_block{index}_mixer").complex_weight.numpy()
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
    grid = state["pos_embed"].reshape(1, 14, 14, 256)
    expected = reference_resize(grid, (24, 24), (1, 2), "bicubic", align_corners=False)
    pos = model.get_layer("pos_embed").pos_embed.numpy()
    np.testing.assert_allclose(pos, expected, rtol=1e-5, atol=1e-6)


def test_gfnet_h_checkpoint_loads_at_a_non_square_size(tmp_path, save_pth):
    state = gfnet_state((64, 128, 256, 512), (3, 3, 10, 3), 4, 16)
    path = save_pth(tmp_path / "gfnet-h-ti.pth", {"model": tensors(state)})
    model = km.GFNetHTi(weights=path, input_shape=(96, 64, 3))
    for stage, size in enumerate([(24, 9), (12, 5), (6, 3), (3, 2)]):
        source = state[f"blocks.{stage}.0.filter.complex_weight"]
        expected = reference_resize(source, size, (0, 1), "bicubic", align_corners=True)
        actual = model.get_layer(f"stage{stage}_block0_mixer").complex_weight.numpy()
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
    grid = state["pos_embed"].reshape(1, 16, 16, 64)
    expected = reference_resize(grid, (24, 16), (1, 2), "bicubic", align_corners=False)
    np.testing.assert_allclose(
        model.get_layer("pos_embed").pos_embed.numpy(), expected, rtol=1e-5, atol=1e-6
    )


def test_hornet_gf_filters_resize_like_the_official_run_time_resize(tmp_path, save_pth):
    state = hornet_state(64, gf=True)  # the 224-pixel filters, (14, 8) and (7, 4)
    path = save_pth(tmp_path / "hornet_tiny_gf.pth", {"model": tensors(state)})
    model = km.HorNetTGF(weights=path, input_shape=(64, 64, 3))
    for stage, size in ((2, (4, 3)), (3, (2, 2))):
        source = state[f"stages.{stage}.0.gnconv.dwconv.complex_weight"]
        expected = reference_resize(source, size, (1, 2), "bilinear", align_corners=True)
        converted = model.get_layer(f"stage{stage}_block0_mixer").dwconv
        np.testing.assert_allclose(to_numpy(converted.complex_weight), expected, atol=1e-6)

    # The official layer keeps the 14x8 filter and resizes it on every call.
    converted = model.get_layer("stage2_block0_mixer").dwconv
    source = state["stages.2.0.gnconv.dwconv.complex_weight"]
    run_time = GlobalLocalFilter(height=14, width=8)
    x = random_input((2, 4, 4, 480), seed=4)
    run_time.build(x.shape)
    for ours, theirs in zip(run_time.weights, converted.weights, strict=True):
        ours.assign(source if ours.name == "complex_weight" else to_numpy(theirs))
    np.testing.assert_allclose(to_numpy(run_time(x)), to_numpy(converted(x)), atol=1e-5)


@pytest.fixture(scope="module")
def small_gfnet():
    return km.GFNetTi(input_shape=(32, 32, 3))


def _mismatch(state):
    state["blocks.0.mlp.fc1.weight"] = np.zeros((1024, 255), "float32")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            _mismatch,
            r"wrong shapes \(1\): blocks\.0\.mlp\.fc1\.weight -> stage0_block0_ffn/fc1/kernel: "
            r"checkpoint shape \(1024, 255\) gives \(255, 1024\), expected \(256, 1024\)",
        ),
        (
            lambda state: state.pop("blocks.3.norm2.bias"),
            r"missing keys \(1\): blocks\.3\.norm2\.bias",
        ),
        (
            lambda state: state.update({"blocks.12.norm1.weight": np.ones(256, "float32")}),
            r"unexpected keys \(1\): blocks\.12\.norm1\.weight",
        ),
    ],
    ids=["wrong_shape", "missing_key", "extra_key"],
)
def test_mismatching_checkpoint_raises_and_leaves_the_model_unchanged(
    edit, message, small_gfnet, tmp_path, save_pth
):
    state = gfnet_state((256,), (12,), 16, 2)
    edit(state)
    path = save_pth(tmp_path / "bad.pth", {"model": tensors(state)})
    before = snapshot(small_gfnet)
    with pytest.raises(ValueError, match=message) as info:
        load_variant_weights(catalog.variant("gfnet_ti"), small_gfnet, path)
    assert f"do not match the architecture of model 'gfnet_ti'; {LEFT_UNCHANGED}" in str(info.value)
    assert "The checkpoint does not match 'gfnet_ti' as built" in str(info.value)
    assert_same_weights(small_gfnet, before)


def test_checkpoint_of_another_variant_lists_every_problem(small_gfnet):
    gfnet_ti, hornet_t_7x7 = catalog.variant("gfnet_ti"), catalog.variant("hornet_t_7x7")
    xs = gfnet_state((384,), (12,), 16, 2)
    with pytest.raises(ValueError, match=r"wrong shapes \(114\): .*, \.\.\. and 104 more"):
        convert.convert(small_gfnet, xs, functools.partial(pytorch_key_map, gfnet_ti))
    with pytest.raises(ValueError, match=r"variables without a counterpart in the official "):
        convert.convert(small_gfnet, xs, functools.partial(pytorch_key_map, hornet_t_7x7))
    with pytest.raises(ValueError, match=r"Unknown variant 'gfnet_q'; expected one of \["):
        pytorch_key_map(catalog.variant("gfnet_q"), small_gfnet)


def test_convert_tensor_layouts_and_errors():
    linear = np.arange(6, dtype="float32").reshape(3, 2)
    np.testing.assert_array_equal(convert.convert_tensor("linear", linear, (2, 3)), linear.T)
    conv = np.arange(2 * 3 * 4 * 5, dtype="float32").reshape(2, 3, 4, 5)
    out = convert.convert_tensor("conv", conv, (4, 5, 3, 2))
    assert out[1, 2, 0, 1] == conv[1, 0, 1, 2]
    depthwise = np.arange(6 * 9, dtype="float32").reshape(6, 1, 3, 3)
    out = convert.convert_tensor("depthwise", depthwise, (3, 3, 6, 1))
    assert out[0, 2, 4, 0] == depthwise[4, 0, 0, 2]
    with pytest.raises(
        ValueError, match=r"a conv tensor must have rank 4; checkpoint shape \(3, 2\)"
    ):
        convert.convert_tensor("conv", linear, (1, 1, 2, 3))
    with pytest.raises(ValueError, match=r"`transform` must be one of .*Received: 'transpose'"):
        convert.convert_tensor("transpose", linear, (2, 3))


@pytest.mark.single_backend  # Keras's PyTorch backend itself needs torch.
def test_official_checkpoint_loads_with_torch_unavailable(tmp_path, save_pth):
    state = gfnet_state((256,), (12,), 16, 2)
    path = save_pth(tmp_path / "gfnet-ti.pth", {"model": tensors(state)})
    expected = km.GFNetTi(weights=path, input_shape=(32, 32, 3)).get_layer("head").get_weights()
    script = (
        "import sys; sys.modules['torch'] = None\n"
        "import numpy as np, keras_fourier\n"
        f"model = keras_fourier.GFNetTi(weights={path!r}, input_shape=(32, 32, 3))\n"
        f"np.save({os.fspath(tmp_path / 'head.npy')!r}, model.get_layer('head').get_weights()[0])\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
    np.testing.assert_array_equal(np.load(tmp_path / "head.npy"), expected[0])


def test_hostile_checkpoint_is_refused_and_leaves_the_model_unchanged(small_gfnet, tmp_path):
    path = tmp_path / "hostile.pth"
    torch.save({"model": {"head.weight": torch.ones(2)}, "hook": io.BytesIO(b"x")}, path)
    before = snapshot(small_gfnet)
    with pytest.raises(ValueError, match=r"hostile\.pth.*refers to _io\.BytesIO, which is neither"):
        load_variant_weights(catalog.variant("gfnet_ti"), small_gfnet, os.fspath(path))
    assert_same_weights(small_gfnet, before)


def test_read_pth_unwraps_and_checks_the_state_dict(tmp_path, save_pth):
    state = {"head.bias": torch.ones(2, dtype=torch.float64)}
    parallel = {f"module.{key}": value for key, value in state.items()}
    for name, checkpoint in (
        ("flat", state),
        ("model", {"model": state}),
        ("module", {"module": state}),
        ("mmseg", {"state_dict": state, "meta": {"epoch": 3}}),
        ("fourcastnet", {"model_state": parallel, "iters": 7}),
        ("parallel", parallel),
    ):
        read = read_pth(save_pth(tmp_path / f"{name}.pth", checkpoint))
        assert list(read) == ["head.bias"]
        assert read["head.bias"].dtype == np.float32
    with pytest.raises(ValueError, match=r"not a state dict of tensors; .* not tensors: epoch"):
        read_pth(save_pth(tmp_path / "mixed.pth", {**state, "epoch": 3}))
    with pytest.raises(ValueError, match=r"must be a state dict \(a mapping\); received list"):
        read_pth(save_pth(tmp_path / "list.pth", [state]))
    broken = tmp_path / "broken.pth"
    broken.write_bytes(b"PytorchStreamReader failed")
    with pytest.raises(ValueError, match=r"Could not read .*broken\.pth.* not a PyTorch zip"):
        read_pth(os.fspath(broken))


def test_unsupported_weights_file_is_refused(small_gfnet, tmp_path):
    path = tmp_path / "weights.npz"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=r"or an official PyTorch '\.pth'/'\.pt' checkpoint"):
        load_variant_weights(catalog.variant("gfnet_ti"), small_gfnet, os.fspath(path))


def test_imagenet_without_an_official_checkpoint():
    with pytest.raises(ValueError, match=r"no official ImageNet checkpoint for 'afnonet_s4'"):
        km.AFNONetS4(weights="imagenet", input_shape=(16, 16, 3))


def _stub(shape, head):
    inputs = keras.Input(shape)
    x = keras.layers.GlobalAveragePooling2D()(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, name="head" if head else "x")(x))


def test_imagenet_22k_checkpoints_need_include_top_false():
    message = (
        r"'hornet_l_7x7' is trained on ImageNet-22k \(21841 classes\).*only available for "
        r"variants with an ImageNet-1k checkpoint. Build it with include_top=False"
    )
    with pytest.raises(ValueError, match=message):
        imagenet_checkpoint(catalog.variant("hornet_l_7x7"), _stub((224, 224, 3), head=True))
    backbone = imagenet_checkpoint(catalog.variant("hornet_l_gf"), _stub((224, 224, 3), head=False))
    assert (backbone.file_name, backbone.classes) == ("hornet_large_gf.pth", 21841)
    at_384 = imagenet_checkpoint(catalog.variant("hornet_l_gf"), _stub((384, 384, 3), head=False))
    assert (at_384.file_name, at_384.resolution) == ("hornet_large_gf_img384.pth", 384)
    assert (
        imagenet_checkpoint(
            catalog.variant("hornet_t_gf"), _stub((256, 256, 3), head=True)
        ).resolution
        == 224
    )


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The download cache folder: KERAS_HOME is a fresh folder under tmp_path."""
    monkeypatch.setenv("KERAS_HOME", os.fspath(tmp_path / "keras_home"))
    monkeypatch.delenv(download.MIRROR_VARIABLE, raising=False)
    monkeypatch.setenv(download.RETRIES_VARIABLE, "0")  # a cut-off download is not retried
    return tmp_path / "keras_home" / "keras_fourier"


@contextlib.contextmanager
def _mirror(monkeypatch, checkpoint, cut_at=None):
    """A release mirror on 127.0.0.1 serving `checkpoint` (torch.save) as gfnet-ti.pth."""
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    with serve({"gfnet-ti.pth": buffer.getvalue()}, cut_at=cut_at) as server:
        monkeypatch.setenv(download.MIRROR_VARIABLE, server.url)
        yield server


def test_imagenet_failed_download_raises_and_writes_nothing(
    small_gfnet, tmp_path, cache, monkeypatch
):
    def offline(url, timeout):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    before = snapshot(small_gfnet)
    message = (
        r"weights='imagenet' for 'gfnet_ti' needs network access the first time\. Could not "
        r"download https://cloud\.tsinghua\.edu\.cn/f/3d0c1579aa524a0a99dd/\?dl=1 \(.*name "
        r"resolution.*nothing was kept\. To work offline, download .* pass the file's path as "
        r"`weights`"
    )
    with pytest.raises(ValueError, match=message):
        load_variant_weights(catalog.variant("gfnet_ti"), small_gfnet, "imagenet")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    assert_same_weights(small_gfnet, before)


def test_imagenet_cut_off_download_keeps_nothing(small_gfnet, tmp_path, cache, monkeypatch):
    state = gfnet_state((256,), (12,), 16, 2)
    before = snapshot(small_gfnet)
    with (
        _mirror(monkeypatch, {"model": tensors(state)}, cut_at=1000),
        pytest.raises(
            ValueError, match=r"(cut off at 1000 of \d+ bytes|IncompleteRead).*; nothing"
        ),
    ):
        load_variant_weights(catalog.variant("gfnet_ti"), small_gfnet, "imagenet")
    assert list(cache.iterdir()) == []
    assert_same_weights(small_gfnet, before)


def test_imagenet_downloads_and_converts_once(tmp_path, cache, monkeypatch):
    state = gfnet_state((256,), (12,), 16, 2)
    with _mirror(monkeypatch, {"model": tensors(state)}) as server:
        model = km.GFNetTi(weights="imagenet", input_shape=(32, 32, 3))
        assert server.requests == ["/gfnet-ti.pth"]
        again = km.GFNetTi(weights="imagenet", input_shape=(32, 32, 3))
        assert server.requests == ["/gfnet-ti.pth"]  # cached: no second download
    converted = sorted(p.name for p in cache.glob("*.weights.h5"))
    assert len(converted) == 1 and converted[0].startswith("gfnet-ti_")
    assert sorted(p.name for p in cache.iterdir()) == sorted(["gfnet-ti.pth", *converted])
    expected = snapshot(model)
    assign_gfnet(model, state, (12,), hierarchical=False)
    assert_same_weights(model, expected)
    assert_same_weights(again, expected)
    assert sorted(p.name for p in cache.iterdir()) == sorted(["gfnet-ti.pth", *converted])


def test_imagenet_mismatching_download_writes_no_conversion(
    small_gfnet, tmp_path, cache, monkeypatch
):
    state = gfnet_state((256,), (12,), 16, 2)
    del state["pos_embed"]
    before = snapshot(small_gfnet)
    with (
        _mirror(monkeypatch, {"model": tensors(state)}),
        pytest.raises(ValueError, match=rf"{LEFT_UNCHANGED}.*missing keys \(1\): pos_embed"),
    ):
        load_variant_weights(catalog.variant("gfnet_ti"), small_gfnet, "imagenet")
    assert [p.name for p in cache.iterdir()] == ["gfnet-ti.pth"]
    assert_same_weights(small_gfnet, before)


def test_imagenet_damaged_cached_file_is_downloaded_again(cache, monkeypatch, capfd):
    cache.mkdir(parents=True)
    (cache / "gfnet-ti.pth").write_bytes(b"left by an old, interrupted download")
    with _mirror(monkeypatch, {"model": tensors(gfnet_state((256,), (12,), 16, 2))}) as server:
        load_variant_weights(
            catalog.variant("gfnet_ti"), km.GFNetTi(input_shape=(32, 32, 3)), "imagenet"
        )
        assert server.requests == ["/gfnet-ti.pth"]
    error = capfd.readouterr().err
    assert (
        f"the cached download {cache / 'gfnet-ti.pth'} was damaged (it is not a complete zip"
        in error
    )
    assert "downloading it again" in error


def test_weights_file_from_a_deeper_model_is_refused(tmp_path):
    deeper = build_model(depths=3, dims=16, patch_size=4, input_shape=(16, 16, 3), classes=3)
    path = str(tmp_path / "deeper.weights.h5")
    deeper.save_weights(path)
    shallow = build_model(
        depths=2, dims=16, patch_size=4, input_shape=(16, 16, 3), classes=3, name="shallow"
    )
    before = [w.numpy() for w in shallow.weights]
    with pytest.raises(ValueError, match=r"the file holds \d+ tensors, the model \d+"):
        load_file_weights(shallow, path)
    for weight, value in zip(shallow.weights, before, strict=True):
        np.testing.assert_array_equal(weight.numpy(), value)
    same = build_model(
        depths=3, dims=16, patch_size=4, input_shape=(16, 16, 3), classes=3, name="same"
    )
    load_file_weights(same, path)
    for ours, theirs in zip(same.weights, deeper.weights, strict=True):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_each_family_owns_its_release_rows():
    from keras_fourier.models import afnonet, fnet_family, gfnet, hornet

    table = catalog.RELEASES
    assert set(table) == set(gfnet.RELEASES) | set(hornet.RELEASES)
    assert afnonet.RELEASES == {}
    every_row = [
        row for family in catalog.FAMILIES for rows in family.releases.values() for row in rows
    ]
    assert {row.reader for row in every_row} <= set(READERS)  # every release has its reader
    assert fnet_family.FNET.releases["base"][0].reader == "flax"
    assert {row.reader for row in gfnet.RELEASES["gfnet_ti"]} == {"pth"}
    assert fnet_family.FNET.releases["base"][0].file_name == "f_net_base_checkpoint"
    assert [family.name for family in catalog.FAMILIES if family.releases.get("gfnet_ti")] == [
        "GFNet"
    ]
    assert set(table) <= set(km.VARIANTS)
    ti = table["gfnet_ti"][0]
    assert (ti.url, ti.top1, ti.crop_pct, ti.interpolation) == (
        GFNET_TI_URL,
        74.6,
        0.875,
        "bicubic",
    )
    assert ti.source == "https://github.com/raoyongming/GFNet" and ti.license == "MIT"
    large = table["hornet_l_gf"]
    assert [(r.resolution, r.crop_pct, r.classes, r.top1) for r in large] == [
        (224, 0.875, 21841, None),
        (384, 1.0, 21841, None),
    ]


# ------------------------------------------------- the package's own files at another input size


def _by_path(model):
    return {v.path: to_numpy(v) for v in model.weights}


@pytest.mark.parametrize("suffix", [".weights.h5", ".keras"])
def test_own_gfnet_file_loads_at_another_input_size(tmp_path, suffix):
    options = {"depths": 2, "dims": 16, "patch_size": 4, "classes": 3}
    source = build_model(input_shape=(32, 32, 3), name="saved", **options)  # 8x8 tokens
    path = tmp_path / f"saved{suffix}"
    source.save_weights(path) if suffix == ".weights.h5" else source.save(path)
    model = build_model(weights=os.fspath(path), input_shape=(48, 40, 3), **options)  # 12x10
    saved, loaded = _by_path(source), _by_path(model)
    for index in (0, 1):
        key = f"stage0_block{index}_mixer/complex_weight"
        expected = reference_resize(saved[key], (12, 6), (0, 1), "bicubic", align_corners=True)
        np.testing.assert_allclose(loaded[key], expected, rtol=1e-5, atol=1e-6)
    expected = reference_resize(
        saved["pos_embed/pos_embed"], (12, 10), (1, 2), "bicubic", align_corners=False
    )
    np.testing.assert_allclose(loaded["pos_embed/pos_embed"], expected, rtol=1e-5, atol=1e-6)
    resized = {"pos_embed/pos_embed", *(f"stage0_block{i}_mixer/complex_weight" for i in (0, 1))}
    for key in saved.keys() - resized:
        np.testing.assert_array_equal(loaded[key], saved[key], err_msg=key)
    # Back at the saved size, nothing is resized.
    again = build_model(weights=os.fspath(path), input_shape=(32, 32, 3), **options)
    for key, value in _by_path(again).items():
        np.testing.assert_array_equal(value, saved[key], err_msg=key)


@pytest.mark.parametrize("suffix", [".weights.h5", ".keras"])
def test_own_hornet_gf_file_loads_at_another_input_size(tmp_path, suffix):
    options = {"depths": (1, 1, 1), "dims": (8, 16, 32), "patch_size": 2, "classes": 3}
    source = build_model("gnconv_gf", input_shape=(16, 16, 3), **options)
    path = tmp_path / f"saved{suffix}"
    source.save_weights(path) if suffix == ".weights.h5" else source.save(path)
    model = build_model("gnconv_gf", weights=os.fspath(path), input_shape=(32, 24, 3), **options)
    saved, loaded = _by_path(source), _by_path(model)
    for stage, size in ((0, (16, 7)), (1, (8, 4)), (2, (4, 2))):
        key = f"stage{stage}_block0_mixer/dwconv/complex_weight"
        expected = reference_resize(saved[key], size, (1, 2), "bilinear", align_corners=True)
        np.testing.assert_allclose(loaded[key], expected, rtol=1e-5, atol=1e-6)


def test_own_file_of_other_widths_is_still_refused(tmp_path):
    source = build_model(depths=2, dims=16, patch_size=4, input_shape=(32, 32, 3), classes=3)
    path = os.fspath(tmp_path / "narrow.weights.h5")
    source.save_weights(path)
    wider = build_model(depths=2, dims=24, patch_size=4, input_shape=(48, 48, 3), classes=3)
    before = snapshot(wider)
    with pytest.raises(ValueError, match=r"the file holds \d+ tensors, the model \d+|cannot give"):
        load_file_weights(wider, path)
    assert_same_weights(wider, before)
