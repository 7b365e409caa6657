"""Segmentation exports: SavedModel signatures, builtin TFLite and ONNX against Keras, the CLI."""

from __future__ import annotations

import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_fourier import cli, export, segmentation
from keras_fourier.data.segmentation import digit_canvas
from keras_fourier.export.parity import TOLERANCES, compare
from keras_fourier.export.signatures import fixed_size, serving_model
from keras_fourier.model_record import TASK_KEY
from keras_fourier.tasks.segmentation import TASK
from keras_fourier.training.callbacks import save_model

SIZE = 32
CLASSES = 3


def _images(batch: int = 2, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 255, (batch, SIZE, SIZE, 3)).astype("float32")


def _logits(model: keras.Model, images: np.ndarray) -> np.ndarray:
    return keras.ops.convert_to_numpy(model(images, training=False))


def _png_file(path: str, height: int, width: int) -> bytes:
    """A real PNG file of another size than the model's input, read back as bytes."""
    rows, cols = np.mgrid[0:height, 0:width]
    image = np.stack([rows * 255 // height, cols * 255 // width, (rows + cols) % 256], -1)
    with open(path, "wb") as file:
        file.write(tf.io.encode_png(image.astype(np.uint8)).numpy())
    with open(path, "rb") as file:
        return file.read()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny HorNet UPerNet and its SavedModel, TFLite and ONNX exports, by `export.export`."""
    keras.utils.set_random_seed(0)
    model = segmentation.UPerNet(
        backbone="hornet_tiny", num_classes=CLASSES, channels=8, input_shape=(SIZE, SIZE, 3)
    )
    out = tmp_path_factory.mktemp("exports")
    result = export.export(model, out, ("saved_model", "tflite", "onnx"))
    return model, out, result


@pytest.mark.slow
def test_export_reports_parity_of_every_format(exported):
    model, out, result = exported
    saved, lite, onnx = result.reports
    assert saved.path == os.path.join(out, model.name, "1")
    assert sorted(saved.max_abs_diff) == ["serving_bytes", "serving_default"]
    assert saved.max_abs_diff["serving_default"] <= TOLERANCES["saved_model"]
    assert saved.max_abs_diff["serving_bytes"] == 0.0  # the class map equals Keras's arg-max
    assert lite.max_abs_diff <= TOLERANCES["tflite"]
    assert onnx.max_abs_diff <= TOLERANCES["onnx"]
    assert (
        "outputs['class_map'] tensor_info:\n        dtype: DT_INT32\n        shape: (-1, 32, 32)"
        in (saved.signatures)
    )
    assert (
        "outputs['logits'] tensor_info:\n        dtype: DT_FLOAT\n        shape: (-1, 32, 32, 3)"
        in (saved.signatures)
    )


def test_saved_model_signatures_match_keras(exported, tmp_path):
    model, _, result = exported
    loaded = tf.saved_model.load(result.reports[0].path)
    images = _images()
    logits = loaded.signatures["serving_default"](images=tf.constant(images))["logits"].numpy()
    np.testing.assert_allclose(logits, _logits(model, images), atol=1e-5)

    encoded = _png_file(str(tmp_path / "street.png"), 45, 70)
    class_map = loaded.signatures["serving_bytes"](image_bytes=tf.constant([encoded]))["class_map"]
    assert class_map.dtype == tf.int32 and class_map.shape == (1, SIZE, SIZE)
    # The image is stretched to the model's input size (bilinear, no crop), then classified.
    resized = tf.image.resize(tf.io.decode_png(encoded, channels=3)[None], (SIZE, SIZE)).numpy()
    expected = _logits(model, resized).argmax(-1)
    np.testing.assert_array_equal(class_map.numpy(), expected)
    assert len(np.unique(expected)) > 1  # a map of one class would compare nothing


def test_tflite_is_builtin_only_and_matches_keras_in_litert(exported):
    from ai_edge_litert.interpreter import Interpreter

    model, out, _ = exported
    interpreter = Interpreter(model_path=str(out / f"{model.name}.tflite"))
    ops = {op["op_name"] for op in interpreter._get_ops_details()}
    assert not any(name.startswith("Flex") or name == "CUSTOM" for name in ops), ops
    runner = interpreter.get_signature_runner("serving_default")
    images = _images(3, seed=2)
    logits = runner(images=images)["logits"]
    assert logits.shape == (3, SIZE, SIZE, CLASSES)
    np.testing.assert_allclose(logits, _logits(model, images), atol=1e-4)


def test_onnx_matches_keras_in_onnxruntime(exported):
    import onnxruntime

    model, out, _ = exported
    session = onnxruntime.InferenceSession(
        str(out / f"{model.name}.onnx"), providers=["CPUExecutionProvider"]
    )
    assert [o.name for o in session.get_outputs()] == ["logits"]
    images = _images(3, seed=3)
    (logits,) = session.run(["logits"], {"images": images})
    np.testing.assert_allclose(logits, _logits(model, images), atol=1e-4)

    # With validation data, agreement is the fraction of pixels whose class is Keras's.
    def run(inputs):
        return {"logits": session.run(["logits"], inputs)[0]}

    def negated(inputs):
        return {"logits": -run(inputs)["logits"]}

    reference = serving_model(model)
    assert compare(run, reference, [images], "ONNX")[1:] == (1.0, 3)
    _, agreement, _ = compare(negated, reference, [images], "ONNX")
    assert agreement == pytest.approx(np.mean(logits.argmax(-1) == (-logits).argmax(-1)))
    assert 0 <= agreement < 1


def test_training_model_with_auxiliary_head_serves_its_logits_only():
    model = segmentation.UPerNet(
        backbone="hornet_tiny",
        num_classes=CLASSES,
        channels=8,
        input_shape=(SIZE, SIZE, 3),
        auxiliary=True,
    )
    serving = serving_model(model, output="probabilities")
    assert serving.dense and serving.output_name == "logits"
    images = _images()
    np.testing.assert_allclose(
        serving.run({"images": images})["logits"],
        keras.ops.convert_to_numpy(model(images)["logits"]),
        atol=1e-6,
    )


@pytest.mark.slow
def test_cli_exports_a_segmentation_runs_model_keras(tmp_path, capsys):
    # The model.keras of `keras-fourier train --task segmentation`: the trainer's training model
    # (logits and auxiliary logits concatenated) reduced by the task to its inference model.
    keras.utils.set_random_seed(1)
    segmenter = segmentation.UPerNet(
        backbone="gfnet_tiny",
        num_classes=CLASSES,
        channels=8,
        input_shape=(SIZE, SIZE, 3),
        auxiliary=True,
    )
    training = keras.Model(
        segmenter.inputs,
        keras.layers.Concatenate()([segmenter.output["logits"], segmenter.output["auxiliary"]]),
        name=f"{segmenter.name}_training",
    )
    run = tmp_path / "run"
    run.mkdir()
    save_model(TASK.inference_model(training), run / "model.keras", {TASK_KEY: TASK.name})
    out = tmp_path / "models"
    argv = ["export", str(run / "model.keras"), "--format", "saved_model,tflite,onnx"]
    assert cli.main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    name = segmenter.name
    assert sorted(os.listdir(out)) == sorted(
        [name, f"{name}.tflite", f"{name}.onnx", "models.config"]
    )
    for line in (
        "Parity serving_default: max |SavedModel - Keras| = ",
        "Parity serving_bytes: max |SavedModel - Keras| = 0\n",
        "max |LiteRT - Keras| = ",
        "max |onnxruntime - Keras| = ",
        "outputs['class_map'] tensor_info:",
    ):
        assert line in printed, line
    diffs = [float(v) for v in re.findall(r"Keras\| = ([0-9.e+-]+)", printed)]
    assert len(diffs) == 4 and max(diffs) <= 1e-4

    # Parity data read by the model's task: digit canvases, and a segdir: folder.
    argv = ["export", str(run / "model.keras"), "--format", "tflite", "--num-batches", "1"]
    assert cli.main([*argv, "--data", "digits", "--out", str(tmp_path / "d")]) == 0
    assert re.search(r"on 32 examples, pixel agreement \d+\.\d+%", capsys.readouterr().out)
    folder = tmp_path / "segdir"
    images, masks, _ = digit_canvas("test", count=3, size=SIZE)
    for index in range(3):
        for kind, array in (("images", images[index]), ("masks", masks[index][..., None] % 3)):
            (folder / kind / "validation").mkdir(parents=True, exist_ok=True)
            path = folder / kind / "validation" / f"{index}.png"
            path.write_bytes(tf.io.encode_png(array).numpy())
    (folder / "classes.txt").write_text("a\nb\nc\n")
    assert cli.main([*argv, "--data", f"segdir:{folder}", "--out", str(tmp_path / "s")]) == 0
    assert "on 3 examples, pixel agreement" in capsys.readouterr().out


@pytest.mark.slow
def test_any_size_segmenter_keeps_any_size_in_its_saved_model(tmp_path, capsys):
    keras.utils.set_random_seed(2)
    model = segmentation.UPerNet(backbone="hornet_tiny", num_classes=CLASSES, channels=8)
    with pytest.raises(
        ValueError, match=r"any size.*pass image_size \(multiples of its stride \d+\)"
    ):
        export.export(model, tmp_path / "refused", ("saved_model", "tflite"))
    assert not (tmp_path / "refused").exists()
    with pytest.raises(ValueError, match="applies to a model of any input size"):
        export.export(fixed_size(model, (32, 32), "image_size"), tmp_path / "x", image_size=32)
    result = export.export(
        model, tmp_path / "models", ("saved_model", "tflite"), image_size=(32, 64)
    )
    saved, lite = result.reports
    assert saved.max_abs_diff == {
        "serving_default": saved.max_abs_diff["serving_default"],
        "serving_bytes": 0.0,
    }
    assert "shape: (-1, -1, -1, 3)" in saved.signatures  # images and logits of any size
    loaded = tf.saved_model.load(saved.path)
    images = np.random.default_rng(4).uniform(0, 255, (1, 64, 96, 3)).astype("float32")
    logits = loaded.signatures["serving_default"](images=tf.constant(images))["logits"].numpy()
    np.testing.assert_allclose(logits, _logits(model, images), atol=1e-5)
    # serving_bytes: the class map at the sent image's own size.
    pixels = np.round(images[0]).astype(np.uint8)
    encoded = tf.io.encode_png(pixels).numpy()
    class_map = loaded.signatures["serving_bytes"](image_bytes=tf.constant([encoded]))["class_map"]
    expected = _logits(model, pixels[None].astype("float32")).argmax(-1)
    np.testing.assert_array_equal(class_map.numpy(), expected)
    odd = tf.io.encode_png(pixels[:45, :70]).numpy()
    assert loaded.signatures["serving_bytes"](image_bytes=tf.constant([odd]))[
        "class_map"
    ].shape == (1, 45, 70)
    # TFLite at the size given.
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=lite.path).get_signature_runner("serving_default")
    small = images[:, :32, :64]
    np.testing.assert_allclose(runner(images=small)["logits"], _logits(model, small), atol=1e-4)

    model.save(tmp_path / "any.keras")
    argv = ["export", str(tmp_path / "any.keras"), "--format", "tflite", "--out", str(tmp_path)]
    assert cli.main(argv) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--image-size" in error
