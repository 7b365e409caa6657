"""The embedded forecast job through the command line: train, kill, resume, evaluate, export."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

from keras_fourier.cli import main
from keras_fourier.data.fields import load_field_source
from keras_fourier.data.navier_stokes import navier_stokes
from keras_fourier.model_record import FIELD_STATS_KEY, read_checkpoint_record
from keras_fourier.models.fourcastnet import rollout
from keras_fourier.training import read_history
from keras_fourier.weights.saved import load_keras_file
from tests.test_run_faults import ENV, kill_before_checkpoints

TINY = ["--task", "forecast", "--dims", "16", "--depths", "1", "--batch-size", "8"]
TINY += ["--epochs", "2", "--steps-per-epoch", "2", "--verbose", "0", "--no-tensorboard"]


@pytest.mark.slow
def test_forecast_job_trains_resumes_evaluates_predicts_and_exports(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "home"))  # the solved data's cache
    out = tmp_path / "run"
    argv = ["train", *TINY, "--out", str(out)]
    kill_before_checkpoints(argv, env={**ENV, "KERAS_HOME": str(tmp_path / "home")})
    assert read_checkpoint_record(out / "last.keras")["epoch"] == 0
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "rewrote" in captured.err
    lines = captured.out.strip().splitlines()
    assert re.fullmatch(r"test_rel_l2=\d\.\d{4}", lines[-1]), lines[-5:]
    assert [line.split("=")[0] for line in lines[-4:-1]] == [
        "test_rmse_0",
        "test_rmse_1",
        "test_acc",
    ]
    history = read_history(out / "history.csv")
    assert len(history) == 2 and {"val_rel_l2", "val_acc", "val_rmse_1"} <= set(history[0])
    record = read_checkpoint_record(out / "model.keras")
    assert record["logs"]["val_rel_l2"] == min(row["val_rel_l2"] for row in history)
    source = load_field_source("navier_stokes")
    assert record[FIELD_STATS_KEY]["mean"] == source.mean.tolist()
    assert record[FIELD_STATS_KEY]["channels"] == ["vorticity", "tracer"]

    assert main(["evaluate", "--model", str(out)]) == 0
    scored = capsys.readouterr().out
    assert f"rel_l2={lines[-1].split('=')[1]}" in scored, scored

    frames = navier_stokes()
    state = tmp_path / "state.npy"
    np.save(state, frames[900])
    predictions = tmp_path / "predictions"
    argv = ["predict", str(state), "--model", str(out), "--out", str(predictions), "--steps", "3"]
    assert main(argv) == 0
    assert str(state) in capsys.readouterr().out
    forecast = np.load(predictions / "state_forecast.npy")
    model = load_keras_file(out / "model.keras", compile=False)
    normalised = (np.moveaxis(frames[900], 0, -1) - source.mean) / source.std
    expected = np.asarray(rollout(model, normalised[None], 3))[0] * source.std + source.mean
    np.testing.assert_allclose(forecast, np.moveaxis(expected, -1, 1), rtol=1e-4, atol=1e-4)
    assert forecast.shape == (3, 2, 32, 32)

    exported = tmp_path / "models"
    assert main(["export", str(out), "--out", str(exported), "--name", "ns"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"Parity serving_rollout: max \|SavedModel - Keras\| = ", printed)
    assert re.search(r"Wrote TFLite .*ns.tflite \(float32.*max \|LiteRT - Keras\| = ", printed)
    loaded = tf.saved_model.load(str(exported / "ns" / "1"))
    trajectory = loaded.signatures["serving_rollout"](
        fields=tf.constant(normalised[None], tf.float32), steps=tf.constant(2)
    )["trajectory"].numpy()
    np.testing.assert_allclose(
        trajectory[0] * source.std + source.mean, np.moveaxis(forecast[:2], 1, -1), atol=1e-3
    )
    next_state = loaded.signatures["serving_default"](fields=tf.constant(normalised[None]))
    np.testing.assert_allclose(next_state["next_state"].numpy(), trajectory[:, 0], atol=1e-5)
