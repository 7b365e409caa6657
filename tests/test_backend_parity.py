"""Same weights, same logits on TensorFlow, JAX and PyTorch, for every model family.

Keras fixes its backend at import, so this test (run once, in the TensorFlow
run) saves weights and inputs, runs `tests/backend_parity.py` under JAX and
PyTorch in subprocesses, and compares their logits, of both ``fft`` and
``matmul``, with TensorFlow's. A `.keras` file saved under each backend is
then loaded here and exported as a SavedModel.
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_fourier.export.savedmodel import saved_model
from tests import backend_parity
from tests.harness import relative_error

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OTHER_BACKENDS = ("jax", "torch")


@pytest.mark.single_backend
@pytest.mark.slow
def test_same_weights_give_same_logits_on_every_backend(tmp_path):
    reference = backend_parity.write_reference(str(tmp_path))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    for backend in OTHER_BACKENDS:
        subprocess.run(
            [sys.executable, "-m", "tests.backend_parity", str(tmp_path)],
            env={**env, "KERAS_BACKEND": backend},
            cwd=ROOT,
            check=True,
            timeout=900,
        )
    errors = {}
    for family, (_, tolerance) in backend_parity.FAMILIES.items():
        expected = reference[family]
        assert np.all(np.isfinite(expected)) and np.std(expected) > 0, family
        for backend in OTHER_BACKENDS:
            with np.load(tmp_path / f"{backend}_{family}.npz") as results:
                for fft_impl in ("fft", "matmul"):
                    error = relative_error(results[fft_impl], expected)
                    errors[(family, backend, fft_impl)] = error
                    assert error <= tolerance, (family, backend, fft_impl, error)
    assert len(errors) == 4 * len(backend_parity.FAMILIES)

    family = backend_parity.KERAS_FAMILY
    with np.load(tmp_path / f"{family}_inputs.npz") as data:
        inputs = dict(data)
    for backend in OTHER_BACKENDS:
        model = keras.saving.load_model(tmp_path / f"{backend}_{family}.keras")
        assert relative_error(backend_parity.logits(model, inputs), reference[family]) <= 1e-5
        report = saved_model(model, tmp_path / f"served_{backend}", output="logits", verbose=False)
        assert os.path.isfile(os.path.join(report.path, "saved_model.pb"))
        assert max(report.max_abs_diff.values()) <= 1e-4, report.max_abs_diff
