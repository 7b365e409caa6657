"""FourCastNet: the row, a NumPy reference forward, official checkpoints and the rollout.

The checkpoints are written here in NVlabs/FourCastNet's layout
(``{"iters", "epoch", "model_state": {"module.<key>": tensor},
"optimizer_state_dict"}``, keys and tensor layouts of ``networks/afnonet.py``)
by ``torch.save`` (the test extra has PyTorch), independently of the key map
under test, and read by the package's PyTorch-free reader; the reference
forward is NumPy, written from the official code's rules, channels first.
"""

import dataclasses
import math
import re

import keras
import numpy as np
import pytest
import torch

from keras_fourier.models import fourcastnet_family
from keras_fourier.models.fourcastnet import FourCastNet, build_fourcastnet, rollout
from keras_fourier.models.fourcastnet_weights import load_fourcastnet_checkpoint
from tests.harness import random_input, run_model_checks, to_numpy

pytestmark = pytest.mark.multi_backend

# A non-square grid whose half spectrum is wider than FourCastNet keeps (W // 2 + 1 = 5 > T = 3
# on 4 x 8 tokens), so the official mode slicing matters.
TINY = {
    "image_size": (16, 32),
    "patch_size": 4,
    "in_channels": 3,
    "out_channels": 2,
    "embed_dim": 16,
    "depth": 2,
    "num_blocks": 4,
}


@pytest.mark.single_backend
def test_the_full_row_has_the_official_parameter_count():
    model = build_fourcastnet(fourcastnet_family.VARIANTS["fourcastnet"])
    assert model.input_shape == (None, 720, 1440, 20)
    assert model.output_shape == (None, 720, 1440, 20)
    # The official AFNONet counts 74,691,840, of which its final `norm` (2 x 768, in the
    # checkpoint, never applied in forward) is not part of this model.
    assert model.count_params() + 2 * 768 == 74_691_840
    afno = model.get_layer("stage0_block0_mixer")
    assert (afno.num_blocks, afno.mode_slicing) == (8, "fourcastnet")
    assert model.get_layer("stage0_block0_norm1").epsilon == 1e-6


# ----------------------------------------------------------------------------- reference


def _layer_norm(x, weight, bias):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-6) * weight + bias


def _gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def _afno(x, sd, prefix, num_blocks, fraction=1.0, threshold=0.01):
    batch, height, width, channels = x.shape
    spectrum = np.fft.rfft2(x, axes=(1, 2), norm="ortho")
    spectrum = spectrum.reshape(batch, height, width // 2 + 1, num_blocks, -1)
    total = height // 2 + 1
    kept = int(total * fraction)
    rows, cols = slice(total - kept, total + kept), slice(None, kept)
    w1, b1, w2, b2 = (sd[f"{prefix}.{n}"] for n in ("w1", "b1", "w2", "b2"))
    modes = spectrum[:, rows, cols]
    hidden = np.einsum("...bi,bio->...bo", modes, w1[0] + 1j * w1[1]) + (b1[0] + 1j * b1[1])
    hidden = np.maximum(hidden.real, 0) + 1j * np.maximum(hidden.imag, 0)
    out = np.zeros_like(spectrum)
    out[:, rows, cols] = np.einsum("...bi,bio->...bo", hidden, w2[0] + 1j * w2[1]) + (
        b2[0] + 1j * b2[1]
    )

    def shrink(v):
        return np.sign(v) * np.maximum(np.abs(v) - threshold, 0)

    out = (shrink(out.real) + 1j * shrink(out.imag)).reshape(batch, height, -1, channels)
    return np.fft.irfft2(out, s=(height, width), axes=(1, 2), norm="ortho") + x


def _reference(sd, x, spec, prefix=""):
    """AFNONet.forward (and PrecipNet's) in NumPy; x and the output are (B, C, H, W)."""
    batch, _, height, width = x.shape
    p = spec.patch_size
    rows, cols = height // p, width // p
    patches = x.reshape(batch, -1, rows, p, cols, p)
    tokens = np.einsum("bcipjq,ecpq->bije", patches, sd[f"{prefix}patch_embed.proj.weight"])
    tokens = tokens + sd[f"{prefix}patch_embed.proj.bias"]
    tokens = tokens + sd[f"{prefix}pos_embed"].reshape(1, rows, cols, -1)
    for i in range(spec.depth):
        block = f"{prefix}blocks.{i}"
        residual = tokens
        tokens = _layer_norm(tokens, sd[f"{block}.norm1.weight"], sd[f"{block}.norm1.bias"])
        tokens = _afno(tokens, sd, f"{block}.filter", spec.num_blocks)
        if spec.double_skip:
            tokens = tokens + residual
            residual = tokens
        tokens = _layer_norm(tokens, sd[f"{block}.norm2.weight"], sd[f"{block}.norm2.bias"])
        tokens = _gelu(tokens @ sd[f"{block}.mlp.fc1.weight"].T + sd[f"{block}.mlp.fc1.bias"])
        tokens = tokens @ sd[f"{block}.mlp.fc2.weight"].T + sd[f"{block}.mlp.fc2.bias"]
        tokens = tokens + residual
    out = tokens @ sd[f"{prefix}head.weight"].T  # b h w (p1 p2 c)
    out = out.reshape(batch, rows, cols, p, p, -1)
    out = out.transpose(0, 5, 1, 3, 2, 4).reshape(batch, -1, height, width)
    if spec.precip:
        out = np.concatenate([out[..., -1:], out, out[..., :1]], axis=-1)
        out = np.pad(out, [(0, 0), (0, 0), (1, 1), (0, 0)])
        kernel, bias = sd["conv.weight"], sd["conv.bias"]
        windows = np.lib.stride_tricks.sliding_window_view(out, (3, 3), axis=(2, 3))
        out = np.maximum(np.einsum("bchwuv,ocuv->bohw", windows, kernel) + bias[:, None, None], 0)
    return out


def _official_state_dict(spec, seed=0, prefix=""):
    """Random tensors under the official keys, shapes and layouts (the final norm included)."""
    rng = np.random.default_rng(seed)
    e, p, rows, cols = spec.embed_dim, spec.patch_size, *spec.grid
    block, hidden = e // spec.num_blocks, int(e * spec.mlp_ratio)
    shapes = {
        "pos_embed": (1, rows * cols, e),
        "patch_embed.proj.weight": (e, spec.in_channels, p, p),
        "patch_embed.proj.bias": (e,),
        "norm.weight": (e,),
        "norm.bias": (e,),
        "head.weight": (spec.out_channels * p * p, e),
    }
    for i in range(spec.depth):
        shapes.update(
            {
                f"blocks.{i}.norm1.weight": (e,),
                f"blocks.{i}.norm1.bias": (e,),
                f"blocks.{i}.filter.w1": (2, spec.num_blocks, block, block),
                f"blocks.{i}.filter.b1": (2, spec.num_blocks, block),
                f"blocks.{i}.filter.w2": (2, spec.num_blocks, block, block),
                f"blocks.{i}.filter.b2": (2, spec.num_blocks, block),
                f"blocks.{i}.norm2.weight": (e,),
                f"blocks.{i}.norm2.bias": (e,),
                f"blocks.{i}.mlp.fc1.weight": (hidden, e),
                f"blocks.{i}.mlp.fc1.bias": (hidden,),
                f"blocks.{i}.mlp.fc2.weight": (e, hidden),
                f"blocks.{i}.mlp.fc2.bias": (e,),
            }
        )
    sd = {f"{prefix}{k}": rng.standard_normal(s).astype("float32") * 0.3 for k, s in shapes.items()}
    if spec.precip:
        sd["conv.weight"] = rng.standard_normal((1, 1, 3, 3)).astype("float32") * 0.3
        sd["conv.bias"] = np.full((1,), 0.1, "float32")
    return sd


def _save_official(sd, path):
    """torch.save as FourCastNet's train.py: DDP keys and an Adam state beside the model."""
    params = [torch.nn.Parameter(torch.from_numpy(v)) for v in sd.values()]
    optimizer = torch.optim.Adam(params, lr=5e-4)
    sum(p.sum() for p in params).backward()
    optimizer.step()
    torch.save(
        {
            "iters": 10,
            "epoch": 1,
            "model_state": {f"module.{k}": torch.from_numpy(v) for k, v in sd.items()},
            "optimizer_state_dict": optimizer.state_dict(),
        },
        path,
    )


def test_official_checkpoint_converts_and_matches_the_numpy_reference(tmp_path):
    spec = dataclasses.replace(fourcastnet_family.VARIANTS["fourcastnet"], **TINY)
    sd = _official_state_dict(spec)
    path = tmp_path / "backbone.ckpt"
    _save_official(sd, path)
    model = FourCastNet(weights=path, **TINY)
    x = random_input((2, 3, 16, 32))
    expected = _reference(sd, x, spec)
    out = to_numpy(model(np.moveaxis(x, 1, -1)))
    np.testing.assert_allclose(np.moveaxis(out, -1, 1), expected, atol=1e-4)
    # The paper's low-frequency rule keeps all 5 columns here, FourCastNet 3: not the same model.
    other = FourCastNet(mode_slicing="low_frequency", **TINY)
    other.set_weights(model.get_weights())
    assert np.abs(to_numpy(other(np.moveaxis(x, 1, -1))) - out).max() > 1e-3


def test_precipitation_checkpoint_converts_and_matches_the_numpy_reference(tmp_path):
    tiny = {**TINY, "out_channels": 1, "depth": 1}
    spec = dataclasses.replace(fourcastnet_family.VARIANTS["fourcastnet_precip"], **tiny)
    sd = _official_state_dict(spec, seed=1, prefix="backbone.")
    path = tmp_path / "precip.ckpt"
    _save_official(sd, path)
    model = FourCastNet("fourcastnet_precip", weights=path, **tiny)
    x = random_input((1, 3, 16, 32))
    out = np.moveaxis(to_numpy(model(np.moveaxis(x, 1, -1))), -1, 1)
    expected = _reference(sd, x, spec, prefix="backbone.")
    assert (expected == 0).any() and (expected > 0).any()  # the ReLU acts
    np.testing.assert_allclose(out, expected, atol=1e-4)


def test_a_checkpoint_that_does_not_match_lists_every_mismatch_and_changes_nothing(tmp_path):
    spec = dataclasses.replace(fourcastnet_family.VARIANTS["fourcastnet"], **TINY)
    sd = _official_state_dict(spec)
    del sd["blocks.1.filter.w2"]
    sd["blocks.0.mlp.fc1.weight"] = sd["blocks.0.mlp.fc1.weight"][:, :8]
    sd["extra.weight"] = np.zeros(3, "float32")
    path = tmp_path / "bad.tar"
    _save_official(sd, path)
    model = FourCastNet(**TINY)
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(ValueError) as info:
        load_fourcastnet_checkpoint(model, path)
    message = str(info.value)
    assert "missing keys (1): blocks.1.filter.w2" in message
    assert "unexpected keys (1): extra.weight" in message
    assert re.search(r"wrong shapes \(1\): blocks\.0\.mlp\.fc1\.weight", message)
    for after, value in zip(model.get_weights(), before, strict=True):
        np.testing.assert_array_equal(after, value)


def test_another_models_checkpoint_is_refused_naming_its_keys(tmp_path):
    path = tmp_path / "other.pth"
    torch.save({"model": {"x": torch.zeros(2)}}, path)
    with pytest.raises(
        ValueError, match=r"missing keys \(28\): blocks.0.filter.b1.*unexpected keys \(1\): x"
    ):
        FourCastNet(weights=path, **TINY)


def test_tiny_rows_pass_the_model_checks(tmp_path):
    # One output channel: the harness trains regressions with MSE.
    for variant in ("fourcastnet", "fourcastnet_precip"):
        run_model_checks(
            lambda variant=variant: FourCastNet(variant, **{**TINY, "out_channels": 1}),
            random_input((2, 16, 32, 3)),
            str(tmp_path),
        )


def _loop(model, state, steps):
    states = []
    for _ in range(steps):
        state = to_numpy(model(state))
        states.append(state)
    return np.stack(states, axis=1)


def test_rollout_runs_compiled_and_equals_the_step_by_step_loop():
    model = FourCastNet(**{**TINY, "out_channels": 3})
    state = random_input((2, 16, 32, 3))
    expected = _loop(model, state, 3)
    backend = keras.config.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        compiled = tf.function(lambda s: rollout(model, s, 3), jit_compile=True)
        out = compiled(tf.constant(state)).numpy()
    elif backend == "jax":
        import jax

        out = np.asarray(jax.jit(lambda s: rollout(model, s, 3))(state))
    else:
        out = to_numpy(rollout(model, state, 3))
    assert out.shape == (2, 3, 16, 32, 3)
    np.testing.assert_allclose(out, expected, atol=1e-4)


def test_rollout_residual_and_hook():
    model = FourCastNet(**{**TINY, "out_channels": 3, "depth": 1})
    state = random_input((1, 16, 32, 3))
    step = to_numpy(model(state))
    out = to_numpy(
        rollout(model, state, 2, residual=True, hook=lambda prev, new: keras.ops.clip(new, -1, 1))
    )
    np.testing.assert_allclose(out[:, 0], np.clip(state + step, -1, 1), atol=1e-5)
    second = np.clip(out[:, 0] + to_numpy(model(out[:, 0])), -1, 1)
    np.testing.assert_allclose(out[:, 1], second, atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"image_size": (30, 64)}, ValueError, "Received: image_size=(30, 64)"),
        ({"embed_dim": 18}, ValueError, "Received: embed_dim=18"),
        ({"mode_slicing": "afno"}, ValueError, "Received: mode_slicing='afno'"),
        ({"precip": True}, TypeError, "Received: precip=True"),
        ({"variant": "fcn"}, ValueError, "Received: variant='fcn'"),
        ({"weights": "missing.ckpt"}, ValueError, "Received: weights='missing.ckpt'"),
    ],
)
def test_bad_arguments_name_argument_and_value(kwargs, error, match):
    with pytest.raises(error, match=re.escape(match)):
        FourCastNet(**{**TINY, **kwargs})


def test_release_rows_name_the_official_files_and_statistics():
    rows = fourcastnet_family.RELEASES
    assert sorted(rows) == ["fourcastnet_precip_v0", "fourcastnet_v0"]
    assert rows["fourcastnet_v0"].url.endswith("/fourcastnet/0.0/backbone.ckpt")
    assert rows["fourcastnet_precip_v0"].url.endswith("/fourcastnet/0.0/precip.ckpt")
    assert sorted(rows["fourcastnet_v0"].statistics) == ["global_means.npy", "global_stds.npy"]
    assert fourcastnet_family.FOURCASTNET.releases["fourcastnet"] == (rows["fourcastnet_v0"],)
    assert {row.reader for row in rows.values()} == {"pth"}


def test_a_release_is_downloaded_through_the_cache_and_mirror(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.setenv("KERAS_FOURIER_MIRROR", "http://127.0.0.1:9/")  # nothing listens
    with pytest.raises(ValueError, match="weights='fourcastnet_v0' needs network access"):
        FourCastNet(**TINY, weights="fourcastnet_v0")
    with pytest.raises(ValueError, match="variant 'fourcastnet_precip', not 'fourcastnet'"):
        FourCastNet(**TINY, weights="fourcastnet_precip_v0")
    assert not any(path.is_file() for path in tmp_path.rglob("*"))
