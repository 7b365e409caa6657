"""Two-stage detector exports by `keras-fourier export`: detections and pasted masks."""

from __future__ import annotations

import json
import os
import pathlib
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_fourier.cli import main
from keras_fourier.detection import MaskRCNN, paste_masks
from keras_fourier.export.parity import mask_iou, match_detections
from keras_fourier.export.signatures import fixed_size
from keras_fourier.tasks import select_task
from keras_fourier.training.config import TrainConfig
from tests.harness import export_run_model

SIZE = 64
CLASSES = 3


def _tiny() -> keras.Model:
    """The default job's two-stage detector, its scores apart from RoI to RoI, masks far from 1/2.

    The digit canvases' Mask R-CNN of `--task instance_segmentation`, at 64
    x 64 with 3 classes.
    """
    keras.utils.set_random_seed(0)
    task = select_task("digits", task="instance_segmentation")
    model = task.build_model(TrainConfig(task="instance_segmentation"), CLASSES)
    rng = np.random.default_rng(0)
    head = model.get_layer("roi_head")
    for layer in head.bbox_heads:  # class logits of RoIs far apart, background's 0
        kernel = rng.normal(0, 0.03, layer.fc_cls.kernel.shape).astype("float32")
        kernel[:, -1] = 0.0
        layer.fc_cls.kernel.assign(kernel)
    for layer in head.mask_heads:
        kernel = layer.conv_logits.kernel
        kernel.assign(rng.normal(0, 1.0, kernel.shape).astype("float32"))
    return model


def _images(batch: int, seed: int, height: int = SIZE, width: int = SIZE) -> np.ndarray:
    shape = (batch, height, width, 3)
    return np.round(np.random.default_rng(seed).uniform(0, 255, shape)).astype("float32")


def _keras_outputs(model: keras.Model, images: np.ndarray, scale=(1.0, 1.0), size=None) -> dict:
    """Keras's detections, boxes scaled by (x, y) `scale`, masks pasted at `size` (h, w)."""
    outputs = {k: keras.ops.convert_to_numpy(v) for k, v in model(images, training=False).items()}
    outputs["boxes"] = outputs["boxes"] * np.array(scale * 2, "float32")
    height, width = size or images.shape[1:3]
    outputs["mask_probabilities"] = outputs["masks"]
    outputs["masks"] = np.asarray(paste_masks(outputs["masks"], outputs["boxes"], height, width))
    return outputs


def _assert_same(served, expected, size: int, model: keras.Model) -> int:
    """Every Keras detection matched, their masks the same; the detections' count."""
    served = {name: np.asarray(value) for name, value in served.items()}
    np.testing.assert_array_equal(served["num_detections"], expected["num_detections"])
    sizes = np.full(len(served["num_detections"]), size)
    head = model.get_layer("roi_head")
    pairs = []
    _, matched, total = match_detections(served, expected, sizes, head, "Export", pairs=pairs)
    assert matched == total
    # A pixel at probability 0.5 may round either way between the graph and eager Keras.
    assert mask_iou(served, expected, pairs, "Export") >= 0.999
    for image, keras_row, served_row in pairs:
        np.testing.assert_allclose(
            served["mask_probabilities"][image, served_row],
            expected["mask_probabilities"][image, keras_row],
            atol=1e-4,
        )
    return total


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The default job's model.keras (Mask R-CNN), exported by `keras-fourier export`."""
    model = _tiny()
    root = tmp_path_factory.mktemp("two_stage")
    out, printed = export_run_model(model, root, "instance_segmentation", "saved_model,tflite")
    return model, root, pathlib.Path(out), printed


@pytest.mark.slow
def test_cli_export_of_a_two_stage_detector_serves_detections_and_pasted_masks(exported):
    model, _, out, printed = exported
    assert sorted(os.listdir(out)) == sorted([model.name, f"{model.name}.tflite", "models.config"])
    for signature in ("serving_default", "serving_bytes"):
        line = re.search(
            rf"Parity {signature}: (\d+) of (\d+) Keras detections matched .*, IoU of their "
            r"masks (\S+)",
            printed,
        )
        assert line and line[1] == line[2] and int(line[1]) > 0, printed
        assert float(line[3]) >= 0.999, printed
    line = re.search(
        r"max \|LiteRT - Keras\| = (\S+) on 2 examples, detections matched .*their pasted "
        r"masks of IoU at least 0.99\) 100.00%",
        printed,
    )
    assert line and float(line[1]) <= 1e-3, printed
    # serving_default's pasted masks at the input's size; serving_bytes' at the sent images'.
    described = re.findall(r"outputs\['(\w+)'\] tensor_info:\s+dtype: (\w+)\s+shape: (.*)", printed)
    assert ("masks", "DT_UINT8", f"(-1, 20, {SIZE}, {SIZE})") in described
    assert ("masks", "DT_UINT8", "(-1, 20, -1, -1)") in described
    assert ("mask_probabilities", "DT_FLOAT", "(-1, 20, 28, 28)") in described
    assert ("classes", "DT_INT32", "(-1, 20)") in described


def test_saved_model_matches_keras_on_images_and_encoded_images(exported, tmp_path):
    _, root, out, _ = exported
    model = keras.saving.load_model(root / "model.keras")
    loaded = tf.saved_model.load(str(out / model.name / "1"))
    images = _images(2, seed=5)
    served = loaded.signatures["serving_default"](images=tf.constant(images))
    expected = _keras_outputs(model, images)
    assert _assert_same(served, expected, SIZE, model) > 0
    assert served["masks"].dtype == tf.uint8 and int(tf.reduce_max(served["masks"])) == 1

    # serving_bytes: a PNG of another size, stretched to the model's input; boxes and masks in
    # its pixels.
    height, width = 48, 80
    pixels = _images(1, seed=6, height=height, width=width)[0]
    path = tmp_path / "photo.png"
    path.write_bytes(tf.io.encode_png(pixels.astype(np.uint8)).numpy())
    served = loaded.signatures["serving_bytes"](image_bytes=tf.constant([path.read_bytes()]))
    assert served["masks"].shape == (1, 20, height, width)
    resized = tf.image.resize(pixels[None], (SIZE, SIZE)).numpy()
    expected = _keras_outputs(model, resized, (width / SIZE, height / SIZE), (height, width))
    assert _assert_same(served, expected, width, model) > 0
    # 100 masks pasted at 2001 x 2000 would take gigabytes: refused from the header.
    large = tf.io.encode_png(tf.zeros((2001, 2000, 3), tf.uint8))
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"\[2001\] \[x\] \[2000\] \[> 4000000 pixels"
    ):
        loaded.signatures["serving_bytes"](image_bytes=tf.stack([large]))


def test_full_integer_tflite_of_a_two_stage_detector_is_refused_writing_nothing(exported, capsys):
    _, root, _, _ = exported
    out = root / "int8"
    argv = ["export", str(root / "model.keras"), "--format", "tflite", "--out", str(out)]
    status = main([*argv, "--quantize", "int8", "--data", "digits"])
    error = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and not out.exists()
    assert len(error) == 1 and "two-stage detector" in error[0] and "int8" in error[0], error


def test_bench_times_a_two_stage_detectors_inference_and_training_step(exported, tmp_path):
    # the training step: the detector's own loss on seeded boxes and box-local masks
    _, root, _, _ = exported
    argv = ["bench", str(root / "model.keras"), "--batch-size", "1", "--repeats", "1"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    (row,) = json.loads((tmp_path / "bench.json").read_text())["rows"]
    assert row["batch_size"] == 1 and row["gflops"] > 0
    assert row["predict_img_s"] > 0 and row["train_img_s"] > 0 and row["train_peak_mib"] >= 0
    assert row["train_gmac_s"] > 0 and row["train_fraction"] > 0


def test_an_any_size_two_stage_detector_exports_at_any_image_size(tmp_path, capsys):
    # The model pads its images to multiples of 32 itself: `--image-size` takes any size, and is
    # still needed (in one line, without a stride to meet) for a converted file.
    keras.utils.set_random_seed(0)
    tiny = {"channels": 16, "fc_channels": 32, "mask_channels": 16, "max_proposals": 20}
    model = MaskRCNN("gfnet_tiny", num_classes=CLASSES, max_detections=10, **tiny)
    model.save(tmp_path / "model.keras")
    out = tmp_path / "out"
    assert (
        main(["export", str(tmp_path / "model.keras"), "--format", "tflite", "--out", str(out)])
        == 2
    )
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "pass --image-size." in error[0] and "stride" not in error[0], error
    assert not out.exists()
    fixed = fixed_size(model, (71, 101), "--image-size")
    assert fixed.input_shape == (None, 71, 101, 3)
    assert fixed.get_layer("pad_to_stride").output.shape == (None, 96, 128, 3)
    images = _images(1, seed=7, height=71, width=101)
    expected = keras.tree.map_structure(keras.ops.convert_to_numpy, model(images))
    for key, value in keras.tree.map_structure(keras.ops.convert_to_numpy, fixed(images)).items():
        np.testing.assert_allclose(value, expected[key], atol=1e-4)
    assert expected["boxes"][..., 2].max() <= 101 and expected["boxes"][..., 3].max() <= 71
