"""The record inside a run's .keras files: written by training, read without Keras."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import keras_fourier
from keras_fourier import model_record
from keras_fourier.training import tasks
from keras_fourier.training.callbacks import save_model

pytestmark = pytest.mark.single_backend

ROOT = Path(__file__).parents[1]
READ = """
import json, sys
from keras_fourier import model_record
path = sys.argv[1]
loaded = sorted({name.split(".")[0] for name in sys.modules} & {"keras", "tensorflow"})
print(json.dumps([
    model_record.read_model_record(path), model_record.read_checkpoint_record(path), loaded
]))
"""


def _read(path: Path) -> tuple[dict, dict | None, list[str], str]:
    completed = subprocess.run(
        [sys.executable, "-c", READ, os.fspath(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.fspath(ROOT)},
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    return (*json.loads(completed.stdout), completed.stderr)


def test_the_record_training_writes_is_read_by_its_keys_without_keras(tmp_path):
    model = keras_fourier.build_model(
        depths=1, dims=8, patch_size=8, input_shape=(16, 16, 3), classes=3
    )
    written = {
        "epoch": 2,
        tasks.CLASS_NAMES_KEY: ["cat", "dog", "fox"],
        tasks.CROP_PCT_KEY: 0.9,
        tasks.TOKENIZER_KEY: {"kind": "bytes"},
    }
    save_model(model, tmp_path / "model.keras", written)
    record, checkpoint, loaded, _ = _read(tmp_path / "model.keras")
    assert record == checkpoint == written
    assert record[model_record.CLASS_NAMES_KEY] == ["cat", "dog", "fox"]
    assert record[model_record.CROP_PCT_KEY] == 0.9
    assert record[model_record.TOKENIZER_KEY] == {"kind": "bytes"}
    assert loaded == []
    # A file saved by Keras itself has no record: {} quietly, or None with one warning line.
    model.save(tmp_path / "plain.keras")
    record, checkpoint, _, stderr = _read(tmp_path / "plain.keras")
    assert record == {} and checkpoint is None
    assert stderr.startswith("keras-fourier: warning: ignoring unreadable checkpoint")
    assert len(stderr.splitlines()) == 1
