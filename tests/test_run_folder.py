"""Run folders under real faults: damaged files, kills, concurrent runs, reused folders, NaN."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_fourier.cli import main
from keras_fourier.model_record import CHECKPOINT_RECORD, read_checkpoint_record
from keras_fourier.tasks import TaskData
from keras_fourier.tasks.image_classification import ImageClassification
from keras_fourier.training import (
    NonFiniteLossError,
    RunConfigError,
    RunFolderBusyError,
    RunLock,
    TrainConfig,
    read_history,
    train,
    validate_config,
)
from tests.faults import dead_pid

TINY = {
    "model": "gfnet_tiny",
    "dims": 16,
    "depths": 1,
    "batch_size": 8,
    "epochs": 2,
    "steps_per_epoch": 2,
    "tensorboard": False,
    "verbose": 0,
}
TINY_ARGV = ["--model", "gfnet_tiny", "--dims", "16", "--depths", "1", "--no-tensorboard"]
TINY_ARGV += ["--batch-size", "8", "--verbose", "0"]
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}


def _snapshot(folder) -> dict[str, tuple[int, float]]:
    return {
        os.path.relpath(os.path.join(root, name), folder): (
            os.path.getsize(os.path.join(root, name)),
            os.path.getmtime(os.path.join(root, name)),
        )
        for root, _, names in os.walk(folder)
        for name in names
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished two-epoch run: (folder, its result)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    return out, train(TrainConfig(out=str(out), **TINY))


def _copy(finished, tmp_path):
    source, _ = finished
    target = tmp_path / "run"
    shutil.copytree(source, target)
    return target


def _interrupt(folder) -> None:
    """Turns a finished folder into one killed after its last backup: no final model yet."""
    os.remove(folder / "model.keras")
    record = json.loads((folder / "run.json").read_text())
    record["status"] = "running"
    record.pop("metrics")
    (folder / "run.json").write_text(json.dumps(record))


def _damage(path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes(b"" if how == "empty" else data[: len(data) // 2])


def test_finished_run_records_its_identity_result_and_checkpoints(finished):
    out, result = finished
    record = json.loads((out / "run.json").read_text())
    assert record["status"] == "finished"
    assert record["identity"]["model"] == "gfnet_tiny"
    assert record["identity"]["image_size"] == 16
    assert record["keras_fourier_version"]
    assert record["metrics"] == pytest.approx(result.metrics)
    assert [row["epoch"] for row in result.history] == [0, 1]
    assert sorted(os.listdir(out / "backup")) == [
        "epoch-00000.json",
        "epoch-00000.weights.h5",
        "epoch-00001.json",
        "epoch-00001.weights.h5",
    ]
    best = read_checkpoint_record(out / "best.keras")
    assert best["logs"]["val_accuracy"] == max(row["val_accuracy"] for row in result.history)
    assert read_checkpoint_record(out / "last.keras")["epoch"] == 1
    assert not (out / "run.lock").exists()
    assert not [name for name in os.listdir(out) if name.startswith(".")]


DAMAGED = [
    "run.json",
    "history.csv",
    "best.keras",
    "last.keras",
    "model.keras",
    "backup/epoch-00001.weights.h5",
    "backup/epoch-00001.json",
]


@pytest.mark.parametrize("how", ["empty", "truncated"])
@pytest.mark.parametrize("name", DAMAGED)
def test_rerun_recovers_from_each_damaged_file(finished, tmp_path, name, how, capsys):
    _, result = finished
    out = _copy(finished, tmp_path)
    _damage(out / name, how)
    rerun = train(TrainConfig(out=str(out), **TINY))
    assert [row["epoch"] for row in read_history(out / "history.csv")] == [0, 1]
    assert read_history(out / "history.csv")[0] == result.history[0]
    assert rerun.metrics["accuracy"] == pytest.approx(result.metrics["accuracy"], abs=1e-6)
    assert json.loads((out / "run.json").read_text())["status"] == "finished"
    keras.saving.load_model(out / "model.keras", compile=False)
    if name in ("run.json", "history.csv", "model.keras"):
        assert "keras-fourier: warning:" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["backup/epoch-00001.weights.h5", "backup/epoch-00001.json"])
def test_killed_run_resumes_from_the_previous_backup_when_the_newest_is_damaged(
    finished, tmp_path, name, capsys
):
    _, result = finished
    out = _copy(finished, tmp_path)
    _interrupt(out)
    _damage(out / name, "truncated")
    rerun = train(TrainConfig(out=str(out), **TINY))
    err = capsys.readouterr().err
    assert f"cannot resume from the backup of epoch 1: {out / name}" in err
    assert "resuming after epoch 0 instead" in err
    assert err.count("keras-fourier: warning:") == 1
    history = read_history(out / "history.csv")
    assert [row["epoch"] for row in history] == [0, 1]
    assert history[0] == result.history[0]
    assert rerun.history == history
    assert json.loads((out / "backup" / "epoch-00001.json").read_text())["history"] == history


def test_no_intact_backup_restarts_from_epoch_0_with_one_warning(finished, tmp_path, capsys):
    out = _copy(finished, tmp_path)
    _interrupt(out)
    for name in os.listdir(out / "backup"):
        _damage(out / "backup" / name, "empty")
    train(TrainConfig(out=str(out), **TINY))
    err = capsys.readouterr().err
    assert "no intact backup" in err and "training restarts from epoch 0" in err
    assert err.count("keras-fourier: warning:") == 1
    assert str(out / "backup" / "epoch-00001.json") in err
    assert [row["epoch"] for row in read_history(out / "history.csv")] == [0, 1]


def test_partial_last_history_row_is_dropped(tmp_path):
    path = tmp_path / "history.csv"
    path.write_text("epoch,loss,val_accuracy\n0,3.0,0.5\n1,2.0,0.6\n2,1.")
    assert read_history(path) == [
        {"epoch": 0, "loss": 3.0, "val_accuracy": 0.5},
        {"epoch": 1, "loss": 2.0, "val_accuracy": 0.6},
    ]
    path.write_text("epo")
    assert read_history(path) == []


def test_best_so_far_comes_from_the_saved_best_model(finished, tmp_path):
    out = _copy(finished, tmp_path)
    _interrupt(out)
    for name in os.listdir(out / "backup"):
        if name.startswith("epoch-00001"):
            os.remove(out / "backup" / name)
    # The saved best model claims a validation accuracy no redone epoch can beat.
    best = out / "best.keras"
    with zipfile.ZipFile(best) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    members[CHECKPOINT_RECORD] = json.dumps({"epoch": 0, "logs": {"val_accuracy": 2.0}}).encode()
    with zipfile.ZipFile(best, "w") as archive:
        for member, data in members.items():
            archive.writestr(member, data)
    before = best.read_bytes()
    train(TrainConfig(out=str(out), **TINY))
    assert best.read_bytes() == before
    assert read_checkpoint_record(out / "last.keras")["epoch"] == 1


def test_reusing_a_finished_folder_with_another_model_fails_listing_the_fields(
    finished, tmp_path, capsys
):
    out = _copy(finished, tmp_path)
    before = _snapshot(out)
    argv = ["train", *TINY_ARGV, "--epochs", "2", "--steps-per-epoch", "2", "--out", str(out)]
    argv[argv.index("gfnet_tiny")] = "afno_tiny"
    assert main([*argv, "--learning-rate", "0.001"]) == 2
    err = capsys.readouterr().err
    assert "--model: stored 'gfnet_tiny', given 'afno_tiny'" in err
    assert "--learning-rate: stored 0.003, given 0.001" in err
    assert "--out" in err
    assert _snapshot(out) == before


def test_rerun_of_a_finished_run_says_so_and_shows_the_stored_result(finished, tmp_path, capsys):
    _, result = finished
    out = _copy(finished, tmp_path)
    before = _snapshot(out)
    argv = ["train", *TINY_ARGV, "--epochs", "2", "--steps-per-epoch", "2", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "is already finished (2 epochs)" in printed
    assert printed.strip().splitlines()[-1] == f"test_accuracy={result.metrics['accuracy']:.4f}"
    assert _snapshot(out) == before


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--learning-rate", "nan"),
        ("--learning-rate", "0"),
        ("--min-learning-rate", "inf"),
        ("--label-smoothing", "1.0"),
        ("--ema-momentum", "1"),
        ("--steps-per-epoch", "0"),
        ("--epochs", "-1"),
        ("--warmup-epochs", "-2"),
        ("--weight-decay", "nan"),
        ("--drop-path-rate", "1.5"),
        ("--image-size", "15"),
    ],
)
def test_bad_hyper_parameters_are_refused_naming_the_flag_and_writing_nothing(
    tmp_path, capsys, flag, value
):
    out = tmp_path / "run"
    assert main(["train", *TINY_ARGV, flag, value, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{flag}={value}" in err or f"{flag}={float(value)}" in err, err
    assert not out.exists()


def test_bad_settings_of_the_python_api_name_the_field():
    for field, value in [("learning_rate", float("nan")), ("ema_momentum", 0.0), ("seed", -1)]:
        with pytest.raises(ValueError, match=f"`{field}`"):
            validate_config(TrainConfig(**{field: value}))


def _nan_in_second_epoch(config):
    """Real images, with NaN pixels in every batch of the second epoch."""
    images = np.random.default_rng(0).uniform(0, 255, (32, 16, 16, 3)).astype("float32")
    labels = tf.one_hot(np.arange(32) % 10, 10)
    images[16:] = np.nan
    train_data = tf.data.Dataset.from_tensor_slices((images, labels)).batch(8)
    eval_data = tf.data.Dataset.from_tensor_slices((images[:16], labels[:16])).batch(8)
    return TaskData(train_data, eval_data, num_classes=10, splits={})


def test_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setattr(
        ImageClassification,
        "datasets",
        lambda self, config, names=None: _nan_in_second_epoch(config),
    )
    out = tmp_path / "run"
    config = TrainConfig(out=str(out), **{**TINY, "epochs": 3})
    with pytest.raises(NonFiniteLossError, match="epoch 2, step 1"):
        train(config)
    assert [row["epoch"] for row in read_history(out / "history.csv")] == [0]
    assert sorted(os.listdir(out / "backup")) == ["epoch-00000.json", "epoch-00000.weights.h5"]
    last = keras.saving.load_model(out / "last.keras", compile=False)
    assert all(np.isfinite(weight).all() for weight in last.get_weights())
    assert read_checkpoint_record(out / "last.keras")["epoch"] == 0
    assert not (out / "model.keras").exists()
    assert json.loads((out / "run.json").read_text())["status"] == "running"
    assert not (out / "run.lock").exists()


def test_a_second_run_on_a_held_folder_fails_at_once_naming_the_holder(tmp_path):
    with RunLock(tmp_path):
        assert (tmp_path / "run.lock").read_text().strip() == str(os.getpid())
        with pytest.raises(RunFolderBusyError, match=rf"{tmp_path}.*pid {os.getpid()}"):
            RunLock(tmp_path).acquire()
        with pytest.raises(RunFolderBusyError):
            train(TrainConfig(out=str(tmp_path), **TINY))
    assert not (tmp_path / "run.lock").exists()


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path, capsys):
    dead = dead_pid()
    (tmp_path / "run.lock").write_text(f"{dead}\n")
    with RunLock(tmp_path):
        assert (tmp_path / "run.lock").read_text().strip() == str(os.getpid())
    assert f"left by pid {dead}" in capsys.readouterr().err


@pytest.mark.slow
def test_two_runs_on_one_folder_then_sigkill_and_rerun(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", *TINY_ARGV, "--epochs", "3", "--steps-per-epoch", "100", "--out", str(out)]
    first = subprocess.Popen(
        [sys.executable, "-m", "keras_fourier.cli", *argv],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 300
        while len(read_history(out / "history.csv")) < 1:
            assert first.poll() is None, first.stderr.read().decode()[-4000:]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert str(out) in err and f"pid {first.pid}" in err
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert (out / "run.lock").exists()
    assert main(argv) == 0
    assert f"left by pid {first.pid}" in capsys.readouterr().err
    assert [row["epoch"] for row in read_history(out / "history.csv")] == [0, 1, 2]


def test_different_settings_raise_run_config_error(finished, tmp_path):
    out = _copy(finished, tmp_path)
    with pytest.raises(RunConfigError, match=r"label_smoothing: stored 0\.1, given 0\.2"):
        train(TrainConfig(out=str(out), **{**TINY, "label_smoothing": 0.2}))
