"""Training on the current Keras backend: strategies by backend, and a short `train` run.

Runs under every backend (see tests/conftest.py): tf.data feeds JAX and
PyTorch too, and `get_strategy` maps the strategy names onto each backend.
"""

import os

import keras
import numpy as np
import pytest

from keras_fourier.training import get_strategy, train
from keras_fourier.training.strategy import BACKEND_STRATEGIES, STRATEGIES

# The layer, model and weight tests run under every Keras backend (tests/conftest.py).
pytestmark = pytest.mark.multi_backend


def test_strategies_of_this_backend():
    backend = keras.config.backend()
    names = STRATEGIES if backend == "tensorflow" else BACKEND_STRATEGIES[backend]
    for name in names:
        if name in ("tpu", "multi_worker"):
            continue
        strategy = get_strategy(name)
        assert strategy.num_replicas_in_sync >= 1
        with strategy.scope():
            assert keras.layers.Dense(2)(np.ones((1, 3), "float32")).shape == (1, 2)
    for name in sorted(set(STRATEGIES) - set(names)):
        with pytest.raises(ValueError, match=f"Received: strategy='{name}'"):
            get_strategy(name)


def test_train_runs_on_this_backend(tmp_path):
    # A few steps only: whether the recipe learns on each backend is the main job's
    # accuracy (see the issue-10 note); here the run must complete with finite numbers.
    result = train(
        dims=16,
        depths=1,
        epochs=2,
        steps_per_epoch=8,
        warmup_epochs=0,
        batch_size=16,
        tensorboard=False,
        verbose=0,
        out=str(tmp_path),
    )
    losses = [row["loss"] for row in result.history]
    assert len(losses) == 2 and np.all(np.isfinite(losses))
    assert np.isfinite(result.metrics["loss"])
    assert 0.0 <= result.metrics["accuracy"] <= 1.0
    assert os.path.isfile(result.model_path)
