"""Runs always finish: kills and full disks between the last backup and the checkpoints, Ctrl-C."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time

from keras_fourier.cli import main
from keras_fourier.model_record import read_checkpoint_record
from keras_fourier.training import callbacks, read_history
from tests.faults import unwritable

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
ARGV = ["train", "--model", "gfnet_tiny", "--dims", "16", "--depths", "1", "--no-tensorboard"]
ARGV += ["--batch-size", "8", "--verbose", "0", "--steps-per-epoch", "2"]

# Runs `keras-fourier ARGS` and kills itself (SIGKILL) when the checkpoint of epoch EPOCH is
# about to be saved: its backup is written, its last.keras and best.keras are not.
KILL_BEFORE_CHECKPOINTS = """
import os, signal, sys
from keras_fourier import cli
from keras_fourier.training import callbacks
epoch = int(sys.argv[1])
save = callbacks.save_model
def save_model(model, path, record):
    if record["epoch"] == epoch:
        os.kill(os.getpid(), signal.SIGKILL)
    save(model, path, record)
callbacks.save_model = save_model
sys.exit(cli.main(sys.argv[2:]))
"""


def kill_before_checkpoints(argv: list[str], epoch: int = 1, env: dict | None = None) -> None:
    """Runs `keras-fourier ARGV` in a process that SIGKILLs itself at epoch EPOCH's checkpoints."""
    killed = subprocess.run(
        [sys.executable, "-c", KILL_BEFORE_CHECKPOINTS, str(epoch), *argv],
        env=ENV if env is None else env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -9, killed.stderr[-3000:]


def _agrees(out) -> None:
    history = read_history(out / "history.csv")
    best = read_checkpoint_record(out / "best.keras")
    values = [row["val_accuracy"] for row in history]
    assert best["logs"]["val_accuracy"] == max(values)
    assert best["epoch"] == values.index(max(values))
    assert read_checkpoint_record(out / "last.keras")["epoch"] == len(history) - 1
    assert read_checkpoint_record(out / "model.keras")["epoch"] == best["epoch"]
    assert json.loads((out / "run.json").read_text())["status"] == "finished"


def test_kill_between_the_last_backup_and_its_checkpoints_then_rerun(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [*ARGV, "--epochs", "2", "--out", str(out)]
    kill_before_checkpoints(argv)
    assert (out / "backup" / "epoch-00001.weights.h5").exists()
    assert read_checkpoint_record(out / "last.keras")["epoch"] == 0
    assert main(argv) == 0
    assert "rewrote" in capsys.readouterr().err
    _agrees(out)


def test_full_disk_before_the_only_epoch_is_checkpointed_then_rerun(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    argv = [*ARGV, "--epochs", "1", "--out", str(out)]
    save = callbacks.save_model

    def full_disk(model, path, record):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(callbacks, "save_model", full_disk)
    assert main(argv) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "No space left on device" in error
    assert "rerun the same command to resume" in error and "Traceback" not in error
    assert not (out / "best.keras").exists() and (out / "backup").exists()
    monkeypatch.setattr(callbacks, "save_model", save)
    assert main(argv) == 0  # was: "No .keras file at '.../best.keras'" forever
    _agrees(out)


def test_unwritable_out_is_one_error_line(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    with unwritable(read_only):
        for out, message in [
            (a_file / "run", "is a file"),
            (a_file, "is a file"),
            (read_only / "run", "is not writable"),
        ]:
            assert main([*ARGV, "--out", str(out)]) == 2
            error = capsys.readouterr().err
            assert error.count("\n") == 1 and message in error and "--out" in error
        assert os.listdir(read_only) == []


def test_ctrl_c_says_the_run_can_be_resumed(tmp_path, terminal_sigint):
    out = tmp_path / "run"
    run = subprocess.Popen(
        [sys.executable, "-m", "keras_fourier.cli", *ARGV, "--epochs", "500", "--out", str(out)],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while len(read_history(out / "history.csv")) < 1:
            assert run.poll() is None, run.stderr.read()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        run.send_signal(signal.SIGINT)
        _, error = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 130
    assert "Traceback" not in error
    assert f"interrupted; rerun the same command to resume '{out}'" in error
    assert error.strip().splitlines()[-1].startswith("keras-fourier train: interrupted")


def _signal_when(condition, signum: int) -> threading.Thread:
    """A thread that sends `signum` to this process once `condition()` holds (within 300 s)."""

    def watch():
        deadline = time.monotonic() + 300
        while not condition():
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        os.kill(os.getpid(), signum)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_sigterm_before_the_first_epoch_then_a_rerun_with_other_settings(tmp_path, capsys):
    out = tmp_path / "run"
    # A real SIGTERM while the first (long) epoch runs, after run.json says "running".
    watcher = _signal_when(lambda: (out / "run.json").exists(), signal.SIGTERM)
    argv = [*ARGV, "--epochs", "1", "--out", str(out)]
    assert main([*argv, "--steps-per-epoch", "100000"]) == 143
    watcher.join()
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "Traceback" not in error
    assert error.startswith("keras-fourier train: terminated; rerun the same command to resume")
    assert json.loads((out / "run.json").read_text())["status"] == "running"
    assert read_history(out / "history.csv") == []
    # The corrected command (here: fewer steps) starts the run again instead of refusing it.
    assert main(argv) == 0
    assert "holds a run with other settings that stopped before its first epoch" in (
        capsys.readouterr().err
    )
    _agrees(out)
