"""The one shared harness every keras_fourier layer goes through.

`run_layer_checks` runs, for one layer configuration and one input shape:

* config round trip (and `get_config` keys are exactly the constructor's),
* `.keras` save and load give identical outputs,
* forward under `mixed_float16` and `mixed_bfloat16` is finite, has the
  policy's compute dtype, and is close to float32 with the same weights,
* the per-layer dtype policy (`check_dtype_policy`, Keras's own
  ``run_layer_test`` mixed-precision check): with ``dtype="mixed_float16"``
  on the layer alone, every sublayer carries that policy, every weight is
  float32 and the output has the dtype `compute_output_spec` promises,
* compiled forward equals eager, and its gradients are finite and equal
  eager gradients (TensorFlow: ``tf.function(jit_compile=True)`` under a
  ``GradientTape``; JAX: ``jax.jit`` of ``jax.value_and_grad`` over
  ``stateless_call``); PyTorch has no XLA here, so its autograd gradient is
  checked against a central finite difference instead,
* the trainable weights are exactly the expected names and shapes,
* one SGD step lowers a regression loss,
* Keras's own ``run_layer_test`` passes, its mixed-precision check on.

Every check runs on the Keras backend of the process (``KERAS_BACKEND``):
the suite runs once per backend. Layer-specific numerics (NumPy references,
fft vs matmul) live in the per-layer test modules; helpers for them are here
too.
"""

from __future__ import annotations

import inspect
import os
import tempfile
from collections.abc import Callable, Sequence

import keras
import numpy as np
from keras.src.testing import TestCase as KerasTestCase

BASE_CONFIG_KEYS = {"name", "trainable", "dtype"}
HALF_TOLERANCE = {"mixed_float16": 3e-2, "mixed_bfloat16": 8e-2}


def random_input(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Deterministic standard-normal float32 input."""
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def to_numpy(x) -> np.ndarray:
    """A backend tensor (or array) as a NumPy array."""
    return np.asarray(keras.ops.convert_to_numpy(x))


def fft_and_matmul_outputs(
    make_layer: Callable[..., keras.layers.Layer],
    x: np.ndarray,
    initialise: Callable[[keras.layers.Layer], object] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The outputs on `x` of `make_layer(fft_impl="fft")` and of its "matmul" twin.

    Both are built for `x`; `initialise`, when given, sets the weights of the
    "fft" layer; the "matmul" layer then takes them.
    """
    layer_fft, layer_mm = make_layer(fft_impl="fft"), make_layer(fft_impl="matmul")
    layer_fft.build(x.shape)
    layer_mm.build(x.shape)
    if initialise is not None:
        initialise(layer_fft)
    layer_mm.set_weights(layer_fft.get_weights())
    return to_numpy(layer_fft(x)), to_numpy(layer_mm(x))


def check_run_time_sized_graph(
    layer: keras.layers.Layer, shapes: Sequence[tuple[int, ...]], seed: int = 5
) -> None:
    """A TensorFlow graph of `layer` traced with unknown batch and spatial sizes equals eager.

    `layer` is built for such inputs; each input of `shapes` (channels last)
    goes through the graph and through the layer eagerly. TensorFlow only.
    """
    import tensorflow as tf

    unknown = tf.TensorSpec((None,) * (len(shapes[0]) - 1) + (shapes[0][-1],), tf.float32)
    traced = tf.function(layer.__call__, input_signature=[unknown])
    for shape in shapes:
        x = random_input(shape, seed=seed)
        np.testing.assert_allclose(traced(x).numpy(), to_numpy(layer(x)), atol=1e-5)


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
        spec = layer.compute_output_spec(keras.KerasTensor(shape))
        assert keras.backend.standardize_dtype(out.dtype) == spec.dtype
        assert spec.dtype in (layer.compute_dtype, "float32"), (policy, spec.dtype)
        out = keras.ops.convert_to_numpy(keras.ops.cast(out, "float32"))
        assert np.all(np.isfinite(out)), policy
        error = relative_error(out, expected)
        assert error < tolerance, (policy, error)


def check_dtype_policy(make_layer, *inputs) -> None:
    """The layer contract's dtype rule, with the policy set on the layer only.

    The global policy stays float32, so a sublayer built without
    ``dtype=self.dtype_policy`` falls back to float32 and shows up here
    (wrong policy, or an output dtype other than the one
    ``compute_output_spec`` promises).

    Args:
        make_layer: factory taking ``dtype`` and returning a fresh layer.
        *inputs: NumPy call arguments (float or int).
    """
    assert keras.config.dtype_policy().name == "float32"
    layer = make_layer(dtype="mixed_float16")
    outputs = layer(*inputs)
    specs = layer.compute_output_spec(
        *[
            keras.KerasTensor(
                x.shape,
                dtype=layer.compute_dtype if np.issubdtype(x.dtype, np.floating) else str(x.dtype),
            )
            for x in inputs
        ]
    )
    for sublayer in layer._flatten_layers(include_self=False):
        assert sublayer.dtype_policy.name == "mixed_float16", (sublayer.path, sublayer.dtype_policy)
    for weight in layer.weights:
        assert keras.backend.standardize_dtype(weight.dtype) == "float32", weight.path
    for output, spec in zip(keras.tree.flatten(outputs), keras.tree.flatten(specs), strict=True):
        assert keras.backend.standardize_dtype(output.dtype) == spec.dtype, (output.dtype, spec)


def _tf_gradients(layer, x, target):
    import tensorflow as tf

    def loss_and_grads(a, b):
        with tf.GradientTape() as tape:
            tape.watch(a)
            out = layer(a, training=False)
            loss = tf.reduce_mean(tf.square(tf.cast(out, tf.float32) - b))
        return out, loss, tape.gradient(loss, [a, *list(layer.trainable_weights)])

    x, target = tf.constant(x), tf.constant(target)
    compiled = tf.function(loss_and_grads, jit_compile=True)
    return loss_and_grads(x, target), compiled(x, target)


def _jax_gradients(layer, x, target):
    import jax
    import jax.numpy as jnp

    trainable = [v.value for v in layer.trainable_variables]
    non_trainable = [v.value for v in layer.non_trainable_variables]

    def loss_fn(a, weights):
        out, _ = layer.stateless_call(weights, non_trainable, a)
        return jnp.mean(jnp.square(out.astype("float32") - target)), out

    def loss_and_grads(a, weights):
        (loss, out), (grad_x, grad_w) = jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)(
            a, weights
        )
        return out, loss, [grad_x, *grad_w]

    x = jnp.asarray(x)
    with jax.disable_jit():
        eager = loss_and_grads(x, trainable)
    return eager, jax.jit(loss_and_grads)(x, trainable)


def _torch_gradients(layer, x, target):
    """Autograd gradients, and the same loss and gradient with the input
    direction's component checked by a central finite difference."""
    import torch

    def loss_of(a):
        out = layer(a, training=False)
        return out, torch.mean(
            torch.square(out.float() - torch.as_tensor(target, device=out.device))
        )

    device = keras.ops.convert_to_tensor(x).device
    a = torch.tensor(x, device=device, requires_grad=True)
    out, loss = loss_of(a)
    grads = torch.autograd.grad(loss, [a, *[v.value for v in layer.trainable_weights]])
    direction = torch.as_tensor(random_input(x.shape, seed=9), device=device)
    direction = direction / torch.linalg.vector_norm(direction)
    eps = 1e-2
    with torch.no_grad():
        plus = loss_of(a + eps * direction)[1]
        minus = loss_of(a - eps * direction)[1]
    numeric = float((plus - minus) / (2 * eps))
    analytic = float(torch.sum(grads[0] * direction))
    assert abs(numeric - analytic) <= 2e-2 * max(abs(analytic), 1e-3), (numeric, analytic)
    result = (out.detach(), loss.detach(), [g.detach() for g in grads])
    return result, result


def check_xla(make_layer, shape) -> None:
    """Compiled (XLA) forward and gradients equal eager ones; finite-difference on PyTorch."""
    x = random_input(shape, seed=3)
    layer = make_layer()
    layer.build(shape)
    target = random_input(tuple(layer.compute_output_shape(shape)), seed=4)
    gradients = {
        "tensorflow": _tf_gradients,
        "jax": _jax_gradients,
        "torch": _torch_gradients,
    }[keras.config.backend()]
    (eager_out, eager_loss, eager_grads), (xla_out, xla_loss, xla_grads) = gradients(
        layer, x, target
    )
    assert relative_error(to_numpy(xla_out), to_numpy(eager_out)) < 1e-5
    eager_loss, xla_loss = float(to_numpy(eager_loss)), float(to_numpy(xla_loss))
    assert abs(xla_loss - eager_loss) <= 1e-5 * max(1.0, abs(eager_loss))
    assert len(eager_grads) == len(xla_grads) == 1 + len(layer.trainable_weights)
    for eager_grad, xla_grad in zip(eager_grads, xla_grads, strict=True):
        assert xla_grad is not None
        assert np.all(np.isfinite(to_numpy(xla_grad)))
        assert relative_error(to_numpy(xla_grad), to_numpy(eager_grad)) < 1e-4


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


def check_keras_layer_test(make_layer: Callable[..., keras.layers.Layer], shape: tuple) -> None:
    """Keras's own layer test (`run_layer_test`, the one Keras runs on its layers), on `shape`.

    Its mixed-precision check is on; its `fit` check is off (the harness's
    own training step covers training).
    """
    layer = make_layer()
    config = layer.get_config()
    init_kwargs = {key: value for key, value in config.items() if key not in BASE_CONFIG_KEYS}
    KerasTestCase().run_layer_test(
        type(layer),
        init_kwargs=init_kwargs,
        input_shape=shape,
        expected_output_shape=tuple(layer.compute_output_shape(shape)),
        run_training_check=False,
        run_mixed_precision_check=True,
    )


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
    check_dtype_policy(make_layer, random_input(shape, seed=2))
    check_xla(make_layer, shape)
    check_training_step(make_layer, shape, learning_rate)
    check_keras_layer_test(make_layer, shape)


def tflite_max_error(make_layer: Callable[..., keras.layers.Layer], shape: tuple) -> float:
    """Converts a one-layer model with builtin ops only, runs it in ai_edge_litert.

    Returns the max abs difference between the interpreter and Keras.
    Conversion fails (raises) if any op is not a TFLite builtin.
    """
    import tensorflow as tf
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


# ----------------------------------------------------------------------------- models


# On JAX a model called eagerly compiles each operation for each new shape (about a thousand
# XLA compilations per family check); `predict_on_batch` compiles the whole model once, as
# `predict` and `fit` run it. The other backends call the model directly.
_WHOLE_PROGRAM = keras.config.backend() == "jax"


def _numpy_outputs(model: keras.Model, inputs) -> list[np.ndarray]:
    outputs = model.predict_on_batch(inputs) if _WHOLE_PROGRAM else model(inputs, training=False)
    return [to_numpy(out) for out in keras.tree.flatten(outputs)]


def run_model_checks(
    make_model: Callable[..., keras.Model],
    inputs,
    tmp_dir: str,
    *,
    features: Callable[[keras.Model], keras.Model] | None = None,
    half_tolerance: float = 2.0,
    learning_rate: float = 1e-3,
) -> None:
    """The model-level checks every family's test runs (as keras-hub's run_backbone_test).

    For ``make_model(**overrides)`` (a tiny configuration of a family) and a
    batch of `inputs`:

    * build: finite outputs, the same twice (inference is deterministic);
    * `.keras` save and load give identical outputs, the same classes;
    * weights round trip: ``save_weights`` then ``load_weights`` into a fresh
      model gives identical outputs;
    * mixed precision: built under ``mixed_float16`` and ``mixed_bfloat16``
      with the float32 weights, outputs are finite and within
      `half_tolerance` times the layer tolerance (`HALF_TOLERANCE`, relative)
      of float32, and every weight stays float32;
    * one training step (Adam, cross-entropy on the class outputs, or MSE on
      other outputs) lowers the loss;
    * feature extractor: ``features(model)`` (when given) runs on `inputs`
      and returns finite maps.

    Args:
        make_model: factory returning a freshly built model of a tiny
            configuration (called under each dtype policy).
        inputs: a batch the model takes (an array or a dict of arrays).
        tmp_dir: a scratch directory for the files.
        features: the family's feature extractor, or None.
        half_tolerance: factor on `HALF_TOLERANCE` for whole models. Default 2.
        learning_rate: Adam's step of the training check. Default 1e-3.
    """
    keras.utils.set_random_seed(0)
    model = make_model()
    expected = _numpy_outputs(model, inputs)
    assert all(np.all(np.isfinite(out)) for out in expected), model.name
    for again, out in zip(_numpy_outputs(model, inputs), expected, strict=True):
        np.testing.assert_array_equal(again, out)

    path = os.path.join(tmp_dir, "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert [type(layer) for layer in loaded.layers] == [type(layer) for layer in model.layers]
    for actual, out in zip(_numpy_outputs(loaded, inputs), expected, strict=True):
        np.testing.assert_array_equal(actual, out)

    weights = os.path.join(tmp_dir, "model.weights.h5")
    model.save_weights(weights)
    fresh = make_model()
    fresh.load_weights(weights)
    for actual, out in zip(_numpy_outputs(fresh, inputs), expected, strict=True):
        np.testing.assert_array_equal(actual, out)

    previous = keras.config.dtype_policy()
    for policy, tolerance in HALF_TOLERANCE.items():
        keras.config.set_dtype_policy(policy)
        try:
            half = make_model()
        finally:
            keras.config.set_dtype_policy(previous)
        half.set_weights(model.get_weights())
        assert all(keras.backend.standardize_dtype(w.dtype) == "float32" for w in half.weights), (
            policy
        )
        for actual, out in zip(_numpy_outputs(half, inputs), expected, strict=True):
            actual = actual.astype("float32")
            assert np.all(np.isfinite(actual)), policy
            error = relative_error(actual, out)
            assert error < half_tolerance * tolerance, (policy, model.name, error)

    trained = fresh  # its weights are the model's
    outputs = keras.tree.flatten(trained.outputs)
    classes = outputs[0].shape[-1]
    if len(outputs) == 1 and classes and classes > 1:
        # One label per sample (classifiers) or per pixel (segmentation logits).
        labels = (np.arange(np.prod(expected[0].shape[:-1])) % classes).reshape(
            expected[0].shape[:-1]
        )
        loss = keras.losses.SparseCategoricalCrossentropy(
            from_logits=trained.layers[-1].get_config().get("activation") in (None, "linear")
        )
        targets = labels
    else:
        loss = keras.losses.MeanSquaredError()
        targets = [np.zeros_like(out) for out in expected]
        targets = targets[0] if len(targets) == 1 else targets
    trained.compile(keras.optimizers.Adam(learning_rate), loss, run_eagerly=not _WHOLE_PROGRAM)

    def current_loss() -> float:
        if _WHOLE_PROGRAM:
            predictions = keras.tree.pack_sequence_as(
                trained.output, _numpy_outputs(trained, inputs)
            )
        else:
            predictions = trained(inputs, training=False)
        return float(to_numpy(loss(targets, predictions)))

    before = current_loss()
    trained.train_on_batch(inputs, targets)
    after = current_loss()
    assert after < before, (model.name, before, after)

    if features is not None:
        maps = _numpy_outputs(features(model), inputs)
        assert maps, model.name
        assert all(np.all(np.isfinite(value)) for value in maps)


def export_run_model(model: keras.Model, root, task: str, formats: str) -> tuple[str, str]:
    """`keras-fourier export` of `model` saved as a `task` run's ROOT/model.keras into ROOT/models.

    Returns:
        (the output folder, what the command printed); the command must exit 0.
    """
    import contextlib
    import io

    from keras_fourier import cli
    from keras_fourier.model_record import TASK_KEY
    from keras_fourier.training.callbacks import save_model

    path, out = os.path.join(root, "model.keras"), os.path.join(root, "models")
    save_model(model, path, {TASK_KEY: task})
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert cli.main(["export", path, "--format", formats, "--out", out]) == 0
    return out, buffer.getvalue()
