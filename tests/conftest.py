"""Test-wide settings: quiet TensorFlow, float32 policy, fixed seeds, one run per backend.

The suite runs once per Keras backend (``KERAS_BACKEND=tensorflow|jax|torch``).
Tests marked ``single_backend`` run only in the TensorFlow run and are
deselected, not skipped, under the other backends: TensorFlow by nature
(tf.data, strategies, SavedModel, TFLite, training and the CLI: every module
not in :data:`MULTI_BACKEND_MODULES`, plus marked tests there), shape-only
checks that no backend can change (parameter counts), and the cross-backend
parity test, which drives JAX and PyTorch in subprocesses itself.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import pytest

# The layer, model and weight tests: the modules that run under every backend. Every other
# module (data, training, export, CLI, benchmarks, parity driver) is single_backend.
MULTI_BACKEND_MODULES = {
    "test_afbo.py",
    "test_backend_training.py",
    "test_checkpoints.py",
    "test_clear_errors.py",
    "test_common_layers.py",
    "test_fnet_models.py",
    "test_fourier_layers.py",
    "test_hornet_layers.py",
    "test_interpolation.py",
    "test_models.py",
    "test_spectral.py",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name not in MULTI_BACKEND_MODULES:
            item.add_marker(pytest.mark.single_backend)
    if keras.config.backend() == "tensorflow":
        return
    deselected = [item for item in items if item.get_closest_marker("single_backend")]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker("single_backend")]


def pytest_report_header(config):
    return f"keras backend: {keras.config.backend()}"


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(0)
    yield
    keras.config.set_dtype_policy("float32")
