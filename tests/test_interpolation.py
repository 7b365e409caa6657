"""Separable align_corners=True resizing against closed forms, hand values and TF1 kernels."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_fourier.layers.interpolation import (
    interpolation_matrix,
    interpolation_matrix_tensor,
    resize_2d,
    resize_2d_tensor,
    resize_axis_tensor,
)
from tests.harness import random_input, to_numpy

# The layer, model and weight tests run under every Keras backend (tests/conftest.py).
pytestmark = pytest.mark.multi_backend

MODES = ("bilinear", "bicubic")
SIZE_PAIRS = [(1, 4), (4, 1), (2, 3), (3, 2), (5, 9), (9, 5), (7, 13), (14, 24), (8, 8)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [1, 2, 5, 14])
def test_equal_sizes_give_identity(mode, size):
    np.testing.assert_array_equal(interpolation_matrix(size, size, mode), np.eye(size))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("in_size", "out_size"), SIZE_PAIRS)
def test_rows_sum_to_one_and_corners_are_kept(mode, in_size, out_size):
    matrix = interpolation_matrix(in_size, out_size, mode)
    assert matrix.shape == (out_size, in_size)
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0, atol=1e-12)
    first_row = np.eye(in_size)[0]
    np.testing.assert_array_equal(matrix[0], first_row)
    if out_size > 1:
        np.testing.assert_array_equal(matrix[-1], np.eye(in_size)[-1])


@pytest.mark.parametrize(("in_size", "out_size"), SIZE_PAIRS)
def test_bilinear_keeps_linear_ramps_exactly(in_size, out_size):
    ramp = 3.0 * np.arange(in_size) - 2.0
    step = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    expected = 3.0 * step * np.arange(out_size) - 2.0
    np.testing.assert_allclose(interpolation_matrix(in_size, out_size) @ ramp, expected, atol=1e-12)


def test_bilinear_keeps_a_2d_plane_exactly():
    rows, cols = np.meshgrid(np.arange(5.0), np.arange(4.0), indexing="ij")
    plane = 2.0 * rows - 0.5 * cols + 1.0
    out_rows, out_cols = np.meshgrid(np.arange(9.0) / 2, np.arange(7.0) / 2, indexing="ij")
    expected = 2.0 * out_rows - 0.5 * out_cols + 1.0
    np.testing.assert_allclose(resize_2d(plane, (9, 7)), expected, atol=1e-12)


# Hand values of the cubic convolution kernel with A = -0.75 at fraction t = 1/2:
# W(1.5) = A/8 = -0.09375 and W(0.5) = 1/2 - A/8 = 0.59375 (neighbours at offsets -1, 0, 1, 2).
def test_bicubic_2_to_3_by_hand():
    # Output 1 reads position 0.5; offsets -1 and 2 clamp onto inputs 0 and 1.
    expected = np.array([[1.0, 0.0], [-0.09375 + 0.59375, 0.59375 - 0.09375], [0.0, 1.0]])
    np.testing.assert_allclose(interpolation_matrix(2, 3, "bicubic"), expected, atol=1e-12)


def test_bicubic_3_to_5_by_hand_clamps_the_border():
    # Positions 0, 0.5, 1, 1.5, 2; at 0.5 offset -1 clamps onto input 0, at 1.5 offset 2 onto 2.
    expected = np.array(
        [
            [1.0, 0.0, 0.0],
            [0.5, 0.59375, -0.09375],
            [0.0, 1.0, 0.0],
            [-0.09375, 0.59375, 0.5],
            [0.0, 0.0, 1.0],
        ]
    )
    np.testing.assert_allclose(interpolation_matrix(3, 5, "bicubic"), expected, atol=1e-12)


def test_bicubic_4_to_3_on_squares_by_hand():
    # Output 1 reads position 1.5 from inputs 0, 1, 4, 9 with all four neighbours inside:
    # -0.09375 * 0 + 0.59375 * 1 + 0.59375 * 4 - 0.09375 * 9 = 2.125 (bilinear would give 2.5).
    squares = np.array([0.0, 1.0, 4.0, 9.0])
    np.testing.assert_allclose(
        interpolation_matrix(4, 3, "bicubic") @ squares, [0.0, 2.125, 9.0], atol=1e-12
    )
    np.testing.assert_allclose(interpolation_matrix(4, 3) @ squares, [0.0, 2.5, 9.0], atol=1e-12)


@pytest.mark.single_backend
@pytest.mark.parametrize(
    ("in_hw", "out_hw"),
    [((6, 4), (8, 6)), ((14, 8), (24, 13)), ((14, 8), (12, 6)), ((5, 7), (3, 2)), ((1, 3), (4, 1))],
)
def test_bilinear_matches_tf1_resize_bilinear_align_corners(in_hw, out_hw):
    import tensorflow as tf

    x = random_input((2, *in_hw, 3))
    expected = tf.compat.v1.image.resize_bilinear(x, out_hw, align_corners=True).numpy()
    np.testing.assert_allclose(resize_2d(x, out_hw, axes=(1, 2)), expected, atol=3e-6)


@pytest.mark.single_backend
@pytest.mark.parametrize(
    ("in_hw", "out_hw"), [((4, 5), (5, 9)), ((7, 3), (5, 5)), ((2, 9), (3, 17))]
)
def test_bicubic_matches_tf1_resize_bicubic_on_dyadic_grids(in_hw, out_hw):
    import tensorflow as tf

    # TF1's legacy bicubic kernel also uses A = -0.75 with clamped borders, but reads its
    # weights from a table sampled every 1/1024; these sizes only hit fractions on that grid.
    x = random_input((2, *in_hw, 3))
    expected = tf.compat.v1.image.resize_bicubic(x, out_hw, align_corners=True).numpy()
    np.testing.assert_allclose(
        resize_2d(x, out_hw, axes=(1, 2), mode="bicubic"), expected, atol=1e-6
    )


def test_resize_2d_axes_and_dtypes():
    x = random_input((3, 4, 5, 2))
    by_positive = resize_2d(x, (6, 7), axes=(1, 2))
    by_negative = resize_2d(x, (6, 7), axes=(-3, -2))
    assert by_positive.shape == (3, 6, 7, 2)
    assert by_positive.dtype == np.float32
    np.testing.assert_array_equal(by_positive, by_negative)
    swapped = resize_2d(x, (7, 6), axes=(2, 1))
    np.testing.assert_array_equal(swapped, by_positive)
    ints = resize_2d(np.arange(6).reshape(2, 3), (3, 5))
    assert ints.dtype == np.float64
    np.testing.assert_allclose(ints[1], [1.5, 2.0, 2.5, 3.0, 3.5])


@pytest.mark.parametrize("mode", MODES)
def test_resize_2d_tensor_matches_numpy_eager_and_compiled(mode):
    x = random_input((5, 7, 3, 2))
    expected = resize_2d(x, (9, 4), axes=(0, 1), mode=mode)
    eager = resize_2d_tensor(ops.convert_to_tensor(x), (9, 4), mode=mode)
    np.testing.assert_allclose(to_numpy(eager), expected, atol=1e-6)
    backend = keras.config.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        compiled = tf.function(lambda t: resize_2d_tensor(t, (9, 4), mode=mode), jit_compile=True)
        np.testing.assert_allclose(to_numpy(compiled(tf.constant(x))), expected, atol=1e-6)
    elif backend == "jax":
        import jax

        compiled = jax.jit(lambda t: resize_2d_tensor(t, (9, 4), mode=mode))
        np.testing.assert_allclose(to_numpy(compiled(x)), expected, atol=1e-6)


def test_resize_2d_tensor_gradient_is_the_transposed_resize():
    upstream = random_input((6, 5, 2), seed=1)
    rows, cols = interpolation_matrix(4, 6), interpolation_matrix(3, 5)
    expected = np.einsum("oh,pw,opc->hwc", rows, cols, upstream)
    x = random_input((4, 3, 2))
    backend = keras.config.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        x = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(resize_2d_tensor(x, (6, 5)) * upstream)
        grad = tape.gradient(loss, x)
    elif backend == "jax":
        import jax

        grad = jax.grad(lambda t: (resize_2d_tensor(t, (6, 5)) * upstream).sum())(x)
    else:
        import torch

        x = torch.tensor(x, requires_grad=True)
        loss = (resize_2d_tensor(x, (6, 5)) * torch.tensor(upstream)).sum()
        (grad,) = torch.autograd.grad(loss, [x])
    np.testing.assert_allclose(to_numpy(grad), expected, atol=1e-5)


def test_resize_2d_tensor_skips_axes_already_at_size():
    x = ops.convert_to_tensor(random_input((4, 3)))
    assert resize_2d_tensor(x, (4, 3)) is x


def test_interpolation_matrix_returns_a_private_copy():
    matrix = interpolation_matrix(3, 5)
    matrix[:] = 0.0
    assert interpolation_matrix(3, 5)[0, 0] == 1.0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: interpolation_matrix(0, 3),
            "`in_size` must be a positive int. Received: in_size=0",
        ),
        (lambda: interpolation_matrix(True, 3), "Received: in_size=True"),
        (
            lambda: interpolation_matrix(3, 2.0),
            "`out_size` must be a positive int. Received: out_size=2.0",
        ),
        (lambda: interpolation_matrix(3, 4, "nearest"), "Received: mode='nearest'"),
        (
            lambda: resize_2d(np.zeros((2, 2)), (3,)),
            "`size` must be (height, width). Received: size=(3,)",
        ),
        (lambda: resize_2d(np.zeros((2, 2)), (3, -1)), "Received: size[1]=-1"),
        (lambda: resize_2d(np.zeros((2, 2)), (3, 3), mode="area"), "Received: mode='area'"),
        (lambda: resize_2d(np.zeros((2, 2)), (3, 3), axes=(0, 2)), "Received: axes=(0, 2)"),
        (
            lambda: resize_2d(np.zeros((2, 2)), (3, 3), axes=(1, -1)),
            "two different axes. Received: axes=(1, -1)",
        ),
        (lambda: resize_2d(np.zeros((2, 2)), (3, 3), axes=(0,)), "Received: axes=(0,)"),
        (
            lambda: resize_2d_tensor(ops.zeros((2, 2)), (3, 3), mode="linear"),
            "Received: mode='linear'",
        ),
        (
            lambda: resize_2d_tensor(ops.zeros((2, 2, 2)), (3, 3), axes=(0, 3)),
            "Received: axes=(0, 3)",
        ),
    ],
)
def test_invalid_arguments_raise(call, message):
    with pytest.raises(ValueError) as error:
        call()
    assert message in str(error.value)


@pytest.mark.single_backend
def test_resize_2d_tensor_needs_static_axes():
    import tensorflow as tf

    traced = tf.function(
        lambda t: resize_2d_tensor(t, (3, 3)),
        input_signature=[tf.TensorSpec((None, 2), tf.float32)],
    )
    with pytest.raises(ValueError, match=r"static lengths on `axes`; received shape \(None, 2\)"):
        traced.get_concrete_function()


@pytest.mark.single_backend
@pytest.mark.parametrize(("in_size", "out_size"), [(4, 7), (7, 11), (5, 5)])
def test_half_pixel_bilinear_matches_tf2_resize(in_size, out_size):
    import tensorflow as tf

    # TF2's bilinear resize uses half-pixel centres like PyTorch's align_corners=False.
    image = np.random.default_rng(0).standard_normal((1, in_size, 3, 1))
    expected = tf.image.resize(image, (out_size, 3), method="bilinear").numpy()[0, :, :, 0]
    matrix = interpolation_matrix(in_size, out_size, "bilinear", align_corners=False)
    np.testing.assert_allclose(matrix @ image[0, :, :, 0], expected, atol=1e-5)


@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("mode", MODES)
def test_in_graph_matrix_matches_numpy(mode, align_corners):
    # keras.ops from arange, floor and clip on every backend; float32 positions.
    for in_size, out_size in SIZE_PAIRS:
        matrix = to_numpy(interpolation_matrix_tensor(in_size, out_size, mode, align_corners))
        expected = interpolation_matrix(in_size, out_size, mode, align_corners)
        assert matrix.shape == (out_size, in_size)
        np.testing.assert_allclose(matrix, expected, atol=1e-6)
        if in_size == out_size:  # exactly the identity: any-size models at their built size
            np.testing.assert_array_equal(matrix, np.eye(in_size))


@pytest.mark.single_backend
@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("mode", MODES)
def test_resize_axis_with_a_run_time_size_matches_numpy(mode, align_corners):
    import tensorflow as tf

    traced = tf.function(
        lambda t, n: resize_axis_tensor(t, n, 1, mode, align_corners),
        input_signature=[tf.TensorSpec((2, None, 3)), tf.TensorSpec((), tf.int32)],
    )
    x = random_input((2, 7, 3))
    for out_size in (7, 11, 4):
        expected = np.einsum(
            "oi,bic->boc", interpolation_matrix(7, out_size, mode, align_corners), x
        )
        out = traced(x, out_size).numpy()
        assert out.shape == (2, out_size, 3)
        np.testing.assert_allclose(out, expected, atol=1e-5)  # float32 source positions
    np.testing.assert_array_equal(traced(x, 7).numpy(), x)  # run-time identity: x itself


def test_resize_axis_with_static_sizes_is_the_numpy_resize():
    x = random_input((2, 5, 3))
    out = resize_axis_tensor(ops.convert_to_tensor(x), 8, 1, "bicubic", align_corners=False)
    expected = np.einsum("oi,bic->boc", interpolation_matrix(5, 8, "bicubic", False), x)
    np.testing.assert_allclose(to_numpy(out), expected, atol=1e-6)
    with pytest.raises(ValueError, match="out_size=0"):
        resize_axis_tensor(ops.convert_to_tensor(x), 0, 1)
