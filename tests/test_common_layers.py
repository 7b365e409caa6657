"""Mlp, GLU, SelfAttention, LayerScale, DropPath, PositionEmbedding, StrideCheck, PadToMultiple."""

import math

import keras
import numpy as np
import pytest

from keras_fourier.layers import (
    GLU,
    DropPath,
    LayerScale,
    Mlp,
    PadToMultiple,
    PositionEmbedding,
    SelfAttention,
    StrideCheck,
)
from keras_fourier.weights import resize
from tests.harness import random_input, run_layer_checks, tflite_max_error, to_numpy

# The layer, model and weight tests run under every Keras backend (tests/conftest.py).
pytestmark = pytest.mark.multi_backend

_erf = np.vectorize(math.erf)


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _silu(x):
    return x / (1.0 + np.exp(-x))


@pytest.mark.parametrize(
    ("make", "shape", "weights"),
    [
        (
            lambda **kw: Mlp(hidden_ratio=2, **kw),
            (2, 3, 4, 6),
            {"fc1/kernel": (6, 12), "fc1/bias": (12,), "fc2/kernel": (12, 6), "fc2/bias": (6,)},
        ),
        (
            GLU,
            (2, 3, 4, 6),
            {"fc1/kernel": (6, 32), "fc1/bias": (32,), "fc2/kernel": (16, 6), "fc2/bias": (6,)},
        ),
        (
            lambda **kw: SelfAttention(num_heads=2, **kw),
            (2, 3, 4, 8),
            {
                "qkv/kernel": (8, 24),
                "qkv/bias": (24,),
                "proj/kernel": (8, 8),
                "proj/bias": (8,),
            },
        ),
        (lambda **kw: LayerScale(0.5, **kw), (2, 3, 4, 5), {"gamma": (5,)}),
        (lambda **kw: DropPath(0.0, **kw), (2, 3, 4, 5), {}),
        (PositionEmbedding, (2, 3, 4, 5), {"pos_embed": (1, 3, 4, 5)}),
        (
            lambda **kw: PositionEmbedding(height=4, width=4, **kw),
            (2, 3, 5, 5),
            {"pos_embed": (1, 4, 4, 5)},
        ),
        (lambda **kw: StrideCheck(2, **kw), (2, 4, 6, 3), {}),
        (lambda **kw: PadToMultiple(4, **kw), (2, 5, 6, 3), {}),
    ],
    ids=[
        "mlp",
        "glu",
        "attention",
        "layer_scale",
        "drop_path",
        "pos_embed",
        "pos_embed-resized",
        "stride_check",
        "pad_to_multiple",
    ],
)
def test_shared_checks(make, shape, weights, tmp_path):
    run_layer_checks(make, shape, weights, str(tmp_path))


def test_mlp_matches_numpy_with_exact_gelu():
    x = random_input((2, 3, 3, 4))
    layer = Mlp(hidden_ratio=1.5)
    out = to_numpy(layer(x))
    k1, b1, k2, b2 = (w.numpy() for w in layer.weights)
    np.testing.assert_allclose(out, _gelu(x @ k1 + b1) @ k2 + b2, atol=1e-5)
    assert k1.shape == (4, 6)


def test_glu_is_swiglu_by_default_and_geglu_by_activation():
    x = random_input((2, 5, 6))
    for activation, act in (("silu", _silu), ("gelu", _gelu)):
        layer = GLU(hidden_ratio=2, activation=activation)
        out = to_numpy(layer(x))
        k1, b1, k2, b2 = (w.numpy() for w in layer.weights)
        hidden = x @ k1 + b1
        gate, value = hidden[..., :12], hidden[..., 12:]
        np.testing.assert_allclose(out, (act(gate) * value) @ k2 + b2, atol=1e-5)


def test_self_attention_matches_numpy():
    x = random_input((2, 2, 3, 8))
    layer = SelfAttention(num_heads=2)
    out = to_numpy(layer(x))
    wq, bq, wp, bp = (w.numpy() for w in layer.weights)
    tokens = x.reshape(2, 6, 8)
    qkv = (tokens @ wq + bq).reshape(2, 6, 3, 2, 4).transpose(2, 0, 3, 1, 4)
    scores = qkv[0] @ qkv[1].transpose(0, 1, 3, 2) / 2.0
    attn = np.exp(scores - scores.max(-1, keepdims=True))
    attn /= attn.sum(-1, keepdims=True)
    mixed = (attn @ qkv[2]).transpose(0, 2, 1, 3).reshape(2, 6, 8)
    np.testing.assert_allclose(out, (mixed @ wp + bp).reshape(x.shape), atol=1e-5)


def test_self_attention_mixes_all_tokens_and_takes_sequences():
    layer = SelfAttention(num_heads=1)
    x = random_input((1, 4, 4, 4))
    base = to_numpy(layer(x))
    x2 = x.copy()
    x2[0, 3, 3] += 1.0
    assert np.all(np.abs(to_numpy(layer(x2))[0, 0, 0] - base[0, 0, 0]) > 0)
    assert tuple(SelfAttention(num_heads=2)(random_input((2, 7, 4))).shape) == (2, 7, 4)


def test_deit_tiny_block_parameter_counts():
    mlp, attention = Mlp(), SelfAttention(num_heads=3)
    mlp.build((None, 14, 14, 192))
    attention.build((None, 14, 14, 192))
    assert mlp.count_params() == 295_872
    assert attention.count_params() == 148_224


def test_layer_scale_scales_channels():
    layer = LayerScale(1e-6)
    out = to_numpy(layer(np.ones((1, 2, 2, 3), "float32")))
    np.testing.assert_allclose(out, 1e-6)


def test_drop_path_drops_whole_samples_and_keeps_expectation():
    layer = DropPath(0.5, seed=1)
    x = np.ones((2000, 3, 3, 2), "float32")
    out = keras.ops.convert_to_numpy(layer(x, training=True))
    per_sample = out.reshape(2000, -1)
    assert set(np.unique(per_sample)) == {0.0, 2.0}
    assert np.all(per_sample.min(1) == per_sample.max(1))
    assert abs(per_sample.mean() - 1.0) < 0.1
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(x, training=False)), x)


@pytest.mark.parametrize(
    "make",
    [Mlp, GLU, lambda **kw: SelfAttention(num_heads=2, **kw)],
    ids=["mlp", "glu", "attention"],
)
@pytest.mark.single_backend
def test_tflite_builtin_ops_only(make):
    assert tflite_max_error(make, (1, 6, 5, 8)) <= 1e-4


@pytest.mark.parametrize(
    ("make", "exception", "match"),
    [
        (lambda: Mlp(hidden_ratio=0), ValueError, "hidden_ratio=0"),
        (lambda: Mlp(dropout=1.0), ValueError, "dropout=1.0"),
        (lambda: GLU(activation="nope"), ValueError, "activation='nope'"),
        (lambda: SelfAttention(num_heads=0), ValueError, "num_heads=0"),
        (lambda: SelfAttention(num_heads=2, dropout=-0.1), ValueError, "dropout=-0.1"),
        (lambda: LayerScale("small"), TypeError, "init_value='small'"),
        (lambda: DropPath(1.0), ValueError, "rate=1.0"),
    ],
)
def test_bad_arguments_name_argument_and_value(make, exception, match):
    with pytest.raises(exception, match=match):
        make()


def test_attention_heads_must_divide_channels():
    with pytest.raises(ValueError, match="received 10 channels with num_heads=3"):
        SelfAttention(num_heads=3).build((None, 2, 2, 10))


@pytest.mark.parametrize("size", [(4, 4), (7, 3), (2, 9)])
def test_position_embedding_at_any_size_equals_the_checkpoint_resize(size):
    # Bicubic, align_corners=False, as the conversion of an official pos_embed; at the
    # built grid the embedding is added as it is.
    layer = PositionEmbedding(height=4, width=4)
    layer.build((None, None, None, 3))
    embedding = random_input((1, 4, 4, 3), seed=2)
    layer.pos_embed.assign(embedding)
    x = random_input((2, *size, 3))
    expected = x + resize.resize_pos_embed(embedding.reshape(1, 16, 3), size)
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=1e-6)
    if size == (4, 4):
        np.testing.assert_array_equal(to_numpy(layer(x)), x + embedding)


def test_stride_check_names_the_stride_and_the_size():
    layer = StrideCheck(4)
    x = random_input((1, 8, 12, 3))
    np.testing.assert_array_equal(to_numpy(layer(x)), x)
    with pytest.raises(ValueError, match=r"multiples of the model's stride 4.*\(1, 8, 10, 3\)"):
        layer(random_input((1, 8, 10, 3)))


@pytest.mark.single_backend
def test_stride_check_refuses_a_run_time_size_in_a_graph():
    import tensorflow as tf

    traced = tf.function(
        StrideCheck(4).__call__,
        input_signature=[tf.TensorSpec((None, None, None, 3), tf.float32)],
    )
    x = random_input((2, 8, 12, 3))
    np.testing.assert_array_equal(traced(x).numpy(), x)
    with pytest.raises(tf.errors.InvalidArgumentError):
        traced(random_input((2, 8, 10, 3)))


def test_pad_to_multiple_pads_bottom_and_right_with_zeros_for_any_size():
    # a fixed size, and one known only at run time (the model's (None, None) input)
    inputs = keras.Input((None, None, 2))
    model = keras.Model(inputs, PadToMultiple(8)(inputs))
    assert model.output.shape == (None, None, None, 2)
    for height, width in ((5, 8), (8, 16), (9, 17)):
        x = random_input((1, height, width, 2))
        expected = np.pad(x, [(0, 0), (0, -height % 8), (0, -width % 8), (0, 0)])
        np.testing.assert_array_equal(to_numpy(PadToMultiple(8)(x)), expected)
        np.testing.assert_array_equal(model.predict(x, verbose=0), expected)
    assert PadToMultiple(32).compute_output_shape((None, 70, None, 3)) == (None, 96, None, 3)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: PadToMultiple(0), "multiple=0"),
        (lambda: PositionEmbedding(height=0), "height=0"),
        (lambda: PositionEmbedding(width=2.5), "width=2.5"),
        (lambda: StrideCheck(0), "stride=0"),
    ],
)
def test_size_arguments_name_argument_and_value(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_position_embedding_without_a_grid_needs_a_static_size():
    with pytest.raises(ValueError, match=r"H and W must then be static.*\(None, None, 4, 8\)"):
        PositionEmbedding().build((None, None, 4, 8))
