"""Training across processes: MirroredStrategy, multi-worker, and a run killed and restarted.

Each test runs TensorFlow in subprocesses: logical devices and multi-worker
clusters must be configured before TensorFlow initialises.
"""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import time

import keras
import numpy as np
import pytest

from keras_fourier.training import read_history

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
# A tiny gfnet_tiny: one block of 16 channels.
TINY = [
    "--model",
    "gfnet_tiny",
    "--dims",
    "16",
    "--depths",
    "1",
    "--no-tensorboard",
    "--deterministic",
]
TIMEOUT = 300


def _python(code: str) -> str:
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    return completed.stdout


def test_mirrored_on_two_cpus_matches_default_strategy():
    # The same model, recipe and batches (in a fixed order) under both strategies.
    out = _python(
        """
        import json
        import tensorflow as tf

        cpu = tf.config.list_physical_devices("CPU")[0]
        two_cpus = [tf.config.LogicalDeviceConfiguration()] * 2
        tf.config.set_logical_device_configuration(cpu, two_cpus)
        import keras
        from keras_fourier.data import load_image_dataset
        from keras_fourier.training import (
            create_model, create_optimizer, get_strategy, warmup_cosine_schedule,
        )

        class BatchLosses(keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                self.losses = []

            def on_train_batch_end(self, batch, logs=None):
                self.losses.append(float(logs["loss"]))

        data = load_image_dataset(
            "digits", image_size=16, batch_size=32, training=False, one_hot=True
        ).take(8)
        results = {}
        for name in ("default", "mirrored"):
            keras.utils.set_random_seed(0)
            strategy = get_strategy(name)
            with strategy.scope():
                model = create_model("gfnet_tiny", num_classes=10, image_size=16, dims=16, depths=2)
                model.compile(
                    optimizer=create_optimizer(
                        model, learning_rate=warmup_cosine_schedule(2e-3, 16, 4)
                    ),
                    loss=keras.losses.CategoricalCrossentropy(label_smoothing=0.1),
                )
            losses = BatchLosses()
            model.fit(data, epochs=2, callbacks=[losses], shuffle=False, verbose=0)
            results[name] = {
                "replicas": strategy.num_replicas_in_sync,
                "losses": losses.losses,
                "weights": [w.tolist() for w in model.get_weights()],
            }
        print(json.dumps(results))
        """
    )
    results = json.loads(out.strip().splitlines()[-1])
    default, mirrored = results["default"], results["mirrored"]
    assert (default["replicas"], mirrored["replicas"]) == (1, 2)
    assert len(default["losses"]) == 16
    np.testing.assert_allclose(mirrored["losses"], default["losses"], rtol=1e-4)
    assert default["losses"][-1] < default["losses"][0]
    for got, expected in zip(mirrored["weights"], default["weights"], strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-5)


@pytest.mark.slow
def test_two_workers_on_localhost_end_with_the_same_weights(tmp_path):
    out = tmp_path / "run"
    completed = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "multi_worker.py"),
            "--num-workers",
            "2",
            "--",
            *TINY,
            "--epochs",
            "2",
            "--steps-per-epoch",
            "3",
            "--batch-size",
            "16",
            "--out",
            str(out),
            "--verbose",
            "2",
            # Overrides the launcher's --strategy multi_worker: "auto" must find it in TF_CONFIG.
            "--strategy",
            "auto",
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    chief = keras.saving.load_model(out / "model.keras")
    worker = keras.saving.load_model(out / "workers" / "worker_1" / "model.keras")
    for a, b in zip(chief.get_weights(), worker.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    history = read_history(out / "history.csv")
    assert [row["epoch"] for row in history] == [0, 1]
    assert history == read_history(out / "workers" / "worker_1" / "history.csv")
    assert completed.stdout.count("(2 replica(s) in sync)") == 2
    # Every line comes prefixed with its worker; each worker ends with its test accuracy.
    finals = re.findall(r"^\[worker ([01])\] test_accuracy=[\d.]+$", completed.stdout, re.MULTILINE)
    assert sorted(finals) == ["0", "1"], completed.stdout[-3000:]


@pytest.mark.slow
def test_killed_run_restarts_and_logs_every_epoch_once(tmp_path):
    command = [
        sys.executable,
        "-m",
        "keras_fourier.cli",
        "train",
        *TINY,
        "--epochs",
        "4",
        "--steps-per-epoch",
        "30",
        "--batch-size",
        "16",
        "--out",
        str(tmp_path),
        "--verbose",
        "2",
    ]
    history = tmp_path / "history.csv"
    first = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + TIMEOUT
    while len(read_history(history)) < 2:
        assert first.poll() is None, first.stderr.read().decode()[-4000:]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait()
    before_kill = read_history(history)
    assert len(before_kill) < 4

    completed = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=TIMEOUT)
    assert completed.returncode == 0, completed.stderr[-4000:]
    rows = read_history(history)
    assert [row["epoch"] for row in rows] == [0, 1, 2, 3]
    assert rows[0] == before_kill[0]
    assert "Epoch 1/4" not in completed.stdout
    assert completed.stdout.strip().splitlines()[-1].startswith("test_accuracy=")
