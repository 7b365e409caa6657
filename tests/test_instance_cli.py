"""The instance segmentation task through the command line: train, evaluate, predict, refuse."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import tensorflow as tf
from pycocotools import mask as mask_api

from keras_fourier.cli import main
from tests.test_tasks import write_tiny_instances

pytestmark = pytest.mark.single_backend

TINY = ["--model", "gfnet_tiny", "--dims", "16", "--depths", "1", "--image-size", "32"]


@pytest.mark.slow
def test_instance_job_trains_evaluates_and_predicts_masks(tmp_path, capsys):
    data = tmp_path / "coco"
    data.mkdir()
    write_tiny_instances(data)
    out = tmp_path / "run"
    argv = ["train", "--task", "instance_segmentation", "--data", f"coco:{data}", *TINY]
    argv += ["--batch-size", "4", "--epochs", "1", "--verbose", "0", "--no-tensorboard"]
    assert main([*argv, "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    names = ("map50", "map", "mask_map50", "mask_map")
    for line, name in zip(lines[-4:], names, strict=True):
        assert re.fullmatch(rf"test_{name}=\d\.\d{{4}}", line), lines[-5:]
    stored = json.loads((out / "run.json").read_text())["metrics"]
    assert {"map", "mask_map", "mask_map50", "mask_map75", "loss"} <= set(stored)
    assert lines[-1] == f"test_mask_map={stored['mask_map']:.4f}"
    assert all(np.isfinite(value) for value in stored.values())

    assert main(["evaluate", "--model", str(out), "--data", f"coco:{data}"]) == 0
    assert f"mask_map={stored['mask_map']:.4f}" in capsys.readouterr().out

    broken = tmp_path / "broken.png"
    broken.write_bytes((data / "test" / "test0.png").read_bytes()[:60])
    good = str(data / "test" / "test0.png")
    refused = tmp_path / "refused"
    argv = ["predict", good, str(broken), "--model", str(out), "--out", str(refused)]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "broken.png" in error[0], error
    assert not refused.exists()  # the good image before it was not written either

    images = [good, str(data / "test" / "test1.png")]
    predictions = tmp_path / "predictions"
    assert main(["predict", *images, "--model", str(out), "--out", str(predictions)]) == 0
    printed = capsys.readouterr().out
    assert all(image in printed for image in images), printed
    assert sorted(path.name for path in predictions.iterdir()) == [
        "test0_instances.json",
        "test0_masks.png",
        "test1_instances.json",
        "test1_masks.png",
    ]
    for stem in ("test0", "test1"):
        overlay = tf.io.decode_png((predictions / f"{stem}_masks.png").read_bytes())
        assert overlay.shape == (32, 40, 3)
        results = json.loads((predictions / f"{stem}_instances.json").read_text())
        assert len(results) <= 100
        for result in results:
            assert result["category_id"] in (1, 2) and 0 < result["score"] <= 1
            x, y, w, h = result["bbox"]
            assert 0 <= x <= x + w <= 40 and 0 <= y <= y + h <= 32
            rle = result["segmentation"]
            assert rle["size"] == [32, 40]
            decoded = mask_api.decode({**rle, "counts": rle["counts"].encode()})
            assert decoded.sum() == result["area"]
            ys, xs = np.nonzero(decoded)  # the mask lies in its box
            assert not len(xs) or (x - 1 <= xs.min() and xs.max() < x + w + 1)
            assert not len(ys) or (y - 1 <= ys.min() and ys.max() < y + h + 1)


def test_a_bad_polygon_is_refused_in_one_line_and_nothing_is_written(tmp_path, capsys):
    data = tmp_path / "coco"
    data.mkdir()
    write_tiny_instances(data)
    path = data / "train" / "_annotations.coco.json"
    document = json.loads(path.read_text())
    document["annotations"][2]["segmentation"] = [[1, 2, 3, 4]]
    path.write_text(json.dumps(document))
    out = tmp_path / "run"
    argv = ["train", "--task", "instance_segmentation", "--data", f"coco:{data}", *TINY]
    assert main([*argv, "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1, error
    assert "_annotations.coco.json" in error[0] and "annotations[2] (id 3)" in error[0], error
    assert "fewer than 3 points" in error[0]
    assert not out.exists()
