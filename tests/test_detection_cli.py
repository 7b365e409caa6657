"""The detection task through the command line: train, kill, resume, evaluate, predict, refuse."""

from __future__ import annotations

import json
import re

import pytest
import tensorflow as tf

from keras_fourier.cli import main
from keras_fourier.model_record import read_checkpoint_record
from keras_fourier.training import read_history
from tests.test_run_faults import kill_before_checkpoints
from tests.test_tasks import write_tiny_coco

pytestmark = pytest.mark.single_backend

TINY = ["--model", "gfnet_tiny", "--dims", "16", "--depths", "1", "--image-size", "32"]


@pytest.mark.slow
def test_detection_job_trains_resumes_evaluates_and_predicts(tmp_path, capsys):
    data = tmp_path / "coco"
    data.mkdir()
    write_tiny_coco(data)
    out = tmp_path / "run"
    argv = ["train", "--task", "detection", "--data", f"coco:{data}", *TINY, "--batch-size", "4"]
    argv += ["--epochs", "2", "--verbose", "0", "--no-tensorboard", "--out", str(out)]
    kill_before_checkpoints(argv)
    assert read_checkpoint_record(out / "last.keras")["epoch"] == 0
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "rewrote" in captured.err
    lines = captured.out.strip().splitlines()
    assert re.fullmatch(r"test_map=\d\.\d{4}", lines[-1]), lines[-3:]
    assert re.fullmatch(r"test_map50=\d\.\d{4}", lines[-2]), lines[-3:]
    stored = json.loads((out / "run.json").read_text())["metrics"]
    assert {"map", "map50", "map75", "loss"} <= set(stored)
    assert lines[-1] == f"test_map={stored['map']:.4f}"
    assert {key for key in stored if key.startswith("ap/")} <= {"ap/circle", "ap/square"}
    history = read_history(out / "history.csv")
    assert len(history) == 2 and {"val_map", "val_map50", "val_map75"} <= set(history[0])
    best = read_checkpoint_record(out / "model.keras")
    assert best["logs"]["val_map"] == max(row["val_map"] for row in history)

    assert main(["evaluate", "--model", str(out), "--data", f"coco:{data}"]) == 0
    assert f"map={stored['map']:.4f}" in capsys.readouterr().out
    # A detector of 2 classes on data of 10 is refused in one line.
    assert main(["evaluate", "--model", str(out), "--data", "digits"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "detects 2 classes but data 'digits' has 10" in error[0], error

    broken = tmp_path / "broken.png"
    broken.write_bytes((data / "test" / "test0.png").read_bytes()[:60])
    refused = tmp_path / "refused"
    assert main(["predict", str(broken), "--model", str(out), "--out", str(refused)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "broken.png" in error[0], error
    assert not refused.exists()

    images = [str(data / "test" / "test0.png"), str(data / "test" / "test1.png")]
    predictions = tmp_path / "predictions"
    assert main(["predict", *images, "--model", str(out), "--out", str(predictions)]) == 0
    printed = capsys.readouterr().out
    assert all(image in printed for image in images), printed
    assert sorted(path.name for path in predictions.iterdir()) == [
        "test0_boxes.png",
        "test0_detections.json",
        "test1_boxes.png",
        "test1_detections.json",
    ]
    for stem in ("test0", "test1"):
        drawn = tf.io.decode_png((predictions / f"{stem}_boxes.png").read_bytes())
        assert drawn.shape == (32, 40, 3)
        results = json.loads((predictions / f"{stem}_detections.json").read_text())
        assert len(results) <= 100
        for result in results:
            assert result["category_id"] in (1, 2) and 0 < result["score"] <= 1
            x, y, w, h = result["bbox"]
            assert 0 <= x <= x + w <= 40 and 0 <= y <= y + h <= 32


def test_a_bad_coco_json_is_refused_in_one_line_and_nothing_is_written(tmp_path, capsys):
    data = tmp_path / "coco"
    data.mkdir()
    write_tiny_coco(data)
    document = json.loads((data / "train" / "_annotations.coco.json").read_text())
    document["annotations"][0]["category_id"] = 99
    (data / "train" / "_annotations.coco.json").write_text(json.dumps(document))
    out = tmp_path / "run"
    argv = ["train", "--task", "detection", "--data", f"coco:{data}", *TINY, "--out", str(out)]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "_annotations.coco.json" in error[0] and "99" in error[0], error
    assert not out.exists()
