"""The default segmentation job through the command line: train, kill, resume, evaluate, predict."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import keras_fourier
from keras_fourier.cli import main
from keras_fourier.data.segmentation import digit_canvas
from keras_fourier.model_record import read_checkpoint_record
from keras_fourier.training import read_history
from tests.test_run_faults import ENV, kill_before_checkpoints

TINY = ["--model", "afno_tiny", "--dims", "16", "--depths", "1", "--image-size", "32"]


@pytest.mark.slow
def test_segmentation_job_trains_resumes_evaluates_and_predicts(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "--task", "segmentation", *TINY, "--batch-size", "8", "--epochs", "2"]
    argv += ["--steps-per-epoch", "2", "--verbose", "0", "--no-tensorboard", "--out", str(out)]
    kill_before_checkpoints(argv)
    assert read_checkpoint_record(out / "last.keras")["epoch"] == 0
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "rewrote" in captured.err
    lines = captured.out.strip().splitlines()
    assert re.fullmatch(r"test_miou=\d\.\d{4}", lines[-1]), lines[-3:]
    assert re.fullmatch(r"test_pixel_accuracy=\d\.\d{4}", lines[-2]), lines[-3:]
    # The per-class IoU table comes before them; run.json stores the same values, by name.
    table = lines[lines.index("per-class IoU:") + 1 : -2]
    cells = dict(re.findall(r"(\S+) +(\d\.\d{4})", " ".join(table)))
    stored = json.loads((out / "run.json").read_text())["metrics"]
    per_class = {key[4:]: value for key, value in stored.items() if key.startswith("iou/")}
    assert set(cells) == set(per_class) and "background" in cells
    assert all(cells[name] == f"{value:.4f}" for name, value in per_class.items())
    assert np.mean(list(per_class.values())) == pytest.approx(stored["miou"], abs=1e-6)
    history = read_history(out / "history.csv")
    assert len(history) == 2 and {"val_miou", "val_pixel_accuracy"} <= set(history[0])
    best = read_checkpoint_record(out / "model.keras")
    assert best["logs"]["val_miou"] == max(row["val_miou"] for row in history)

    assert main(["evaluate", "--model", str(out), "--data", "digits", "--split", "test"]) == 0
    scored = capsys.readouterr().out
    assert f"miou={lines[-1].split('=')[1]}" in scored, scored
    assert "\n".join(["per-class IoU:", *table]) in scored and "iou/" not in scored

    images, _, _ = digit_canvas("test", count=2)
    paths = []
    for index, size in enumerate(((64, 64), (40, 56))):
        path = tmp_path / f"canvas{index}.png"
        path.write_bytes(tf.io.encode_png(images[index][: size[0], : size[1]]).numpy())
        paths.append(str(path))
    predictions = tmp_path / "predictions"
    assert main(["predict", *paths, "--model", str(out), "--out", str(predictions)]) == 0
    printed = capsys.readouterr().out
    for index, size in enumerate(((64, 64), (40, 56))):
        assert paths[index] in printed
        labels = tf.io.decode_png((predictions / f"canvas{index}_labels.png").read_bytes())
        overlay = tf.io.decode_png((predictions / f"canvas{index}_overlay.png").read_bytes())
        assert labels.shape == (*size, 1) and overlay.shape == (*size, 3)
        assert np.asarray(labels).max() < 11
    assert sorted(path.name for path in predictions.iterdir()) == [
        "canvas0_labels.png",
        "canvas0_overlay.png",
        "canvas1_labels.png",
        "canvas1_overlay.png",
    ]


@pytest.mark.slow
def test_inpainting_run_starts_a_segmenter_in_a_fresh_process(tmp_path, capsys):
    """AFNO's few-shot path: inpainting pretraining, then segmentation from its backbone."""
    steps = ["--batch-size", "8", "--epochs", "1", "--steps-per-epoch", "2", "--verbose", "0"]
    pretrained = tmp_path / "inpaint"
    argv = ["train", "--task", "inpainting", *TINY, *steps, "--no-tensorboard", "--seed", "1"]
    assert main([*argv, "--out", str(pretrained)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"test_psnr=\d+\.\d{4}", lines[-1]), lines[-3:]
    assert float(lines[-1].split("=")[1]) > 10.0  # a grey guess of the digits scores about 8
    # A new process has not imported the inpainting task: its model.keras must load all the
    # same (its output layer is a registered layer of keras_fourier.layers).
    segment = tmp_path / "segment"
    completed = subprocess.run(
        [
            *(sys.executable, "-m", "keras_fourier.cli", "train", "--task", "segmentation"),
            *(*TINY, *steps, "--no-tensorboard", "--weights", str(pretrained)),
            *("--out", str(segment)),
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert re.fullmatch(r"test_miou=\d\.\d{4}", completed.stdout.strip().splitlines()[-1])
    # The segmenter's backbone started from the inpainting run's (seed 1), not from a fresh
    # initialisation (seed 0): two Adam steps of at most 3e-3 moved its first layer's weights
    # by less than 0.01, where the two initialisations differ by several times that.
    donor = keras_fourier.models.resolve_model(str(pretrained))
    trained = keras_fourier.models.resolve_model(str(segment))
    start = next(v for v in donor.weights if "stem_conv" in v.path)
    end = next(v for v in trained.weights if "stem_conv" in v.path)
    assert np.abs(np.asarray(end) - np.asarray(start)).max() < 0.01
