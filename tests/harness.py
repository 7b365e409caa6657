"""The one shared harness every keras_fourier layer goes through.

`run_layer_checks` runs, for one layer configuration and one input shape:

* config round trip (and `get_config` keys are exactly the constructor's),
* `.keras` save and load give identical outputs,
* forward under `mixed_float16` and `mixed_bfloat16` is finite, has the
  policy's compute dtype, and is close to float32 with the same weights,
* `jit_compile=True` forward equals eager, and its gradients are finite and
  equal eager gradients,
* the trainable weights are exactly the expected names and shapes,
* one SGD step lowers a regression loss.

Layer-specific numerics (NumPy references, fft vs matmul) live in the
per-layer test modules; helpers for them are here too.
"""

from __future__ import annotations

import inspect
import os
import tempfile
from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf

BASE_CONFIG_KEYS = {"name", "trainable", "dtype"}
HALF_TOLERANCE = {"mixed_float16": 3e-2, "mixed_bfloat16": 8e-2}


def random_input(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Deterministic standard-normal float32 input."""
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def weight_shapes(layer: keras.layers.Layer, trainable: bool = True) -> dict[str, tuple]:
    """{path relative to the layer: shape} of the layer's (trainable) weights."""
    weights = layer.trainable_weights if trainable else layer.weights
    prefix = layer.path + "/"
    return {v.path.removeprefix(prefix): tuple(v.shape) for v in weights}


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |actual - expected| / max(1, max |expected|)."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    return float(np.max(np.abs(actual - expected)) / max(1.0, np.max(np.abs(expected))))


def check_config(layer: keras.layers.Layer) -> None:
    config = layer.get_config()
    params = set(inspect.signature(type(layer).__init__).parameters) - {"self", "kwargs"}
    assert set(config) - BASE_CONFIG_KEYS == params, (set(config), params)
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is type(layer)
    assert restored.get_config() == config


def _model(make_layer: Callable[..., keras.layers.Layer], shape, **kwargs) -> keras.Model:
    inputs = keras.Input(shape[1:], batch_size=None)
    return keras.Model(inputs, make_layer(**kwargs)(inputs))


def check_save_load(make_layer, shape, tmp_dir: str) -> None:
    x = random_input(shape, seed=1)
    model = _model(make_layer, shape)
    expected = model.predict(x, verbose=0)
    path = os.path.join(tmp_dir, "layer.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), expected)
    assert [type(la) for la in loaded.layers] == [type(la) for la in model.layers]


def check_mixed_precision(make_layer, shape) -> None:
    x = random_input(shape, seed=2)
    reference = make_layer()
    expected = keras.ops.convert_to_numpy(reference(x))
    for policy, tolerance in HALF_TOLERANCE.items():
        layer = make_layer(dtype=policy)
        layer.build(shape)
        layer.set_weights(reference.get_weights())
        out = layer(x)
        assert keras.backend.standardize_dtype(out.dtype) == layer.compute_dtype
        out = keras.ops.convert_to_numpy(keras.ops.cast(out, "float32"))
        assert np.all(np.isfinite(out)), policy
        error = relative_error(out, expected)
        assert error < tolerance, (policy, error)


def _loss_and_grads(layer, x, target):
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = layer(x, training=False)
        loss = tf.reduce_mean(tf.square(tf.cast(out, tf.float32) - target))
    grads = tape.gradient(loss, [x, *list(layer.trainable_weights)])
    return out, loss, grads


def check_xla(make_layer, shape) -> None:
    x = tf.constant(random_input(shape, seed=3))
    layer = make_layer()
    layer.build(shape)
    target = tf.constant(random_input(tuple(layer.compute_output_shape(shape)), seed=4))
    eager_out, eager_loss, eager_grads = _loss_and_grads(layer, x, target)
    compiled = tf.function(lambda a, b: _loss_and_grads(layer, a, b), jit_compile=True)
    xla_out, xla_loss, xla_grads = compiled(x, target)
    assert relative_error(xla_out, eager_out) < 1e-5
    assert abs(float(xla_loss) - float(eager_loss)) <= 1e-5 * max(1.0, abs(float(eager_loss)))
    for eager_grad, xla_grad in zip(eager_grads, xla_grads, strict=True):
        assert xla_grad is not None
        assert np.all(np.isfinite(xla_grad))
        assert relative_error(xla_grad, eager_grad) < 1e-4


def check_training_step(make_layer, shape, learning_rate: float = 1e-2) -> None:
    """One SGD step on the layer's own weights lowers an MSE loss.

    A layer without weights gets a Dense layer after it, so the gradient
    still flows through it.
    """
    x = random_input(shape, seed=5)
    layer = make_layer()
    inputs = keras.Input(shape[1:])
    outputs = layer(inputs)
    if not layer.trainable_weights:
        outputs = keras.layers.Dense(outputs.shape[-1])(outputs)
    model = keras.Model(inputs, outputs)
    y = random_input((shape[0], *tuple(model.output_shape[1:])), seed=6)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate), loss="mse")
    before = model.evaluate(x, y, verbose=0)
    model.train_on_batch(x, y)
    after = model.evaluate(x, y, verbose=0)
    assert after < before, (before, after)


def check_output_shape(make_layer, shape) -> None:
    layer = make_layer()
    out = layer(random_input(shape, seed=7))
    assert tuple(out.shape) == tuple(layer.compute_output_shape(shape))
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(out)))
    symbolic = layer.compute_output_shape((None, *tuple(shape[1:])))
    assert tuple(symbolic[1:]) == tuple(out.shape[1:])


def run_layer_checks(
    make_layer: Callable[..., keras.layers.Layer],
    shape: tuple[int, ...],
    expected_weights: dict[str, tuple],
    tmp_dir: str,
    learning_rate: float = 1e-2,
) -> None:
    """Runs every shared check on `make_layer(**overrides)` for inputs of `shape`.

    Args:
        make_layer: factory taking keyword overrides (e.g. ``dtype``) and
            returning a fresh, unbuilt layer.
        shape: full input shape, batch included.
        expected_weights: {path relative to the layer: shape} of the
            trainable weights after build.
        tmp_dir: a scratch directory for the `.keras` file.
        learning_rate: SGD step size of the training check.
    """
    keras.utils.set_random_seed(0)
    layer = make_layer()
    layer.build(shape)
    assert weight_shapes(layer) == expected_weights
    check_config(layer)
    check_output_shape(make_layer, shape)
    check_save_load(make_layer, shape, tmp_dir)
    check_mixed_precision(make_layer, shape)
    check_xla(make_layer, shape)
    check_training_step(make_layer, shape, learning_rate)


def tflite_max_error(make_layer: Callable[..., keras.layers.Layer], shape: tuple) -> float:
    """Converts a one-layer model with builtin ops only, runs it in ai_edge_litert.

    Returns the max abs difference between the interpreter and Keras.
    Conversion fails (raises) if any op is not a TFLite builtin.
    """
    from ai_edge_litert.interpreter import Interpreter

    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape[1:], batch_size=shape[0])
    model = keras.Model(inputs, make_layer()(inputs))
    x = random_input(shape, seed=8)
    expected = model.predict(x, verbose=0)

    with tempfile.TemporaryDirectory(prefix="kf_tflite_") as saved_model_dir:
        model.export(saved_model_dir, format="tf_saved_model", verbose=False)
        converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_dir)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        content = converter.convert()
    interpreter = Interpreter(model_content=content)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    actual = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    return float(np.max(np.abs(actual - expected)))
