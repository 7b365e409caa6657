"""Detector exports (detections decoded in the graph) by `keras-fourier export`; flops, bench."""

from __future__ import annotations

import json
import os
import pathlib
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_fourier import cli
from keras_fourier.detection import RetinaNet, detector
from keras_fourier.export.parity import ParityError, match_detections
from keras_fourier.flop_count import flops
from keras_fourier.layers import DetectionDecoder
from tests.harness import export_run_model

SIZE = 64
CLASSES = 3


def _tiny_detector() -> keras.Model:
    """A tiny RetinaNet whose head gives well-separated scores, some of them detections."""
    keras.utils.set_random_seed(0)
    model = RetinaNet(
        "gfnet_tiny", num_classes=CLASSES, input_shape=(SIZE, SIZE, 3), channels=32, stacked_convs=1
    )
    head = model.get_layer("head")
    rng = np.random.default_rng(0)
    for conv, std, bias in ((head.retina_cls, 0.3, -2.0), (head.retina_reg, 0.05, 0.0)):
        conv.kernel.assign(rng.normal(0, std, conv.kernel.shape).astype("float32"))
        conv.bias.assign(np.full(conv.bias.shape, bias, "float32"))
    return model


def _images(batch: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 255, (batch, SIZE, SIZE, 3)).astype("float32")


def _keras_detections(model: keras.Model, images: np.ndarray) -> dict[str, np.ndarray]:
    outputs = detector(model)(images)
    return {name: keras.ops.convert_to_numpy(value) for name, value in outputs.items()}


def _assert_same_detections(actual, expected, sizes) -> int:
    """Every detection matched (class, box within 1e-3 of the image size); their count."""
    actual = {name: np.asarray(value) for name, value in actual.items()}
    np.testing.assert_array_equal(actual["num_detections"], expected["num_detections"])
    _, matched, total = match_detections(actual, expected, sizes, DetectionDecoder(), "Export")
    assert matched == total
    return total


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The run's model.keras of a tiny detector, exported by `keras-fourier export`."""
    model = _tiny_detector()
    root = tmp_path_factory.mktemp("detector")
    out, printed = export_run_model(model, root, "detection", "saved_model,tflite,onnx")
    return model, pathlib.Path(out), printed


@pytest.mark.slow
def test_cli_export_of_a_detector_reports_matched_detections(exported):
    model, out, printed = exported
    name = model.name
    assert sorted(os.listdir(out)) == sorted(
        [name, f"{name}.tflite", f"{name}.onnx", "models.config"]
    )
    for signature in ("serving_default", "serving_bytes"):
        line = re.search(rf"Parity {signature}: (\d+) of (\d+) Keras detections matched", printed)
        assert line and line[1] == line[2] and int(line[1]) > 0, printed
    for runtime in ("LiteRT", "onnxruntime"):
        line = re.search(
            rf"max \|{runtime} - Keras\| = (\S+) on 2 examples, detections matched "
            r"\(same class, boxes within 0.001 of the image size.*\) 100.00%",
            printed,
        )
        assert line and float(line[1]) <= 1e-3, printed
    for output, dtype, shape in (
        ("boxes", "DT_FLOAT", "(-1, 100, 4)"),
        ("classes", "DT_INT32", "(-1, 100)"),
        ("num_detections", "DT_INT32", "(-1)"),
    ):
        described = (
            f"outputs['{output}'] tensor_info:\n        dtype: {dtype}\n        shape: {shape}"
        )
        assert described in printed


def test_saved_model_signatures_serve_detections(exported, tmp_path):
    model, out, _ = exported
    loaded = tf.saved_model.load(str(out / model.name / "1"))
    images = _images(2, seed=5)
    served = loaded.signatures["serving_default"](images=tf.constant(images))
    expected = _keras_detections(model, images)
    assert _assert_same_detections(served, expected, np.full(2, SIZE)) > 0
    assert served["classes"].dtype == tf.int32 and served["boxes"].shape == (2, 100, 4)

    # serving_bytes: a PNG of another size, stretched to the model's input, boxes in its pixels.
    height, width = 48, 80
    pixels = np.round(np.random.default_rng(6).uniform(0, 255, (height, width, 3)))
    path = tmp_path / "photo.png"
    path.write_bytes(tf.io.encode_png(pixels.astype(np.uint8)).numpy())
    served = loaded.signatures["serving_bytes"](image_bytes=tf.constant([path.read_bytes()]))
    resized = tf.image.resize(pixels[None].astype("float32"), (SIZE, SIZE)).numpy()
    expected = _keras_detections(model, resized)
    expected["boxes"] = expected["boxes"] * np.array([width, height] * 2) / SIZE
    assert _assert_same_detections(served, expected, np.array([width])) > 0


def test_tflite_decodes_with_builtin_nms_in_litert(exported):
    from ai_edge_litert.interpreter import Interpreter

    model, out, _ = exported
    interpreter = Interpreter(model_path=str(out / f"{model.name}.tflite"))
    ops = {op["op_name"] for op in interpreter._get_ops_details()}
    assert "NON_MAX_SUPPRESSION_V5" in ops and "TOPK_V2" in ops
    assert not any(name.startswith("Flex") or name == "CUSTOM" for name in ops), ops
    runner = interpreter.get_signature_runner("serving_default")
    images = _images(3, seed=7)
    detections = runner(images=images)
    assert _assert_same_detections(detections, _keras_detections(model, images), [SIZE] * 3) > 0


def test_onnx_decodes_with_nonmaxsuppression_in_onnxruntime(exported):
    import onnx
    import onnxruntime

    model, out, _ = exported
    path = str(out / f"{model.name}.onnx")
    assert "NonMaxSuppression" in {node.op_type for node in onnx.load(path).graph.node}
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    assert sorted(names) == ["boxes", "classes", "num_detections", "scores"]
    images = _images(2, seed=8)
    detections = dict(zip(names, session.run(names, {"images": images}), strict=True))
    assert _assert_same_detections(detections, _keras_detections(model, images), [SIZE] * 2) > 0


def test_a_missing_detection_fails_the_parity_check(exported):
    model, _, _ = exported
    expected = _keras_detections(model, _images(1, seed=9))
    assert expected["num_detections"][0] > 1
    shifted = {**expected, "boxes": expected["boxes"] + np.array([0.2, 0, 0.2, 0], "float32")}
    with pytest.raises(ParityError, match=r"misses Keras's detection of class \d .*image 0"):
        match_detections(shifted, expected, np.array([SIZE]), DetectionDecoder(), "The copy")
    # 0.2 px of 64 is 3e-3 of the image: beyond the 1e-3 tolerance; 0.05 px is within.
    nudged = {**expected, "boxes": expected["boxes"] + np.float32(0.05)}
    assert match_detections(nudged, expected, np.array([SIZE]), DetectionDecoder(), "x")[1] > 1


def test_flops_and_bench_take_a_detector(exported, tmp_path, capsys):
    model, out, _ = exported
    path = out.parent / "model.keras"
    assert cli.main(["flops", str(path)]) == 0
    printed = capsys.readouterr().out
    total = flops(model)
    assert f"{model.name}: {total / 1e9:.3f} GFLOPs ({total} multiply-adds per input)" in printed
    # The shared head counts at each level, P3-P7 of 8x8 ... 1x1 positions: a 3x3 conv of 32
    # channels per branch, then 9 anchors x 3 classes and 9 x 4 deltas.
    table = {name: count for name, _, count in flops(model, by_layer=True)}
    positions = 8 * 8 + 4 * 4 + 2 * 2 + 1 + 1
    assert table["head"] == positions * 9 * 32 * (32 + 32 + 9 * CLASSES + 9 * 4)
    assert table["anchors"] == 0 and table["neck"] > 0
    # the training step: the detection task's loss on seeded ground-truth rows
    argv = ["bench", str(path), "--batch-size", "1", "--repeats", "1"]
    assert cli.main([*argv, "--out", str(tmp_path)]) == 0
    (report,) = [name for name in os.listdir(tmp_path) if name.endswith(".json")]
    rows = json.loads((tmp_path / report).read_text())["rows"]
    assert rows[0]["gflops"] == round(total / 1e9, 4) and rows[0]["predict_img_s"] > 0
    assert rows[0]["train_img_s"] > 0 and rows[0]["train_peak_mib"] >= 0
