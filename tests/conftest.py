"""Test-wide settings: quiet TensorFlow, float32 policy, fixed seeds, one run per backend.

The suite runs once per Keras backend (``KERAS_BACKEND=tensorflow|jax|torch``).
Tests marked ``single_backend`` (TensorFlow by nature: tf.data, strategies,
SavedModel, TFLite, the CLI; and the cross-backend parity test, which drives
the other backends in subprocesses itself) run only in the TensorFlow run and
are deselected, not skipped, under the other backends.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import pytest


def pytest_collection_modifyitems(config, items):
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
